"""The answer at a glance: the few facts of the chosen step a performance engineer asks first,
for the top of the terminal view and of the run report (issue 42).

Why a module of its own: the terminal and the page must say the same thing in the same words,
and both must say it first; each fact is computed here once, from the rows the rest of the views
already read (phases.parquet of the chosen step, ranks.parquet), and carries the anchor of the
report section that shows it, so the page can link each line to where it is drawn.

Facts, in order (each only where the rows allow it):
- `step`: the chosen step's wall and the stage that bounds it (the critical path);
- `culprit`: who lost the time and who paid (the chosen step's `culprit` statement), or why
  nobody is named;
- `recurs`: the recurrence statement over the profiled steps;
- `GPU`: the largest GPU idle inside one top-level phase of one process (its wall minus the GPU
  busy time it launched), and the phase with the most NCCL kernel time; or that no GPU work was
  recorded (a CPU-only capture).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pandas as pd

from .compare import UNATTRIBUTED, to_frame
from .culprits import fmt_ms, leaf
from ..stages.core import formats


@dataclass(frozen=True)
class Fact:
    """One line of the headline: a short label, the sentence, the report anchor that shows it."""

    label: str
    text: str
    anchor: str


def _chosen(ranks_df: pd.DataFrame) -> pd.DataFrame:
    if ranks_df.empty or "chosen" not in ranks_df.columns or ranks_df["chosen"].isna().all():
        return ranks_df
    return ranks_df[(ranks_df["chosen"] == True) | ranks_df["chosen"].isna()]   # noqa: E712


def _kind(df: pd.DataFrame, kind: str) -> pd.DataFrame:
    if df.empty or "row_kind" not in df.columns:
        return df.iloc[:0]
    return df[df["row_kind"] == kind]


def _who(role: Any, rank: Any, pid: Any) -> str:
    r = f"{role} " if isinstance(role, str) and role else ""
    if rank is not None and not pd.isna(rank):
        return f"{r}rank {int(rank)}"
    return f"{r}pid {int(pid)}" if pid is not None and not pd.isna(pid) else (r.strip() or "?")


def step_fact(phases: pd.DataFrame, chosen: pd.DataFrame) -> Fact | None:
    crit = _kind(chosen, "critical_path")
    if len(crit):
        c = crit.iloc[0]
        return Fact("step", f"step {int(c['step'])}: {fmt_ms(c['wall_ns'])}, bound by {c['bound_stage']} "
                            f"({fmt_ms(c['bound_ns'])})", "critical-path")
    if phases.empty or "stage" not in phases.columns:
        return None
    steps = phases[phases["stage"] == "step"]
    if steps.empty:
        return None
    top = steps.loc[pd.to_numeric(steps["wall_ns"], errors="coerce").idxmax()]
    step = "" if pd.isna(top.get("step")) else f" {int(top['step'])}"
    return Fact("step", f"step{step}: {fmt_ms(top['wall_ns'])} ({_who(top.get('role'), top.get('rank'), top.get('pid'))})",
                "timeline")


def headline_roles(ranks_rows: Any) -> list[str]:
    """The roles whose culprit and recurrence the headline states (the first two with a `culprit`
    row of the chosen step; `?` for a role-less one): the terminal does not repeat them."""
    cul = _kind(_chosen(to_frame(ranks_rows)), "culprit")
    return list(dict.fromkeys(cul["role"].fillna("?")))[:2] if len(cul) else []


def culprit_facts(chosen: pd.DataFrame, full: pd.DataFrame) -> list[Fact]:
    """The culprit of the chosen step and its recurrence, one line each, per role that has ranks
    to compare (the first two roles: a headline is not a table)."""
    out: list[Fact] = []
    cul = _kind(chosen, "culprit")
    rec = _kind(full, "recurrence")
    for role in headline_roles(full):
        mine = cul[cul["role"].fillna("?") == role]
        text = str(mine["statement"].iloc[0])
        prefix = f"{role}: " if cul["role"].nunique() > 1 else ""
        out.append(Fact("culprit", prefix + text, "ranks"))
        r = rec[rec["role"].fillna("?") == role]
        if len(r):
            out.append(Fact("recurs", prefix + str(r["statement"].iloc[0]), "ranks"))
    return out


def gpu_fact(phases: pd.DataFrame) -> Fact:
    """The largest GPU idle inside one top-level phase and the largest NCCL time, or none."""
    if phases.empty or "gpu_busy_inherited_ns" not in phases.columns:
        return Fact("GPU", "no GPU work recorded in this step (a CPU-only capture)", "timeline")
    df = phases
    if "source_kind" in df.columns:
        df = df[~df["source_kind"].isin(formats.untimed_kinds())]
    gpu = pd.to_numeric(df["gpu_busy_inherited_ns"], errors="coerce").fillna(0)
    comm = pd.to_numeric(df.get("comm_ns", pd.Series(0, index=df.index)), errors="coerce").fillna(0)
    if not (gpu > 0).any() and not (comm > 0).any():
        return Fact("GPU", "no GPU work recorded in this step (a CPU-only capture)", "timeline")
    depth = pd.to_numeric(df.get("depth", pd.Series(0, index=df.index)), errors="coerce").fillna(0)
    top = df[(df["phase"] != UNATTRIBUTED) & ~df["stage"].isin(["step"]) & (depth <= 1)].copy()
    top["_gpu"] = pd.to_numeric(top["gpu_busy_inherited_ns"], errors="coerce")
    top["_idle"] = pd.to_numeric(top["wall_ns"], errors="coerce") - top["_gpu"].fillna(0)
    top = top[top["_gpu"].notna() & (top["_gpu"] > 0)]
    parts = []
    if len(top):
        i = top.loc[top["_idle"].idxmax()]
        share = 100 * float(i["_idle"]) / float(i["wall_ns"]) if i["wall_ns"] else 0.0
        parts.append(f"largest GPU idle {fmt_ms(i['_idle'])} of {fmt_ms(i['wall_ns'])} ({share:.0f}%) in "
                     f"{leaf(i.get('path') or i['phase'])} on {_who(i.get('role'), i.get('rank'), i.get('pid'))}")
    if (comm > 0).any():
        c = df.loc[comm.idxmax()]
        parts.append(f"most NCCL {fmt_ms(comm.max())} in {leaf(c.get('path') or c['phase'])} on "
                     f"{_who(c.get('role'), c.get('rank'), c.get('pid'))}")
    return Fact("GPU", "; ".join(parts), "timeline")


def headline(phases: Any, ranks_rows: Any) -> list[Fact]:
    """The facts of the chosen step, in the order the views print them."""
    ph = to_frame(phases)
    full = to_frame(ranks_rows)
    chosen = _chosen(full)
    out = [f for f in [step_fact(ph, chosen)] if f is not None]
    out += culprit_facts(chosen, full)
    out.append(gpu_fact(ph))
    return out
