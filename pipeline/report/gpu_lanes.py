"""What each process's GPU did during the step, read from the window traces the bundle holds.

Why here and not in phases.parquet: the summaries keep per-phase sums, but a timeline needs the
intervals themselves (when the GPU was busy, with what). The bundle already carries the step's
scrubbed traces (`traces/<source>.sqlite` for nsys, `.trace.json.gz` for torch), so the page reads
kernel, memcpy and memset intervals from them, keeps one lane category per interval (gemm,
attention, comm, memcpy, other) and hands the timeline merged, pixel-sized runs.
"""
from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ...stages.core.errors import VerlprofError
from ...stages.readers.chrome_trace import KERNEL, MEMCPY, MEMSET, read_chrome_trace
from ...stages.readers.nsys_sqlite import NsysExport, pid_of_gtid
from ...stages.summarize import categorize

#: Lane categories, drawn in this order (later ones on top, so exposed communication shows).
LANE_CATEGORIES: tuple[str, ...] = ("other", "memcpy", "gemm", "attention", "comm")
LANE_COLORS: dict[str, str] = {"other": "#9e9e9e", "memcpy": "#f2c14e", "gemm": "#3b6fb6",
                               "attention": "#8e44ad", "comm": "#d62728"}
_LANE_OF = {"gemm": "gemm", "attention": "attention", "comm": "comm", "memcpy": "memcpy", "memset": "memcpy"}


def lane_category(kernel_category: str) -> int:
    """Index into LANE_CATEGORIES of a kernel category (stages/summarize/kernel_category.py)."""
    return LANE_CATEGORIES.index(_LANE_OF.get(kernel_category, "other"))


@dataclass
class GpuIntervals:
    """GPU activity of one process: absolute UTC ns, one lane category per interval."""
    start: np.ndarray
    end: np.ndarray
    cat: np.ndarray

    @classmethod
    def empty(cls) -> GpuIntervals:
        z = np.zeros(0, np.int64)
        return cls(z, z.copy(), np.zeros(0, np.int8))

    def __len__(self) -> int:
        return len(self.start)


def _concat(parts: Iterable[tuple[np.ndarray, np.ndarray, np.ndarray]]) -> GpuIntervals:
    parts = list(parts)
    if not parts:
        return GpuIntervals.empty()
    return GpuIntervals(*(np.concatenate([p[i] for p in parts]) for i in range(3)))


def read_nsys_window(path: Path) -> dict[int, GpuIntervals]:
    """pid -> GPU intervals of an nsys window export (kernels by name category, copies, memsets)."""
    out: dict[int, list[tuple[np.ndarray, np.ndarray, np.ndarray]]] = {}
    with NsysExport.open(path) as exp:
        base = exp.session_start_ns() or 0
        if exp.has("CUPTI_ACTIVITY_KIND_KERNEL", "start", "end", "globalPid", "shortName"):
            dem = "demangledName" if exp.has("CUPTI_ACTIVITY_KIND_KERNEL", "demangledName") else "shortName"
            rows = exp.query(f"SELECT start, end, globalPid, shortName, {dem} FROM CUPTI_ACTIVITY_KIND_KERNEL")
            if rows:
                a = np.array([r[:3] for r in rows], dtype=np.int64)
                names = exp.strings([i for r in rows for i in r[3:5] if isinstance(i, int)])
                cats: dict[tuple[Any, Any], int] = {}
                cat = np.array([cats.setdefault((r[3], r[4]), lane_category(categorize(names.get(r[3]), names.get(r[4]))))
                                for r in rows], dtype=np.int8)
                _split(out, a[:, 0] + base, a[:, 1] + base, pid_of_gtid(a[:, 2]), cat)
        for table in ("CUPTI_ACTIVITY_KIND_MEMCPY", "CUPTI_ACTIVITY_KIND_MEMSET"):
            if exp.has(table, "start", "end", "globalPid"):
                rows = exp.query(f"SELECT start, end, globalPid FROM {table}")
                if rows:
                    a = np.array(rows, dtype=np.int64)
                    _split(out, a[:, 0] + base, a[:, 1] + base, pid_of_gtid(a[:, 2]),
                           np.full(len(a), LANE_CATEGORIES.index("memcpy"), np.int8))
    return {pid: _concat(parts) for pid, parts in out.items()}


def _split(out: dict[int, list], s: np.ndarray, e: np.ndarray, pid: np.ndarray, cat: np.ndarray) -> None:
    for p in np.unique(pid):
        m = pid == p
        out.setdefault(int(p), []).append((s[m], e[m], cat[m]))


def read_torch_window(path: Path) -> GpuIntervals:
    """GPU intervals of a torch window trace (one process per trace)."""
    data = read_chrome_trace(path)
    if not data.n_gpu:
        return GpuIntervals.empty()
    kind = np.frombuffer(data.gpu_kind, np.int8) if len(data.gpu_kind) else np.zeros(0, np.int8)
    ts = np.frombuffer(data.gpu_ts, np.int64) + data.base_ns
    dur = np.frombuffer(data.gpu_dur, np.int64)
    name = np.frombuffer(data.gpu_name, np.int64)
    by_name: dict[int, int] = {}
    cat = np.empty(len(ts), np.int8)
    for i, (k, n) in enumerate(zip(kind.tolist(), name.tolist())):
        if k == KERNEL:
            if n not in by_name:
                by_name[n] = lane_category(categorize(None, data.names[n] if 0 <= n < len(data.names) else None))
            cat[i] = by_name[n]
        else:
            cat[i] = LANE_CATEGORIES.index("memcpy" if k in (MEMCPY, MEMSET) else "other")
    return GpuIntervals(ts, ts + dur, cat)


def read_bundle_gpu(bundle: Path, traces: Mapping[str, tuple[str, str | None, str | None]],
                    wanted: Iterable[tuple[str, int | None]]) -> tuple[dict[tuple[str, int | None], GpuIntervals], list[str]]:
    """(source, pid) -> GPU intervals for each wanted process, from the bundle's window traces.

    traces: source -> (kind, chrome rel, sqlite rel). A window with an SQLite (an nsys window) is
    read from it, else its Chrome JSON (a Kineto window): by the files it has, whatever its format.
    A trace that cannot be read leaves its process without a GPU lane and adds one line to the
    returned problems (the page says so)."""
    out: dict[tuple[str, int | None], GpuIntervals] = {}
    problems: list[str] = []
    cache: dict[str, Any] = {}
    for source, pid in wanted:
        if source not in traces:
            continue
        _kind, chrome, sqlite = traces[source]
        try:
            if sqlite:
                if sqlite not in cache:
                    cache[sqlite] = read_nsys_window(bundle / sqlite)
                got = cache[sqlite].get(pid) if pid is not None else None
                out[(source, pid)] = got if got is not None else GpuIntervals.empty()
            elif chrome:
                if chrome not in cache:
                    cache[chrome] = read_torch_window(bundle / chrome)
                out[(source, pid)] = cache[chrome]
        except (VerlprofError, OSError, ValueError) as exc:
            problems.append(f"{source}: GPU lane left out ({str(exc).splitlines()[0][:160]})")
            cache[sqlite or chrome or source] = {}
    return out, problems


def busy_ns(iv: GpuIntervals, lo: int, hi: int, cats: Iterable[int] | None = None) -> int:
    """Length of the union of the intervals (of `cats`, default all) clipped to [lo, hi)."""
    m = np.ones(len(iv), bool) if cats is None else np.isin(iv.cat, list(cats))
    s, e = np.clip(iv.start[m], lo, hi), np.clip(iv.end[m], lo, hi)
    keep = e > s
    s, e = s[keep], e[keep]
    if not len(s):
        return 0
    starts, ends = _union(s, e)
    return int((ends - starts).sum())


def _union(s: np.ndarray, e: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The union of the (non-empty list of) intervals [s, e) as sorted, disjoint (starts, ends)."""
    order = np.argsort(s, kind="stable")
    s, e = s[order], e[order]
    run_end = np.maximum.accumulate(e)
    new = np.empty(len(s), bool)
    new[0] = True
    new[1:] = s[1:] > run_end[:-1]
    return s[new], np.append(run_end[np.flatnonzero(new)[1:] - 1], run_end[-1])


def _covered(iv_s: np.ndarray, iv_e: np.ndarray, edges: np.ndarray) -> np.ndarray:
    """Busy ns of the union of [iv_s, iv_e) inside each bin [edges[k], edges[k+1])."""
    if not len(iv_s):
        return np.zeros(len(edges) - 1)
    ms, me = _union(iv_s, iv_e)
    lengths = (me - ms).astype(np.float64)
    before = np.concatenate([[0.0], np.cumsum(lengths)])
    j = np.searchsorted(ms, edges, side="right") - 1
    jj = np.clip(j, 0, len(ms) - 1)
    cum = np.where(j < 0, 0.0, before[jj] + np.clip(edges - ms[jj], 0, lengths[jj]))
    return np.diff(cum)


def coverage_pixels(iv: GpuIntervals, lo: int, hi: int, sx: float, px_per_ns: float) -> list[tuple[int, int, int]]:
    """The lane as whole pixel columns: `(x, width, lane category)` runs whose painted width equals
    the GPU's busy share of [lo, hi) (to the pixel), however short the kernels.

    Why: drawing each kernel at least a pixel wide painted a GPU busy 18% of the step over 94% of
    its lane. Here every pixel column gets its covered fraction of time; an error-diffusion pass
    paints a column when the carried coverage reaches half a pixel, so the painted count is the
    rounded sum of the fractions, and each painted column takes the category that covered most of
    it. Columns sit on whole CSS pixels so a screenshot counts them exactly."""
    if hi <= lo or not len(iv):
        return []
    x_first = int(np.floor(sx))
    x_last = int(np.ceil(sx + (hi - lo) * px_per_ns))
    xs = np.arange(x_first, x_last + 1, dtype=np.float64)
    edges = np.clip(lo + (xs - sx) / px_per_ns, lo, hi)
    s, e = np.clip(iv.start, lo, hi), np.clip(iv.end, lo, hi)
    keep = e > s
    s, e, cat = s[keep].astype(np.float64), e[keep].astype(np.float64), iv.cat[keep]
    total = _covered(s, e, edges) * px_per_ns
    per = np.stack([_covered(s[cat == c], e[cat == c], edges) for c in range(len(LANE_CATEGORIES))])
    dominant = per.argmax(axis=0)
    runs: list[tuple[int, int, int]] = []
    acc = 0.0
    for k, c in enumerate(np.minimum(total, 1.0).tolist()):
        acc += c
        if acc >= 0.5:
            acc -= 1.0
            x, cat_k = x_first + k, int(dominant[k])
            if runs and runs[-1][0] + runs[-1][1] == x and runs[-1][2] == cat_k:
                runs[-1] = (runs[-1][0], runs[-1][1] + 1, cat_k)
            else:
                runs.append((x, 1, cat_k))
    return runs
