"""The one event model: what every trace format becomes before any figure is computed.

Why a module of its own: nsys exports (SQL) and torch chrome traces (a JSON stream) describe the
same things, CPU ranges, the GPU work they launched, CUDA API time, device memory, and who ran
it. Each format's adapter (`summarize/nsys.py`, `summarize/torch_profile.py`) fills these records,
and the one summarizer (`summarize/phases.phase_rows(model, spans, top)`) reads them alone, so the
rules live once and neither adapter needs the other (or the other's reader).

Records, all columnar (numpy arrays, one entry per event), all times integer ns on the model's
clock (`EventModel.offset_ns` reaches absolute UTC ns):
- `NvtxRanges`: CPU ranges (NVTX push/pop and start/end ranges, torch `user_annotation`s), sorted
  by (thread, start, -end) so a range's enclosing ranges come before it; `RangeIndex` (built over
  them, `readers/nvtx_tree.py`) answers nesting questions;
- `GpuOps`: kernels, memcpys and memsets with the range that launched them;
- `EventModel.api_ns`: CUDA API time per innermost same-thread range;
- `MemoryLevels`: one process's device memory level over time;
- `Identity`: who made the capture (role, rank ...), what a row's keys are built from;
- `Span`: one chosen step's span, what `phase_rows` summarizes.
"""
from __future__ import annotations

from dataclasses import dataclass, field, fields, replace
from typing import Any, Protocol

import numpy as np

from .nvtx_tree import RangeIndex

# globalTid / globalPid are serialised GlobalIds (nsys, and torch threads mapped the same way): the
# pid sits in bits 24..47, the tid in bits 0..23 (`globalPid` has tid 0).
TID_MASK = 0xFFFFFF
PID_SHIFT = 24

# NVTX event type ids of the push/pop ranges (nsys 2020-2025; `NvtxRanges.style` names them)
NVTX_PUSHPOP = 59
NVTXT_PUSHPOP = 70

# GPU operation kinds (`GpuOps.kind`)
KIND_KERNEL, KIND_MEMCPY, KIND_MEMSET = 0, 1, 2
# copy directions (`GpuOps.copy_kind`); 0: other or unknown
COPY_H2D, COPY_D2H, COPY_D2D = 1, 2, 3


def pid_of_gtid(gtid: "np.ndarray | int") -> "np.ndarray | int":
    """The OS process id inside a globalTid / globalPid."""
    return (gtid >> PID_SHIFT) & TID_MASK


def tid_of_gtid(gtid: "np.ndarray | int") -> "np.ndarray | int":
    """The OS thread id inside a globalTid."""
    return gtid & TID_MASK


@dataclass
class NvtxRanges:
    """CPU ranges of one capture, sorted by (thread, start, -end, rowid).

    That order makes a range's enclosing ranges come before it, so `parent[i] < i` and nesting
    can be rolled up in one reverse pass. `end` of a range left open is the export's last
    timestamp (NVIDIA's rule). `same_thread` is False for start/end ranges ended on another
    thread: NVIDIA's projection ignores those. `gtid` is pid << 24 | tid.
    """

    start: np.ndarray
    end: np.ndarray
    gtid: np.ndarray
    event_type: np.ndarray
    same_thread: np.ndarray
    rowid: np.ndarray
    text: list[str]
    domain: list[str | None]
    # (code per range, texts) with text[i] == texts[code[i]], when the reader built the texts so
    _codes: "tuple[np.ndarray, list[str]] | None" = field(default=None, repr=False, compare=False)
    # the same for the domains
    _domain_codes: "tuple[np.ndarray, list[str | None]] | None" = field(default=None, repr=False, compare=False)
    # per range, the tightest enclosing range on its thread (-1: none), when the reader knows it
    # (`nvtx_tree.same_thread_parents`, kept in the ranges cache): `RangeIndex.build` then skips nesting
    parent: "np.ndarray | None" = field(default=None, repr=False, compare=False)

    def __len__(self) -> int:
        return int(self.start.size)

    @classmethod
    def empty(cls) -> "NvtxRanges":
        z = np.zeros(0, np.int64)
        return cls(z, z.copy(), z.copy(), z.copy(), np.zeros(0, bool), z.copy(), [], [])

    def text_codes(self) -> tuple[np.ndarray, list[str]]:
        """(code per range, texts): `text[i] == texts[code[i]]`. Why: callers judge names once per
        distinct text (10^6 ranges, a few hundred names; issue 25); the reader has the codes already,
        other builders get them computed here. A text may appear under two codes (two string ids)."""
        if self._codes is None:
            self._codes = _codes_of(self.text)
        return self._codes

    def domain_codes(self) -> tuple[np.ndarray, list[str | None]]:
        """(code per range, domains): `domain[i] == domains[code[i]]`, as `text_codes` (a capture
        has a handful of domains, judged once each instead of once per range)."""
        if self._domain_codes is None:
            self._domain_codes = _codes_of(self.domain)
        return self._domain_codes

    @property
    def pid(self) -> np.ndarray:
        return pid_of_gtid(self.gtid)

    def full_name(self, i: int) -> str:
        """`domain:text` like NVIDIA's reports (`text` alone in the default domain)."""
        d = self.domain[i]
        return f"{d}:{self.text[i]}" if d else self.text[i]

    def style(self, i: int) -> str:
        return "PushPop" if int(self.event_type[i]) in (NVTX_PUSHPOP, NVTXT_PUSHPOP) else "StartEnd"

    def selected(self, spans: "list[Span]") -> np.ndarray:
        """Per range: it starts inside one of `spans` (in that span's process when it names one),
        the ranges a step's figures are made of."""
        out = np.zeros(len(self), bool)
        for s in spans:
            m = (self.start >= s.lo) & (self.start <= s.hi)
            if s.pid is not None:
                m &= self.pid == s.pid
            out |= m
        return out


def _codes_of(values: list) -> tuple[np.ndarray, list]:
    """(code per value, distinct values in first-seen order): `values[i] == distinct[code[i]]`."""
    code: dict = {}
    codes = np.fromiter((code.setdefault(v, len(code)) for v in values), np.int64, len(values))
    return codes, list(code)


@dataclass
class GpuOps:
    """GPU operations (kernels, memcpys, memsets), one entry per operation, parallel int64 columns.

    `rng`: NVIDIA's same-thread home, the innermost range on the launching call's thread that
    holds the call (-1: none). `kind`: KIND_*. `name`: kernel name id (into
    `EventModel.kernel_names`; -1 for copies and sets). `nbytes`, `copy_kind` (COPY_*). `pid`: the
    launching process. `launch` / `launch_tid`: time and globalTid of the launching call where no
    range holds it (-1 elsewhere), so the summarizer can give the work to the range open on the
    process's main thread then. `fwd_tid` / `fwd_t` (Kineto only, else None): the thread and time
    of the forward op whose backward op launched it (`Sequence number` / `fwdbwd`)."""

    rng: np.ndarray
    start: np.ndarray
    end: np.ndarray
    kind: np.ndarray
    name: np.ndarray
    nbytes: np.ndarray
    copy_kind: np.ndarray
    pid: np.ndarray
    launch: np.ndarray
    launch_tid: np.ndarray
    fwd_tid: np.ndarray | None = None
    fwd_t: np.ndarray | None = None

    def __post_init__(self) -> None:
        n = self.start.size
        bad = [f.name for f in fields(self) if getattr(self, f.name) is not None and getattr(self, f.name).size != n]
        if bad:
            raise ValueError(f"GpuOps columns {bad} do not have the {n} entries of `start`")

    def __len__(self) -> int:
        return int(self.start.size)

    @classmethod
    def empty(cls) -> "GpuOps":
        return cls(*(np.zeros(0, np.int64) for _ in range(10)))

    def take(self, ix: np.ndarray) -> "GpuOps":
        """The operations at `ix` (positions or a mask), every column alike."""
        return replace(self, **{f.name: getattr(self, f.name)[ix] for f in fields(self)
                                if getattr(self, f.name) is not None})

    def when(self, ids: np.ndarray) -> np.ndarray:
        """When each operation of `ids` counts for a step: its launch time where known, else its start."""
        return np.where(self.launch[ids] >= 0, self.launch[ids], self.start[ids])


@dataclass(frozen=True)
class MemoryLevels:
    """One process's allocated device bytes over time: `levels[i]` holds from `times[i]` (sorted)
    until `times[i + 1]`, `baseline` before `times[0]` (nsys CUDA memory events, Kineto `[memory]`
    instants, a torch memory snapshot's timeline)."""

    times: np.ndarray
    levels: np.ndarray
    baseline: int

    def peak(self, lo: int, hi: int) -> int:
        """The highest level over [lo, hi]."""
        i0 = int(np.searchsorted(self.times, lo, side="left"))
        i1 = int(np.searchsorted(self.times, hi, side="right"))
        before = int(self.levels[i0 - 1]) if i0 > 0 else self.baseline
        inside = int(self.levels[i0:i1].max()) if i1 > i0 else before
        return max(before, inside)


class Identity(Protocol):
    """Who made a capture (`window.SourceIdentity` is one): its role and the key columns of a row."""

    @property
    def role(self) -> str | None: ...

    def keys(self, step: int | None) -> dict[str, Any]: ...


@dataclass(frozen=True)
class Span:
    """One chosen step's span on the model's clock, in one process (`pid` None: any). GPU work no
    range launched counts for the step when its launch (else start) lies in [gpu_lo, gpu_hi]
    (default [lo, hi]; a torch file that is one step owns all of its GPU work)."""

    lo: int
    hi: int
    pid: int | None
    step: int | None
    gpu_lo: int | None = None
    gpu_hi: int | None = None

    @property
    def gpu(self) -> tuple[int, int]:
        return (self.lo if self.gpu_lo is None else self.gpu_lo, self.hi if self.gpu_hi is None else self.gpu_hi)


@dataclass
class EventModel:
    """One capture as the summarizer reads it, whatever its format (module docstring)."""

    ident: Identity
    offset_ns: int                            # model time + offset_ns = absolute UTC ns
    ranges: NvtxRanges
    index: RangeIndex                         # over `ranges`
    ops: GpuOps
    api_ns: np.ndarray                        # CUDA API time per innermost same-thread range
    kernel_names: dict[int, tuple[str, str]]  # GpuOps.name id -> (full name, short name)
    memory: dict[int, MemoryLevels] = field(default_factory=dict)   # pid -> device memory levels

    def __post_init__(self) -> None:
        if self.api_ns.size != len(self.ranges) or self.index.parent.size != len(self.ranges):
            raise ValueError(f"api_ns ({self.api_ns.size}) and the index ({self.index.parent.size}) must "
                             f"cover the {len(self.ranges)} ranges")
