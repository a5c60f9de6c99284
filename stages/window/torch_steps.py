"""Steps of torch chrome traces and memory snapshots, by the same rules as nsys exports.

Why here: step finding is the window stage's job for every format, so `--step-range REGEX`,
`ProfilerStep#N`, `step<N>`, verl `step` ranges and file names mean the same thing whatever wrote
the file. A trace's `user_annotation` ranges become `NvtxRanges` (globalTid = pid << 24 | tid, as
nsys packs them) and go through `steps.source_steps_from_ranges`, the nsys rule set. Then, per
torch trace: `--step-range` matches win; else the `step<N>` of the file name (verl's torch traces
hold one step each, and verl calls `profiler.step()` per mini-batch, so its ProfilerStep#N are not
RL steps); else the markers; else the whole file, which `series.py` numbers afterwards as its
process's k-th profiled step when the process wrote several (rollout engines, verl 0.8). A step without markers spans the trace's ranges
(else the profiler's own span, else its GPU work). The summarizer builds its model from the same
`trace_ranges`, so a span's pid is the model's pid.

Memory snapshots: the `external_annotations` (record_function START/END pairs) at the top level are
cut into steps where a name repeats; the last group is the folder's step N (verl dumps at the end
of step N), earlier groups N-1, N-2 ...
"""
from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np

from ..core import formats
from ..core.errors import VerlprofError
from ..readers.chrome_trace import TraceData, read_chrome_trace
from ..readers.memory_snapshot import Annotation, load_snapshot, snapshot_annotations
from ..readers.nsys_sqlite import NVTX_PUSHPOP, PID_SHIFT, NvtxRanges
from .steps import OOM_NOTE, SourceSteps, source_steps_from_ranges
from .types import SourceIdentity, StepSpan

_ID_BITS = (1 << PID_SHIFT) - 1     # what a pid or tid may hold inside a globalTid

__all__ = ["thread_gtids", "trace_ranges", "trace_ident", "trace_source_steps", "torch_source_steps",
           "snapshot_spans", "memory_source_steps", "source_steps_item"]


def _int(v: Any) -> int | None:
    return v if isinstance(v, int) and not isinstance(v, bool) else None


def thread_gtids(threads: list[tuple[Any, Any]], fallback_pid: int) -> np.ndarray:
    """(pid, tid) of every trace thread -> a globalTid (`pid << 24 | tid`, as nsys packs them).

    Kineto writes OS ids, which fit; string or oversized ids (other writers) get ids of their own
    from the top of the range, so a thread stays one thread and `tid == pid` still marks main."""
    out = np.zeros(len(threads), np.int64)
    spare = _ID_BITS
    pids: dict[Any, int] = {}
    for k, (pid, tid) in enumerate(threads):
        p = pid if _int(pid) is not None and 0 <= pid <= _ID_BITS else None
        if p is None:
            p = pids.get(pid)
            if p is None:
                p = pids[pid] = fallback_pid if not pids and fallback_pid <= _ID_BITS else spare
                spare -= 1
        t = tid if _int(tid) is not None and 0 <= tid <= _ID_BITS else spare
        if t == spare:
            spare -= 1
        out[k] = (p << PID_SHIFT) | t
    return out


def trace_ranges(data: TraceData, gtid_of: np.ndarray) -> NvtxRanges:
    """The trace's user annotations as the model's ranges, sorted (thread, start, -end): parents first."""
    nr = len(data.ranges)
    start = np.fromiter((r[1] for r in data.ranges), np.int64, nr)
    end = start + np.fromiter((r[2] for r in data.ranges), np.int64, nr)
    gtid = gtid_of[np.fromiter((r[3] for r in data.ranges), np.int64, nr)] if nr else np.zeros(0, np.int64)
    order = np.lexsort((np.arange(nr), -end, start, gtid))
    return NvtxRanges(start[order], end[order], gtid[order], np.full(nr, NVTX_PUSHPOP, np.int64),
                      np.ones(nr, bool), order.astype(np.int64), [data.ranges[i][0] for i in order.tolist()],
                      [None] * nr)


def trace_ident(ident: SourceIdentity, metadata: dict[str, Any]) -> SourceIdentity:
    """The identity with what the trace itself says: kind torch, rank and world size from
    `distributedInfo` (kineto with torch.distributed) where the file name gave none."""
    info = metadata.get("distributedInfo")
    got: dict[str, Any] = {"source_kind": "torch"}
    for key in ("rank", "world_size"):
        v = info.get(key) if isinstance(info, dict) else None
        if getattr(ident, key) is None and _int(v) is not None and v >= 0:
            got[key] = v
    return replace(ident, **got)


def _step_hint(ident: SourceIdentity, path: Path) -> int | None:
    if ident.step_hint is not None:
        return ident.step_hint
    from ..readers.naming import classify_name

    info = classify_name(ident.source or path.name) or classify_name(path.name)
    return info.step if info is not None else None


def _check_clock(data: TraceData, path: Path) -> None:
    """Refuse a time base under which the trace's absolute times do not fit the int64 ns every
    summary and window holds (a damaged `baseTimeNanoseconds`): its window cannot be cut."""
    last = max([r[1] + r[2] for r in data.ranges] + [int(np.frombuffer(a, np.int64).max())
                                                      for a in (data.gpu_ts, data.api_ts) if len(a)], default=0)
    if data.base_ns + last >= 1 << 63:
        raise VerlprofError(path, f"unusable time base: baseTimeNanoseconds {data.base_ns} puts its events past "
                            "2262-04-11 (beyond 64-bit ns); no step window can be cut from it")


def trace_source_steps(data: TraceData, ident: SourceIdentity, path: str | Path,
                       step_range: str | None = None) -> tuple[SourceSteps, list[str]]:
    """The steps one read trace holds (absolute ns) and notes on how they were found."""
    p = Path(path)
    _check_clock(data, p)
    ident = trace_ident(ident, data.metadata)
    gtid_of = thread_gtids(data.threads, ident.pid if ident.pid is not None else 0)
    r = trace_ranges(data, gtid_of)
    src = source_steps_from_ranges(ident, str(p), data.base_ns, r, (), step_range)
    markers = list(src.steps)
    hint = _step_hint(ident, p)
    notes: list[str] = []
    if step_range:
        notes.append(f"steps from the ranges --step-range {step_range!r} matches, numbered in order" if markers
                     else f"--step-range {step_range!r} matches no range of the trace")
    if ident.mini_batch_markers and markers and not step_range and all(s.boundary == "profiler_step" for s in markers):
        notes.append("ProfilerStep#N ranges count the writer's update mini-batches (verl's scheduled "
                     "Profiler), not RL steps: the whole file is one step")
        markers = []
    if markers and (step_range or hint is None):
        if any(s.boundary == "profiler_step" for s in markers):
            notes.append("steps from ProfilerStep#N ranges (they count profiler.step() calls from 0, so "
                         "ProfilerStep#N is step N+1; verl calls it per mini-batch, not per RL step)")
        spans = markers
    else:
        pid = ident.pid
        if pid is None and len(r):
            u, c = np.unique(r.pid, return_counts=True)
            pid = int(u[c.argmax()])
        base = data.base_ns
        gpu = None
        if data.n_gpu:  # the whole capture holds the GPU work its ranges launched (graph replays
            ts = np.frombuffer(data.gpu_ts, np.int64)  # run long after the CPU range that queued them)
            gpu = (int(ts.min()) + base, int((ts + np.frombuffer(data.gpu_dur, np.int64)).max()) + base)
        if src.span is not None:
            lo, hi = src.span
            if gpu is not None:
                lo, hi = min(lo, gpu[0]), max(hi, gpu[1])
        elif data.profiler_span is not None:
            lo, hi = (x + base for x in data.profiler_span)
        elif gpu is not None:
            lo, hi = gpu
        else:
            return replace(src, steps=()), notes + ["no ranges and no GPU activity: nothing to summarize"]
        if hint is None:
            notes.append("no step<N> in the file name and no step ranges: the whole file is one step")
        spans = [StepSpan(hint if hint is not None else 1, lo, hi, "whole_file" if hint is None else "file_name",
                          ident.source, (), pid)]
    spans = [replace(s, flags=tuple(sorted({u.name for u in src.unsteady if s.start_ns <= u.start_ns <= s.end_ns})))
             for s in spans]
    return SourceSteps.from_spans(ident, spans, str(p), src.unsteady), notes


def torch_source_steps(path: str | Path, ident: SourceIdentity, step_range: str | None = None) -> SourceSteps:
    """The window stage's view of one torch trace: its step spans (absolute ns) and unsteady ranges."""
    return trace_source_steps(read_chrome_trace(path), ident, path, step_range)[0]


def snapshot_spans(snap: dict[str, Any], annots: list[Annotation], ident: SourceIdentity) -> list[StepSpan]:
    """Steps of a snapshot: its top-level annotations cut where a name repeats, numbered so the
    last group is the folder's step (else from the artifact's profiled steps, else from 1); a
    snapshot without annotations is its folder's step over its allocation history."""
    groups: list[list[Annotation]] = []
    seen: set[str] = set()
    for a in sorted((a for a in annots if a.parent < 0), key=lambda a: a.start):
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
        times = [int(ev["time_us"] * 1000) for trace in snap.get("device_traces") or [] for ev in trace or []
                 if isinstance(ev, dict) and ev.get("action") in ("alloc", "free_requested")
                 and isinstance(ev.get("time_us"), (int, float))]
        if times:
            spans = [StepSpan(ident.step_hint, min(times), max(times), "snapshot_dir", ident.source, (), ident.pid)]
        else:  # torch < 2.2 entries carry no time_us: the folder (`step<N>/`) still names the step
            spans = [StepSpan(ident.step_hint, 0, 0, "snapshot_dir", ident.source, (), ident.pid,
                              "no times in the snapshot: the step of its folder")]
    return [s for s in spans if s.step >= 1] or spans[-1:]


def _gib(n: int) -> str:
    return f"{n / 2**30:.2f} GiB"


def oom_note(snap: dict[str, Any], ident: SourceIdentity) -> str:
    """What an out-of-memory snapshot is: the allocator's state at the failure, per device (its
    segments' reserved and allocated bytes), said in one note."""
    per_dev: dict[int, list[int]] = {}
    for seg in snap.get("segments") or []:
        if isinstance(seg, dict):
            d = per_dev.setdefault(_int(seg.get("device")) or 0, [0, 0])
            d[0] += _int(seg.get("total_size")) or 0
            d[1] += _int(seg.get("allocated_size")) or 0
    said = ", ".join(f"cuda:{d} {_gib(a)} allocated of {_gib(r)} reserved" for d, (r, a) in sorted(per_dev.items()))
    return f"{OOM_NOTE} {ident.source} is the memory at a failure, not a profiled step ({said or 'no segments'})"


def memory_source_steps(path: str | Path, ident: SourceIdentity) -> SourceSteps:
    """The window stage's view of one memory snapshot. An out-of-memory snapshot (verl's OOM
    observer writes `oom_<timestamp>/<tag>_rank<R>_pid<P>.pickle` when the allocator fails) holds
    no profiled step: it is said as the memory at the failure and numbers no step."""
    snap = load_snapshot(path)
    ident = replace(ident, source_kind="memory")
    if ident.scope == "oom":
        return SourceSteps(ident, str(path), 0, notes=(oom_note(snap, ident),))
    return SourceSteps.from_spans(ident, snapshot_spans(snap, snapshot_annotations(snap), ident), str(path))


def source_steps_item(item: tuple[str, SourceIdentity], options: Any = None) -> SourceSteps:
    """Picklable per-artifact function: the steps of one source of any kind (its identity's
    `source_kind`); `options.step_range` is the user's `--step-range REGEX`."""
    path, ident = item
    return formats.get(ident.source_kind).source_steps(path, ident, options)
