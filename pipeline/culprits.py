"""The culprit of each profiled step and its recurrence: the `culprit` and `recurrence` rows of
ranks.parquet (pipeline/ranks.py computes the per-rank `wait_ns` / `excess_ns` they read).

Why a module of its own: the rule that decides whether a rank is *named* is the one sentence a
reader acts on, so it lives in one place with its floors and its limits (docs/summaries.md):

1. Per step, a **candidate**: the rank with the largest excess (own time over the others' median)
   above the phase's floor (`NoiseFloor.of`: 5% of the phase and 1 ms) *and* the step's
   (`NoiseFloor.of_step`: 5% of the step). The per-phase floor alone made any jitter in a short
   phase a culprit (1.3 ms of a 96 ms step on the sample).
2. **Recurrence decides**: with two or more profiled steps, a candidate is named culprit only where
   the same rank is a candidate in at least max(2, half) of the role's profiled steps (in any
   phase: a bad node is slow wherever it runs). A rank that is a candidate once is scheduler noise
   on a loaded machine as often as not (10.9 ms of a 46.3 ms step on an even 4-rank run), and the
   statement says so: `no culprit: rank 3 lost 10.9 ms in actor_update once in 3 steps: within
   noise`. With one profiled step nothing can be told from noise; the candidate is named and the
   recurrence statement says that one step was profiled.
3. The recurrence statement names every phase the culprit lost time in, with its steps:
   `rank 1 culprit in 2 of 3 profiled steps: actor_compute_log_prob in step 2, actor_update in
   step 3`, never one phase for several.
"""
from __future__ import annotations

import math
import re
from typing import Any, Iterable

import numpy as np
import pandas as pd

from .rank_inputs import DEFAULT_FLOOR, NoiseFloor

#: Victim lists longer than this are counted in the statement (the column keeps them all).
MAX_NAMED = 8


def fmt_ms(ns: float) -> str:
    """`150 ms`, `4.2 ms`, `0.35 ms`: whole milliseconds from 10 ms up (the statements' unit)."""
    ms = float(ns) / 1e6
    return f"{ms:,.0f} ms" if abs(ms) >= 10 else (f"{ms:.1f} ms" if abs(ms) >= 1 else f"{ms:.2f} ms")


def collective_label(name: Any, wait_by: str) -> str:
    """What the others waited in, in the user's words: `all-reduce`, `all-gather`, `barrier` ..."""
    if wait_by == "nccl":
        return "NCCL collective kernels"
    if wait_by == "implied":
        return "at its end; no collective recorded"
    n = str(name or "").lower().replace("gloo:", "").replace("nccl:", "").replace("c10d::", "")
    for pat, label in ((r"all_?reduce|allreduce", "all-reduce"), (r"all_?gather|allgather", "all-gather"),
                       (r"reduce_?scatter", "reduce-scatter"), (r"all_?to_?all", "all-to-all"),
                       (r"barrier", "barrier"), (r"broadcast", "broadcast"), (r"send|recv", "send/recv")):
        if re.search(pat, n):
            return label
    return str(name) if name else "a collective"


def leaf(path: Any) -> str:
    return str(path).rsplit(" > ", 1)[-1]


def _rank_list(ranks: Iterable[int]) -> str:
    rs = sorted(int(r) for r in ranks)
    if len(rs) <= MAX_NAMED:
        return ("rank " if len(rs) == 1 else "ranks ") + ", ".join(str(r) for r in rs)
    return f"{len(rs):,} ranks ({', '.join(str(r) for r in rs[:3])} ... {rs[-1]})"


def _steps_text(steps: list[int]) -> str:
    return ("step " if len(steps) == 1 else "steps ") + ", ".join(str(s) for s in sorted(steps))


def recurring_needs(profiled: int) -> int:
    """Steps a rank must be the candidate in to be named: max(2, half the profiled steps) (1 when
    only one step was profiled: nothing to compare it with)."""
    return 1 if profiled <= 1 else max(2, math.ceil(profiled / 2))


def step_wall(g: pd.DataFrame) -> float:
    """A role's step in ns: the median over its ranks of their `step` range, else of the extent of
    their ranges (first start to last end: a worker without a step range of its own)."""
    ranked = g[g["_key"] >= 0]
    steps = ranked[ranked["stage"] == "step"]
    if len(steps):
        return float(steps.groupby("_key")["wall_ns"].max().median())
    ends = ranked["_start"] + ranked["wall_ns"]
    per = ends.groupby(ranked["_key"]).max() - ranked["_start"].groupby(ranked["_key"]).min()
    return float(per.median()) if len(per) else 0.0


def _candidate(g: pd.DataFrame, floor: NoiseFloor) -> tuple[pd.Series, float] | None:
    """(the row where the step's candidate lost its time, the step floor) or None (rule 1)."""
    step_floor = floor.of_step(step_wall(g))
    cand = g[(g["stage"] != "step") & (g["excess_ns"] > g["_floor"]) & (g["excess_ns"] > step_floor)]
    if cand.empty:
        return None
    top = cand.loc[cand["excess_ns"].idxmax()]
    who = int(top["_key"])
    mine = cand[(cand["_key"] == who) & (cand["excess_ns"] >= 0.9 * top["excess_ns"])]
    depth = mine["path"].str.count(" > ")
    return mine.loc[depth[depth == depth.max()].index].sort_values("_start").iloc[0], step_floor


def culprit_rows(per_rank: pd.DataFrame, floor: NoiseFloor = DEFAULT_FLOOR) -> pd.DataFrame:
    """One `culprit` row per role and step (after `ranks.across_rows` filled `excess_ns` /
    `wait_ns`): the module docstring's rule. Its phase: the most specific path holding >= 90% of
    the candidate's excess. Where the others paid: the earliest phase from the culprit's on (not
    one of its ancestors) where some ranks waited more than the culprit by more than the floor, the
    most specific such path; the victims are those ranks, their wait the median of (their wait -
    the culprit's). A candidate that does not recur keeps its figures with `rank` null and
    `straggler_rank` set (what the views show as noise)."""
    rows: list[dict[str, Any]] = []
    if per_rank.empty or "excess_ns" not in per_rank.columns:
        return pd.DataFrame(rows)
    df = per_rank[per_rank["_key"] >= 0]
    found: dict[tuple[str, Any], tuple[pd.Series, float] | None] = {}
    groups = {}
    for (role, step), g in df.groupby([df["role"].fillna(""), "step"], sort=False):
        groups[(role, step)] = g
        found[(role, step)] = _candidate(g, floor) if g["_key"].nunique() >= 2 else None
    profiled = df.groupby(df["role"].fillna(""))["step"].nunique().to_dict()
    times: dict[tuple[str, int], int] = {}
    for (role, _), c in found.items():
        if c is not None:
            times[(role, int(c[0]["_key"]))] = times.get((role, int(c[0]["_key"])), 0) + 1
    for (role, step), g in groups.items():
        n = int(g["_key"].nunique())
        if n < 2:
            continue
        base = {"row_kind": "culprit", "role": role or None, "step": step, "ranks": n}
        c = found[(role, step)]
        if c is None:
            rows.append({**base, "statement": f"no straggler: every rank within the noise floor ({floor.text()})"})
            continue
        lost, step_floor = c
        who = int(lost["_key"])
        k, steps = times[(role, who)], int(profiled.get(role, 1))
        out = {**base, "path": lost["path"], "stage": lost["stage"], "wall_ns": int(lost["wall_ns"]),
               "excess_ns": int(lost["excess_ns"]), "floor_ns": int(max(lost["_floor"], step_floor))}
        if k < recurring_needs(steps):
            how = f"once in {steps} steps" if k == 1 else f"in {k} of {steps} steps"
            rows.append({**out, "straggler_rank": who, "culprit_steps": k, "profiled_steps": steps,
                         "statement": f"no culprit: rank {who} lost {fmt_ms(lost['excess_ns'])} in "
                                      f"{leaf(lost['path'])} {how}: within noise, or a one-off"})
            continue
        out.update(rank=who, culprit_steps=k, profiled_steps=steps)
        statement = f"rank {who} lost {fmt_ms(lost['excess_ns'])} in {leaf(lost['path'])}"
        paid = _where_paid(g, who, lost)
        if paid is None:
            statement += "; no rank was seen waiting for it"
        else:
            q, victims, wait, label = paid
            out.update(victim_path=q, victim_ranks=",".join(str(v) for v in victims), victims=len(victims),
                       victim_wait_ns=int(wait), collective=label)
            statement += f"; {_rank_list(victims)} waited {fmt_ms(wait)} for it in {leaf(q)} ({label})"
        rows.append({**out, "statement": statement})
    return pd.DataFrame(rows)


def _where_paid(g: pd.DataFrame, who: int, lost: pd.Series) -> tuple[str, list[int], float, str] | None:
    """(path, victim ranks, their median wait beyond the culprit's, the collective) or None."""
    lost_path = str(lost["path"])
    ancestors = {" > ".join(lost_path.split(" > ")[:i]) for i in range(1, lost_path.count(" > ") + 1)}
    t0 = int(g.loc[(g["_key"] == who) & (g["path"] == lost_path), "_start"].min())
    found: list[tuple[int, int, str, list[int], float, str]] = []
    for path, q in g[(g["stage"] != "step") & ~g["path"].isin(ancestors)].groupby("path", sort=False):
        mine = q[q["_key"] == who]
        if mine.empty or int(mine["_start"].iloc[0]) + int(mine["wall_ns"].iloc[0]) < t0:
            continue   # over before the culprit's phase began
        base = float(mine["wait_ns"].iloc[0])
        others = q[q["_key"] != who]
        extra = others["wait_ns"].to_numpy(np.float64) - base
        hit = extra > others["_floor"].to_numpy()
        if not hit.any():
            continue
        victims = others["_key"].to_numpy()[hit].astype(int).tolist()
        found.append((int(np.median(q["_start"])), path.count(" > "), path, victims, float(np.median(extra[hit])),
                      collective_label(_coll_name(q), str(q["_wait_by"].iloc[0]))))
    if not found:
        return None
    # a path whose wait a more specific candidate explains gives way to it (update_actor > actor_update)
    keep = [f for f in found if not any(o[2].startswith(f[2] + " > ") and o[4] >= 0.9 * f[4] for o in found)]
    first = min(keep, key=lambda f: (f[0], -f[1]))
    return first[2], first[3], first[4], first[5]


def _coll_name(q: pd.DataFrame) -> Any:
    names = q["_coll"].dropna()
    return names.mode().iloc[0] if len(names) else None


def recurrence_rows(culprits: pd.DataFrame, profiled: dict[str, int] | None = None) -> pd.DataFrame:
    """One `recurrence` row per role: every named culprit with each phase it lost time in and the
    steps (`rank 1 culprit in 2 of 3 profiled steps: actor_compute_log_prob in step 2, actor_update
    in step 3`), the most frequent first; or nobody, with the candidates that did not recur."""
    rows: list[dict[str, Any]] = []
    if culprits.empty:
        return pd.DataFrame(rows)
    for role, g in culprits.groupby(culprits["role"].fillna(""), sort=False):
        steps = int(g["step"].nunique())
        if profiled and role in profiled:
            steps = max(steps, profiled[role])
        s = "s" if steps != 1 else ""
        named = g[g["rank"].notna()] if "rank" in g.columns else g.iloc[:0]
        base = {"row_kind": "recurrence", "role": role or None, "profiled_steps": steps,
                "ranks": int(g["ranks"].max())}
        if named.empty:
            text = f"no culprit in any of {steps} profiled step{s}"
            noise = g[g["straggler_rank"].notna()] if "straggler_rank" in g.columns else g.iloc[:0]
            if len(noise):
                text += "; " + ", ".join(f"rank {int(r['straggler_rank'])} lost {fmt_ms(r['excess_ns'])} in "
                                         f"step {int(r['step'])}" for r in noise.sort_values("step").to_dict("records")[:3])
                text += ": within noise, or a one-off"
            rows.append({**base, "culprit_steps": 0, "statement": text})
            continue
        counts = named.groupby("rank")["step"].nunique().sort_values(ascending=False, kind="stable")
        parts = []
        for who, k in counts.items():
            mine = named[named["rank"] == who].sort_values("step")
            by_phase: dict[str, list[int]] = {}
            for path, step in zip(mine["path"], mine["step"]):
                by_phase.setdefault(leaf(path), []).append(int(step))
            where = ", ".join(f"{ph} in {_steps_text(st)}" for ph, st in by_phase.items())
            parts.append(f"rank {int(who)} culprit in {int(k)} of {steps} profiled step{s}: {where}")
        text = "; ".join(parts[:3])
        if steps == 1:
            text += " (one step profiled: recurrence unknown)"
        top = named[named["rank"] == counts.index[0]]
        rows.append({**base, "rank": int(counts.index[0]), "path": top["path"].map(leaf).mode().iloc[0],
                     "culprit_steps": int(counts.iloc[0]), "statement": text})
    return pd.DataFrame(rows)
