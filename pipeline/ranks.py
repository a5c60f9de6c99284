"""The run across ranks: `summaries/ranks.parquet` (schema `ranks` in stages/schema.py).

Why a module of its own: collect's terminal view, the HTML report and `summarize` must name the
same culprit and the same spread, so it is computed once, from phase rows alone (pure pandas and
numpy, no I/O), in one pass over the rows: it stays fast at 10,000 ranks.

Rows (`row_kind`):
- `rank`: per role, step, phase path and rank: wall, GPU busy (inherited and same-thread), time in
  collectives, the arrival offset against the earliest rank, peak memory, and the two figures the
  culprit rule reads: `wait_ns` (time waiting for the others: collective ranges or kernels nested
  in the phase) and `excess_ns` (its own time, wall minus wait, over the other ranks' median).
- `ranks` (rank null): per role, step and path, across the ranks: min / median / p90 / max wall,
  the slowest rank, `skew_ns`, and `straggler_rank`: the rank whose own time in the phase exceeds
  the others' median the most (`straggler_by = excess`), when that excess is above the noise floor
  (default 5% of the phase's median wall and 1 ms, `NoiseFloor`); else none (`straggler_by` says
  why). Neither a late arrival nor being waited for names a straggler in a phase: both are the
  cost of time lost earlier, which the excess names where it was lost (the old rules, shortest
  collective kernels / least collective wait / latest arrival, named the rank where the others
  paid, or arrival noise over a slow rank).
- `culprit`: per role and step, one statement: the rank that lost the time, the phase where it lost
  it (`excess_ns`) and where the others paid (`victim_path`, `victim_ranks`, `victim_wait_ns`, the
  collective): `rank 2 lost 150 ms in generate_sequences; ranks 0, 1, 3 waited 148 ms for it in
  actor_update (all-reduce)`; below the floor (of the phase and of the step), or seen in too few
  of the profiled steps, nobody is named (pipeline/culprits.py holds that rule).
- `recurrence`: per role, over every profiled step, each phase with its steps: `rank 1 culprit in
  2 of 3 profiled steps: actor_compute_log_prob in step 2, actor_update in step 3`.
- `dispatch`: controller against workers (`dispatch_rows`).
- `critical_path`: per step, which stage bounds the RL step and, per role, busy and idle time
  (`critical_path_rows`).
Rows of every profiled step are written; `chosen` flags the step summarized in phases.parquet.
Only phases at depth <= 2, phases with a known stage and the ranges enclosing them are kept (an
emit_nvtx capture has thousands of op ranges; they are in phases.parquet). docs/summaries.md states the rules and limits.
"""
from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa

from ..stages.core import formats
from ..stages.schema import arrow_schema
from .compare import UNATTRIBUTED, ancestor_paths, process_stage_totals, to_frame
from .culprits import (  # noqa: F401 - re-exported: the views and tests read them here
    MAX_NAMED,
    collective_label,
    culprit_rows,
    fmt_ms,
    recurrence_rows,
)
from .rank_inputs import (  # noqa: F401 - re-exported: collect and the CLI read rank_inputs (no pandas)
    DEFAULT_FLOOR,
    MAX_DEPTH,
    STEP_COLUMNS,
    NoiseFloor,
    parse_noise_floor,
    step_phase_rows,
)

_NUM = ("wall_ns", "gpu_busy_inherited_ns", "gpu_busy_ns", "comm_ns", "start_ns", "mem_peak_bytes", "depth",
        "launch_span_ns")


# ------------------------------------------------------------------------------------------------
# rank rows
# ------------------------------------------------------------------------------------------------


def _collective_wall(df: pd.DataFrame) -> tuple[pd.Series, pd.Series]:
    """Per row: wall time of the outermost `collective` ranges nested under it (same process), and
    the name of the longest of them (`all_reduce` ...)."""
    out = pd.Series(0, index=df.index, dtype="int64")
    names = pd.Series(None, index=df.index, dtype=object)
    coll = df[(df["stage"] == "collective") & df["path"].notna()]
    if coll.empty:
        return out, names
    index = {(k, s, p): i for k, s, p, i in zip(df["_proc"], df["step"], df["path"], df.index)}
    is_coll = set(zip(coll["_proc"], coll["step"], coll["path"]))
    best: dict[Any, int] = {}
    for proc, step, path, wall in zip(coll["_proc"], coll["step"], coll["path"], coll["wall_ns"]):
        parts = path.split(" > ")
        prefixes = [" > ".join(parts[:i]) for i in range(1, len(parts))]
        if any((proc, step, p) in is_coll for p in prefixes):
            continue   # nested in another collective range: counted there
        w = 0 if pd.isna(wall) else int(wall)
        for p in prefixes:
            i = index.get((proc, step, p))
            if i is not None:
                out[i] += w
                if w >= best.get(i, -1):
                    best[i] = w
                    names[i] = parts[-1]
    return out, names


def rank_rows(phases: Any) -> pd.DataFrame:
    """The `rank` rows: one per role, step, path and rank (first source kind of the role: nsys)."""
    df = to_frame(phases)
    if df.empty or "rank" not in df.columns:
        return pd.DataFrame(columns=arrow_schema("ranks").names)
    kind = df["source_kind"] if "source_kind" in df.columns else pd.Series(None, index=df.index)
    df = df[(df["phase"] != UNATTRIBUTED) & ~kind.isin(formats.untimed_kinds())].copy()
    # a process without a rank (verl's single controller) keeps its own row: key -pid, null on output
    pid = pd.to_numeric(df["pid"], errors="coerce").fillna(0) if "pid" in df.columns else 0
    df["rank"] = pd.to_numeric(df["rank"], errors="coerce").where(df["rank"].notna(), -pid - 1)
    if df.empty:
        return pd.DataFrame(columns=arrow_schema("ranks").names)
    if "path" not in df.columns:
        df["path"] = None
    if df["path"].isna().any():   # older rows: the path rebuilt from `parent` names
        parent_of = dict(zip(df["phase"], df.get("parent", pd.Series(None, index=df.index))))
        df["path"] = [p if isinstance(p, str) and p else
                      " > ".join([*ancestor_paths(None, ph, par, parent_of), ph])
                      for p, ph, par in zip(df["path"], df["phase"], df.get("parent", [None] * len(df)))]
    for c in _NUM:
        df[c] = pd.to_numeric(df[c], errors="coerce") if c in df.columns else np.nan
    if "source_kind" in df.columns and df["source_kind"].notna().any():
        pref = formats.preference()
        order = df["source_kind"].map(lambda k: pref.get(k, len(pref)))
        df = df[order == order.groupby(df["role"].fillna("")).transform("min")]
    df["_proc"] = list(zip(df["role"].fillna(""), df["rank"], df.get("pid", pd.Series(0, index=df.index)).fillna(0)))
    df["collective_ns"], df["_coll"] = _collective_wall(df)
    keep = ((df["depth"].fillna(0) <= MAX_DEPTH) | ~df["stage"].isin(["other", None])) & (df["stage"] != "collective")
    # and their enclosing ranges, so that a kept row is never shown without its parent (the tree)
    kept = set(df.loc[keep, "path"].dropna())
    kept |= {" > ".join(q.split(" > ")[:i]) for q in kept for i in range(1, q.count(" > ") + 1)}
    df = df[(keep | df["path"].isin(kept)) & (df["stage"] != "collective")]
    df["role"] = df["role"].fillna("")
    if df.duplicated(["role", "step", "path", "rank"]).any():   # two processes or sources of one rank
        agg = {c: "sum" for c in ("wall_ns", "gpu_busy_inherited_ns", "gpu_busy_ns", "comm_ns", "collective_ns")}
        agg["launch_span_ns"] = lambda v: v.sum(min_count=len(v))   # summed as the GPU figures; unknown if any is
        agg.update(start_ns="min", mem_peak_bytes="max", stage="first", depth="min", _coll="first")
        df = df.groupby(["role", "step", "path", "rank"], sort=False, dropna=False).agg(agg).reset_index()
    g = df.groupby(["role", "step", "path"], sort=False)["start_ns"]
    df["arrival_ns"] = (df["start_ns"] - g.transform("min")).fillna(0).astype("int64")
    out = pd.DataFrame({
        "row_kind": "rank", "role": df["role"].replace("", None), "step": df["step"], "path": df["path"],
        "stage": df["stage"], "rank": df["rank"].astype("int64").where(df["rank"] >= 0, None),
        "_key": df["rank"].astype("int64"), "wall_ns": df["wall_ns"].fillna(0).astype("int64"),
        "gpu_busy_inherited_ns": df["gpu_busy_inherited_ns"], "gpu_busy_ns": df["gpu_busy_ns"],
        "launch_span_ns": df["launch_span_ns"],
        "comm_ns": df["comm_ns"].fillna(0).astype("int64"), "collective_ns": df["collective_ns"],
        "arrival_ns": df["arrival_ns"], "mem_peak_bytes": df["mem_peak_bytes"],
        "_start": df["start_ns"].fillna(0).astype("int64"), "_coll": df["_coll"],
    })
    return out.reset_index(drop=True)


# ------------------------------------------------------------------------------------------------
# per phase, across ranks
# ------------------------------------------------------------------------------------------------


def others_median(x: np.ndarray) -> np.ndarray:
    """For each element, the median of all the OTHER elements (NaN for a single element): O(n log n),
    one sort, where a loop would be O(n^2) at 10,000 ranks."""
    n = len(x)
    if n < 2:
        return np.full(n, np.nan)
    order = np.argsort(x, kind="stable")
    s = x[order].astype(np.float64)
    pos = np.empty(n, np.int64)
    pos[order] = np.arange(n)
    m = n - 1

    def kth(k: int) -> np.ndarray:   # k-th smallest of the others, per element
        return np.where(k < pos, s[k], s[min(k + 1, n - 1)])
    return kth((m - 1) // 2) if m % 2 else (kth(m // 2 - 1) + kth(m // 2)) / 2


def _waits(wall: np.ndarray, start: np.ndarray, coll: np.ndarray, comm: np.ndarray, floor: float) -> tuple[np.ndarray, str]:
    """Per rank, its time waiting for the others in the phase, and how it is known: collective
    kernels (`nccl`), collective ranges (`collectives`), or `implied`: no collective is recorded,
    but the ranks leave the phase together (ends within the floor) after arriving apart, so the
    early ones waited (max start - own start) at its end; else no wait (`none`)."""
    if (comm > 0).any():
        return comm.astype(np.float64), "nccl"
    if (coll > 0).any():
        return coll.astype(np.float64), "collectives"
    ends = start + wall
    if len(wall) > 1 and ends.max() - ends.min() <= floor and start.max() - start.min() > floor:
        return np.minimum((start.max() - start).astype(np.float64), wall), "implied"
    return np.zeros(len(wall)), "none"


def across_rows(per_rank: pd.DataFrame, floor: NoiseFloor = DEFAULT_FLOOR) -> pd.DataFrame:
    """The `ranks` rows: per role, step and path, the spread across ranks and the straggler; fills
    `wait_ns`, `excess_ns` and the private `_floor` / `_wait_by` of `per_rank` in place.

    Why columns: an emit_nvtx capture has hundreds of paths per rank, and a pandas group object per
    path cost more than the rest of a small collect's summary; the groups are
    cut once from numpy arrays instead (the same rows, in the order the groups first appear)."""
    rows: list[dict[str, Any]] = []
    if per_rank.empty:
        return pd.DataFrame(rows)
    key = per_rank["role"].fillna("")
    gid = per_rank.groupby([key, "step", "path"], sort=False).ngroup().fillna(-1).to_numpy(np.int64)  # -1: null key
    order = np.argsort(gid, kind="stable")
    order = order[gid[order] >= 0]
    cuts = np.flatnonzero(np.diff(gid[order])) + 1
    col = {c: per_rank[c].to_numpy() for c in ("wall_ns", "_key", "comm_ns", "collective_ns", "arrival_ns", "stage", "_start")}
    col.update({c: pd.to_numeric(per_rank[c], errors="coerce").to_numpy(np.float64)
                for c in ("mem_peak_bytes", "gpu_busy_inherited_ns", "gpu_busy_ns", "launch_span_ns")})
    role_v, step_v, path_v = key.to_numpy(), per_rank["step"].to_numpy(), per_rank["path"].to_numpy()
    n_all = len(per_rank)
    wait_all, excess_all, floor_all = np.zeros(n_all), np.full(n_all, np.nan), np.zeros(n_all)
    wait_by_all = np.empty(n_all, dtype=object)
    for idx in sorted(np.split(order, cuts), key=lambda ix: int(gid[ix[0]])):
        first = int(idx[0])
        wall = col["wall_ns"][idx].astype(np.int64)
        ranks = col["_key"][idx]   # rank, or -pid-1 for a process without one
        med = float(np.median(wall))
        fl = floor.of(med)
        wait, wait_by = _waits(wall, col["_start"][idx].astype(np.int64), col["collective_ns"][idx].astype(np.int64),
                               col["comm_ns"][idx].astype(np.int64), fl)
        own = wall - wait
        excess = own - others_median(own)
        wait_all[idx], excess_all[idx], floor_all[idx], wait_by_all[idx] = wait, excess, fl, wait_by
        who, rule, cost = _straggler(ranks, excess, fl)
        if who is not None and who < 0:
            who, rule, cost = None, "none: the waited-for process has no rank", None
        peak = _skipna(np.max, col["mem_peak_bytes"][idx])
        slowest = ranks[int(np.argmax(wall))]
        rows.append({
            "row_kind": "ranks", "role": role_v[first] or None, "step": step_v[first], "path": path_v[first],
            "stage": col["stage"][first],
            "ranks": len(idx), "wall_ns": int(med), "wall_min_ns": int(wall.min()),
            "wall_median_ns": int(med), "wall_p90_ns": int(np.percentile(wall, 90)),
            "wall_max_ns": int(wall.max()),
            "slowest_rank": int(slowest) if slowest >= 0 else None,
            "skew_ns": int(wall.max() - wall.min()), "straggler_rank": who, "straggler_by": rule,
            "straggler_ns": cost, "gpu_busy_inherited_ns": _skipna(np.median, col["gpu_busy_inherited_ns"][idx]),
            "gpu_busy_ns": _skipna(np.median, col["gpu_busy_ns"][idx]),
            # the median span of the same ranks: each rank's GPU figure lies under its span, so the
            # medians keep GPU % at most 100 (order statistics keep the ranks' order)
            "launch_span_ns": _span_median(col["gpu_busy_inherited_ns"][idx], col["launch_span_ns"][idx]),
            "comm_ns": int(np.median(col["comm_ns"][idx])),
            "collective_ns": int(np.median(col["collective_ns"][idx])), "arrival_ns": int(col["arrival_ns"][idx].max()),
            "mem_peak_bytes": None if pd.isna(peak) else int(peak),
            "wait_ns": int(np.median(wait)), "excess_ns": None if np.isnan(excess).all() else int(np.nanmax(excess)),
            "floor_ns": int(fl),
        })
    per_rank["wait_ns"] = wait_all.astype(np.int64)
    per_rank["excess_ns"] = excess_all
    per_rank["_floor"] = floor_all
    per_rank["_wait_by"] = wait_by_all
    starts = per_rank.groupby([key, "step", "path"], sort=False)["_start"].median().to_dict()
    return pd.DataFrame(depth_first(rows, lambda r, p: starts.get((r["role"] or "", r["step"], p))))


def depth_first(rows: list[dict[str, Any]], start_of: Any) -> list[dict[str, Any]]:
    """`rows` (dicts with role, step, path) in tree order: per role and step, a parent before its
    children, siblings by start time (`start_of(row, path)`; a path not among the rows sorts by the
    row's own start). Why: the terminal and the report indent by depth, and a child printed after
    an unrelated range reads as nested in it (issue 32)."""
    def key(r: dict[str, Any]) -> tuple[Any, ...]:
        parts = str(r["path"]).split(" > ")
        own = start_of(r, r["path"])
        own = float("inf") if own is None or pd.isna(own) else float(own)
        chain = []
        for i in range(1, len(parts) + 1):
            t = start_of(r, " > ".join(parts[:i]))
            chain.append((own if t is None or pd.isna(t) else float(t), parts[i - 1]))
        return tuple(chain)
    firsts: dict[tuple[Any, Any], int] = {}
    for r in rows:
        firsts.setdefault((r["role"], r["step"]), len(firsts))
    return sorted(rows, key=lambda r: (firsts[(r["role"], r["step"])], key(r)))


def _span_median(gpu: np.ndarray, span: np.ndarray) -> float:
    """The median launch span over the ranks whose GPU figure is known (those the GPU median is
    taken over); NaN when any of them lacks a span (rows older than the column)."""
    known = ~np.isnan(gpu)
    if not known.any() or np.isnan(span[known]).any():
        return float("nan")
    return float(np.median(span[known]))


def _straggler(ranks: np.ndarray, excess: np.ndarray, floor: float) -> tuple[Any, str, Any]:
    """(rank, rule, ns) for one phase: the module docstring's rule (waits and arrivals are kept in
    the rows; they name nobody)."""
    if len(ranks) < 2:
        return None, "none: one rank", None
    i = int(np.nanargmax(excess))
    if excess[i] > floor:
        return int(ranks[i]), "excess", int(excess[i])
    return None, "none: every rank within the noise floor", None


def _skipna(fn: Any, values: np.ndarray) -> float:
    """`fn` over the values that are not NaN (NaN when none is): what pandas' Series.median/max
    do, without building a Series per group (50 us each, hundreds of groups per capture)."""
    kept = values[~np.isnan(values)]
    return float(fn(kept)) if kept.size else float("nan")


# ------------------------------------------------------------------------------------------------
# controller and workers
# ------------------------------------------------------------------------------------------------


def _controllers(df: pd.DataFrame) -> set[tuple[str, Any]]:
    has_step = df[(df["stage"] == "step") & (pd.to_numeric(df["depth"], errors="coerce") == 0)]
    return set(zip(has_step["role"].fillna(""), has_step["pid"]))


def dispatch_rows(phases: Any, per: pd.DataFrame | None = None) -> pd.DataFrame:
    """`dispatch` rows: per step and verl driver stage, the controller's wall, the slowest
    worker's matching stage and the gap (`dispatch_ns`: dispatch, data transfer, waiting).

    The controller is a process with a `step` range whose role no worker shares (verl's
    single controller: `marked_timer` ranges `step > gen` ...); the workers are the processes of
    other roles that have the same stage (`generate_sequences` ...). Stage walls follow the one
    rule for totals (`compare.process_stage_totals`)."""
    df = to_frame(phases)
    per = process_stage_totals(df) if per is None else per
    if per.empty or "depth" not in df.columns:
        return pd.DataFrame()
    per = per[~per["source_kind"].isin(formats.untimed_kinds())]
    ctl = _controllers(df)
    is_ctl = np.array([(r if isinstance(r, str) else "", p) in ctl for r, p in zip(per["role"], per["pid"])], bool)
    steps = per[(per["stage"] == "step").to_numpy() & is_ctl]
    rows: list[dict[str, Any]] = []
    per = per.assign(_role=per["role"].fillna(""))
    if per["_role"].nunique() < 2 or steps.empty:
        return pd.DataFrame(rows)   # one role only: no controller/worker split
    work = per[~per["stage"].isin(["step", "other"])]
    # the slowest worker per (step, role, stage), once
    slowest = work.loc[work.groupby(["step", "_role", "stage"], sort=False)["wall_ns"].idxmax()]
    for d in steps.assign(_role=steps["role"].fillna("")).to_dict("records"):
        mine = work[(work["step"] == d["step"]) & (work["pid"] == d["pid"]) & (work["_role"] == d["_role"])]
        for st, dw in mine.groupby("stage", sort=False)["wall_ns"].max().items():
            w = slowest[(slowest["step"] == d["step"]) & (slowest["stage"] == st) & (slowest["_role"] != d["_role"])]
            if w.empty:
                continue
            top = w.loc[w["wall_ns"].idxmax()]
            n = int(((work["step"] == d["step"]) & (work["stage"] == st) & (work["_role"] == top["_role"])).sum())
            rows.append({"row_kind": "dispatch", "role": top["role"], "step": d["step"], "path": st, "stage": st,
                         "rank": None, "ranks": n, "wall_ns": int(dw), "wall_max_ns": int(top["wall_ns"]),
                         "slowest_rank": None if pd.isna(top["rank"]) else int(top["rank"]),
                         "dispatch_ns": int(dw) - int(top["wall_ns"]), "driver_role": d["role"]})
    return pd.DataFrame(rows)


def _own_stage_time(per_rank: pd.DataFrame) -> pd.DataFrame:
    """Per role, step, rank and stage: the rank's own time in the stage's top ranges (wall minus its
    wait in them; top: no ancestor path with a known stage), from the `rank` rows."""
    if per_rank.empty or "wait_ns" not in per_rank.columns:
        return pd.DataFrame(columns=["role", "step", "_key", "stage", "own_ns"])
    known = per_rank[~per_rank["stage"].isin(["step", "other", "collective"]) & per_rank["stage"].notna()]
    have = set(zip(known["role"].fillna(""), known["step"], known["_key"], known["path"]))
    top = [not any((r, s, k, " > ".join(p.split(" > ")[:i])) in have for i in range(1, p.count(" > ") + 1))
           for r, s, k, p in zip(known["role"].fillna(""), known["step"], known["_key"], known["path"])]
    t = known[np.array(top, bool)]
    return (t.assign(role=t["role"].fillna(""), own_ns=(t["wall_ns"] - t["wait_ns"]).clip(lower=0))
            .groupby(["role", "step", "_key", "stage"], sort=False)["own_ns"].sum().reset_index())


def critical_path_rows(phases: Any, per: pd.DataFrame | None = None, per_rank: pd.DataFrame | None = None) -> pd.DataFrame:
    """`critical_path` rows, per step: which stage bounds the RL step and how busy each role was.

    With verl's single controller, the step is the controller's `step` and its stages run one after
    the other, so the stage with the longest wall on the controller bounds it; `wall_max_ns` /
    `slowest_rank` name that stage's slowest worker and `dispatch_ns` the controller's gap over it.
    Without a controller (one role), the bounding stage is the one with the largest *own* time on
    some rank (wall minus its wait in collectives: a rank waiting for a straggler is not what
    bounds the step), `slowest_rank` that rank. Per role, one row (`path` = the bounding stage):
    `busy_ns` = the median over its ranks of their own time in its stages (a process without a
    rank, the controller: its stages that no worker role has, plus the step's gaps), `idle_ns` =
    the step minus it (waiting, dispatch, gaps): busy + idle = the step for every role."""
    df = to_frame(phases)
    per = process_stage_totals(df) if per is None else per
    if per.empty or "depth" not in df.columns:
        return pd.DataFrame()
    per = per[~per["source_kind"].isin(formats.untimed_kinds())].assign(_role=lambda d: d["role"].fillna(""))
    own = _own_stage_time(per_rank if per_rank is not None else pd.DataFrame())
    ctl = _controllers(df)
    roles = per["_role"].unique()
    rows: list[dict[str, Any]] = []
    for step, s in per.groupby("step", sort=True):
        st = s[s["stage"] == "step"]
        if st.empty:
            continue
        is_ctl = np.array([(r, p) in ctl for r, p in zip(st["_role"], st["pid"])], bool)
        work = s[~s["stage"].isin(["step", "other"])]
        mine_own = own[own["step"] == step]
        if is_ctl.any() and len(roles) > 1:
            driver = st[is_ctl].loc[st[is_ctl]["wall_ns"].idxmax()]
            mine = work[(work["_role"] == driver["_role"]) & (work["pid"] == driver["pid"])]
            if mine.empty:
                continue
            stages = mine.groupby("stage", sort=False)["wall_ns"].sum().sort_values(ascending=False, kind="stable")
            bound, bound_wall = stages.index[0], int(stages.iloc[0])
            others = work[(work["stage"] == bound) & (work["_role"] != driver["_role"])]
            wk = others.loc[others["wall_ns"].idxmax()] if len(others) else None
            worker_wall = int(wk["wall_ns"]) if wk is not None else bound_wall
            who = None if wk is None or pd.isna(wk["rank"]) else int(wk["rank"])
            tail = (f", its slowest worker {wk['role']} rank {'?' if who is None else who} {fmt_ms(worker_wall)}"
                    f" + {fmt_ms(bound_wall - worker_wall)} dispatch" if wk is not None else "")
            dispatch = bound_wall - worker_wall if wk is not None else None
            worker_stages = set(work[work["_role"] != driver["_role"]]["stage"])
        elif len(roles) == 1:
            driver = st.loc[st["wall_ns"].idxmax()]
            if mine_own.empty:
                continue
            top = mine_own.loc[mine_own.groupby("stage", sort=False)["own_ns"].idxmax()]
            top = top.sort_values("own_ns", ascending=False, kind="stable")
            bound, bound_wall = top["stage"].iloc[0], int(top["own_ns"].iloc[0])
            who = int(top["_key"].iloc[0]) if int(top["_key"].iloc[0]) >= 0 else None
            worker_wall, dispatch, worker_stages = bound_wall, None, set()
            tail = f" (rank {who}'s own time, the longest)" if who is not None else ""
        else:
            continue
        step_wall = int(driver["wall_ns"])
        if step_wall <= 0:
            continue
        text = f"step {int(step)} ({fmt_ms(step_wall)}) bound by {bound}: {fmt_ms(bound_wall)}{tail}"
        for role, g in s.groupby("_role", sort=False):
            o = mine_own[mine_own["role"] == role]
            ranked = o[o["_key"] >= 0]
            if len(ranked):
                busy = int(ranked.groupby("_key")["own_ns"].sum().median())
                rank = None
            else:   # the controller: its own stages (no worker has them) and the gaps between stages
                steps_of = g[g["stage"] == "step"]
                proc = steps_of.loc[steps_of["wall_ns"].idxmax()] if len(steps_of) else None
                if proc is None:
                    continue
                gw = g[(g["pid"] == proc["pid"]) & ~g["stage"].isin(["step"]) & ~g["stage"].isin(worker_stages)]
                busy = int(gw["wall_ns"].sum())
                rank = None if pd.isna(proc["rank"]) else int(proc["rank"])
            busy = min(busy, step_wall)
            rows.append({"row_kind": "critical_path", "role": role or None, "step": int(step), "path": bound,
                         "stage": bound, "rank": rank, "wall_ns": step_wall, "busy_ns": busy,
                         "idle_ns": step_wall - busy, "bound_stage": bound, "bound_ns": bound_wall,
                         "wall_max_ns": worker_wall, "slowest_rank": who, "dispatch_ns": dispatch,
                         "driver_role": driver["role"], "statement": text})
    return pd.DataFrame(rows)


# ------------------------------------------------------------------------------------------------
# the table
# ------------------------------------------------------------------------------------------------


def ranks_table(phases: Any, metadata: dict[str, str] | None = None, *, other_steps: Any = None,
                floor: NoiseFloor = DEFAULT_FLOOR) -> pa.Table:
    """Every kind of row as one Arrow table of the `ranks` schema (rank rows first). `phases`: the
    chosen step's rows (phases.parquet); `other_steps`: phase rows of the other profiled steps
    (collect's per-step pass; only their depth <= 2 / known-stage rows are read), flagged
    `chosen = false`; `metadata`: the summaries' own (versions, inputs)."""
    chosen = to_frame(phases)
    extra = to_frame(other_steps)
    chosen_steps = set(pd.to_numeric(chosen["step"], errors="coerce").dropna().astype(int)) if "step" in chosen else set()
    both_ph = pd.concat([chosen, extra], ignore_index=True) if len(extra) else chosen
    per = rank_rows(both_ph)
    parts = [per]
    if len(per):
        across = across_rows(per, floor)
        cul = culprit_rows(per, floor)
        parts += [across, cul]
        if len(cul):
            profiled = per.groupby(per["role"].fillna(""))["step"].nunique().to_dict()
            parts.append(recurrence_rows(cul, profiled))
    totals = process_stage_totals(both_ph) if len(both_ph) else pd.DataFrame()
    parts += [dispatch_rows(both_ph, totals), critical_path_rows(both_ph, totals, per)]
    both = pd.concat([p for p in parts if len(p)], ignore_index=True) if any(len(p) for p in parts) else per
    schema = arrow_schema("ranks", metadata)
    for f in schema:
        if f.name not in both.columns:
            both[f.name] = None
    steps = pd.to_numeric(both["step"], errors="coerce")
    both["chosen"] = steps.isin(chosen_steps).where(steps.notna(), None)
    both = both[schema.names].astype(object).where(both[schema.names].notna(), None)
    return pa.Table.from_pandas(both, schema=schema, preserve_index=False)


def chosen_rows(table: Any) -> pd.DataFrame:
    """The rows of the chosen step (and the step-less `recurrence` rows): what the views show."""
    df = to_frame(table)
    if df.empty or "chosen" not in df.columns or df["chosen"].isna().all():
        return df
    return df[(df["chosen"] == True) | df["chosen"].isna()]   # noqa: E712 - object column of bools / None


def stragglers(table: Any) -> pd.DataFrame:
    """The `ranks` rows that name a straggler, the costliest first (for the views)."""
    df = to_frame(table)
    if df.empty:
        return df
    df = df[(df["row_kind"] == "ranks") & df["straggler_rank"].notna()]
    return df.sort_values("straggler_ns", ascending=False, kind="stable")


def statements(table: Any, role: Any, kind: str) -> list[str]:
    """The `statement` of the rows of one kind (`culprit`, `recurrence`, `critical_path`) for a role
    (None: any), in step order."""
    df = to_frame(table)
    if df.empty or "statement" not in df.columns:
        return []
    d = df[df["row_kind"] == kind]
    if role is not None:
        d = d[d["role"].fillna("?") == role]
    return [s for s in d.sort_values("step", kind="stable")["statement"].dropna().drop_duplicates()]


def culprit_statements(tables: dict[str, pa.Table]) -> pd.DataFrame:
    """The `culprit` and `recurrence` rows of many runs' ranks tables, with a `run` column (filtered
    in Arrow first: a 10,240-rank table has 100,000 other rows)."""
    import pyarrow.compute as pc

    parts = []
    for run, t in tables.items():
        if "statement" not in t.column_names:
            continue
        t = t.filter(pc.is_in(t.column("row_kind"), pa.array(["culprit", "recurrence"])))
        parts.append(t.select(["row_kind", "role", "step", "chosen", "rank", "statement"]).to_pandas().assign(run=run))
    return pd.concat(parts, ignore_index=True) if parts else pd.DataFrame()


def bundle_ranks_table(bundle: Any, phases: Any) -> pa.Table:
    """The bundle's own ranks.parquet when it is current (it holds every profiled step, which the
    phases alone do not), else the table computed from `phases` (a bundle older than issue 32)."""
    from pathlib import Path

    import pyarrow.parquet as pq

    p = Path(bundle) / "summaries" / "ranks.parquet"
    if p.is_file():
        try:
            t = pq.read_table(p)
        except (pa.ArrowException, OSError):
            t = None
        if t is not None and {"statement", "launch_span_ns"} <= set(t.column_names):
            return t.select(arrow_schema("ranks").names) if set(arrow_schema("ranks").names) <= set(t.column_names) else t
    return ranks_table(phases)


def write_ranks(phases: Any, folder: Any, metadata: dict[str, str] | None = None, *, other_steps: Any = None,
                floor: NoiseFloor = DEFAULT_FLOOR) -> pa.Table:
    """`folder/ranks.parquet` from the phases rows (atomic); what collect and summarize call.
    Returns the table written."""
    from pathlib import Path

    import pyarrow.parquet as pq

    from ..stages.core.atomic import atomic_path

    table = ranks_table(phases, metadata, other_steps=other_steps, floor=floor)
    with atomic_path(Path(folder) / "ranks.parquet") as tmp:
        pq.write_table(table, tmp, compression="zstd")
    return table
