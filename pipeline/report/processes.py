"""Per process, the chosen step as the report draws it: its wall window, its top-level phases, and
the partition of that window into phases and the gaps between them.

Why: a bar per process must add up to the step's wall time. Stacking every phase row (nested
ranges, the whole-window `(unattributed)` row) counts time twice; instead the step window
[start, end) is cut at the top-level phases' edges: each instant belongs to the top-level phase
that covers it (the earlier one where two overlap, e.g. a torch `gloo:all_reduce` inside an
update), or to a gap. The segments of a bar therefore sum to the step wall exactly, and the same
records place the boxes of the timeline on the absolute time axis (clocks are aligned across
ranks by collect).

A process is one (role, rank, pid). When a bundle has it from several source kinds (an nsys report
and a torch trace of the same worker), the nsys rows are drawn (compare.py's preference), so each
process is one bar and one lane. Memory-snapshot rows are not drawn: their times are allocation
events, not ranges of the step. Where a process has no `step` range but one range around all the
others (a torch trace's `train`), that range's children are its top-level phases.
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import pandas as pd

from .. import compare
from .template import isnull
from ...stages.core import formats
from ...stages.core.phases import UNATTRIBUTED

ProcessId = tuple[Any, Any, Any]   # (role, rank, pid-or-source): nulls as None, numbers as int


@dataclass(frozen=True)
class Phase:
    """One top-level range of a process's step (absolute UTC ns)."""
    name: str
    stage: str
    start_ns: int
    end_ns: int
    gpu_busy_ns: int | None
    gpu_inherited_ns: int | None = None   # with kernels of range-less threads inherited (issue 10)

    @property
    def wall_ns(self) -> int:
        return self.end_ns - self.start_ns


@dataclass(frozen=True)
class Segment:
    """A piece of the step window: a top-level phase (its part not covered by an earlier one) or a
    gap (`phase is None`)."""
    phase: Phase | None
    start_ns: int
    end_ns: int

    @property
    def wall_ns(self) -> int:
        return self.end_ns - self.start_ns


@dataclass
class ProcessStep:
    """One process in the chosen step."""
    role: str | None
    rank: int | None
    pid: int | None
    kind: str
    sources: list[str]
    start_ns: int
    end_ns: int
    step_from: str                     # "step range" | "steps table" | "phase span"
    phases: list[Phase] = field(default_factory=list)
    gpu_busy_ns: int | None = None     # GPU busy inside the step (phases.parquet), None if unknown
    unattributed_gpu_ns: int = 0       # GPU time of kernels launched outside every range
    unattributed_left_ns: int | None = None   # of that, what no inheritance rule placed
    launch_span_ns: int | None = None  # the step's launch span (phases.parquet): GPU % = busy / this

    @property
    def wall_ns(self) -> int:
        return self.end_ns - self.start_ns

    @property
    def ident(self) -> ProcessId:
        return (self.role, self.rank, self.pid if self.pid is not None else (self.sources or [None])[0])

    @property
    def label(self) -> str:
        who = self.role or "?"
        if self.rank is not None:
            return f"{who} rank {self.rank} [{self.kind}]"
        return f"{who} pid {self.pid} [{self.kind}]" if self.pid is not None else f"{who} [{self.kind}]"

    def segments(self) -> list[Segment]:
        """The step window cut into phases and gaps (they tile [start_ns, end_ns) exactly)."""
        out: list[Segment] = []
        cursor = self.start_ns
        for ph in self.phases:
            s, e = max(ph.start_ns, cursor), min(ph.end_ns, self.end_ns)
            if e <= s:
                continue
            if s > cursor:
                out.append(Segment(None, cursor, s))
            out.append(Segment(ph, s, e))
            cursor = e
        if cursor < self.end_ns:
            out.append(Segment(None, cursor, self.end_ns))
        return out


def _int(v: Any) -> int | None:
    if isnull(v) or (not isinstance(v, (str, bytes)) and bool(pd.isna(v))):
        return None
    try:
        return int(v)
    except (TypeError, ValueError):
        return None


def _str(v: Any) -> str | None:
    return None if v is None or (not isinstance(v, str) and bool(pd.isna(v))) else str(v)


def _chosen_step(df: pd.DataFrame, manifest: Mapping[str, Any]) -> int | None:
    window = manifest.get("window") if isinstance(manifest.get("window"), Mapping) else {}
    step = _int(window.get("step"))
    steps = sorted({s for s in (_int(v) for v in df["step"]) if s is not None}) if "step" in df.columns else []
    if step is not None and (not steps or step in steps):
        return step
    return steps[0] if steps else None


def _step_windows(steps_rows: Any, manifest: Mapping[str, Any], step: int | None) -> dict[tuple[str, Any], tuple[int, int]]:
    """(source, pid) -> (start, end) of the chosen step, from steps.parquet rows or the manifest."""
    out: dict[tuple[str, Any], tuple[int, int]] = {}
    recs: list[Mapping[str, Any]] = []
    sdf = compare.to_frame(steps_rows)
    if not sdf.empty:
        recs = sdf.to_dict("records")
    else:
        window = manifest.get("window") if isinstance(manifest.get("window"), Mapping) else {}
        recs = [r for r in window.get("steps") or [] if isinstance(r, Mapping)]
    for r in recs:
        start, wall, src = _int(r.get("start_ns")), _int(r.get("wall_ns")), _str(r.get("source"))
        if src is None or start is None or wall is None or (step is not None and _int(r.get("step")) != step):
            continue
        out[(src, _int(r.get("pid")))] = (start, start + wall)
    return out


def process_steps(phases_rows: Any, steps_rows: Any = None, manifest: Mapping[str, Any] | None = None) -> list[ProcessStep]:
    """Every process of the bundle in the chosen step, sorted by role, rank, pid.

    The step window of a process is, in this order: its own `step` range; the steps table's (or
    the manifest's) window of its source for the chosen step; the span of its top-level phases."""
    manifest = manifest or {}
    df = compare.to_frame(phases_rows)
    if df.empty or "start_ns" not in df.columns or "phase" not in df.columns:
        return []
    df = df[df["start_ns"].notna() & df["wall_ns"].notna()] if "wall_ns" in df.columns else df.iloc[0:0]
    step = _chosen_step(df, manifest)
    if step is not None and "step" in df.columns:
        df = df[[_int(s) in (step, None) for s in df["step"]]]
    windows = _step_windows(steps_rows, manifest, step)

    by_proc: dict[ProcessId, dict[str, list[Mapping[str, Any]]]] = {}
    for r in df.to_dict("records"):
        if r.get("source_kind") in formats.untimed_kinds():   # allocation times of a snapshot, not a timing source
            continue
        pid = _int(r.get("pid"))
        ident = (_str(r.get("role")), _int(r.get("rank")), pid if pid is not None else _str(r.get("source")))
        by_proc.setdefault(ident, {}).setdefault(_str(r.get("source_kind")) or "?", []).append(r)

    out: list[ProcessStep] = []
    for ident, kinds in by_proc.items():
        kind = min(kinds, key=lambda k: (formats.preference().get(k, 9), k))
        rows = sorted(kinds[kind], key=lambda r: (int(r["start_ns"]), _int(r.get("depth")) or 0))
        sources = list(dict.fromkeys(s for s in (_str(r.get("source")) for r in rows) if s))
        pid = _int(rows[0].get("pid"))
        out.append(_one_process(ident, kind, pid, sources, rows, windows))
    out.sort(key=lambda p: (p.role or "~", p.rank if p.rank is not None else 1 << 30, p.pid or 0, p.kind))
    return out


def _one_process(ident: ProcessId, kind: str, pid: int | None, sources: list[str],
                 rows: Sequence[Mapping[str, Any]], windows: Mapping[tuple[str, Any], tuple[int, int]]) -> ProcessStep:
    def depth(r: Mapping[str, Any]) -> int:
        return _int(r.get("depth")) or 0

    unattributed = [r for r in rows if r.get("phase") == UNATTRIBUTED]
    ranged = [r for r in rows if r.get("phase") != UNATTRIBUTED]
    step_rows = [r for r in ranged if r.get("stage") == "step"]
    d_min = min((depth(x) for x in ranged), default=0)   # once: per row it made 10,240 ranks quadratic
    roots = [r for r in ranged if depth(r) == d_min]
    container = None
    if not step_rows and len(roots) == 1 and any(_str(r.get("parent")) == roots[0]["phase"] for r in ranged):
        container = roots[0]    # one range around everything (torch's `train`): its children are the phases
    step_row = min(step_rows, key=depth) if step_rows else None
    if step_row is not None or container is not None:
        outer = step_row if step_row is not None else container
        top = [r for r in ranged if depth(r) == depth(outer) + 1 and _str(r.get("parent")) == outer["phase"]]
    else:
        d0 = min((depth(r) for r in ranged), default=0)
        top = [r for r in ranged if depth(r) == d0]
    phases = [Phase(str(r["phase"]), _str(r.get("stage")) or "other", int(r["start_ns"]),
                    int(r["start_ns"]) + int(r["wall_ns"]), _int(r.get("gpu_busy_ns")),
                    _int(r.get("gpu_busy_inherited_ns"))) for r in top]
    phases.sort(key=lambda p: (p.start_ns, -p.end_ns))

    if step_row is not None:
        start, end, how = int(step_row["start_ns"]), int(step_row["start_ns"]) + int(step_row["wall_ns"]), "step range"
    elif (wins := [windows[(s, pid)] for s in sources if (s, pid) in windows]
          or [w for (s, _p), w in windows.items() if s in sources]):
        start, end, how = min(w[0] for w in wins), max(w[1] for w in wins), "steps table"
    elif phases:
        start, end, how = min(p.start_ns for p in phases), max(p.end_ns for p in phases), "phase span"
    else:
        first = min(int(r["start_ns"]) for r in rows)
        start, end, how = first, max(int(r["start_ns"]) + int(r["wall_ns"]) for r in rows), "phase span"

    un_gpu = sum(_int(r.get("gpu_busy_ns")) or 0 for r in unattributed)
    left = [_int(r.get("gpu_busy_inherited_ns")) for r in unattributed]
    un_left = sum(v for v in left if v is not None) if any(v is not None for v in left) else None
    if step_row is not None or container is not None:
        outer = step_row if step_row is not None else container
        gpu, span = _int(outer.get("gpu_busy_ns")), _int(outer.get("launch_span_ns"))
    else:
        parts = [p.gpu_busy_ns for p in phases if p.gpu_busy_ns is not None]
        gpu = (sum(parts) + un_gpu) if parts or unattributed else None
        spans = [_int(r.get("launch_span_ns")) for r in [*top, *unattributed]]   # as the GPU figure: summed
        span = None if any(v is None for v in spans) else sum(v for v in spans if v is not None)
    role, rank, _ = ident
    return ProcessStep(role, rank, pid, kind, sources, start, end, how, phases, gpu, un_gpu, un_left, span)
