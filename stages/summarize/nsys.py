"""The nsys adapter: one export's chosen step as the event model, through the one summarizer.

Why: the user's question is "in the steady-state step, per role and rank, where did the time and
memory go, phase by phase?". The rules live in `summarize/phases.py`; this module only fills its
`EventModel` (`readers/events.py`) from an export: it reads the export through SQL for the step's
window only, projects GPU work onto the NVTX ranges with NVIDIA's rule (`projection.project`, one
streaming sweep), reads device memory levels and each process's rank.

`projection_rows` and `totals_rows` give NVIDIA-comparable whole-report numbers (nvtxgpuproj,
gpukernsum) for checks and the benchmark.

Per-artifact work is `summarize_nsys_steps(item, options)`: plain, module-level and picklable, so the
pipeline runs it inline, in a process pool, or on Ray.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from ..readers.events import KIND_KERNEL, EventModel, GpuOps, MemoryLevels, NvtxRanges, Span, pid_of_gtid, tid_of_gtid
from ..readers.nsys_sqlite import KERNEL, MEMORY, NsysExport
from ..readers.nvtx_tree import RangeIndex
from ..readers.report_identity import process_ranks
from ..window import (
    SourceIdentity,
    SourceSteps,
    StepSpan,
    gpu_only_spans,
    pick_window,
    source_steps_from_ranges,
    window_spans,
)
from .kernel_category import categorize
from .phases import phase_rows
from .projection import ProjectionResult, project
from .steps import steps_rows, with_phase_identity
from .types import StepSummaries, SummarizeOptions, SummaryRows

_HOST_MEM_KINDS = (0, 1)  # pageable, pinned: not device memory


# ----------------------------------------------------------------------------------------------
# Items the pipeline hands to executors
# ----------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class NsysItem:
    """One export to summarize: where it is, who made it, the chosen step's spans in it, and the
    spans of each other step to summarize in the same scan (`other_steps`, collect's profiled steps
    for ranks.parquet). `chosen` False: the chosen step has no span in this export, only the other
    steps are wanted."""

    path: str
    ident: SourceIdentity
    spans: tuple[StepSpan, ...] = ()
    offset_ns: int = 0
    other_steps: tuple[tuple[StepSpan, ...], ...] = ()
    chosen: bool = True


def summarize_nsys_steps(item: NsysItem, options: SummarizeOptions, export: NsysExport | None = None
                         ) -> StepSummaries:
    """Picklable per-artifact function: phases + kernels rows of the item's chosen step and of each
    of its other steps, in one scan (read from `export` when the pass has the export open already)."""
    scan = scan_nsys(export or item.path, item.ident, options, item.spans if item.chosen else (),
                     other_steps=item.other_steps)
    return StepSummaries(scan.rows if item.chosen else None, scan.others)


# ----------------------------------------------------------------------------------------------
# One export
# ----------------------------------------------------------------------------------------------


@dataclass
class NsysScan:
    """Everything one sweep over an export yields: the chosen step's rows, and the phases and
    kernels rows of each other step asked for (`others`, in the order asked)."""

    rows: SummaryRows
    source: SourceSteps | None = None
    ranges: NvtxRanges | None = None
    projection: ProjectionResult | None = None
    db_facts: dict[str, Any] = field(default_factory=dict)
    others: list[SummaryRows] = field(default_factory=list)


def scan_nsys(path: "str | Path | NsysExport", ident: SourceIdentity, options: SummarizeOptions,
              spans: Sequence[StepSpan] | None = None, kernel_totals: bool = False,
              other_steps: Sequence[Sequence[StepSpan]] = ()) -> NsysScan:
    """Summarize one export (a path, or the export open in this pass). `spans`: the chosen step's
    spans in it (absolute ns); when None the step is chosen from this export alone (`options.step`)
    and its steps rows are included. `other_steps`: the spans of each other step to summarize too.

    Every step is read in ONE projection over the union of the steps' windows (the SQL reads are
    full table scans, so one scan of five steps costs about what one step's did); kernel names and
    process ranks are read once, device memory levels for the chosen step only (the other steps'
    rows keep no memory figure). Each step's rows equal a scan of that step alone (`_step_ops`)."""
    with NsysExport.use(path, ranges_cache=options.ranges_cache) as db:
        path = db.path
        offset = db.session_start_ns() or 0
        r = db.nvtx_ranges()
        own_steps_rows: list[dict[str, Any]] = []
        src = None
        if spans is None:
            src = source_steps_from_ranges(ident, str(path), offset, r, (), options.step_range)
            src = gpu_only_spans(db, src, offset)
            win = pick_window([src], options.step)
            src, spans = win.sources[0], win.spans_of(0)
            own_steps_rows = steps_rows(list(win.sources), win.choice)
        index = RangeIndex.build(r)
        steps = [[Span(s.start_ns - offset, s.end_ns - offset, s.pid, s.step) for s in group]
                 for group in (spans, *other_steps)]
        windows = [(min(s.lo for s in g), max(s.hi for s in g)) if g else None for g in steps]
        live = [w for w in windows if w is not None]
        window = (min(w[0] for w in live), max(w[1] for w in live)) if live else None
        res = project(db, index, selected=r.selected([s for g in steps for s in g]), window=window,
                      kernel_totals=kernel_totals)
        res.ops.copy_kind = _copy_direction(res.ops.copy_kind, db.copy_kind_names())
        names = _kernel_names(db, res.ops)
        memory = _memory_levels(db, windows[0]) if windows[0] is not None else {}
        ranks = _RanksOnce(db, {int(p) for p in np.unique(r.pid)})
        out: list[SummaryRows] = []
        for k, (group, win_k) in enumerate(zip(steps, windows)):
            if not group:   # no span of this step in this export
                out.append({"phases": [], "kernels": []})
                continue
            ops = res.ops if len(steps) == 1 or win_k is None else _step_ops(res.ops, win_k)
            model = EventModel(ident, offset, r, index, ops, res.api_ns, names, memory if k == 0 else {})
            phases, kernels = phase_rows(model, group, options.top)
            _fill_ranks(phases + kernels, ranks.of({int(row["pid"]) for row in phases}))
            out.append({"phases": phases, "kernels": kernels})
        facts = {"nsys_version": db.nsys_version, "schema_version": db.schema_version}
    rows: SummaryRows = {**out[0], "steps": with_phase_identity(own_steps_rows, out[0]["phases"])}
    return NsysScan(rows, src, r, res, facts, out[1:])


def _step_ops(ops: GpuOps, window: tuple[int, int]) -> GpuOps:
    """The GPU operations of a several-step projection that a projection of one step alone
    (`window`: its [lo, hi]) keeps, with what it knows of them: work no range launched only where
    it starts in the step's window, and its launch time only where the launching call lies in it
    (a projection knows the calls outside ranges in its window alone). Ranges' work is chosen by
    the step's selected ranges in `phase_rows`, as in a scan of the step alone; the order is kept."""
    lo, hi = window
    free = ops.rng < 0
    out = ops.take(np.flatnonzero(~free | ((ops.start >= lo) & (ops.start <= hi))))
    far = (out.rng < 0) & (out.launch >= 0) & ((out.launch < lo) | (out.launch > hi))
    if far.any():
        out.launch = np.where(far, -1, out.launch)
        out.launch_tid = np.where(far, -1, out.launch_tid)
    return out


class _RanksOnce:
    """Each process's rank (`process_ranks`), read once per set of processes a scan's steps name:
    the answer depends on the set (one process alone may take the session's environment; a device
    shared by two says nothing), and the steps of one export nearly always name the same set."""

    def __init__(self, db: NsysExport, base: set[int]) -> None:
        self.db, self.base = db, base
        self.seen: dict[frozenset[int], dict[int, tuple[int | None, str]]] = {}

    def of(self, pids: set[int]) -> dict[int, tuple[int | None, str]]:
        key = frozenset(self.base | pids)
        if key not in self.seen:
            self.seen[key] = process_ranks(self.db, key) if key else {}
        return self.seen[key]


def _fill_ranks(rows: list[dict[str, Any]], ranks: dict[int, tuple[int | None, str]]) -> None:
    """Each row's rank and where it came from: the export's own word on its process where it has
    one (and always when it holds several processes), else the artifact's."""
    for row in rows:
        got = ranks.get(row["pid"])
        if got is not None and (row.get("rank") is None or len(ranks) > 1):
            row["rank"], row["rank_source"] = got
        elif row.get("rank") is not None:
            row["rank_source"] = "artifact"


def _kernel_names(db: NsysExport, ops: GpuOps) -> dict[int, tuple[str, str]]:
    """demangled-name id -> (demangled, short) for the kept kernels."""
    ids = np.unique(ops.name[(ops.kind == KIND_KERNEL) & (ops.name >= 0)])
    if ids.size == 0:
        return {}
    strings = db.strings(ids.tolist())
    short: dict[int, int] = {}
    cols = db.columns(KERNEL)
    if "demangledName" in cols and "shortName" in cols:
        for i in ids.tolist():  # LIMIT 1 stops at the first instance: no full-table scan
            got = db.query(f"SELECT shortName FROM {KERNEL} WHERE demangledName = ? LIMIT 1", (int(i),))
            if got and got[0][0] is not None:
                short[int(i)] = int(got[0][0])
    short_str = db.strings(list(short.values()))
    out = {}
    for i in ids.tolist():
        dem = strings.get(int(i), f"<kernel {i}>")
        out[int(i)] = (dem, short_str.get(short.get(int(i), -1), dem))
    return out


_DIRECTIONS = {"h2d": 1, "d2h": 2, "d2d": 3}


def _copy_direction(kinds: np.ndarray, names: dict[int, str]) -> np.ndarray:
    """copyKind ids -> 1 h2d, 2 d2h, 3 d2d, 0 other (ids read from the export's ENUM table)."""
    out = np.zeros(kinds.size, np.int64)
    for kid, name in names.items():
        out[kinds == kid] = _DIRECTIONS.get(name, 0)
    return out


def _memory_levels(db: NsysExport, window: tuple[int, int]) -> dict[int, MemoryLevels]:
    """pid -> (event times, device memory level after each event, level before the window)."""
    if not db.has(MEMORY, "start", "bytes", "globalPid"):
        return {}
    cols = db.columns(MEMORY)
    dealloc = ",".join(str(i) for i in db.dealloc_op_ids())
    op = "memoryOperationType" if "memoryOperationType" in cols else None
    signed = f"CASE WHEN {op} IN ({dealloc}) THEN -bytes ELSE bytes END" if op else "bytes"
    kind = (f" AND (memKind IS NULL OR memKind NOT IN ({','.join(map(str, _HOST_MEM_KINDS))}))"
            if "memKind" in cols else "")
    base = {int(pid_of_gtid(int(g))): int(v or 0) for g, v in _sums_before(db, signed, kind, window[0])}
    parts: dict[int, list[tuple[np.ndarray, np.ndarray]]] = {}
    for s, b, g in db.iter_columns(MEMORY, ["start", signed, "globalPid"],
                                   f"start >= ? AND start <= ?{kind}", window):
        pk = pid_of_gtid(g)
        for p in np.unique(pk):
            m = pk == p
            parts.setdefault(int(p), []).append((s[m], b[m]))
    out = {}
    for p in set(base) | set(parts):
        chunks = parts.get(p, [])
        t = np.concatenate([c[0] for c in chunks]) if chunks else np.zeros(0, np.int64)
        d = np.concatenate([c[1] for c in chunks]) if chunks else np.zeros(0, np.int64)
        order = np.argsort(t, kind="stable")
        b0 = base.get(p, 0)
        out[p] = MemoryLevels(t[order], b0 + np.cumsum(d[order]), b0)
    return out


def _sums_before(db: NsysExport, signed: str, kind: str, t0: int) -> list[tuple[Any, Any]]:
    """(globalPid, sum of the signed bytes of its memory events before t0). One process (most
    exports): a plain aggregate, as GROUP BY sorts every row in a temp b-tree first (a third of the
    memory read of a 100 MB export)."""
    one = db.query(f"SELECT min(globalPid), max(globalPid), sum({signed}), count(*) - count(globalPid) "
                   f"FROM {MEMORY} WHERE start < ?{kind}", (t0,))
    if not one or one[0][0] is None and not one[0][3]:
        return []   # no event before the window
    lo, hi, total, nulls = one[0]
    if lo == hi and not nulls:
        return [(lo, total)]
    return db.query(f"SELECT globalPid, sum({signed}) FROM {MEMORY} WHERE start < ?{kind} GROUP BY globalPid", (t0,))


def totals_rows(db: NsysExport, res: ProjectionResult) -> list[dict[str, Any]]:
    """Per kernel name over the whole export (`project(..., kernel_totals=True)`), like `nsys stats -r
    gpukernsum` (kernels named by demangled name) or `nsys recipe cuda_gpu_kern_sum` (short name)."""
    kt = res.kernel_totals
    if kt is None:
        return []
    strings = db.strings(kt.name_id.tolist())
    rows = []
    for i in range(kt.name_id.size):
        nm = strings.get(int(kt.name_id[i]), f"<kernel {int(kt.name_id[i])}>")
        rows.append({"name": nm, "category": categorize(None, nm), "count": int(kt.count[i]),
                     "total_ns": int(kt.total[i]), "avg_ns": float(kt.total[i]) / int(kt.count[i]),
                     "median_ns": float(kt.median[i]), "min_ns": int(kt.min[i]), "max_ns": int(kt.max[i])})
    rows.sort(key=lambda x: (-x["total_ns"], x["name"]))
    return rows


def projection_rows(r: NvtxRanges, res: ProjectionResult) -> list[dict[str, Any]]:
    """Every range with GPU work, like `nsys stats -r nvtxgpuproj` (same columns, snake_case)."""
    ps, pe, n_ops = res.projection()
    ix = res.index
    rows = []
    for i in range(len(r)):
        if not r.same_thread[i] or n_ops[i] == 0:
            continue
        rows.append({
            "name": r.full_name(i), "projected_start_ns": int(ps[i]), "projected_duration_ns": int(pe[i] - ps[i]),
            "orig_start_ns": int(r.start[i]), "orig_duration_ns": int(r.end[i] - r.start[i]),
            "style": r.style(i), "pid": int(pid_of_gtid(int(r.gtid[i]))), "tid": int(tid_of_gtid(int(r.gtid[i]))),
            "num_gpu_ops": int(n_ops[i]), "level": int(ix.depth[i]),
            "parent": r.full_name(int(ix.parent[i])) if ix.parent[i] >= 0 else None,
        })
    rows.sort(key=lambda x: (x["projected_start_ns"], -x["projected_duration_ns"]))
    return rows
