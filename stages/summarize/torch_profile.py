"""torch chrome traces and memory snapshots -> rows of the phases / kernels / steps schemas.

Why: verl's torch profiler writes one chrome trace per step and rank, and its torch_memory tool a
caching-allocator snapshot; users compare them with nsys runs, so this module yields exactly the
rows `stages/summarize/nsys.py` yields for nsys exports, computed by the same rules:

- Phases are `user_annotation` ranges (torch.profiler.record_function, verl's annotations, e.g.
  `mini_batch0`, `Optimizer.step#AdamW.step`). Ranges nest per thread (parent, depth); repeated
  instances with the same (pid, name, parent, depth) add up into one row, like the nsys half.
- GPU work (kernels, memcpys, memsets) belongs to a range when its launching CUDA runtime/driver
  call (joined by `args.correlation`) lies inside the range on the same thread: NVIDIA's
  projection rule. It counts for the innermost such range and is rolled up into the enclosing
  ones. Work launched from no range (PyTorch's autograd engine launches backward kernels from
  its own `pt_autograd_N` thread, which has no annotations) becomes the `(unattributed)` phase,
  as in the nsys half, so totals stay honest. `inherit_ranges=True` instead lends such threads
  the innermost range open at launch time on an annotated thread of the same process.
- Steps: the `step<N>` of the file name (verl's torch traces hold one step each); else
  `ProfilerStep#N` ranges (N counts `profiler.step()` calls from 0, so step N+1; in verl they
  count mini-batches, not RL steps, so they are used only when nothing else says); else the whole
  file. A step's span is the extent of its top-level ranges (else the profiler's own span).
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
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any, Iterable, Sequence

import numpy as np

from ..core.phases import UNSTEADY_STAGES, canonical_stage
from ..readers.chrome_trace import KERNEL, MEMCPY, MEMSET, TraceData, read_chrome_trace
from ..readers.memory_snapshot import load_snapshot
from ..window import (
    DEFAULT_STEP,
    SourceIdentity,
    SourceSteps,
    StepArg,
    StepSpan,
    TopRange,
    run_window,
    window_spans,
)
from . import intervals
from .kernel_category import categorize
from .types import SummarizeOptions, SummaryRows

UNATTRIBUTED = "(unattributed)"
OTHER_KERNELS = "other"
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
# One trace, prepared: absolute times, range nesting, attribution
# ------------------------------------------------------------------------------------------------

@dataclass
class _Prepared:
    data: TraceData
    r_name: list[str]
    r_start: np.ndarray          # absolute ns
    r_end: np.ndarray
    r_thread: np.ndarray
    r_pid: list[Any]
    parent: np.ndarray
    depth: np.ndarray
    api_range: np.ndarray        # innermost same-thread range of each API call, -1 if none
    op_range: np.ndarray         # innermost range each GPU op is attributed to, -1 if none
    op_launch: np.ndarray        # absolute launch time (ns) of each GPU op, -1 if unknown
    op_pid: np.ndarray           # pid of the launching thread (GPU device pid when unknown)
    g_start: np.ndarray
    g_end: np.ndarray
    g_kind: np.ndarray
    g_name: np.ndarray
    g_bytes: np.ndarray
    inherited: int               # ops attributed through inherit_ranges


def _arr(a: Any, dtype: Any = np.int64) -> np.ndarray:
    return np.frombuffer(a, dtype=dtype) if len(a) else np.zeros(0, dtype=dtype)


def _int_pid(v: Any) -> int | None:
    return v if isinstance(v, int) and not isinstance(v, bool) else None


def _sweep(r_start: np.ndarray, r_end: np.ndarray, ranges: list[int], ts: np.ndarray,
           calls: np.ndarray) -> np.ndarray:
    """Innermost range (of `ranges`, one thread's) open at each call time; -1 when none.

    Ranges sorted by (start, -end) are pushed as calls pass their start; ranges that ended are
    popped from the top, so the top is the latest-started range still open."""
    out = np.full(len(calls), -1, dtype=np.int64)
    if not ranges or not len(calls):
        return out
    order = sorted(ranges, key=lambda i: (r_start[i], -r_end[i]))
    starts = [int(r_start[i]) for i in order]
    ends = {i: int(r_end[i]) for i in order}
    call_order = np.argsort(ts[calls], kind="stable")
    stack: list[int] = []
    k = 0
    n = len(order)
    for j in call_order.tolist():
        t = int(ts[calls[j]])
        while k < n and starts[k] <= t:
            stack.append(order[k])
            k += 1
        while stack and ends[stack[-1]] < t:
            stack.pop()
        if stack:
            out[j] = stack[-1]
    return out


def _prepare(data: TraceData, inherit_ranges: bool = False) -> _Prepared:
    base = data.base_ns
    nr = len(data.ranges)
    r_name = [r[0] for r in data.ranges]
    r_start = np.array([r[1] for r in data.ranges], dtype=np.int64) + base
    r_end = r_start + np.array([r[2] for r in data.ranges], dtype=np.int64)
    r_thread = np.array([r[3] for r in data.ranges], dtype=np.int64)
    r_pid = [data.threads[t][0] for t in r_thread.tolist()]

    # Nesting per thread: parent = the latest-started range still open at a range's start.
    parent = np.full(nr, -1, dtype=np.int64)
    depth = np.zeros(nr, dtype=np.int64)
    by_thread: dict[int, list[int]] = {}
    for i in range(nr):
        by_thread.setdefault(int(r_thread[i]), []).append(i)
    for members in by_thread.values():
        members.sort(key=lambda i: (r_start[i], -r_end[i], i))
        stack: list[int] = []
        for i in members:
            while stack and r_end[stack[-1]] <= r_start[i]:
                stack.pop()
            if stack:
                parent[i] = stack[-1]
                depth[i] = depth[stack[-1]] + 1
            stack.append(i)

    # API calls -> innermost range on the same thread.
    api_ts = _arr(data.api_ts) + base
    api_thread = _arr(data.api_thread)
    api_range = np.full(len(api_ts), -1, dtype=np.int64)
    if len(api_ts):
        order = np.argsort(api_thread, kind="stable")
        th_sorted = api_thread[order]
        bounds = np.flatnonzero(np.diff(th_sorted)) + 1
        for grp in np.split(order, bounds):
            if not len(grp):
                continue
            th = int(api_thread[grp[0]])
            if th in by_thread:
                api_range[grp] = _sweep(r_start, r_end, by_thread[th], api_ts, grp)

    # GPU ops -> launch (correlation) -> range.
    g_ts = _arr(data.gpu_ts) + base
    g_end = g_ts + _arr(data.gpu_dur)
    corr = _arr(data.gpu_corr)
    api_corr = _arr(data.api_corr)
    op_api = np.full(len(g_ts), -1, dtype=np.int64)
    # CUPTI correlation ids start at 1; -1 = missing; below -1: ids beyond 64 bits, renumbered.
    valid = np.flatnonzero((api_corr > 0) | (api_corr < -1))
    if len(g_ts) and valid.size:
        srt = valid[np.argsort(api_corr[valid], kind="stable")]
        keys = api_corr[srt]
        pos = np.minimum(np.searchsorted(keys, corr), keys.size - 1)
        hit = ((corr > 0) | (corr < -1)) & (keys[pos] == corr)
        op_api[hit] = srt[pos[hit]]
    has = op_api >= 0
    op_range = np.full(len(g_ts), -1, dtype=np.int64)
    op_range[has] = api_range[op_api[has]]
    op_launch = np.full(len(g_ts), -1, dtype=np.int64)
    op_launch[has] = api_ts[op_api[has]]
    op_pid = np.full(len(g_ts), -1, dtype=np.int64)
    if has.any():
        thread_pid = np.array([_int_pid(p) if _int_pid(p) is not None else -1 for p, _ in data.threads],
                              dtype=np.int64)
        op_pid[has] = thread_pid[api_thread[op_api[has]]]

    inherited = 0
    if inherit_ranges and len(g_ts) and nr:
        # Launches from threads that never annotate: the innermost range open at launch time on
        # any annotated thread of the same process.
        annotated = set(by_thread)
        orphan = has & (op_range < 0)
        orphan_idx = np.flatnonzero(orphan)
        if orphan_idx.size:
            pid_ranges: dict[Any, list[int]] = {}
            for i in range(nr):
                pid_ranges.setdefault(r_pid[i], []).append(i)
            th_of = api_thread[op_api[orphan_idx]]
            for th in np.unique(th_of).tolist():
                if th in annotated:
                    continue
                pid = data.threads[th][0]
                rs = pid_ranges.get(pid)
                if not rs:
                    continue
                sel = orphan_idx[th_of == th]
                got = _sweep(r_start, r_end, rs, op_launch, sel)
                op_range[sel] = got
                inherited += int((got >= 0).sum())
    return _Prepared(data, r_name, r_start, r_end, r_thread, r_pid, parent, depth, api_range, op_range,
                     op_launch, op_pid, g_ts, g_end, _arr(data.gpu_kind, np.int8), _arr(data.gpu_name),
                     _arr(data.gpu_bytes), inherited)


# ------------------------------------------------------------------------------------------------
# Steps
# ------------------------------------------------------------------------------------------------

def _step_hint(ident: SourceIdentity, path: Path) -> int | None:
    if ident.step_hint is not None:
        return ident.step_hint
    from ..readers.naming import classify_name

    info = classify_name(ident.source or path.name) or classify_name(path.name)
    return info.step if info is not None else None


def _main_pid(p: _Prepared, ident: SourceIdentity) -> int | None:
    if ident.pid is not None:
        return ident.pid
    pids = [x for x in p.r_pid if _int_pid(x) is not None]
    if pids:
        return max(set(pids), key=pids.count)
    return None


def _spans(p: _Prepared, ident: SourceIdentity, path: Path) -> tuple[list[StepSpan], list[str]]:
    """The steps this trace holds (absolute ns) and notes about how they were found."""
    notes: list[str] = []
    hint = _step_hint(ident, path)
    pid = _main_pid(p, ident)
    top = np.flatnonzero(p.parent < 0)
    if hint is None:
        prof = [(int(m.group(1)), i) for i, nm in enumerate(p.r_name) if (m := _PROFILER_STEP.match(nm))]
        if prof:
            notes.append("steps from ProfilerStep#N ranges (they count profiler.step() calls, which verl "
                         "makes per mini-batch, not per RL step)")
            return [StepSpan(n + 1, int(p.r_start[i]), int(p.r_end[i]), "profiler_step", ident.source, (),
                             _int_pid(p.r_pid[i]) or pid) for n, i in sorted(prof, key=lambda x: p.r_start[x[1]])], notes
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


def _source_steps(p: _Prepared, ident: SourceIdentity, path: Path) -> tuple[SourceSteps, list[str]]:
    spans, notes = _spans(p, ident, path)
    spans = [StepSpan(s.step, s.start_ns, s.end_ns, s.boundary, s.source, _flags(p, ident, s), s.pid)
             for s in spans]
    unsteady = [TopRange(p.r_name[i], canonical_stage(p.r_name[i], ident.role), int(p.r_start[i]),
                         int(p.r_end[i]), _int_pid(p.r_pid[i]))
                for i in range(len(p.r_name)) if canonical_stage(p.r_name[i], ident.role) in UNSTEADY_STAGES]
    return SourceSteps.from_spans(_torch_ident(ident), spans, str(path), unsteady), notes


def _torch_ident(ident: SourceIdentity) -> SourceIdentity:
    if ident.source_kind == "torch":
        return ident
    from dataclasses import replace

    return replace(ident, source_kind="torch")


def torch_source_steps(path: str | Path, ident: SourceIdentity) -> SourceSteps:
    """The window stage's view of one torch trace: its step spans (absolute ns) and unsteady ranges."""
    p = Path(path)
    src, _ = _source_steps(_prepare(read_chrome_trace(p)), ident, p)
    return src


def torch_step_spans(path: str | Path, ident: SourceIdentity) -> list[StepSpan]:
    """The steps one torch trace holds (see the module docstring for how they are found)."""
    return list(torch_source_steps(path, ident).steps)


def torch_steps_item(item: tuple[str, SourceIdentity], options: Any = None) -> SourceSteps:
    """Picklable per-artifact function for executors: (path, identity) -> SourceSteps."""
    return torch_source_steps(*item)


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
                          spans: Sequence[StepSpan] | None = None, *, inherit_ranges: bool = False
                          ) -> SummaryRows:
    """Summarize one torch chrome trace into phases / kernels / steps rows.

    `spans`: the chosen step's spans in this trace (from the window over all sources); when None the
    step is chosen from this trace alone (`options.step`) and its steps rows are included. The
    result also holds `warnings`: [{"source", "message"}] (tolerant parsing, missing time base)."""
    options = options or SummarizeOptions()
    p = Path(path)
    ident = _torch_ident(ident)
    data = read_chrome_trace(p)
    prep = _prepare(data, inherit_ranges)
    steps_rows_: list[dict[str, Any]] = []
    notes: list[str] = []
    if spans is None:
        from .nsys import steps_rows

        src, notes = _source_steps(prep, ident, p)
        resolved, choice = run_window([src], options.step)
        spans = window_spans(resolved[0], choice.step)
        steps_rows_ = steps_rows(resolved, choice)
    phases, kernels = _rows(prep, ident, list(spans), options.top)
    warnings = [{"source": ident.source, "message": w} for w in data.warnings + notes]
    if prep.inherited:
        warnings.append({"source": ident.source, "message":
                         f"{prep.inherited} GPU ops launched from unannotated threads were attributed to "
                         "the range open on another thread of the process (inherit_ranges)"})
    return {"phases": phases, "kernels": kernels, "steps": steps_rows_, "warnings": warnings}


def _numbers(p: _Prepared, ids: np.ndarray, cat: np.ndarray, direction: list[str],
             compute: tuple[np.ndarray, np.ndarray]) -> dict[str, int]:
    """GPU numbers of a set of GPU ops (indices), the same columns as the nsys half."""
    s, e, kind = p.g_start[ids], p.g_end[ids], p.g_kind[ids]
    dur = e - s
    k = kind == KERNEL
    mc = kind == MEMCPY
    ms = kind == MEMSET
    c = (cat[ids] == "comm") & k if ids.size else np.zeros(0, bool)
    nb = p.g_bytes[ids]
    names = p.g_name[ids]
    dirs = np.array([direction[n] for n in names.tolist()], dtype=object) if ids.size else np.zeros(0, object)
    return {
        "gpu_busy_ns": intervals.union_length(s, e),
        "kernel_ns": int(dur[k].sum()), "kernel_count": int(k.sum()),
        "memcpy_ns": int(dur[mc].sum()),
        "memcpy_h2d_bytes": int(nb[mc & (dirs == "h2d")].sum()),
        "memcpy_d2h_bytes": int(nb[mc & (dirs == "d2h")].sum()),
        "memcpy_d2d_bytes": int(nb[mc & (dirs == "d2d")].sum()),
        "memcpy_other_bytes": int(nb[mc & (dirs == "other")].clip(min=0).sum()),
        "memset_ns": int(dur[ms].sum()),
        "comm_ns": intervals.union_length(s[c], e[c]),
        "exposed_comm_ns": intervals.exposed_length(s[c], e[c], compute[0], compute[1]),
    }


def _rows(p: _Prepared, ident: SourceIdentity, spans: list[StepSpan], top: int
          ) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    names = p.data.names
    n_ops = p.g_start.size
    cat_of_name = [categorize(short_kernel_name(n), n) for n in names]
    cat = np.array([cat_of_name[n] if k == KERNEL else ("memcpy" if k == MEMCPY else "memset")
                    for n, k in zip(p.g_name.tolist(), p.g_kind.tolist())], dtype=object) \
        if n_ops else np.zeros(0, object)
    direction = [_memcpy_direction(n) for n in names]
    # Compute = every non-collective kernel of the trace: what can hide a collective.
    comp = (p.g_kind == KERNEL) & (cat != "comm") if n_ops else np.zeros(0, bool)
    compute = (p.g_start[comp], p.g_end[comp])
    nr = len(p.r_name)
    # Ops and API time per innermost range, then rolled up through parents.
    ops_of: list[list[int]] = [[] for _ in range(nr)]
    for i, r in enumerate(p.op_range.tolist()):
        if r >= 0:
            ops_of[r].append(i)
    api_dur = _arr(p.data.api_dur)
    api_own = np.zeros(nr, dtype=np.int64)
    if nr and api_dur.size:
        m = p.api_range >= 0
        np.add.at(api_own, p.api_range[m], api_dur[m])
    children: list[list[int]] = [[] for _ in range(nr)]
    for i in range(nr):
        if p.parent[i] >= 0:
            children[int(p.parent[i])].append(i)

    def subtree(i: int) -> list[int]:
        out, todo = [], [i]
        while todo:
            j = todo.pop()
            out.append(j)
            todo.extend(children[j])
        return out

    phases: list[dict[str, Any]] = []
    selected_any = np.zeros(nr, dtype=bool)
    step_of_range = np.full(nr, -1, dtype=np.int64)
    span_pid = {s.pid for s in spans}
    for s in spans:
        m = (p.r_start >= s.start_ns) & (p.r_start <= s.end_ns)
        if s.pid is not None and len(span_pid) > 1:
            m &= np.array([x == s.pid for x in p.r_pid], dtype=bool)
        new = m & ~selected_any
        step_of_range[new] = s.step
        selected_any |= m
    groups: dict[tuple, list[int]] = {}
    for i in np.flatnonzero(selected_any).tolist():
        par = int(p.parent[i])
        key = (p.r_pid[i], p.r_name[i], p.r_name[par] if par >= 0 else None, int(p.depth[i]), int(step_of_range[i]))
        groups.setdefault(key, []).append(i)
    for (pid, name, parent, depth, step), members in groups.items():
        ids = np.array(sorted({o for i in members for j in subtree(i) for o in ops_of[j]}), dtype=np.int64)
        row = _numbers(p, ids, cat, direction, compute)
        wall = int(sum(int(p.r_end[i] - p.r_start[i]) for i in members))
        api = int(sum(int(api_own[j]) for i in members for j in subtree(i)))
        keys = ident.keys(step)
        keys["pid"] = _int_pid(pid) if _int_pid(pid) is not None else keys["pid"]
        phases.append({
            **keys, "phase": name, "stage": canonical_stage(name, ident.role), "parent": parent, "depth": depth,
            "start_ns": int(min(p.r_start[i] for i in members)), "wall_ns": wall, **row,
            "idle_ns": max(0, wall - row["gpu_busy_ns"]), "api_ns": api, "mem_peak_bytes": None,
        })
    # GPU work in the step launched from no range: one row per step.
    un = np.flatnonzero(p.op_range < 0)
    un_step = np.full(n_ops, -1, dtype=np.int64)
    for s in spans:
        ids = un[un_step[un] < 0]
        if s.boundary not in _WHOLE_FILE:   # a file that is one step owns all of its GPU work
            when = np.where(p.op_launch[ids] >= 0, p.op_launch[ids], p.g_start[ids])
            ids = ids[(when >= s.start_ns) & (when <= s.end_ns)]
        if s.pid is not None and len(span_pid) > 1:
            ids = ids[(p.op_pid[ids] == s.pid) | (p.op_pid[ids] < 0)]
        if ids.size == 0:
            continue
        un_step[ids] = s.step
        row = _numbers(p, ids, cat, direction, compute)
        wall = s.end_ns - s.start_ns
        keys = ident.keys(s.step)
        keys["pid"] = s.pid if s.pid is not None else keys["pid"]
        phases.append({
            **keys, "phase": UNATTRIBUTED, "stage": "other", "parent": None, "depth": 0,
            "start_ns": s.start_ns, "wall_ns": wall, **row, "idle_ns": max(0, wall - row["gpu_busy_ns"]),
            "api_ns": None, "mem_peak_bytes": None,
        })
    kernels = _kernel_rows(p, ident, cat, step_of_range, un_step, top)
    return phases, kernels


def _kernel_rows(p: _Prepared, ident: SourceIdentity, cat: np.ndarray, step_of_range: np.ndarray,
                 un_step: np.ndarray, top: int) -> list[dict[str, Any]]:
    """Top kernels per (process, step, innermost phase) by total time, plus one `other` row."""
    k = np.flatnonzero(p.g_kind == KERNEL)
    if k.size == 0:
        return []
    rng = p.op_range[k]
    sor = step_of_range if step_of_range.size else np.full(1, -1, dtype=np.int64)
    step = np.where(rng >= 0, sor[np.maximum(rng, 0)], un_step[k])
    keep = step >= 0
    k, rng, step = k[keep], rng[keep], step[keep]
    if k.size == 0:
        return []
    names = p.data.names
    groups: dict[tuple, list[int]] = {}
    for op, r, st in zip(k.tolist(), rng.tolist(), step.tolist()):
        if r >= 0:
            key = (p.r_pid[r], st, p.r_name[r])
        else:
            key = (int(p.op_pid[op]) if p.op_pid[op] >= 0 else None, st, UNATTRIBUTED)
        groups.setdefault(key, []).append(op)
    rows: list[dict[str, Any]] = []
    for (pid, st, phase), ops in groups.items():
        ops_a = np.array(ops, dtype=np.int64)
        nm = p.g_name[ops_a]
        dur = p.g_end[ops_a] - p.g_start[ops_a]
        per: list[tuple[int, str, np.ndarray, int]] = []
        order = np.argsort(nm, kind="stable")
        nm_s, dur_s = nm[order], dur[order]
        bounds = np.flatnonzero(np.diff(nm_s)) + 1
        for seg_n, seg_d in zip(np.split(nm_s, bounds), np.split(dur_s, bounds)):
            n = int(seg_n[0])
            per.append((int(seg_d.sum()), names[n], seg_d, n))
        per.sort(key=lambda x: (-x[0], x[1]))
        head, rest = per[:top], per[top:]
        keys = ident.keys(st)
        if _int_pid(pid) is not None:
            keys["pid"] = pid
        stage = "other" if phase == UNATTRIBUTED else canonical_stage(phase, ident.role)
        for total, name, d, n in head:
            rows.append({**keys, "phase": phase, "stage": stage, "kernel": name,
                         "kernel_short": short_kernel_name(name), "category": cat[ops_a[nm == n][0]],
                         "count": int(d.size), "total_ns": total, "avg_ns": total / d.size,
                         "min_ns": int(d.min()), "max_ns": int(d.max()), "median_ns": float(np.median(d))})
        if rest:
            cnt = sum(x[2].size for x in rest)
            tot = sum(x[0] for x in rest)
            rows.append({**keys, "phase": phase, "stage": stage, "kernel": OTHER_KERNELS,
                         "kernel_short": OTHER_KERNELS, "category": "other", "count": cnt, "total_ns": tot,
                         "avg_ns": tot / cnt, "min_ns": int(min(x[2].min() for x in rest)),
                         "max_ns": int(max(x[2].max() for x in rest)), "median_ns": None})
    return rows


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
        a = int(np.searchsorted(self.times, lo, side="left"))
        b = int(np.searchsorted(self.times, hi, side="right"))
        before = int(self.levels[a - 1]) if a > 0 else self.baseline
        inside = int(self.levels[a:b].max()) if b > a else before
        return max(before, inside)


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
