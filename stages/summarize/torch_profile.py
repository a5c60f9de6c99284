"""torch chrome traces and memory snapshots -> rows of the phases / kernels / steps schemas.

Why: verl's torch profiler writes one chrome trace per step and rank, and its torch_memory tool a
caching-allocator snapshot; users compare them with nsys runs. This module is an adapter: it fills
the summarizer's `EventModel` (`readers/events.py`) from a trace and hands it to `summarize/phases.py`, the rules nsys
exports go through too (same-thread projection, inherited figures, name paths, instances):

- Ranges are `user_annotation` events (torch.profiler.record_function, verl's annotations, e.g.
  `mini_batch0`, `Optimizer.step#AdamW.step`), as the model's `NvtxRanges` with globalTid =
  pid << 24 | tid.
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
- Steps: found by the window stage (`window/torch_steps.py`, the rules of every format); the ranges
  and thread ids come from the same `window.trace_ranges` / `thread_gtids`. A file that is one step
  (`file_name`, `whole_file`) owns all of its GPU work, also what ran after the last range ended.
- Time: event `ts` are microseconds after the trace's `baseTimeNanoseconds` (kineto, torch >= 2.1);
  rows hold absolute UTC ns. See `readers/chrome_trace.py` for traces without that field.
- Memory snapshots: the allocator's event timeline (`device_traces`: alloc / free_requested /
  free_completed / segment_*) gives allocated bytes over time; the snapshot's
  `external_annotations` START/END pairs (record_function ranges) cut it into phases, and the peak
  inside each becomes `mem_peak_bytes`. The level before the first event is reconstructed from the
  snapshot's final state (blocks still allocated) minus the net of the timeline, so history
  buffers that wrapped (`max_entries`) are still right. A snapshot whose entries carry no time
  (torch < 2.2) cannot be cut into phases: it gives one row per device of step-level figures over
  its recorded history instead (`summarize/memory_history.py`, `mem_scope = "recorded_history"`).

Per-artifact work is `summarize_torch_item(item, options)` / `summarize_memory_item(item,
options)`: plain, module-level and picklable.
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from functools import lru_cache
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from ..core.phases import canonical_stage
from ..readers.chrome_trace import KERNEL, MEMCPY, TraceData, read_chrome_trace
from ..readers.events import (
    COPY_D2D,
    COPY_D2H,
    COPY_H2D,
    KIND_KERNEL,
    KIND_MEMCPY,
    KIND_MEMSET,
    EventModel,
    GpuOps,
    MemoryLevels,
    Span,
    pid_of_gtid,
)
from ..readers.memory_snapshot import Annotation, load_snapshot, snapshot_annotations
from ..readers.nvtx_tree import RangeIndex
from ..window import (
    SourceIdentity,
    SourceSteps,
    StepSpan,
    pick_window,
    snapshot_spans,
    thread_gtids,
    trace_ident,
    trace_ranges,
    trace_source_steps,
)
from .memory_history import HISTORY_PHASE, HISTORY_SCOPE, history_figures, is_untimed
from .phases import UNATTRIBUTED, phase_rows
from .steps import steps_rows, with_phase_identity
from .types import StepSummaries, SummarizeOptions, SummaryRows

_FAR = 1 << 62                     # a span that holds every time on a trace's clock
_WHOLE_FILE = ("file_name", "whole_file")   # step boundaries that make the whole trace one step

__all__ = [
    "TorchItem", "MemoryItem", "summarize_torch_trace", "summarize_torch_item", "summarize_torch_steps",
    "summarize_memory_snapshot",
    "summarize_memory_item", "short_kernel_name", "UNATTRIBUTED",
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
# One trace as the event model (readers/events.py)
# ------------------------------------------------------------------------------------------------

_COPY_KIND = {"h2d": COPY_H2D, "d2h": COPY_D2H, "d2d": COPY_D2D}


def _arr(a: Any, dtype: Any = np.int64) -> np.ndarray:
    return np.frombuffer(a, dtype=dtype) if len(a) else np.zeros(0, dtype=dtype)


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


def _memory_levels(data: TraceData, gtid_of: np.ndarray) -> dict[int, MemoryLevels]:
    """pid -> (time, allocated bytes after it, bytes before the first) from `[memory]` instants
    (`profile_memory=True`), the `mem` the summarizer's `mem_peak_bytes` reads, as nsys's CUDA
    memory events give it. Per process the device its kernels ran on (else the CUDA device with
    most events); a trace with no CUDA memory events (a CPU run) gives its CPU allocator's levels."""
    out: dict[int, MemoryLevels] = {}
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
        out[int(p)] = MemoryLevels(t[ix], tot[ix], max(0, int(tot[ix[0]] - chg[ix[0]])))
    return out


def _model(data: TraceData, ident: SourceIdentity) -> EventModel:
    """Fill the event model from one trace: every loop here is over threads or arrays, not events."""
    gtid_of = thread_gtids(data.threads, ident.pid if ident.pid is not None else 0)
    ranges = trace_ranges(data, gtid_of)
    nr = len(ranges)
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
    main_pid = ident.pid
    if main_pid is None and nr:
        u, c = np.unique(pids, return_counts=True)
        main_pid = int(u[c.argmax()])
    op_gtid = np.where(has, api_gtid[ix] if api_gtid.size else -1, -1)
    orphan = has & (rng < 0)
    names_ = data.names
    g_name = _arr(data.gpu_name)
    kind = _arr(data.gpu_kind, np.int8)
    copy_of_name = np.array([_COPY_KIND.get(_memcpy_direction(n), 0) for n in names_], np.int64)
    ops = GpuOps(
        rng=rng, start=g_ts, end=g_ts + _arr(data.gpu_dur),
        kind=np.select([kind == KERNEL, kind == MEMCPY], [KIND_KERNEL, KIND_MEMCPY], KIND_MEMSET).astype(np.int64),
        name=np.where(kind == KERNEL, g_name, -1),
        nbytes=_arr(data.gpu_bytes),
        copy_kind=np.where(kind == MEMCPY, copy_of_name[g_name] if g_name.size else 0, 0),
        pid=np.where(has, pid_of_gtid(np.maximum(op_gtid, 0)), main_pid if main_pid is not None else -1),
        launch=np.where(orphan, api_ts[ix] if api_ts.size else -1, -1),
        launch_tid=np.where(orphan, op_gtid, -1),
    )
    ops.fwd_tid, ops.fwd_t = _forward_links(data, gtid_of, ops.launch_tid, ops.launch)
    kernel_names = np.unique(ops.name[ops.name >= 0])
    names = {int(n): (names_[n], short_kernel_name(names_[n])) for n in kernel_names.tolist()}
    return EventModel(ident, data.base_ns, ranges, index, ops, api_ns, names, _memory_levels(data, gtid_of))


# ------------------------------------------------------------------------------------------------
# Summaries
# ------------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class TorchItem:
    """One torch trace to summarize; `spans`: the chosen step's spans (empty: choose from the file);
    `other_steps`: the spans of each other step to summarize from the same parse (collect's profiled
    steps for ranks.parquet); `chosen` False: only the other steps are wanted."""

    path: str
    ident: SourceIdentity
    spans: tuple[StepSpan, ...] = ()
    other_steps: tuple[tuple[StepSpan, ...], ...] = ()
    chosen: bool = True


def summarize_torch_item(item: TorchItem, options: SummarizeOptions) -> SummaryRows:
    """Picklable per-artifact function: phases + kernels (+ steps when choosing alone) rows of the
    chosen step."""
    return summarize_torch_trace(item.path, item.ident, options, item.spans or None)


def summarize_torch_steps(item: TorchItem, options: SummarizeOptions) -> StepSummaries:
    """Picklable per-artifact function: the chosen step's rows and each of the item's other steps'
    phases + kernels rows, from one parse of the trace."""
    spans = (item.spans or None) if item.chosen else ()   # (): no chosen step here, only the others
    chosen, others = _summarize_trace(item.path, item.ident, options, spans, item.other_steps)
    return StepSummaries(chosen if item.chosen else None, others)


def summarize_torch_trace(path: str | Path, ident: SourceIdentity, options: SummarizeOptions | None = None,
                          spans: Sequence[StepSpan] | None = None) -> SummaryRows:
    """Summarize one torch chrome trace into phases / kernels / steps rows (summarize/phases.py's rules).

    `spans`: the chosen step's spans in this trace (from the window over all sources); when None the
    step is chosen from this trace alone (`options.step`) and its steps rows are included. The
    result also holds `warnings`: [{"source", "message"}] (tolerant parsing, missing time base)."""
    return _summarize_trace(path, ident, options or SummarizeOptions(), spans)[0]


def _summarize_trace(path: str | Path, ident: SourceIdentity, options: SummarizeOptions,
                     spans: Sequence[StepSpan] | None, other_steps: Sequence[Sequence[StepSpan]] = ()
                     ) -> tuple[SummaryRows, list[SummaryRows]]:
    """The chosen step's rows and each other step's phases and kernels rows, from one parse and one
    event model of the trace (the model does not depend on the step: each step's rows equal a
    summary of that step alone)."""
    p = Path(path)
    data = read_chrome_trace(p)
    model = _model(data, ident)
    steps_rows_: list[dict[str, Any]] = []
    notes: list[str] = []
    if spans is None:
        src, notes = trace_source_steps(data, ident, p, options.step_range)
        win = pick_window([src], options.step)
        spans = win.spans_of(0)
        steps_rows_ = steps_rows(list(win.sources), win.choice)
    stated = trace_ident(replace(ident, rank=None), data.metadata).rank
    model.ident = ident = trace_ident(ident, data.metadata)
    source = ("unknown: no rank in the file name or the trace's distributedInfo" if ident.rank is None
              else "distributedInfo" if stated == ident.rank else "artifact")
    out: list[SummaryRows] = []
    for group in (spans, *other_steps):
        if not group:   # no span of this step in this trace
            out.append({"phases": [], "kernels": []})
            continue
        phases, kernels = phase_rows(model, _model_spans(group, model.offset_ns), options.top)
        for row in phases:
            row["rank_source"] = source
        out.append({"phases": phases, "kernels": kernels})
    warnings = [{"source": ident.source, "message": w} for w in data.warnings + notes]
    chosen = {**out[0], "steps": with_phase_identity(steps_rows_, out[0]["phases"]), "warnings": warnings}
    return chosen, out[1:]


def _model_spans(spans: Sequence[StepSpan], base: int) -> list[Span]:
    """The step's spans on the trace's clock. A trace of one process takes its ranges on any
    thread id; a file that is one step owns all of its GPU work, whenever it ran."""
    one_pid = len({s.pid for s in spans}) <= 1
    return [Span(s.start_ns - base, s.end_ns - base, None if one_pid else s.pid, s.step,
                 *((-_FAR, _FAR) if s.boundary in _WHOLE_FILE else (None, None))) for s in spans]


# ------------------------------------------------------------------------------------------------
# Memory snapshots
# ------------------------------------------------------------------------------------------------

def _peak(t: MemoryLevels, lo: int, hi: int) -> int:
    return t.peak(lo, hi) if t.times.size else t.baseline


def _timelines(snap: dict[str, Any]) -> dict[int, MemoryLevels]:
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
    out: dict[int, MemoryLevels] = {}
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
        out[dev] = MemoryLevels(t_arr, baseline + np.cumsum(d_arr), baseline)
    return out


@dataclass(frozen=True)
class MemoryItem:
    """One snapshot to summarize, optionally with the phases rows to attach `mem_peak_bytes` to;
    `spans`: the chosen step's spans (from the window over all sources; empty: choose from the file)."""

    path: str
    ident: SourceIdentity
    phases_rows: tuple[dict[str, Any], ...] | None = None
    spans: tuple[StepSpan, ...] = ()


def summarize_memory_item(item: MemoryItem, options: SummarizeOptions) -> SummaryRows:
    """Picklable per-artifact function for executors."""
    rows = list(item.phases_rows) if item.phases_rows is not None else None
    return summarize_memory_snapshot(item.path, item.ident, options, rows, item.spans or None)


def summarize_memory_snapshot(path: str | Path, ident: SourceIdentity, options: SummarizeOptions | None = None,
                              phases_rows: Sequence[dict[str, Any]] | None = None,
                              spans: Sequence[StepSpan] | None = None) -> SummaryRows:
    """Peak allocated bytes per phase from a torch memory snapshot.

    Without `phases_rows`: one phases row per (annotation name, parent, depth) of the chosen step
    (`options.step`, among the steps the snapshot holds), `source_kind="memory"`, with start_ns,
    wall_ns and mem_peak_bytes (other columns null), plus steps rows; with `spans`, of those spans
    (the run's window chose them) and no steps rows.
    With `phases_rows` (rows of a trace of the same process): copies of them with
    `mem_peak_bytes` set where the snapshot covers the row's time: the peak over the snapshot's
    instances of the same annotation inside the row's step, else over the row's own time window.
    Rows of other processes, or outside the snapshot's timeline, are returned unchanged."""
    options = options or SummarizeOptions()
    ident = replace(ident, source_kind="memory")
    snap = load_snapshot(path)
    tl = _timelines(snap)
    annots = snapshot_annotations(snap)
    warnings: list[dict[str, Any]] = []
    untimed = is_untimed(snap)
    if untimed:
        warnings.append({"source": ident.source, "message": "the snapshot's allocation history carries no "
                         "times (torch < 2.2): memory figures over its recorded history, not per phase"})
        if any(f.negative for f in history_figures(snap)):
            warnings.append({"source": ident.source, "message": "allocation history and final state disagree "
                             "(negative level): peaks may be off"})
    elif not any(t.times.size for t in tl.values()):
        warnings.append({"source": ident.source, "message": "the snapshot holds no allocation history "
                         "(was _record_memory_history on?): no per-phase peaks"})
    if any(t.times.size and (int(t.levels.min()) < 0 or t.baseline < 0) for t in tl.values()):
        warnings.append({"source": ident.source, "message": "allocation history and final state disagree "
                         "(negative level): peaks may be off"})
    steps: list[dict[str, Any]] = []
    if phases_rows is not None:
        rows = _attach(phases_rows, ident, tl, annots)
        if untimed:   # appended after the process's rows, which come back in their order
            src = SourceSteps.from_spans(ident, snapshot_spans(snap, annots, ident), str(path))
            rows += _history_rows(snap, ident, pick_window([src], options.step).spans_of(0))
        return {"phases": rows, "kernels": [], "steps": [], "warnings": warnings}
    if spans is None:
        src = SourceSteps.from_spans(ident, snapshot_spans(snap, annots, ident), str(path))
        win = pick_window([src], options.step)
        spans, steps = win.spans_of(0), steps_rows(list(win.sources), win.choice)
    if untimed:
        return {"phases": _history_rows(snap, ident, spans), "kernels": [], "steps": steps,
                "warnings": warnings}
    phases: list[dict[str, Any]] = []
    for s in spans:
        groups: dict[tuple, list[Annotation]] = {}
        for a in annots:
            if s.start_ns <= a.start <= s.end_ns:
                parent = annots[a.parent].name if a.parent >= 0 else None
                groups.setdefault((a.name, parent, a.depth), []).append(a)
        for (name, parent, depth), members in groups.items():
            peaks = [_peak(tl[a.device], a.start, a.end) for a in members if a.device in tl]
            phases.append({
                **ident.keys(s.step), "phase": name, "stage": canonical_stage(name, ident.role),
                "parent": parent, "depth": depth, "start_ns": min(a.start for a in members),
                "wall_ns": sum(a.end - a.start for a in members),
                "mem_peak_bytes": max((x for x in peaks if x is not None), default=None),
            })
    return {"phases": phases, "kernels": [], "steps": steps, "warnings": warnings}


def _history_rows(snap: dict[str, Any], ident: SourceIdentity, spans: Sequence[StepSpan]
                  ) -> list[dict[str, Any]]:
    """An untimed snapshot's rows: per chosen step and device, its figures over the recorded
    history (not per phase: `mem_scope`), at the step's top level (depth 0, stage `step`)."""
    figs = history_figures(snap)
    rows = []
    for step in sorted({s.step for s in spans}):
        for f in figs:
            phase = HISTORY_PHASE if len(figs) == 1 else f"{HISTORY_PHASE} cuda:{f.device}"
            rows.append({
                **ident.keys(step), "phase": phase,
                "stage": "step", "parent": None, "depth": 0, "mem_peak_bytes": f.peak_allocated,
                "mem_scope": HISTORY_SCOPE, "mem_reserved_peak_bytes": f.peak_reserved,
                "mem_reserved_bytes": f.reserved, "mem_allocated_bytes": f.allocated, "mem_active_bytes": f.active,
            })
    return rows


def _attach(rows: Sequence[dict[str, Any]], ident: SourceIdentity, tl: dict[int, MemoryLevels],
            annots: list[Annotation]) -> list[dict[str, Any]]:
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
            peaks = [_peak(tl[a.device], a.start, a.end) for a in same]
        else:
            peaks = [_peak(t, lo, hi) for t in tl.values() if t.times.size]
        peaks = [x for x in peaks if x is not None]
        if peaks:
            r["mem_peak_bytes"] = max(peaks)
    return out
