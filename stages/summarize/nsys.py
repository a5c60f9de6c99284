"""Summarize: the chosen step of every nsys export, phase by phase, as rows of stages/schema.py.

Why: the user's question is "in the steady-state step, per role and rank, where did the time and
memory go, phase by phase?". This module is the nsys adapter of the one summarizer
(`summarize/phases.py`, which holds the rules: same-thread projection, inherited figures, name
paths, instances, the `(unattributed)` row): it reads the export through SQL for the step's window
only, projects GPU work onto the NVTX ranges with NVIDIA's rule (`projection.project`, one streaming
sweep), reads device memory levels and each process's rank, and hands that model over.

Outputs: `phases`, `kernels` and `steps` rows (SummaryRows), written by `write_summaries` as
Parquet with key-value metadata. `kernel_summary` and `project_ranges` give NVIDIA-comparable
whole-report numbers (gpukernsum, nvtxgpuproj) for checks and the benchmark.

Per-artifact work is `summarize_item(item, options)`: plain, module-level and picklable, so the
pipeline runs it inline, in a process pool, or on Ray.
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterable, Sequence

import numpy as np

from ..core.atomic import atomic_path
from ..readers.nsys_sqlite import KERNEL, MEMORY, NsysExport, NvtxRanges, pid_of_gtid, tid_of_gtid
from ..readers.nvtx_tree import RangeIndex
from ..window import (
    SourceIdentity,
    SourceSteps,
    StepSpan,
    WindowChoice,
    gpu_only_spans,
    pick_window,
    source_steps_from_ranges,
    window_spans,
)
from .kernel_category import categorize
from .phases import OTHER_KERNELS, PATH_SEP, UNATTRIBUTED, phase_rows  # noqa: F401 - re-exported
from .projection import KIND_KERNEL, ProjectionResult, project
from .types import DEFAULT_TOP_PHASES, SummarizeOptions, SummaryRows

if TYPE_CHECKING:   # pyarrow (and the schema built on it) only where Parquet is written: a summary needs neither
    import pyarrow as pa

_HOST_MEM_KINDS = (0, 1)  # pageable, pinned: not device memory


# ----------------------------------------------------------------------------------------------
# Items the pipeline hands to executors
# ----------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class NsysItem:
    """One export to summarize: where it is, who made it, and the chosen step's spans in it."""

    path: str
    ident: SourceIdentity
    spans: tuple[StepSpan, ...] = ()
    offset_ns: int = 0


def summarize_item(item: NsysItem, options: SummarizeOptions, export: NsysExport | None = None) -> SummaryRows:
    """Picklable per-artifact function: phases + kernels rows of the item's chosen step (read from
    `export` when the pass has the item's export open already)."""
    return scan_nsys(export or item.path, item.ident, options, item.spans).rows


# ----------------------------------------------------------------------------------------------
# One export
# ----------------------------------------------------------------------------------------------


@dataclass
class NsysScan:
    """Everything one sweep over an export yields."""

    rows: SummaryRows
    source: SourceSteps | None = None
    ranges: NvtxRanges | None = None
    projection: ProjectionResult | None = None
    db_facts: dict[str, Any] = field(default_factory=dict)


def scan_nsys(path: "str | Path | NsysExport", ident: SourceIdentity, options: SummarizeOptions,
              spans: Sequence[StepSpan] | None = None, kernel_totals: bool = False) -> NsysScan:
    """Summarize one export (a path, or the export open in this pass). `spans`: the chosen step's
    spans in it (absolute ns); when None the step is chosen from this export alone (`options.step`)
    and its steps rows are included."""
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
        rel_spans = [(s.start_ns - offset, s.end_ns - offset, s.pid, s.step) for s in spans]
        pids = r.pid
        selected = np.zeros(len(r), bool)
        for lo, hi, pid, _ in rel_spans:
            m = (r.start >= lo) & (r.start <= hi)
            if pid is not None:
                m &= pids == pid
            selected |= m
        window = (min(s[0] for s in rel_spans), max(s[1] for s in rel_spans)) if rel_spans else None
        res = project(db, index, selected=selected, window=window, kernel_totals=kernel_totals)
        names = _kernel_names(db, res.ops)
        res.ops["copy_kind"] = _copy_direction(res.ops["copy_kind"], db.copy_kind_names())
        mem = _memory_levels(db, window) if window is not None else {}
        phases, kernels = phase_rows(ident, offset, r, index, res.ops, res.api_ns, selected, rel_spans, names,
                                     mem, options.top)
        ranks = _process_ranks(db, ident, {int(p) for p in np.unique(r.pid)} | {int(row["pid"]) for row in phases})
        for row in phases + kernels:
            got = ranks.get(row["pid"])
            if got is not None and (row.get("rank") is None or len(ranks) > 1):
                row["rank"], row["rank_source"] = got
            elif row.get("rank") is not None:
                row["rank_source"] = "artifact"
        facts = {"nsys_version": db.nsys_version, "schema_version": db.schema_version}
    rows: SummaryRows = {"phases": phases, "kernels": kernels, "steps": own_steps_rows}
    return NsysScan(rows, src, r, res, facts)


def summarize_nsys(path: str | Path, ident: SourceIdentity | None = None,
                   options: SummarizeOptions | None = None) -> SummaryRows:
    """Window + summarize one export on its own (phases, kernels and steps rows)."""
    from ..window import identity_from_path

    return scan_nsys(path, ident or identity_from_path(path), options or SummarizeOptions()).rows


def _kernel_names(db: NsysExport, ops: dict[str, np.ndarray]) -> dict[int, tuple[str, str]]:
    """demangled-name id -> (demangled, short) for the kept kernels."""
    ids = np.unique(ops["name"][(ops["kind"] == KIND_KERNEL) & (ops["name"] >= 0)])
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


def _memory_levels(db: NsysExport, window: tuple[int, int]) -> dict[int, tuple[np.ndarray, np.ndarray, int]]:
    """pid -> (event times, device memory level after each event, level before the window)."""
    if not db.has(MEMORY, "start", "bytes", "globalPid"):
        return {}
    cols = db.columns(MEMORY)
    dealloc = ",".join(str(i) for i in db.dealloc_op_ids())
    op = "memoryOperationType" if "memoryOperationType" in cols else None
    signed = f"CASE WHEN {op} IN ({dealloc}) THEN -bytes ELSE bytes END" if op else "bytes"
    kind = (f" AND (memKind IS NULL OR memKind NOT IN ({','.join(map(str, _HOST_MEM_KINDS))}))"
            if "memKind" in cols else "")
    base = {int(pid_of_gtid(int(g))): int(v or 0) for g, v in db.query(
        f"SELECT globalPid, sum({signed}) FROM {MEMORY} WHERE start < ?{kind} GROUP BY globalPid", (window[0],))}
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
        out[p] = (t[order], b0 + np.cumsum(d[order]), b0)
    return out


def _process_ranks(db: NsysExport, ident: SourceIdentity, pids: set[int]) -> dict[int, tuple[int | None, str]]:
    """pid -> (rank, where it came from) for every summarised process of the export."""
    from ..readers.report_identity import process_ranks

    if not pids:
        return {}
    return process_ranks(db, pids)


def kernel_summary(path: str | Path, by: str = "demangled") -> list[dict[str, Any]]:
    """Per kernel name over the whole export, like `nsys stats -r gpukernsum` (`by="demangled"`)
    or `nsys recipe cuda_gpu_kern_sum` (`by="short"`)."""
    col = {"demangled": "demangledName", "short": "shortName"}[by]
    with NsysExport.open(path) as db:
        index = RangeIndex.build(db.nvtx_ranges())
        res = project(db, index, kernel_totals=True, kernel_name=col)
        return _totals_rows(db, res)


def _totals_rows(db: NsysExport, res: ProjectionResult) -> list[dict[str, Any]]:
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


def project_ranges(path: str | Path) -> list[dict[str, Any]]:
    """NVIDIA's NVTX projection of every range of an export (see `projection_rows`)."""
    with NsysExport.open(path) as db:
        r = db.nvtx_ranges()
        res = project(db, RangeIndex.build(r), kernel_totals=False)
        return projection_rows(r, res)


# ----------------------------------------------------------------------------------------------
# Several sources: window + summarize
# ----------------------------------------------------------------------------------------------


def steps_rows(sources: Sequence[SourceSteps], choice: WindowChoice) -> list[dict[str, Any]]:
    """One steps.parquet row per (source, process, step) found, with why it was (not) chosen."""
    rows = []
    for src in sources:
        for s in sorted(src.steps, key=lambda s: (s.pid or 0, s.step)):
            chosen = s.step == choice.step
            if chosen:
                reason = choice.reason
            elif choice.step is None:
                reason = "not chosen: " + choice.reason
            else:
                reason = f"not chosen: step {choice.step} is summarized"
            if s.flags:
                reason += f" (contains {', '.join(s.flags)})"
            keys = src.ident.keys(s.step)
            if s.pid is not None:
                keys["pid"] = s.pid
            rows.append({**keys, "start_ns": s.start_ns, "wall_ns": s.wall_ns, "boundary": s.boundary,
                         "chosen": chosen, "reason": reason, "label": step_label(s, src.ident)})
    return rows


def step_label(s: StepSpan, ident: SourceIdentity) -> str:
    """The step's marker as the source names it (steps.parquet `label`)."""
    if s.label:
        return s.label
    if s.boundary == "capture_range":
        return f"capture range .{ident.capture_range if ident.capture_range is not None else s.step}"
    if s.boundary == "file_name":
        return f"step{s.step} in the file name"
    if s.boundary == "snapshot_dir":
        return f"step{s.step} of the snapshot folder"
    if s.boundary == "whole_file":
        return "whole capture"
    return f"{s.boundary.replace('_', ' ')} {s.step}"


@dataclass
class SummarizeResult:
    """What summarizing several sources produced."""

    sources: list[SourceSteps]
    choice: WindowChoice
    rows: SummaryRows
    errors: list[tuple[str, str]] = field(default_factory=list)   # (source, one-line error)


def summarize_any_item(item: Any, options: SummarizeOptions, export: NsysExport | None = None) -> SummaryRows:
    """Summarize one source of any kind (NsysItem, or the torch half's TorchItem / MemoryItem).
    `export`: an NsysItem's export already open in this pass (collect's pass 2 opens it once)."""
    if isinstance(item, NsysItem):
        return summarize_item(item, options, export)
    from .torch_profile import MemoryItem, summarize_memory_item, summarize_torch_item

    return (summarize_memory_item if isinstance(item, MemoryItem) else summarize_torch_item)(item, options)


def summarize_job(path: str, ident: SourceIdentity, src: SourceSteps, step: int | None) -> Any:
    """The summary job of one source for the chosen step (its spans in it), by the source's kind."""
    spans = tuple(window_spans(src, step))
    if ident.source_kind in ("torch", "memory"):
        from .torch_profile import MemoryItem, TorchItem

        return TorchItem(path, src.ident, spans) if ident.source_kind == "torch" else MemoryItem(
            path, src.ident, None, spans)
    return NsysItem(path, ident, spans, src.offset_ns)


# ----------------------------------------------------------------------------------------------
# Writing and showing
# ----------------------------------------------------------------------------------------------


def to_table(name: str, rows: "list[dict[str, Any]] | pa.Table", metadata: dict[str, str] | None = None) -> pa.Table:
    """Rows of one schema as an Arrow table with exactly the declared columns and types."""
    import pyarrow as pa

    from ..schema import SCHEMAS, arrow_schema

    schema = arrow_schema(name, metadata)
    if isinstance(rows, pa.Table):
        cols = {f.name: (rows.column(f.name).cast(f.type) if f.name in rows.column_names
                         else pa.nulls(rows.num_rows, f.type)) for f in schema}
        return pa.table(cols, schema=schema)
    names = [c.name for c in SCHEMAS[name]]
    data = {n: [row.get(n) for row in rows] for n in names}
    return pa.table(data, schema=schema)


def summary_metadata(inputs: Iterable[tuple[str, str]] = (), tools: dict[str, Iterable[str]] | None = None,
                     choice: WindowChoice | None = None) -> dict[str, str]:
    """Parquet key-value metadata: verlprof version, input hashes, tool versions, window choice."""
    try:
        from importlib.metadata import version

        ver = version("verlprof")
    except Exception:  # noqa: BLE001 - an uninstalled checkout still writes summaries
        ver = "unknown"
    meta = {"verlprof.version": ver,
            "verlprof.inputs": json.dumps(dict(sorted(inputs)), sort_keys=True)}
    for tool, versions in (tools or {}).items():
        meta[f"verlprof.{tool}_versions"] = json.dumps(sorted({v for v in versions if v}))
    if choice is not None:
        meta["verlprof.window"] = json.dumps(choice.to_manifest()["step"])
        meta["verlprof.window_reason"] = choice.reason
    return meta


def write_summaries(rows_by_schema: SummaryRows, out_dir: str | Path, metadata: dict[str, str] | None = None
                    ) -> dict[str, Path]:
    """Write `<out_dir>/<schema>.parquet` for every schema (atomically); returns name -> path."""
    import pyarrow.parquet as pq

    from ..schema import SCHEMAS

    out = Path(out_dir)
    written: dict[str, Path] = {}
    for name in SCHEMAS:
        table = to_table(name, rows_by_schema.get(name, []), metadata)
        final = out / f"{name}.parquet"
        with atomic_path(final) as tmp:
            pq.write_table(table, tmp, compression="zstd")
        written[name] = final
    return written


def _ms(ns: Any) -> str:
    return "" if ns is None else f"{ns / 1e6:,.1f}"


_NAME_WIDTH = 36


def _top_phases(part: list[dict[str, Any]], top: int) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """The `top` phases of one process by wall time (ancestors of a shown phase are shown too, so
    the tree reads; the `(unattributed)` row always), in start order; and the rest."""
    by_path = {r.get("path") or r.get("phase"): r for r in part}
    ranked = sorted((r for r in part if r.get("phase") != UNATTRIBUTED),
                    key=lambda x: (-(x.get("wall_ns") or 0), x.get("start_ns") or 0))
    shown: dict[int, dict[str, Any]] = {id(r): r for r in part if r.get("phase") == UNATTRIBUTED}
    for row in ranked:
        if len(shown) >= top + 1:
            break
        chain = [row]
        path = str(row.get("path") or "")
        while PATH_SEP in path:
            path = path.rsplit(PATH_SEP, 1)[0]
            if path in by_path:
                chain.append(by_path[path])
        for r in chain:
            shown[id(r)] = r
    rest = [r for r in part if id(r) not in shown]

    first: dict[str, int] = {}      # path prefix -> earliest start under it (prefixes without a row too)
    for r in part:
        parts = str(r.get("path") or r.get("phase") or "").split(PATH_SEP)
        for k in range(len(parts)):
            key = PATH_SEP.join(parts[:k + 1])
            first[key] = min(first.get(key, 1 << 62), int(r.get("start_ns") or 0))

    def tree_order(x: dict[str, Any]) -> tuple:
        """Depth-first, siblings by start time: each ancestor's start, outermost first."""
        parts = str(x.get("path") or x.get("phase") or "").split(PATH_SEP)
        return (x.get("phase") == UNATTRIBUTED,
                tuple((first[PATH_SEP.join(parts[:k + 1])], parts[k]) for k in range(len(parts))))

    return sorted(shown.values(), key=tree_order), rest


def render_phase_table(phases_rows: "list[dict[str, Any]] | pa.Table", console: Any = None,
                       top: int = DEFAULT_TOP_PHASES) -> Any:
    """A rich table per (role, rank, process) of the chosen step's phases; printed when `console`.

    At most `top` phases per process (the longest by wall time, with their enclosing phases), then
    one line saying how many more are in phases.parquet, so no input prints hundreds of rows. GPU
    time is shown twice: NVIDIA's same-thread figure and the inherited one (what the phase caused,
    backward kernels of autograd's thread included); the `(unattributed)` row's inherited figure is
    what no rule could place."""
    from rich.console import Console
    from rich.table import Table

    rows = phases_rows.to_pylist() if hasattr(phases_rows, "to_pylist") else list(phases_rows)
    if console is None:
        console = Console()
    narrow = (console.width or 80) < 110          # an 80-column terminal: the figures that matter most
    width = 27 if narrow else _NAME_WIDTH
    cols = [("phase", "left"), ("stage", "left"), ("n", "right"), ("wall ms", "right"), ("GPU ms", "right"),
            ("GPU inh. ms", "right"), ("kernels", "right"), ("comm ms", "right"), ("mem GiB", "right")]
    if narrow:
        cols = [c for c in cols if c[0] not in ("stage", "comm ms", "mem GiB")]
    tables = []
    groups: dict[tuple, list[dict[str, Any]]] = {}
    for row in rows:
        groups.setdefault((row.get("role"), row.get("rank"), row.get("pid"), row.get("source")), []).append(row)
    for (role, rank, pid, source), part in groups.items():
        step = part[0].get("step")
        how = part[0].get("rank_source")
        rank_txt = f"{rank if rank is not None else '?'}" + (f" ({how})" if how and how != "artifact" else "")
        title = f"{role or 'role ?'} rank {rank_txt} (pid {pid}) step {step}: {source}"
        t = Table(title=title, title_justify="left")
        for col, just in cols:
            t.add_column(col, justify=just, no_wrap=True, min_width=max(3, len(col)),  # type: ignore[arg-type]
                         max_width=width if col == "phase" else 12 if col == "stage" else None)
        shown, rest = _top_phases(part, max(1, top))
        for row in shown:
            peak = row.get("mem_peak_bytes")
            inh = row.get("gpu_busy_inherited_ns")
            label = "  " * int(row.get("depth") or 0) + str(row.get("phase"))
            cells = {
                "phase": label if len(label) <= width else label[:width - 1] + "…", "stage": str(row.get("stage")),
                "n": str(row.get("instances") or 1), "wall ms": _ms(row.get("wall_ns")),
                "GPU ms": _ms(row.get("gpu_busy_ns")),
                "GPU inh. ms": ("left " if row.get("phase") == UNATTRIBUTED else "") + _ms(inh),
                "kernels": f"{row.get('kernel_count') or 0:,}", "comm ms": _ms(row.get("comm_ns")),
                "mem GiB": "" if peak is None else f"{peak / 2**30:.2f}"}
            t.add_row(*(cells[c] for c, _ in cols))
        if rest:
            shown_paths = {r.get("path") for r in shown}
            # only the outermost hidden phases: nested ones are inside their time already
            outer = [r for r in rest if str(r.get("path") or "").rsplit(PATH_SEP, 1)[0] in shown_paths
                     or PATH_SEP not in str(r.get("path") or "")]
            hidden_ms = sum((r.get("wall_ns") or 0) for r in outer) / 1e6
            t.caption = f"{len(rest)} more phases ({hidden_ms:,.1f} ms wall) in phases.parquet"
            t.caption_style = "none"
            t.caption_justify = "left"
        tables.append(t)
    for t in tables:
        console.print(t)
    return tables
