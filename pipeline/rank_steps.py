"""What ranks.parquet needs of each profiled step's phase rows, cut where the rows are made.

Why a module of its own, without pandas: collect's pass-2 workers cut the other profiled steps'
rows down to what pipeline/ranks.py reads (`step_phase_rows`), and collect's driver must not pay
pandas' import (a few tenths of a second of every collect's serial start-up, issue 30); ranks.py
re-exports these names.
"""
from __future__ import annotations

from typing import Any, Iterable

#: Phases deeper than this are kept in ranks.parquet only with a known stage (or enclosing one).
MAX_DEPTH = 2
#: The catch-all phase of a process's time outside every range (phases.parquet).
UNATTRIBUTED = "(unattributed)"

STEP_COLUMNS = ("source", "source_kind", "role", "rank", "pid", "step", "phase", "stage", "parent", "depth",
                "start_ns", "wall_ns", "comm_ns", "gpu_busy_ns", "gpu_busy_inherited_ns", "kernel_ns", "path",
                "launch_span_ns")


def step_phase_rows(phases: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    """What ranks.parquet needs of another profiled step's phase rows (collect's per-step pass):
    depth <= 2, a known stage or a collective, and the columns read here; the rest is dropped in
    the worker so the other steps of a 10,000-op capture cost little memory."""
    rows = [r for r in phases if r.get("phase") != UNATTRIBUTED and r.get("source_kind") != "memory"]
    kept = {r.get("path") for r in rows if (r.get("depth") or 0) <= MAX_DEPTH
            or (isinstance(r.get("stage"), str) and r.get("stage") != "other")}
    kept |= {" > ".join(q.split(" > ")[:i]) for q in kept if isinstance(q, str) for i in range(1, q.count(" > ") + 1)}
    return [{k: r.get(k) for k in STEP_COLUMNS} for r in rows if r.get("path") in kept]
