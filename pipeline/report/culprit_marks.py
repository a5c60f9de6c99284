"""The culprit and its victims on the report's timeline (issue 42).

Why a module of its own: ranks.parquet says in words who lost the time and who waited; the
timeline must show the same thing where the eye already is. The merged all-ranks trace carries
the same marks (pipeline/merged_trace.py); here they become `Mark`s on the lanes: the culprit's
lane label in red and its lost phase outlined, and on each victim's lane the stretch it waited
(the end of the phase where it paid, as long as its wait beyond the culprit's own wait there:
`victim_wait_ns` of the `rank` row, ranks.parquet). Times come from phases.parquet (the chosen
step), so a mark sits exactly on the range it names.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pandas as pd

from ..compare import to_frame
from ..culprits import fmt_ms, leaf
from ...stages.core import formats


@dataclass(frozen=True)
class Mark:
    """One mark on one lane: `culprit` (an outlined range) or `victim` (a shaded stretch)."""

    kind: str
    start_ns: int
    end_ns: int
    title: str


def _int(v: Any) -> int | None:
    try:
        return None if v is None or pd.isna(v) else int(v)
    except (TypeError, ValueError):
        return None


def culprit_marks(phases_rows: Any, chosen: pd.DataFrame) -> dict[tuple[Any, int], list[Mark]]:
    """(role, rank) -> its marks, from the chosen step's named culprits (none on an even run)."""
    out: dict[tuple[Any, int], list[Mark]] = {}
    if chosen.empty or "row_kind" not in chosen.columns:
        return out
    cul = chosen[(chosen["row_kind"] == "culprit") & chosen["rank"].notna()]
    if cul.empty:
        return out
    ph = to_frame(phases_rows)
    if ph.empty or "path" not in ph.columns:
        return out
    if "source_kind" in ph.columns:
        ph = ph[~ph["source_kind"].isin(formats.untimed_kinds())]
    role_of = ph["role"].where(ph["role"].notna(), None) if "role" in ph.columns else pd.Series(None, index=ph.index)
    rank_rows = chosen[chosen["row_kind"] == "rank"]
    for c in cul.to_dict("records"):
        role = c["role"] if isinstance(c["role"], str) else None
        who = int(c["rank"])
        mine = ph[(role_of == role) & (pd.to_numeric(ph["rank"], errors="coerce") == who) & (ph["path"] == c["path"])]
        if len(mine):
            start = int(mine["start_ns"].min())
            end = int((mine["start_ns"] + mine["wall_ns"]).max())
            out.setdefault((role, who), []).append(Mark("culprit", start, end,
                f"culprit: rank {who} lost {fmt_ms(c['excess_ns'])} in {leaf(c['path'])}"))
        victims = [int(v) for v in str(c.get("victim_ranks") or "").split(",") if v.strip().lstrip("-").isdigit()]
        vpath = c.get("victim_path")
        if not victims or not isinstance(vpath, str):
            continue
        base = rank_rows[(rank_rows["role"].where(rank_rows["role"].notna(), None) == role)
                         & (rank_rows["path"] == vpath)]
        wait_of = dict(zip(pd.to_numeric(base["rank"], errors="coerce"), base["wait_ns"]))
        own = _int(wait_of.get(who)) or 0
        for v in victims:
            rows = ph[(role_of == role) & (pd.to_numeric(ph["rank"], errors="coerce") == v) & (ph["path"] == vpath)]
            if rows.empty:
                continue
            end = int((rows["start_ns"] + rows["wall_ns"]).max())
            waited = max(0, (_int(wait_of.get(v)) or 0) - own)
            start = max(int(rows["start_ns"].min()), end - waited)
            out.setdefault((role, v), []).append(Mark("victim", start, end,
                f"waited {fmt_ms(waited)} for rank {who} in {leaf(vpath)}"))
    return out
