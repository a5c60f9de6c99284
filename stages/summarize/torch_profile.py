"""torch chrome traces and memory snapshots -> rows of the phases / kernels / steps schemas.

Why: verl's torch profiler writes one chrome trace per step and rank, and its torch_memory tool a
caching-allocator snapshot; users compare them with nsys runs. This module is an adapter: it fills
the summarizer's event model from a trace and hands it to `summarize/phases.py`, the rules nsys
exports go through too (same-thread projection, inherited figures, name paths, instances):

- Ranges are `user_annotation` events (torch.profiler.record_function, verl's annotations, e.g.
  `mini_batch0`, `Optimizer.step#AdamW.step`), as `NvtxRanges` with globalTid = pid << 24 | tid.
- GPU operations (kernels, memcpys, memsets) join their launching CUDA runtime/driver call by
  `args.correlation`; the call's innermost same-thread range is NVIDIA's home. Launches from
  threads with no open range (autograd's `pt_autograd_N` thread runs backward) keep their launch
  time, so the inherited figures give them to the range open on the main thread then (`## backward
  ##`, `update_actor`); NVIDIA's figures leave them in `(unattributed)`.
- Backward -> forward: cpu ops with a `Sequence number` and `fwdbwd` flows link each backward op
  (autograd's thread) to its forward op (main thread); launches inside a linked backward op carry
  the forward op's thread and time (`fwd_tid`, `fwd_t`), and the summarizer refines their home with
  it (summarize/phases.py, rule c).
- Memory: `[memory]` instants (`profile_memory=True`, args `Total Allocated`, `Device Id`) give each
  process's allocated bytes over time on its CUDA device (a CPU run: its CPU allocator), the levels
  `mem_peak_bytes` reads, as nsys's CUDA memory events do.
- Identity: `distributedInfo.rank` / `world_size` inside the trace give the rank and world size
  where the file name gave none (`rank_source` says which; collect writes both to the manifest).
- Steps: `--step-range REGEX` ranges when given; the `step<N>` of the file name (verl's torch traces
  hold one step each); else `ProfilerStep#N` ranges (N counts `profiler.step()` calls from 0, so
  step N+1, and steps.parquet's `label` keeps `ProfilerStep#N`); else the whole file. A step's span
  is the extent of its top-level ranges (else the profiler's own span); a file that is one step owns
  all of its GPU work, also what ran after the last range ended.
- Time: event `ts` are microseconds after the trace's `baseTimeNanoseconds` (kineto, torch >= 2.1);
  rows hold absolute UTC ns. See `readers/chrome_trace.py` for traces without that field.
- Memory snapshots: the allocator's event timeline (`device_traces`: alloc / free_requested /
  free_completed / segment_*) gives allocated bytes over time; the snapshot's
  `external_annotations` START/END pairs (record_function ranges) cut it into phases, and the peak
  inside each becomes `mem_peak_bytes`. The level before the first event is reconstructed from the
  snapshot's final state (blocks still allocated) minus the net of the timeline, so history
  buffers that wrapped (`max_entries`) are still right.

Per-artifact work is `summarize_torch_item(item, options)` / `summarize_memory_item(item,
options)`: plain, module-level and picklable.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field, replace
from functools import lru_cache
from pathlib import Path
from typing import Any, Iterable, Sequence

import numpy as np

from ..core.phases import UNSTEADY_STAGES, canonical_stage
from ..readers.chrome_trace import KERNEL, MEMCPY, TraceData, read_chrome_trace
from ..readers.memory_snapshot import load_snapshot
from ..readers.nsys_sqlite import NVTX_PUSHPOP, PID_SHIFT, NvtxRanges, pid_of_gtid
from ..readers.nvtx_tree import RangeIndex
from ..window import (
    DEFAULT_STEP,
    SourceIdentity,
    SourceSteps,
    StepArg,
    StepSpan,
    TopRange,
    compile_step_range,
    run_window,
    window_spans,
)
from .phases import UNATTRIBUTED, level_peak, phase_rows
from .projection import KIND_KERNEL, KIND_MEMCPY, KIND_MEMSET
from .types import SummarizeOptions, SummaryRows

_FAR = 1 << 62                     # a span that holds every time on a trace's clock
_PROFILER_STEP = re.compile(r"^ProfilerStep#(\d+)$")
_WHOLE_FILE = ("file_name", "whole_file")   # step boundaries that make the whole trace one step

__all__ = [
    "TorchItem", "MemoryItem", "summarize_torch_trace", "summarize_torch_item", "torch_source_steps",
    "torch_step_spans", "torch_steps", "summarize_memory_snapshot", "summarize_memory_item",
    "memory_source_steps", "short_kernel_name", "UNATTRIBUTED",
]


# ------------------------------------------------------------------------------------------------
# Kernel names
# ------------------------------------------------------------------------------------------------

@lru_cache(maxsize=65536)
def short_kernel_name(name: str) -> str:
    """nsys-style short name: no return type, namespaces, template arguments or parameters.

    `void at::native::vectorized_gather_kernel<16, long>(char*, ...)` -> `vectorized_gather_kernel`.
    """
    s = name.strip().replace("(anonymous namespace)", "<unnamed>")
    if s.startswith("void "):
        s = s[5:]
    angle = 0
    out: list[str] = []
    for ch in s:
        if ch == "<":
            angle += 1
        elif ch == ">":
            angle = max(0, angle - 1)
        elif angle == 0:
            if ch == "(":
                break   # the parameter list
            out.append(ch)
    base = "".join(out).strip()
    base = base.rsplit("::", 1)[-1].strip()
    return base or name.strip()


def _memcpy_direction(name: str) -> str:
    """kineto memcpy names: `Memcpy HtoD (Pinned -> Device)`, `Memcpy DtoH ...`, `DtoD`, `PtoP`."""
    n = name.replace(" ", "").lower()
    if "htod" in n:
        return "h2d"
    if "dtoh" in n:
        return "d2h"
    if "dtod" in n or "ptop" in n:
        return "d2d"
    return "other"


# ------------------------------------------------------------------------------------------------
# One trace as the event model: ranges (NvtxRanges), GPU operations (ops), API time per range
# ------------------------------------------------------------------------------------------------

_ID_BITS = (1 << PID_SHIFT) - 1     # what a pid or tid may hold inside a globalTid
_COPY_KIND = {"h2d": 1, "d2h": 2, "d2d": 3}


@dataclass
class _Prepared:
    """One trace in the summarizer's model (times on the trace's clock; `base` reaches UTC)."""

    data: TraceData
    base: int
    ranges: NvtxRanges           # sorted by (thread, start, -end): parents first
    index: RangeIndex
    ops: dict[str, np.ndarray]   # summarize/phases.py's GPU-operation columns
    api_ns: np.ndarray           # CUDA API time per innermost same-thread range
    names: dict[int, tuple[str, str]]
    main_pid: int | None
    identity: dict[str, Any]     # distributedInfo.rank / world_size when the trace says

    # the window's view, in the model's range order, absolute ns
    r_name: list[str]
    r_start: np.ndarray
    r_end: np.ndarray
    r_pid: list[int]
    parent: np.ndarray
    g_start: np.ndarray
    g_end: np.ndarray
    mem: dict[int, Any] = field(default_factory=dict)   # pid -> memory levels (`[memory]` instants)


def _arr(a: Any, dtype: Any = np.int64) -> np.ndarray:
    return np.frombuffer(a, dtype=dtype) if len(a) else np.zeros(0, dtype=dtype)


def _int_pid(v: Any) -> int | None:
    return v if isinstance(v, int) and not isinstance(v, bool) else None


def _thread_gtids(threads: list[tuple[Any, Any]], fallback_pid: int) -> np.ndarray:
    """(pid, tid) of every trace thread -> a globalTid (`pid << 24 | tid`, as nsys packs them).

    Kineto writes OS ids, which fit; string or oversized ids (other writers) get ids of their own
    from the top of the range, so a thread stays one thread and `tid == pid` still marks main."""
    out = np.zeros(len(threads), np.int64)
    spare = _ID_BITS
    pids: dict[Any, int] = {}
    for k, (pid, tid) in enumerate(threads):
        p = pid if _int_pid(pid) is not None and 0 <= pid <= _ID_BITS else None
        if p is None:
            p = pids.get(pid)
            if p is None:
                p = pids[pid] = fallback_pid if not pids and fallback_pid <= _ID_BITS else spare
                spare -= 1
        t = tid if _int_pid(tid) is not None and 0 <= tid <= _ID_BITS else spare
        if t == spare:
            spare -= 1
        out[k] = (p << PID_SHIFT) | t
    return out


def _forward_links(data: TraceData, gtid_of: np.ndarray, launch_tid: np.ndarray, launch: np.ndarray
                   ) -> tuple[np.ndarray, np.ndarray]:
    """Per GPU operation launched outside every range: the thread and time of the forward op whose
    backward op was running at launch (-1 where none), the Kineto analogue of emit_nvtx's `seq`.

    A backward op is a cpu op on one thread whose `Sequence number` an earlier op on another thread
    (the forward pass) has; its `fwdbwd` flow, where the trace has one, names that forward op
    directly and wins. Nested ops on a thread share their outermost op's link."""
    n = launch.size
    fwd_tid, fwd_t = np.full(n, -1, np.int64), np.full(n, -1, np.int64)
    m = len(data.seq_no)
    if m == 0 or not (launch_tid >= 0).any():
        return fwd_tid, fwd_t
    th = gtid_of[_arr(data.seq_thread)]
    ts, end, seq = _arr(data.seq_ts), _arr(data.seq_ts) + _arr(data.seq_dur), _arr(data.seq_no)
    # Sequence number: the group's first op is the forward op; ops of it on other threads link to it.
    o = np.lexsort((ts, seq))
    first = np.ones(m, bool)
    first[1:] = seq[o][1:] != seq[o][:-1]
    head = o[np.maximum.accumulate(np.where(first, np.arange(m), 0))]
    l_tid, l_t = np.full(m, -1, np.int64), np.full(m, -1, np.int64)
    other = th[o] != th[head]
    l_tid[o[other]], l_t[o[other]] = th[head[other]], ts[head[other]]
    # fwdbwd flows: 's' at the forward op, 'f' at the start of the backward op (same id).
    if len(data.flow_id):
        fid, fend = _arr(data.flow_id), _arr(data.flow_end, np.int8)
        fth, fts = gtid_of[_arr(data.flow_thread)], _arr(data.flow_ts)
        s_ix, f_ix = np.flatnonzero(fend == 0), np.flatnonzero(fend == 1)
        s_ix = s_ix[np.argsort(fid[s_ix], kind="stable")]
        pos = np.minimum(np.searchsorted(fid[s_ix], fid[f_ix]), max(s_ix.size - 1, 0))
        ok = (s_ix.size > 0) & (fid[s_ix][pos] == fid[f_ix]) if s_ix.size else np.zeros(f_ix.size, bool)
        f_ix, src = f_ix[ok], s_ix[pos[ok]]
        # the backward op: the op of that thread that starts at the flow's end
        ko = np.lexsort((ts, th))
        kth, kts = th[ko], ts[ko]
        for g in np.unique(fth[f_ix]).tolist():
            sel = fth[f_ix] == g
            lo, hi = np.searchsorted(kth, g, "left"), np.searchsorted(kth, g, "right")
            at = lo + np.searchsorted(kts[lo:hi], fts[f_ix[sel]], "left")
            hit = (at < hi) & (kts[np.minimum(at, hi - 1)] == fts[f_ix[sel]]) if hi > lo else np.zeros(sel.sum(), bool)
            dst = ko[at[hit]]
            l_tid[dst], l_t[dst] = fth[src[sel][hit]], fts[src[sel][hit]]
    # Outermost ops per thread (disjoint): an op inside an earlier op's extent is nested.
    ko = np.lexsort((-end, ts, th))
    kth, kts, kend = th[ko], ts[ko], end[ko]
    prev_end = np.full(m, np.iinfo(np.int64).min)
    for g in np.unique(kth).tolist():   # per thread: running max end of the earlier ops
        a, b = np.searchsorted(kth, g, "left"), np.searchsorted(kth, g, "right")
        prev_end[a + 1:b] = np.maximum.accumulate(kend[a:b])[:-1]
    outer = ko[kts > prev_end]
    for g in np.unique(launch_tid[launch_tid >= 0]).tolist():
        mine = outer[th[outer] == g]
        want = np.flatnonzero(launch_tid == g)
        if mine.size == 0:
            continue
        mine = mine[np.argsort(ts[mine], kind="stable")]
        k = np.searchsorted(ts[mine], launch[want], "right") - 1
        c = mine[np.maximum(k, 0)]
        inside = (k >= 0) & (end[c] >= launch[want]) & (l_t[c] >= 0)
        fwd_tid[want[inside]], fwd_t[want[inside]] = l_tid[c[inside]], l_t[c[inside]]
    return fwd_tid, fwd_t


def _memory_levels(data: TraceData, gtid_of: np.ndarray) -> dict[int, tuple[np.ndarray, np.ndarray, int]]:
    """pid -> (time, allocated bytes after it, bytes before the first) from `[memory]` instants
    (`profile_memory=True`), the `mem` the summarizer's `mem_peak_bytes` reads, as nsys's CUDA
    memory events give it. Per process the device its kernels ran on (else the CUDA device with
    most events); a trace with no CUDA memory events (a CPU run) gives its CPU allocator's levels."""
    out: dict[int, tuple[np.ndarray, np.ndarray, int]] = {}
    if not len(data.mem_ts):
        return out
    t, dev, tot, chg = _arr(data.mem_ts), _arr(data.mem_device), _arr(data.mem_total), _arr(data.mem_change)
    pid = pid_of_gtid(gtid_of[_arr(data.mem_thread)])
    gdev = _arr(data.gpu_device)
    gdev = gdev[gdev >= 0]
    for p in np.unique(pid).tolist():
        mine = pid == p
        cuda = dev[mine & (dev >= 0)]
        if cuda.size:
            u, c = np.unique(gdev if gdev.size and np.isin(gdev, cuda).any() else cuda, return_counts=True)
            want = int(u[c.argmax()])
        else:
            want = -1
        ix = np.flatnonzero(mine & (dev == want))
        ix = ix[np.argsort(t[ix], kind="stable")]
        out[int(p)] = (t[ix], tot[ix], max(0, int(tot[ix[0]] - chg[ix[0]])))
    return out


def _identity(meta: dict[str, Any]) -> dict[str, Any]:
    """rank and world size written inside the trace (`distributedInfo`, kineto with torch.distributed)."""
    info = meta.get("distributedInfo")
    out: dict[str, Any] = {}
    if isinstance(info, dict):
        for key in ("rank", "world_size"):
            v = info.get(key)
            if isinstance(v, int) and not isinstance(v, bool) and v >= 0:
                out[key] = v
    return out


def _prepare(data: TraceData, ident: SourceIdentity | None = None) -> _Prepared:
    """Fill the event model from one trace: every loop here is over threads or arrays, not events."""
    pid_hint = ident.pid if ident is not None and ident.pid is not None else 0
    gtid_of = _thread_gtids(data.threads, pid_hint)
    nr = len(data.ranges)
    r_start = np.fromiter((r[1] for r in data.ranges), np.int64, nr)
    r_end = r_start + np.fromiter((r[2] for r in data.ranges), np.int64, nr)
    r_gtid = gtid_of[np.fromiter((r[3] for r in data.ranges), np.int64, nr)] if nr else np.zeros(0, np.int64)
    order = np.lexsort((np.arange(nr), -r_end, r_start, r_gtid))
    text = [data.ranges[i][0] for i in order.tolist()]
    ranges = NvtxRanges(r_start[order], r_end[order], r_gtid[order], np.full(nr, NVTX_PUSHPOP, np.int64),
                        np.ones(nr, bool), order.astype(np.int64), text, [None] * nr)
    index = RangeIndex.build(ranges)

    # API calls -> innermost range on the same thread (NVIDIA's rule), thread by thread.
    api_ts, api_thread = _arr(data.api_ts), _arr(data.api_thread)
    api_gtid = gtid_of[api_thread] if api_ts.size else np.zeros(0, np.int64)
    api_range = np.full(api_ts.size, -1, np.int64)
    for g in np.intersect1d(np.unique(api_gtid), np.fromiter(index.threads, np.int64)).tolist():
        m = np.flatnonzero(api_gtid == g)
        api_range[m] = index.innermost(g, api_ts[m], api_ts[m])
    api_ns = np.zeros(nr, np.int64)
    inside = api_range >= 0
    np.add.at(api_ns, api_range[inside], _arr(data.api_dur)[inside])

    # GPU ops -> launching call (correlation id) -> range.
    g_ts = _arr(data.gpu_ts)
    corr, api_corr = _arr(data.gpu_corr), _arr(data.api_corr)
    op_api = np.full(g_ts.size, -1, np.int64)
    # CUPTI correlation ids start at 1; -1 = missing; below -1: ids beyond 64 bits, renumbered.
    valid = np.flatnonzero((api_corr > 0) | (api_corr < -1))
    if g_ts.size and valid.size:
        srt = valid[np.argsort(api_corr[valid], kind="stable")]
        keys = api_corr[srt]
        pos = np.minimum(np.searchsorted(keys, corr), keys.size - 1)
        hit = ((corr > 0) | (corr < -1)) & (keys[pos] == corr)
        op_api[hit] = srt[pos[hit]]
    has = op_api >= 0
    ix = np.maximum(op_api, 0)
    rng = np.where(has, api_range[ix] if api_range.size else -1, -1)
    pids = ranges.pid
    main_pid = ident.pid if ident is not None else None
    if main_pid is None and nr:
        u, c = np.unique(pids, return_counts=True)
        main_pid = int(u[c.argmax()])
    op_gtid = np.where(has, api_gtid[ix] if api_gtid.size else -1, -1)
    orphan = has & (rng < 0)
    names_ = data.names
    g_name = _arr(data.gpu_name)
    kind = _arr(data.gpu_kind, np.int8)
    copy_of_name = np.array([_COPY_KIND.get(_memcpy_direction(n), 0) for n in names_], np.int64)
    ops = {
        "rng": rng, "start": g_ts, "end": g_ts + _arr(data.gpu_dur),
        "kind": np.select([kind == KERNEL, kind == MEMCPY], [KIND_KERNEL, KIND_MEMCPY], KIND_MEMSET).astype(np.int64),
        "name": np.where(kind == KERNEL, g_name, -1),
        "nbytes": _arr(data.gpu_bytes),
        "copy_kind": np.where(kind == MEMCPY, copy_of_name[g_name] if g_name.size else 0, 0),
        "pid": np.where(has, pid_of_gtid(np.maximum(op_gtid, 0)), main_pid if main_pid is not None else -1),
        "launch": np.where(orphan, api_ts[ix] if api_ts.size else -1, -1),
        "launch_tid": np.where(orphan, op_gtid, -1),
    }
    ops["fwd_tid"], ops["fwd_t"] = _forward_links(data, gtid_of, ops["launch_tid"], ops["launch"])
    kernel_names = np.unique(ops["name"][ops["name"] >= 0])
    names = {int(n): (names_[n], short_kernel_name(names_[n])) for n in kernel_names.tolist()}
    base = data.base_ns
    return _Prepared(data, base, ranges, index, ops, api_ns, names, main_pid, _identity(data.metadata), text,
                     ranges.start + base, ranges.end + base, pids.tolist(), index.parent, g_ts + base,
                     ops["end"] + base, _memory_levels(data, gtid_of))


# ------------------------------------------------------------------------------------------------
# Steps
# ------------------------------------------------------------------------------------------------

def _step_hint(ident: SourceIdentity, path: Path) -> int | None:
    if ident.step_hint is not None:
        return ident.step_hint
    from ..readers.naming import classify_name

    info = classify_name(ident.source or path.name) or classify_name(path.name)
    return info.step if info is not None else None


def _spans(p: _Prepared, ident: SourceIdentity, path: Path, step_range: str | None = None
           ) -> tuple[list[StepSpan], list[str]]:
    """The steps this trace holds (absolute ns) and notes about how they were found."""
    notes: list[str] = []
    hint = _step_hint(ident, path)
    pid = p.main_pid
    top = np.flatnonzero(p.parent < 0)
    user_re = compile_step_range(step_range)
    if user_re is not None:
        mine = sorted((i for i, nm in enumerate(p.r_name) if user_re.search(nm)), key=lambda i: p.r_start[i])
        if mine:
            notes.append(f"steps from the ranges --step-range {step_range!r} matches, numbered in order")
            return [StepSpan(k + 1, int(p.r_start[i]), int(p.r_end[i]), "step_range", ident.source, (),
                             p.r_pid[i], p.r_name[i]) for k, i in enumerate(mine)], notes
        notes.append(f"--step-range {step_range!r} matches no range of the trace")
    if hint is None:
        prof = [(int(m.group(1)), i) for i, nm in enumerate(p.r_name) if (m := _PROFILER_STEP.match(nm))]
        if prof:
            notes.append("steps from ProfilerStep#N ranges (they count profiler.step() calls from 0, so "
                         "ProfilerStep#N is step N+1; verl calls it per mini-batch, not per RL step)")
            return [StepSpan(n + 1, int(p.r_start[i]), int(p.r_end[i]), "profiler_step", ident.source, (),
                             p.r_pid[i], p.r_name[i]) for n, i in sorted(prof, key=lambda x: p.r_start[x[1]])], notes
    if top.size:
        lo, hi = int(p.r_start[top].min()), int(p.r_end[top].max())
    elif p.data.profiler_span is not None:
        lo, hi = (x + p.data.base_ns for x in p.data.profiler_span)
    elif p.g_start.size:
        lo, hi = int(p.g_start.min()), int(p.g_end.max())
    else:
        notes.append("no ranges and no GPU activity: no step span")
        return [], notes
    if hint is None:
        notes.append("no step<N> in the file name and no ProfilerStep ranges: the whole file is one step")
        return [StepSpan(1, lo, hi, "whole_file", ident.source, (), pid)], notes
    return [StepSpan(hint, lo, hi, "file_name", ident.source, (), pid)], notes


def _flags(p: _Prepared, ident: SourceIdentity, span: StepSpan) -> tuple[str, ...]:
    names = {p.r_name[i] for i in range(len(p.r_name))
             if span.start_ns <= p.r_start[i] <= span.end_ns
             and canonical_stage(p.r_name[i], ident.role) in UNSTEADY_STAGES}
    return tuple(sorted(names))


def _source_steps(p: _Prepared, ident: SourceIdentity, path: Path, step_range: str | None = None
                  ) -> tuple[SourceSteps, list[str]]:
    spans, notes = _spans(p, ident, path, step_range)
    spans = [replace(s, flags=_flags(p, ident, s)) for s in spans]
    unsteady = [TopRange(p.r_name[i], canonical_stage(p.r_name[i], ident.role), int(p.r_start[i]),
                         int(p.r_end[i]), _int_pid(p.r_pid[i]))
                for i in range(len(p.r_name)) if canonical_stage(p.r_name[i], ident.role) in UNSTEADY_STAGES]
    return SourceSteps.from_spans(_torch_ident(ident, p), spans, str(path), unsteady), notes


def _torch_ident(ident: SourceIdentity, p: _Prepared) -> SourceIdentity:
    """The identity with what the trace itself says: kind torch, rank and world size from
    `distributedInfo` where the file name gave none."""
    got: dict[str, Any] = {"source_kind": "torch"}
    for key in ("rank", "world_size"):
        if getattr(ident, key) is None and key in p.identity:
            got[key] = p.identity[key]
    return replace(ident, **got)


def torch_source_steps(path: str | Path, ident: SourceIdentity, step_range: str | None = None) -> SourceSteps:
    """The window stage's view of one torch trace: its step spans (absolute ns) and unsteady ranges."""
    p = Path(path)
    src, _ = _source_steps(_prepare(read_chrome_trace(p), ident), ident, p, step_range)
    return src


def torch_step_spans(path: str | Path, ident: SourceIdentity) -> list[StepSpan]:
    """The steps one torch trace holds (see the module docstring for how they are found)."""
    return list(torch_source_steps(path, ident).steps)


def torch_steps_item(item: tuple[str, SourceIdentity], options: Any = None) -> SourceSteps:
    """Picklable per-artifact function for executors: (path, identity) -> SourceSteps."""
    return torch_source_steps(*item, step_range=getattr(options, "step_range", None))


def _as_item(x: Any) -> tuple[Path, SourceIdentity]:
    if isinstance(x, (tuple, list)) and len(x) == 2:
        return Path(x[0]), x[1]
    p = Path(x)
    return p, SourceIdentity(source=p.name, source_kind="torch")


def torch_steps(items: Iterable[Any], step: StepArg = DEFAULT_STEP) -> list[dict[str, Any]]:
    """steps.parquet rows of several torch traces (paths, or (path, SourceIdentity) pairs).

    Every step found is a row; `chosen`/`reason` come from the window's rule over all of them."""
    from .nsys import steps_rows

    srcs = [torch_source_steps(p, ident) for p, ident in map(_as_item, items)]
    resolved, choice = run_window(srcs, step)
    return steps_rows(resolved, choice)


# ------------------------------------------------------------------------------------------------
# Summaries
# ------------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class TorchItem:
    """One torch trace to summarize; `spans`: the chosen step's spans (empty: choose from the file)."""

    path: str
    ident: SourceIdentity
    spans: tuple[StepSpan, ...] = ()


def summarize_torch_item(item: TorchItem, options: SummarizeOptions) -> SummaryRows:
    """Picklable per-artifact function: phases + kernels (+ steps when choosing alone) rows."""
    return summarize_torch_trace(item.path, item.ident, options, item.spans or None)


def summarize_torch_trace(path: str | Path, ident: SourceIdentity, options: SummarizeOptions | None = None,
                          spans: Sequence[StepSpan] | None = None) -> SummaryRows:
    """Summarize one torch chrome trace into phases / kernels / steps rows (summarize/phases.py's rules).

    `spans`: the chosen step's spans in this trace (from the window over all sources); when None the
    step is chosen from this trace alone (`options.step`) and its steps rows are included. The
    result also holds `warnings`: [{"source", "message"}] (tolerant parsing, missing time base)."""
    options = options or SummarizeOptions()
    p = Path(path)
    data = read_chrome_trace(p)
    prep = _prepare(data, ident)
    ident = _torch_ident(ident, prep)
    steps_rows_: list[dict[str, Any]] = []
    notes: list[str] = []
    if spans is None:
        from .nsys import steps_rows

        src, notes = _source_steps(prep, ident, p, options.step_range)
        resolved, choice = run_window([src], options.step)
        spans = window_spans(resolved[0], choice.step)
        steps_rows_ = steps_rows(resolved, choice)
    phases, kernels = _rows(prep, ident, list(spans), options.top)
    for row in phases:
        row["rank_source"] = _rank_source(ident, prep)
    warnings = [{"source": ident.source, "message": w} for w in data.warnings + notes]
    return {"phases": phases, "kernels": kernels, "steps": steps_rows_, "warnings": warnings}


def _rank_source(ident: SourceIdentity, p: _Prepared) -> str:
    if ident.rank is None:
        return "unknown: no rank in the file name or the trace's distributedInfo"
    if p.identity.get("rank") == ident.rank:
        return "distributedInfo"
    return "artifact"


def _rows(p: _Prepared, ident: SourceIdentity, spans: list[StepSpan], top: int
          ) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """The model of one trace through the one summarizer (summarize/phases.py)."""
    base = p.base
    one_pid = len({s.pid for s in spans}) <= 1      # a trace of one process: its ranges, any thread id
    rel = [(s.start_ns - base, s.end_ns - base, None if one_pid else s.pid, s.step) for s in spans]
    # A file that is one step owns all of its GPU work, whenever it ran.
    op_spans = [(-_FAR, _FAR, pid, st) if s.boundary in _WHOLE_FILE else (lo, hi, pid, st)
                for s, (lo, hi, pid, st) in zip(spans, rel)]
    r = p.ranges
    selected = np.zeros(len(r), bool)
    for lo, hi, pid, _ in rel:
        m = (r.start >= lo) & (r.start <= hi)
        if pid is not None:
            m &= r.pid == pid
        selected |= m
    rng = p.ops["rng"]
    keep = rng < 0
    keep[~keep] = selected[rng[~keep]]
    ops = {k: v[keep] for k, v in p.ops.items()}
    return phase_rows(ident, base, r, p.index, ops, p.api_ns, selected, rel, p.names, p.mem, top, op_spans)


# ------------------------------------------------------------------------------------------------
# Memory snapshots
# ------------------------------------------------------------------------------------------------

@dataclass
class _Timeline:
    """Allocated bytes of one device over time: level[i] holds from times[i] until times[i+1]."""

    times: np.ndarray     # absolute ns
    levels: np.ndarray    # bytes after each event
    baseline: int         # bytes before the first event

    def peak(self, lo: int, hi: int) -> int | None:
        if self.times.size == 0:
            return self.baseline
        return level_peak(self.times, self.levels, self.baseline, lo, hi)


@dataclass
class _Annot:
    name: str
    device: int
    start: int
    end: int
    parent: int = -1
    depth: int = 0


def _timelines(snap: dict[str, Any]) -> dict[int, _Timeline]:
    """Per device: allocated bytes (alloc adds, free_requested subtracts, as torch counts
    `memory_allocated`), anchored on the blocks the snapshot still holds at its end."""
    final: dict[int, int] = {}
    for seg in snap.get("segments") or []:
        if not isinstance(seg, dict):
            continue
        dev = seg.get("device", 0)
        for b in seg.get("blocks") or []:
            if isinstance(b, dict) and b.get("state") == "active_allocated":
                final[dev] = final.get(dev, 0) + int(b.get("size") or 0)
    out: dict[int, _Timeline] = {}
    for dev, trace in enumerate(snap.get("device_traces") or []):
        times: list[int] = []
        deltas: list[int] = []
        for ev in trace or []:
            if not isinstance(ev, dict):
                continue
            act = ev.get("action")
            if act == "alloc":
                sign = 1
            elif act == "free_requested":
                sign = -1
            else:
                continue
            t = ev.get("time_us")
            size = ev.get("size")
            if not isinstance(t, (int, float)) or not isinstance(size, int):
                continue
            times.append(int(t * 1000))
            deltas.append(sign * size)
        t_arr = np.array(times, dtype=np.int64)
        d_arr = np.array(deltas, dtype=np.int64)
        order = np.argsort(t_arr, kind="stable")
        t_arr, d_arr = t_arr[order], d_arr[order]
        baseline = final.get(dev, 0) - int(d_arr.sum())
        out[dev] = _Timeline(t_arr, baseline + np.cumsum(d_arr), baseline)
    return out


def _annotations(snap: dict[str, Any]) -> list[_Annot]:
    """START/END pairs of external_annotations, nested per device (parent, depth)."""
    open_: dict[tuple[int, str], list[int]] = {}
    out: list[_Annot] = []
    events = [a for a in snap.get("external_annotations") or [] if isinstance(a, dict)]
    events.sort(key=lambda a: a.get("time_us") if isinstance(a.get("time_us"), (int, float)) else 0)
    for a in events:
        name, stage, t = a.get("name"), a.get("stage"), a.get("time_us")
        if not isinstance(name, str) or not isinstance(t, (int, float)):
            continue
        dev = a.get("device", 0) if isinstance(a.get("device"), int) else 0
        if stage == "START":
            out.append(_Annot(name, dev, int(t * 1000), -1))
            open_.setdefault((dev, name), []).append(len(out) - 1)
        elif stage == "END" and open_.get((dev, name)):
            out[open_[(dev, name)].pop()].end = int(t * 1000)
    out = [a for a in out if a.end >= a.start]
    out.sort(key=lambda a: (a.device, a.start, -a.end))
    stack: list[int] = []
    for i, a in enumerate(out):
        while stack and (out[stack[-1]].device != a.device or out[stack[-1]].end <= a.start):
            stack.pop()
        if stack:
            a.parent, a.depth = stack[-1], out[stack[-1]].depth + 1
        stack.append(i)
    return out


def _memory_spans(annots: list[_Annot], ident: SourceIdentity, tl: dict[int, _Timeline]) -> list[StepSpan]:
    """Steps of a snapshot: its top-level annotations cut where a name repeats; the last group is
    the folder's step N (verl dumps at the end of step N), earlier groups N-1, N-2 ..."""
    top = sorted((a for a in annots if a.parent < 0), key=lambda a: a.start)
    groups: list[list[_Annot]] = []
    seen: set[str] = set()
    for a in top:
        if not groups or a.name in seen:
            groups.append([])
            seen = set()
        groups[-1].append(a)
        seen.add(a.name)
    if ident.step_range is not None:
        first = ident.step_range[0]
    elif ident.step_hint is not None:
        first = ident.step_hint - len(groups) + 1
    else:
        first = 1
    spans = [StepSpan(first + k, min(a.start for a in g), max(a.end for a in g), "snapshot_dir",
                      ident.source, (), ident.pid) for k, g in enumerate(groups)]
    if not spans and ident.step_hint is not None:
        times = [t.times for t in tl.values() if t.times.size]
        if times:
            lo = min(int(t[0]) for t in times)
            hi = max(int(t[-1]) for t in times)
            spans = [StepSpan(ident.step_hint, lo, hi, "snapshot_dir", ident.source, (), ident.pid)]
    return [s for s in spans if s.step >= 1] or spans[-1:]


def memory_source_steps(path: str | Path, ident: SourceIdentity) -> SourceSteps:
    """The window stage's view of one memory snapshot."""
    from dataclasses import replace

    snap = load_snapshot(path)
    ident = replace(ident, source_kind="memory")
    return SourceSteps.from_spans(ident, _memory_spans(_annotations(snap), ident, _timelines(snap)), str(path))


@dataclass(frozen=True)
class MemoryItem:
    """One snapshot to summarize, optionally with the phases rows to attach `mem_peak_bytes` to."""

    path: str
    ident: SourceIdentity
    phases_rows: tuple[dict[str, Any], ...] | None = None


def summarize_memory_item(item: MemoryItem, options: SummarizeOptions) -> SummaryRows:
    """Picklable per-artifact function for executors."""
    rows = list(item.phases_rows) if item.phases_rows is not None else None
    return summarize_memory_snapshot(item.path, item.ident, options, rows)


def summarize_memory_snapshot(path: str | Path, ident: SourceIdentity, options: SummarizeOptions | None = None,
                              phases_rows: Sequence[dict[str, Any]] | None = None) -> SummaryRows:
    """Peak allocated bytes per phase from a torch memory snapshot.

    Without `phases_rows`: one phases row per (annotation name, parent, depth) of the chosen step
    (`options.step`, among the steps the snapshot holds), `source_kind="memory"`, with start_ns,
    wall_ns and mem_peak_bytes (other columns null), plus steps rows.
    With `phases_rows` (rows of a trace of the same process): copies of them with
    `mem_peak_bytes` set where the snapshot covers the row's time: the peak over the snapshot's
    instances of the same annotation inside the row's step, else over the row's own time window.
    Rows of other processes, or outside the snapshot's timeline, are returned unchanged."""
    from dataclasses import replace

    from .nsys import steps_rows

    options = options or SummarizeOptions()
    ident = replace(ident, source_kind="memory")
    snap = load_snapshot(path)
    tl = _timelines(snap)
    annots = _annotations(snap)
    warnings: list[dict[str, Any]] = []
    if not any(t.times.size for t in tl.values()):
        warnings.append({"source": ident.source, "message": "the snapshot holds no allocation history "
                         "(was _record_memory_history on?): no per-phase peaks"})
    if any(t.times.size and (int(t.levels.min()) < 0 or t.baseline < 0) for t in tl.values()):
        warnings.append({"source": ident.source, "message": "allocation history and final state disagree "
                         "(negative level): peaks may be off"})
    if phases_rows is not None:
        return {"phases": _attach(phases_rows, ident, tl, annots), "kernels": [], "steps": [],
                "warnings": warnings}
    spans = _memory_spans(annots, ident, tl)
    src = SourceSteps.from_spans(ident, spans, str(path))
    resolved, choice = run_window([src], options.step)
    chosen = window_spans(resolved[0], choice.step)
    phases: list[dict[str, Any]] = []
    for s in chosen:
        groups: dict[tuple, list[_Annot]] = {}
        for a in annots:
            if s.start_ns <= a.start <= s.end_ns:
                parent = annots[a.parent].name if a.parent >= 0 else None
                groups.setdefault((a.name, parent, a.depth), []).append(a)
        for (name, parent, depth), members in groups.items():
            peaks = [tl[a.device].peak(a.start, a.end) for a in members if a.device in tl]
            phases.append({
                **ident.keys(s.step), "phase": name, "stage": canonical_stage(name, ident.role),
                "parent": parent, "depth": depth, "start_ns": min(a.start for a in members),
                "wall_ns": sum(a.end - a.start for a in members),
                "mem_peak_bytes": max((x for x in peaks if x is not None), default=None),
            })
    return {"phases": phases, "kernels": [], "steps": steps_rows(resolved, choice), "warnings": warnings}


def _attach(rows: Sequence[dict[str, Any]], ident: SourceIdentity, tl: dict[int, _Timeline],
            annots: list[_Annot]) -> list[dict[str, Any]]:
    covered = [(int(t.times[0]), int(t.times[-1])) for t in tl.values() if t.times.size]
    if not covered:
        return [dict(r) for r in rows]
    lo_all, hi_all = min(c[0] for c in covered), max(c[1] for c in covered)
    # Step windows of the rows: per (source, step), from the rows' own extents.
    win: dict[tuple, list[int]] = {}
    for r in rows:
        if r.get("start_ns") is None or r.get("wall_ns") is None:
            continue
        k = (r.get("source"), r.get("step"))
        w = win.setdefault(k, [r["start_ns"], r["start_ns"] + r["wall_ns"]])
        w[0] = min(w[0], r["start_ns"])
        w[1] = max(w[1], r["start_ns"] + r["wall_ns"])
    out = []
    for r in rows:
        r = dict(r)
        out.append(r)
        pid = r.get("pid")
        if ident.pid is not None and pid is not None and pid != ident.pid:
            continue
        if r.get("start_ns") is None or r.get("wall_ns") is None:
            continue
        lo, hi = r["start_ns"], r["start_ns"] + r["wall_ns"]
        if hi < lo_all or lo > hi_all:
            continue
        w = win.get((r.get("source"), r.get("step")), [lo, hi])
        same = [a for a in annots if a.name == r.get("phase") and w[0] <= a.start <= w[1] and a.device in tl]
        if same:
            peaks = [tl[a.device].peak(a.start, a.end) for a in same]
        else:
            peaks = [t.peak(lo, hi) for t in tl.values() if t.times.size]
        peaks = [x for x in peaks if x is not None]
        if peaks:
            r["mem_peak_bytes"] = max(peaks)
    return out
