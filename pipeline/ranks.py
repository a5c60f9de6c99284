"""The run across ranks: `summaries/ranks.parquet` (schema `ranks` in stages/schema.py).

Why a module of its own: collect's terminal view, the HTML report and `summarize` must name the
same straggler and the same spread, so it is computed once, from the phases rows alone (pure
pandas, no I/O), in one pass over the rows: it stays fast at 1,000 ranks.

Rows:
- `row_kind = "rank"`: per role, step, phase path and rank: wall, GPU busy (inherited and
  same-thread), time in collectives, the arrival offset against the earliest rank, peak memory.
- `row_kind = "ranks"` (rank null): per role, step and path, across the ranks: min / median / p90 /
  max wall, the slowest rank, `skew_ns` (max - min) and `straggler_rank` with the rule that
  decided it (`straggler_by`) and what it cost the others (`straggler_ns`).

How the straggler is decided (the rank the others wait for), first rule that applies:
1. `nccl`: some rank has collective kernel time (`comm_ns`) in the phase: the rank whose collective
   kernels are shortest (the others' kernels spin waiting for it). Cost: the others' median minus
   its time.
2. `collectives`: CPU-side collective ranges nested in the phase (stage `collective`: gloo / c10d /
   `record_param_comms` / `nccl:all_reduce` ranges): the rank that waits least in them.
3. `arrival`: the ranks start the phase more than 1 ms apart: the latest to arrive. Cost: its
   offset minus the others' median offset.
4. none: one rank only, or no collectives and the ranks arrive together (`straggler_by` says why).
- `row_kind = "dispatch"`: controller against workers (`dispatch_rows`).
Only phases at depth <= 2 and phases with a known stage are kept (an emit_nvtx capture has
thousands of op ranges; they are in phases.parquet).
"""
from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa

from ..stages.schema import arrow_schema
from .compare import UNATTRIBUTED, _ancestor_paths, process_stage_totals, to_frame

#: Ranks starting a phase closer than this arrive "together" (clocks of one host agree to µs).
ARRIVAL_NS = 1_000_000
MAX_DEPTH = 2
_NUM = ("wall_ns", "gpu_busy_inherited_ns", "gpu_busy_ns", "comm_ns", "start_ns", "mem_peak_bytes", "depth")


def _collective_wall(df: pd.DataFrame) -> pd.Series:
    """Per row: wall time of the outermost `collective` ranges nested under it (same process)."""
    out = pd.Series(0, index=df.index, dtype="int64")
    coll = df[(df["stage"] == "collective") & df["path"].notna()]
    if coll.empty:
        return out
    index = {(k, p): i for k, p, i in zip(df["_proc"], df["path"], df.index)}
    is_coll = set(zip(coll["_proc"], coll["path"]))
    for proc, path, wall in zip(coll["_proc"], coll["path"], coll["wall_ns"]):
        parts = path.split(" > ")
        prefixes = [" > ".join(parts[:i]) for i in range(1, len(parts))]
        if any((proc, p) in is_coll for p in prefixes):
            continue   # nested in another collective range: counted there
        for p in prefixes:
            i = index.get((proc, p))
            if i is not None:
                out[i] += int(wall)
    return out


def rank_rows(phases: Any) -> pd.DataFrame:
    """The `rank` rows: one per role, step, path and rank (first source kind of the role: nsys)."""
    df = to_frame(phases)
    if df.empty or "rank" not in df.columns:
        return pd.DataFrame(columns=arrow_schema("ranks").names)
    kind = df["source_kind"] if "source_kind" in df.columns else pd.Series(None, index=df.index)
    df = df[(df["phase"] != UNATTRIBUTED) & (kind != "memory")].copy()
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
                      " > ".join([*_ancestor_paths(None, ph, par, parent_of), ph])
                      for p, ph, par in zip(df["path"], df["phase"], df.get("parent", [None] * len(df)))]
    for c in _NUM:
        df[c] = pd.to_numeric(df[c], errors="coerce") if c in df.columns else np.nan
    if "source_kind" in df.columns and df["source_kind"].notna().any():
        pref = {"nsys": 0, "torch": 1, "memory": 2}
        order = df["source_kind"].map(lambda k: pref.get(k, 3))
        df = df[order == order.groupby(df["role"].fillna("")).transform("min")]
    df["_proc"] = list(zip(df["role"].fillna(""), df["rank"], df.get("pid", pd.Series(0, index=df.index)).fillna(0)))
    df["collective_ns"] = _collective_wall(df)
    keep = (df["depth"].fillna(0) <= MAX_DEPTH) | ~df["stage"].isin(["other", None])
    df = df[keep & (df["stage"] != "collective")]
    df["role"] = df["role"].fillna("")
    if df.duplicated(["role", "step", "path", "rank"]).any():   # two processes or sources of one rank
        agg = {c: "sum" for c in ("wall_ns", "gpu_busy_inherited_ns", "gpu_busy_ns", "comm_ns", "collective_ns")}
        agg.update(start_ns="min", mem_peak_bytes="max", stage="first")
        df = df.groupby(["role", "step", "path", "rank"], sort=False, dropna=False).agg(agg).reset_index()
    g = df.groupby(["role", "step", "path"], sort=False)["start_ns"]
    df["arrival_ns"] = (df["start_ns"] - g.transform("min")).fillna(0).astype("int64")
    out = pd.DataFrame({
        "row_kind": "rank", "role": df["role"].replace("", None), "step": df["step"], "path": df["path"],
        "stage": df["stage"], "rank": df["rank"].astype("int64").where(df["rank"] >= 0, None),
        "_key": df["rank"].astype("int64"), "wall_ns": df["wall_ns"].fillna(0).astype("int64"),
        "gpu_busy_inherited_ns": df["gpu_busy_inherited_ns"], "gpu_busy_ns": df["gpu_busy_ns"],
        "comm_ns": df["comm_ns"].fillna(0).astype("int64"), "collective_ns": df["collective_ns"],
        "arrival_ns": df["arrival_ns"], "mem_peak_bytes": df["mem_peak_bytes"],
    })
    return out.reset_index(drop=True)


def _straggler(ranks: np.ndarray, comm: np.ndarray, coll: np.ndarray, arrival: np.ndarray) -> tuple[Any, str, Any]:
    """(rank, rule, what it cost the others in ns) for one phase; see the module docstring."""
    if len(ranks) < 2:
        return None, "none: one rank", None
    for rule, wait in (("nccl", comm), ("collectives", coll)):
        if (wait > 0).any():
            i = int(np.argmin(wait))
            return int(ranks[i]), rule, int(np.median(np.delete(wait, i)) - wait[i])
    if arrival.max() - arrival.min() > ARRIVAL_NS:
        i = int(np.argmax(arrival))
        return int(ranks[i]), "arrival", int(arrival[i] - np.median(np.delete(arrival, i)))
    return None, "none: no collectives recorded and the ranks arrive together", None


def across_rows(per_rank: pd.DataFrame) -> pd.DataFrame:
    """The `ranks` rows: per role, step and path, the spread across ranks and the straggler.

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
    col = {c: per_rank[c].to_numpy() for c in ("wall_ns", "_key", "comm_ns", "collective_ns", "arrival_ns", "stage")}
    col.update({c: pd.to_numeric(per_rank[c], errors="coerce").to_numpy(np.float64)
                for c in ("mem_peak_bytes", "gpu_busy_inherited_ns", "gpu_busy_ns")})
    role_v, step_v, path_v = key.to_numpy(), per_rank["step"].to_numpy(), per_rank["path"].to_numpy()
    for idx in sorted(np.split(order, cuts), key=lambda ix: int(gid[ix[0]])):
        first = int(idx[0])
        wall = col["wall_ns"][idx]
        ranks = col["_key"][idx]   # rank, or -pid-1 for a process without one
        who, rule, cost = _straggler(ranks, col["comm_ns"][idx], col["collective_ns"][idx], col["arrival_ns"][idx])
        if who is not None and who < 0:
            who, rule, cost = None, "none: the waited-for process has no rank", None
        peak = _skipna(np.max, col["mem_peak_bytes"][idx])
        slowest = ranks[int(np.argmax(wall))]
        rows.append({
            "row_kind": "ranks", "role": role_v[first] or None, "step": step_v[first], "path": path_v[first],
            "stage": col["stage"][first],
            "ranks": len(idx), "wall_ns": int(np.median(wall)), "wall_min_ns": int(wall.min()),
            "wall_median_ns": int(np.median(wall)), "wall_p90_ns": int(np.percentile(wall, 90)),
            "wall_max_ns": int(wall.max()),
            "slowest_rank": int(slowest) if slowest >= 0 else None,
            "skew_ns": int(wall.max() - wall.min()), "straggler_rank": who, "straggler_by": rule,
            "straggler_ns": cost, "gpu_busy_inherited_ns": _skipna(np.median, col["gpu_busy_inherited_ns"][idx]),
            "gpu_busy_ns": _skipna(np.median, col["gpu_busy_ns"][idx]), "comm_ns": int(np.median(col["comm_ns"][idx])),
            "collective_ns": int(np.median(col["collective_ns"][idx])), "arrival_ns": int(col["arrival_ns"][idx].max()),
            "mem_peak_bytes": None if pd.isna(peak) else int(peak),
        })
    return pd.DataFrame(rows)


def _skipna(fn: Any, values: np.ndarray) -> float:
    """`fn` over the values that are not NaN (NaN when none is): what pandas' Series.median/max
    do, without building a Series per group (50 us each, hundreds of groups per capture)."""
    kept = values[~np.isnan(values)]
    return float(fn(kept)) if kept.size else float("nan")


def dispatch_rows(phases: Any) -> pd.DataFrame:
    """`dispatch` rows: per step and verl driver stage, the controller's wall, the slowest
    worker's matching stage and the gap (`dispatch_ns`: dispatch, data transfer, waiting).

    The controller is a process with a `step` range whose role no worker shares (verl's
    single controller: `marked_timer` ranges `step > gen` ...); the workers are the processes of
    other roles that have the same stage (`generate_sequences` ...). Stage walls follow the one
    rule for totals (`compare.process_stage_totals`)."""
    df = to_frame(phases)
    per = process_stage_totals(df)
    if per.empty or "depth" not in df.columns:
        return pd.DataFrame()
    per = per[per["source_kind"] != "memory"]
    has_step = df[(df["stage"] == "step") & (pd.to_numeric(df["depth"], errors="coerce") == 0)]
    ctl = set(zip(has_step["role"].fillna(""), has_step["pid"]))
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


def ranks_table(phases: Any, metadata: dict[str, str] | None = None) -> pa.Table:
    """The three kinds of rows as one Arrow table of the `ranks` schema (rank rows first);
    `metadata`: the summaries' own (versions, inputs), as phases.parquet carries it."""
    per = rank_rows(phases)
    both = pd.concat([per, across_rows(per)], ignore_index=True) if len(per) else per
    disp = dispatch_rows(phases)
    if len(disp):
        both = pd.concat([both, disp], ignore_index=True)
    schema = arrow_schema("ranks", metadata)
    for f in schema:
        if f.name not in both.columns:
            both[f.name] = None
    both = both[schema.names].astype(object).where(both[schema.names].notna(), None)
    return pa.Table.from_pandas(both, schema=schema, preserve_index=False)


def stragglers(table: Any) -> pd.DataFrame:
    """The `ranks` rows that name a straggler, the costliest first (for the views)."""
    df = to_frame(table)
    if df.empty:
        return df
    df = df[(df["row_kind"] == "ranks") & df["straggler_rank"].notna()]
    return df.sort_values("straggler_ns", ascending=False, kind="stable")


def write_ranks(phases: Any, folder: Any, metadata: dict[str, str] | None = None) -> None:
    """`folder/ranks.parquet` from the phases rows (atomic); what collect and summarize call."""
    from pathlib import Path

    import pyarrow.parquet as pq

    from ..stages.core.atomic import atomic_path

    with atomic_path(Path(folder) / "ranks.parquet") as tmp:
        pq.write_table(ranks_table(phases, metadata), tmp, compression="zstd")
