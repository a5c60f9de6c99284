"""Summarize: the chosen step of every nsys export, phase by phase, as rows of stages/schema.py.

Why: the user's question is "in the steady-state step, per role and rank, where did the time and
memory go, phase by phase?". For each export this module projects GPU work onto verl's NVTX ranges
with NVIDIA's rule (`nsys_projection.project`, one streaming sweep), then for the ranges inside the
chosen step computes wall time, GPU busy time (union over streams), kernel/copy/memset time,
collective time and how much of it compute did not hide, CUDA API time and peak device memory.
Kernels launched in the step from no range at all (e.g. PyTorch's autograd thread has no NVTX
ranges) are kept as a `(unattributed)` phase so totals stay honest.

Phases group by name path: range names are normalised first (`aten::mul, seq = 3, op_id = 9` ->
`aten::mul`, `core/phases.normalize_range_name`), so one row per (process, step, path) carries
an `instances` count. Beside NVIDIA's same-thread numbers every phase has *inherited* ones
(`*_inherited` columns): what a user means by "GPU time of update_actor". Each GPU operation gets
one home range: NVIDIA's, except that (a) an operation launched from a thread with no open range
goes to the innermost range open on its process's main thread at launch time, and (b) an operation
launched inside an emit_nvtx backward range (`MmBackward0, seq = N` on autograd's thread) goes to
the forward op of the same `seq` on the main thread. Inherited figures are inclusive of nested
ranges, like NVIDIA's; what no rule places stays in the `(unattributed)` row's inherited figures.

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
from typing import Any, Iterable, Sequence

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from ..core.atomic import atomic_path
from ..core.phases import autograd_seq, canonical_stage, normalize_range_name
from ..readers.nsys_sqlite import KERNEL, MEMORY, NsysExport, NvtxRanges, pid_of_gtid, tid_of_gtid
from ..readers.nvtx_tree import RangeIndex
from ..schema import SCHEMAS, arrow_schema
from ..window import (
    SourceIdentity,
    SourceSteps,
    StepSpan,
    WindowChoice,
    gpu_only_spans,
    is_phase_range,
    nsys_source_steps,
    run_window,
    source_steps_from_ranges,
    window_spans,
)
from . import intervals
from .kernel_category import categorize
from .projection import KIND_KERNEL, KIND_MEMCPY, KIND_MEMSET, ProjectionResult, project
from .types import DEFAULT_TOP_PHASES, SummarizeOptions, SummaryRows

UNATTRIBUTED = "(unattributed)"
OTHER_KERNELS = "other"
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


def summarize_item(item: NsysItem, options: SummarizeOptions) -> SummaryRows:
    """Picklable per-artifact function: phases + kernels rows of the item's chosen step."""
    return scan_nsys(item.path, item.ident, options, item.spans).rows


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


def scan_nsys(path: str | Path, ident: SourceIdentity, options: SummarizeOptions,
              spans: Sequence[StepSpan] | None = None, kernel_totals: bool = False) -> NsysScan:
    """Summarize one export. `spans`: the chosen step's spans in it (absolute ns); when None the
    step is chosen from this export alone (`options.step`) and its steps rows are included."""
    with NsysExport.open(path) as db:
        offset = db.session_start_ns() or 0
        r = db.nvtx_ranges()
        own_steps_rows: list[dict[str, Any]] = []
        src = None
        if spans is None:
            src = source_steps_from_ranges(ident, str(path), offset, r, (), options.step_range)
            if len(r) == 0:
                src = gpu_only_spans(db, src, offset)
            resolved, choice = run_window([src], options.step)
            src = resolved[0]
            spans = window_spans(src, choice.step)
            own_steps_rows = steps_rows(resolved, choice)
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
        phases, kernels = _phase_rows(ident, offset, r, index, res, selected, rel_spans, names, mem, options.top)
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


def _mem_peak(levels: tuple[np.ndarray, np.ndarray, int] | None, lo: int, hi: int) -> int | None:
    if levels is None:
        return None
    t, lvl, base = levels
    i0 = int(np.searchsorted(t, lo, side="left"))
    i1 = int(np.searchsorted(t, hi, side="right"))
    before = int(lvl[i0 - 1]) if i0 > 0 else base
    inside = int(lvl[i0:i1].max()) if i1 > i0 else before
    return max(0, before, inside)


def _owner(r: NvtxRanges, index: RangeIndex) -> np.ndarray:
    """Each range's phase: itself, or its nearest ancestor outside library NVTX domains."""
    own = np.arange(len(r))
    is_phase = np.array([is_phase_range(d) for d in r.domain], dtype=bool)
    for i in range(len(r)):
        if not is_phase[i]:
            p = index.parent[i]
            own[i] = own[p] if p >= 0 else -1
    return own


def _phase_rows(ident: SourceIdentity, offset: int, r: NvtxRanges, index: RangeIndex, res: ProjectionResult,
                selected: np.ndarray, spans: list[tuple[int, int, int | None, int]],
                names: dict[int, tuple[str, str]], mem: dict[int, Any], top: int
                ) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    ops = res.ops
    order = np.argsort(ops["rng"], kind="stable")
    ops = {k: v[order] for k, v in ops.items()}
    rng = ops["rng"]
    uniq, inv = np.unique(ops["name"], return_inverse=True)
    cat_of = np.array([categorize(*reversed(names.get(int(n), ("", "")))) for n in uniq.tolist()], dtype=object)
    cat = cat_of[inv.reshape(-1)] if uniq.size else np.zeros(0, dtype=object)
    cat[ops["kind"] == KIND_MEMCPY] = "memcpy"
    cat[ops["kind"] == KIND_MEMSET] = "memset"
    api_incl = index.rollup_sum(res.api_ns)
    is_phase = np.array([is_phase_range(d) for d in r.domain], dtype=bool)
    owner = _owner(r, index)
    pids = r.pid
    step_of_pid = {pid: step for _, _, pid, step in spans}
    default_step = spans[0][3] if spans else None

    def op_slice(ids: Iterable[int]) -> np.ndarray:
        parts = [np.arange(np.searchsorted(rng, i, "left"), np.searchsorted(rng, i, "right")) for i in ids]
        return np.concatenate(parts) if parts else np.zeros(0, np.int64)

    # Group selected phase ranges by (pid, path of normalised names): repeated instances add up.
    irng = _inherited_ranges(r, index, ops, selected, is_phase)
    iorder = np.argsort(irng, kind="stable")
    irng_sorted = irng[iorder]

    def inherited_slice(ids: Iterable[int]) -> np.ndarray:
        parts = [iorder[np.searchsorted(irng_sorted, i, "left"):np.searchsorted(irng_sorted, i, "right")] for i in ids]
        return np.concatenate(parts) if parts else np.zeros(0, np.int64)

    paths = _phase_paths(r, index, owner, np.flatnonzero(selected & is_phase))
    groups: dict[tuple, list[int]] = {}
    for i in np.flatnonzero(selected & is_phase).tolist():
        groups.setdefault((int(pids[i]), paths[i]), []).append(i)
    phases: list[dict[str, Any]] = []
    for (pid, path), members in groups.items():
        tree = [j for i in members for j in index.subtree(i).tolist()]
        sel_ops = op_slice(tree)
        starts = [int(r.start[i]) for i in members]
        ends = [int(r.end[i]) for i in members]
        lvl = mem.get(pid)
        peak = None
        if lvl is not None:
            peak = max((_mem_peak(lvl, s, e) or 0) for s, e in zip(starts, ends))
        row = _numbers(ops, cat, sel_ops)
        wall = int(sum(e - s for s, e in zip(starts, ends)))
        name = path[-1]
        phases.append({
            **ident.keys(step_of_pid.get(pid, default_step)), "pid": pid,
            "phase": name, "stage": canonical_stage(name, ident.role), "parent": path[-2] if len(path) > 1 else None,
            "depth": len(path) - 1, "path": PATH_SEP.join(path), "instances": len(members),
            "start_ns": offset + min(starts), "wall_ns": wall, **row,
            **_inherited_numbers(ops, inherited_slice(tree)),
            "idle_ns": max(0, wall - row["gpu_busy_ns"]),
            "api_ns": int(sum(api_incl[i] for i in members)), "mem_peak_bytes": peak,
        })
    # GPU work in the step that no range launched (other threads, no NVTX): one row per process.
    un = np.flatnonzero(rng < 0)
    un_inh = np.flatnonzero(irng < 0)
    for lo, hi, pid, step in spans:
        ids = un if pid is None else un[ops["pid"][un] == pid]
        ids = ids[(ops["start"][ids] >= lo) & (ops["start"][ids] <= hi)]
        if ids.size == 0:
            continue
        left = un_inh if pid is None else un_inh[ops["pid"][un_inh] == pid]
        left = left[(ops["start"][left] >= lo) & (ops["start"][left] <= hi)]
        row = _numbers(ops, cat, ids)
        wall = hi - lo
        phases.append({
            **ident.keys(step), "pid": pid if pid is not None else int(ops["pid"][ids[0]]),
            "phase": UNATTRIBUTED, "stage": "other", "parent": None, "depth": 0, "path": UNATTRIBUTED,
            "instances": 1, "start_ns": offset + lo, "wall_ns": wall, **row, **_inherited_numbers(ops, left),
            "idle_ns": max(0, wall - row["gpu_busy_ns"]), "api_ns": None, "mem_peak_bytes": None,
        })
    kernels = _kernel_rows(ident, r, ops, cat, names, owner, pids, step_of_pid, default_step, spans, top)
    return phases, kernels


PATH_SEP = " > "
_AUTOGRAD_ROOT = "autograd::engine::evaluate_function"


def _process_ranks(db: NsysExport, ident: SourceIdentity, pids: set[int]) -> dict[int, tuple[int | None, str]]:
    """pid -> (rank, where it came from) for every summarised process of the export."""
    from ..readers.report_identity import process_ranks

    if not pids:
        return {}
    return process_ranks(db.con, db.tables, pids, db.path)


def _phase_paths(r: NvtxRanges, index: RangeIndex, owner: np.ndarray, ids: np.ndarray) -> dict[int, tuple[str, ...]]:
    """Range index -> names of its phase ancestors and itself, normalised (`step > gen > aten::mm`).

    Library-domain ranges (NCCL, cuBLAS) take no place in a path; their work belongs to the phase
    around them (`owner`)."""
    memo: dict[int, tuple[str, ...]] = {}
    norm: dict[str, str] = {}

    def name(i: int) -> str:
        t = r.text[i]
        if t not in norm:
            norm[t] = normalize_range_name(t)
        return norm[t]

    def path(i: int) -> tuple[str, ...]:
        chain = []
        j = i
        while j >= 0 and j not in memo:
            chain.append(j)
            p = index.parent[j]
            j = int(owner[p]) if p >= 0 else -1
        base = memo[j] if j >= 0 else ()
        for k in reversed(chain):
            base = base + (name(k),)
            memo[k] = base
        return memo[i]

    return {int(i): path(int(i)) for i in ids.tolist()}


def _main_threads(r: NvtxRanges, index: RangeIndex) -> dict[int, int]:
    """pid -> globalTid of its main (range-issuing) thread: the thread whose id is the pid when it
    opened ranges, else the thread with most ranges."""
    out: dict[int, int] = {}
    counts: dict[int, int] = {}
    for g in index.threads:
        counts[g] = int(np.count_nonzero(r.gtid == g))
    for g in sorted(index.threads, key=lambda g: -counts[g]):
        pid = int(pid_of_gtid(g))
        if int(tid_of_gtid(g)) == pid:
            out[pid] = g
        else:
            out.setdefault(pid, g)
    return out


def _seq_homes(r: NvtxRanges, index: RangeIndex, main: dict[int, int]) -> np.ndarray:
    """Range index -> the forward op range (main thread) whose autograd `seq` it shares, for ranges
    on other threads (emit_nvtx backward ops and everything nested in them); autograd's
    `evaluate_function` wrappers without one go to the main thread's range open when they start;
    -1 elsewhere."""
    n = len(r)
    home = np.full(n, -1, np.int64)
    seq = {i: autograd_seq(t) for i, t in enumerate(r.text) if "seq" in t}
    if not seq:
        return home
    mains = set(main.values())
    forward: dict[tuple[int, int], list[int]] = {}
    for i, q in seq.items():
        if q is not None and int(r.gtid[i]) in mains:
            forward.setdefault((int(pid_of_gtid(int(r.gtid[i]))), q), []).append(i)
    if not forward:
        return home
    for i in range(n):  # parents sort before children
        if int(r.gtid[i]) in mains:
            continue
        q = seq.get(i)
        f = -1
        if q is not None:
            cands = [c for c in forward.get((int(pid_of_gtid(int(r.gtid[i]))), q), ()) if r.start[c] <= r.start[i]]
            if cands:  # the outermost op of that seq, the latest forward pass before this backward
                f = min(cands, key=lambda c: (index.depth[c], -int(r.start[c])))
        if f < 0 and index.parent[i] >= 0:
            f = int(home[index.parent[i]])
        elif f < 0 and r.text[i].startswith(_AUTOGRAD_ROOT) and pid_of_gtid(int(r.gtid[i])) in main:
            # autograd's own wrapper around a backward op: the range open on the main thread then
            g = main[int(pid_of_gtid(int(r.gtid[i])))]
            f = int(index.innermost(g, r.start[i:i + 1], r.start[i:i + 1])[0])
        home[i] = f
    return home


def _inherited_ranges(r: NvtxRanges, index: RangeIndex, ops: dict[str, np.ndarray], selected: np.ndarray,
                      is_phase: np.ndarray) -> np.ndarray:
    """Each kept GPU operation's home range for the inherited figures (module docstring), -1 when none."""
    rng = ops["rng"]
    irng = rng.copy()
    if len(r) == 0 or rng.size == 0:
        return np.full(rng.size, -1, np.int64)
    main = _main_threads(r, index)
    home = _seq_homes(r, index, main)
    on = rng >= 0
    h = np.where(on, home[np.maximum(rng, 0)], -1)
    irng = np.where(h >= 0, h, irng)
    orphan = (rng < 0) & (ops["launch"] >= 0)
    for pid in np.unique(ops["pid"][orphan]).tolist():
        g = main.get(int(pid))
        if g is None:
            continue
        m = np.flatnonzero(orphan & (ops["pid"] == pid))
        irng[m] = index.innermost(g, ops["launch"][m], ops["launch"][m])
    ok = irng >= 0
    ok[ok] = selected[irng[ok]]
    return np.where(ok, irng, -1)


def _inherited_numbers(ops: dict[str, np.ndarray], ids: np.ndarray) -> dict[str, int]:
    """GPU busy, kernel time and kernel count of the operations a phase inherits."""
    k = ops["kind"][ids] == KIND_KERNEL
    dur = ops["end"][ids] - ops["start"][ids]
    return {"gpu_busy_inherited_ns": intervals.union_length(ops["start"][ids], ops["end"][ids]),
            "kernel_inherited_ns": int(dur[k].sum()), "kernel_count_inherited": int(k.sum())}


def _numbers(ops: dict[str, np.ndarray], cat: np.ndarray, ids: np.ndarray) -> dict[str, int]:
    """GPU numbers of a set of operations (indices into ops)."""
    s, e, kind = ops["start"][ids], ops["end"][ids], ops["kind"][ids]
    dur = e - s
    k = kind == KIND_KERNEL
    mc = kind == KIND_MEMCPY
    ms = kind == KIND_MEMSET
    c = cat[ids] == "comm" if ids.size else np.zeros(0, bool)
    nb = ops["nbytes"][ids]
    ck = ops["copy_kind"][ids]
    comm_s, comm_e = s[c & k], e[c & k]
    comp = k & ~c
    return {
        "gpu_busy_ns": intervals.union_length(s, e),
        "kernel_ns": int(dur[k].sum()), "kernel_count": int(k.sum()),
        "memcpy_ns": int(dur[mc].sum()),
        "memcpy_h2d_bytes": int(nb[mc & (ck == 1)].sum()),
        "memcpy_d2h_bytes": int(nb[mc & (ck == 2)].sum()),
        "memcpy_d2d_bytes": int(nb[mc & (ck == 3)].sum()),
        "memcpy_other_bytes": int(nb[mc & (ck == 0)].clip(min=0).sum()),
        "memset_ns": int(dur[ms].sum()),
        "comm_ns": intervals.union_length(comm_s, comm_e),
        "exposed_comm_ns": intervals.exposed_length(comm_s, comm_e, s[comp], e[comp]),
    }


def _kernel_rows(ident: SourceIdentity, r: NvtxRanges, ops: dict[str, np.ndarray], cat: np.ndarray,
                 names: dict[int, tuple[str, str]], owner: np.ndarray, pids: np.ndarray,
                 step_of_pid: dict, default_step: int | None, spans: list, top: int) -> list[dict[str, Any]]:
    """Top kernels per (process, phase) by total time, plus one `other` row so totals add up."""
    import pandas as pd

    k = ops["kind"] == KIND_KERNEL
    if not k.any():
        return []
    rng = ops["rng"][k]
    own = np.where(rng >= 0, owner[np.maximum(rng, 0)], -1) if owner.size else np.full(rng.size, -1, np.int64)
    norm: dict[int, str] = {}
    phase = [(norm.get(o) or norm.setdefault(o, normalize_range_name(r.text[o]))) if o >= 0 else UNATTRIBUTED
             for o in own.tolist()]
    df = pd.DataFrame({
        "pid": ops["pid"][k], "phase": phase, "name": ops["name"][k],
        "dur": ops["end"][k] - ops["start"][k], "cat": cat[k],
    })
    if (rng < 0).any():  # unattributed kernels count only inside their process's span
        st = ops["start"][k]
        inside = np.ones(k.sum(), bool)
        for lo, hi, pid, _ in spans:
            if pid is not None:
                m = (df["pid"].to_numpy() == pid) & (rng < 0)
                inside &= ~m | ((st >= lo) & (st <= hi))
        df = df[inside]
    g = df.groupby(["pid", "phase", "name"], sort=False)["dur"].agg(
        ["count", "sum", "min", "max", "median"]).reset_index()
    cats = df.groupby("name", sort=False)["cat"].first()
    rows: list[dict[str, Any]] = []
    for (pid, ph), part in g.groupby(["pid", "phase"], sort=False):
        part = part.sort_values(["sum", "name"], ascending=[False, True])
        head, rest = part.iloc[:top], part.iloc[top:]
        keys = ident.keys(step_of_pid.get(int(pid), default_step))
        keys["pid"] = int(pid)
        stage = "other" if ph == UNATTRIBUTED else canonical_stage(ph, ident.role)
        for rec in head.itertuples(index=False):
            dem, short = names.get(int(rec.name), (f"<kernel {rec.name}>",) * 2)
            rows.append({**keys, "phase": ph, "stage": stage, "kernel": dem, "kernel_short": short,
                         "category": cats[rec.name], "count": int(rec.count), "total_ns": int(rec.sum),
                         "avg_ns": float(rec.sum) / rec.count, "min_ns": int(rec.min), "max_ns": int(rec.max),
                         "median_ns": float(rec.median)})
        if len(rest):
            cnt, tot = int(rest["count"].sum()), int(rest["sum"].sum())
            rows.append({**keys, "phase": ph, "stage": stage, "kernel": OTHER_KERNELS, "kernel_short": OTHER_KERNELS,
                         "category": "other", "count": cnt, "total_ns": tot, "avg_ns": tot / cnt,
                         "min_ns": int(rest["min"].min()), "max_ns": int(rest["max"].max()), "median_ns": None})
    return rows


# ----------------------------------------------------------------------------------------------
# Whole-report numbers comparable with NVIDIA's tools
# ----------------------------------------------------------------------------------------------


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
                         "chosen": chosen, "reason": reason})
    return rows


@dataclass
class SummarizeResult:
    """What summarizing several sources produced."""

    sources: list[SourceSteps]
    choice: WindowChoice
    rows: SummaryRows
    errors: list[tuple[str, str]] = field(default_factory=list)   # (source, one-line error)


def source_steps_item(item: tuple[str, SourceIdentity], options: Any = None) -> SourceSteps:
    """Window discovery of one source of any kind (nsys export or torch trace)."""
    if item[1].source_kind == "torch":
        from .torch_profile import torch_steps_item

        return torch_steps_item(item, options)
    return nsys_source_steps(*item, step_range=getattr(options, "step_range", None))


def summarize_any_item(item: Any, options: SummarizeOptions) -> SummaryRows:
    """Summarize one source of any kind (NsysItem or the torch half's TorchItem)."""
    if isinstance(item, NsysItem):
        return summarize_item(item, options)
    from .torch_profile import summarize_torch_item

    return summarize_torch_item(item, options)


def summarize_job(path: str, ident: SourceIdentity, src: SourceSteps, step: int | None) -> Any:
    spans = tuple(window_spans(src, step))
    if ident.source_kind == "torch":
        from .torch_profile import TorchItem

        return TorchItem(path, src.ident, spans)
    return NsysItem(path, ident, spans, src.offset_ns)


# ----------------------------------------------------------------------------------------------
# Writing and showing
# ----------------------------------------------------------------------------------------------


def to_table(name: str, rows: "list[dict[str, Any]] | pa.Table", metadata: dict[str, str] | None = None) -> pa.Table:
    """Rows of one schema as an Arrow table with exactly the declared columns and types."""
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

    rows = phases_rows.to_pylist() if isinstance(phases_rows, pa.Table) else list(phases_rows)
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
