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
Only phases at depth <= 2 and phases with a known stage are kept (an emit_nvtx capture has
thousands of op ranges; they are in phases.parquet).
"""
from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa

from ..stages.schema import arrow_schema
from .compare import UNATTRIBUTED, _ancestor_paths, to_frame

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
    df = df[df["rank"].notna() & (df["phase"] != UNATTRIBUTED) & (kind != "memory")].copy()
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
        "stage": df["stage"], "rank": df["rank"].astype("int64"), "wall_ns": df["wall_ns"].fillna(0).astype("int64"),
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
    """The `ranks` rows: per role, step and path, the spread across ranks and the straggler."""
    rows: list[dict[str, Any]] = []
    if per_rank.empty:
        return pd.DataFrame(rows)
    key = per_rank["role"].fillna("")
    for (role, step, path), grp in per_rank.groupby([key, "step", "path"], sort=False):
        wall = grp["wall_ns"].to_numpy()
        ranks = grp["rank"].to_numpy()
        who, rule, cost = _straggler(ranks, grp["comm_ns"].to_numpy(), grp["collective_ns"].to_numpy(),
                                     grp["arrival_ns"].to_numpy())
        peak = grp["mem_peak_bytes"].max()
        rows.append({
            "row_kind": "ranks", "role": role or None, "step": step, "path": path, "stage": grp["stage"].iloc[0],
            "ranks": len(grp), "wall_ns": int(np.median(wall)), "wall_min_ns": int(wall.min()),
            "wall_median_ns": int(np.median(wall)), "wall_p90_ns": int(np.percentile(wall, 90)),
            "wall_max_ns": int(wall.max()), "slowest_rank": int(ranks[int(np.argmax(wall))]),
            "skew_ns": int(wall.max() - wall.min()), "straggler_rank": who, "straggler_by": rule,
            "straggler_ns": cost, "gpu_busy_inherited_ns": grp["gpu_busy_inherited_ns"].median(),
            "gpu_busy_ns": grp["gpu_busy_ns"].median(), "comm_ns": int(grp["comm_ns"].median()),
            "collective_ns": int(grp["collective_ns"].median()), "arrival_ns": int(grp["arrival_ns"].max()),
            "mem_peak_bytes": None if pd.isna(peak) else int(peak),
        })
    return pd.DataFrame(rows)


def ranks_table(phases: Any, metadata: dict[str, str] | None = None) -> pa.Table:
    """Both kinds of rows as one Arrow table of the `ranks` schema (rank rows first); `metadata`:
    the summaries' own (versions, inputs), as phases.parquet carries it."""
    per = rank_rows(phases)
    both = pd.concat([per, across_rows(per)], ignore_index=True) if len(per) else per
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
