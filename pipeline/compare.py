"""Table math shared by `summarize` (many runs) and the HTML reports: stage totals and deltas.

Why a module of its own: the batch summarizer, the terminal table and both HTML pages must agree on
what "the time of stage S in run R" means, so it is computed in exactly one place. Everything here
is pure pandas over rows of the `phases` / `kernels` schemas (stages/schema.py); no I/O.

Definitions (documented in docs/batch.md):
- A phase row *counts* for its stage when none of its ancestors (followed through `parent` names
  within one process) has the same stage, so `gen > generate_sequences` is not counted twice.
  `other` ranges count only when no ancestor has a known stage besides `step`, so unknown ranges
  nested inside a known stage are not added on top of it.
- One source kind per (run, role): nsys rows when the role has any, else torch rows, because a
  bundle may summarise the same process from both an nsys report and a torch trace.
- Stage value = per process and step, the sum over counted rows; then the maximum over the
  processes of a role (ranks synchronise, the slowest bounds the stage); then the mean over steps.
- Kernel value = per step, the sum of `total_ns` over all processes of the preferred source kind.
"""
from __future__ import annotations

from typing import Any, Iterable, Mapping

import pandas as pd
import pyarrow as pa

from ..stages.core.phases import STAGES, canonical_stage

#: Metrics compared per (stage, role); all nanoseconds, all "lower is better".
METRICS: tuple[str, ...] = ("wall_ns", "gpu_busy_ns", "kernel_ns", "comm_ns", "idle_ns")

#: Identity of one profiled process inside a run.
PROCESS_KEYS: tuple[str, ...] = ("source_kind", "role", "rank", "pid")

_KIND_PREFERENCE = ("nsys", "torch", "memory")
_NONE = "\0none"  # stands for a null key while grouping (pandas drops NaN keys otherwise)


def to_frame(rows: Any) -> pd.DataFrame:
    """Rows as a DataFrame, from a DataFrame, an Arrow table or an iterable of dicts."""
    if rows is None:
        return pd.DataFrame()
    if isinstance(rows, pd.DataFrame):
        return rows
    if isinstance(rows, pa.Table):
        return rows.to_pandas()
    return pd.DataFrame(list(rows))


def _fill_keys(df: pd.DataFrame, cols: Iterable[str]) -> pd.DataFrame:
    df = df.copy()
    for c in cols:
        if c not in df.columns:
            df[c] = _NONE
        df[c] = df[c].astype(object).where(df[c].notna(), _NONE)
    return df


def _unfill(df: pd.DataFrame, cols: Iterable[str]) -> pd.DataFrame:
    for c in cols:
        if c in df.columns:
            df[c] = df[c].astype(object).where(df[c] != _NONE, None)
    return df


def _preferred_kind(df: pd.DataFrame, by: list[str]) -> pd.DataFrame:
    """Keep one source kind per `by` group: nsys first, then torch (see module docstring)."""
    if df.empty or "source_kind" not in df.columns:
        return df
    rank = {k: i for i, k in enumerate(_KIND_PREFERENCE)}
    order = df["source_kind"].map(lambda k: rank.get(k, len(rank)))
    best = order.groupby([df[c] for c in by], dropna=False).transform("min") if by else order.min()
    return df[order == best]


def counted_rows(phases: Any) -> pd.DataFrame:
    """The phase rows that count for their stage (no double counting of nested ranges)."""
    df = to_frame(phases)
    if df.empty:
        return df
    df = _fill_keys(df, ("source", *PROCESS_KEYS))
    if "stage" not in df.columns or df["stage"].isna().any():
        df["stage"] = [s if isinstance(s, str) and s else canonical_stage(str(p), r if r != _NONE else None)
                       for s, p, r in zip(df.get("stage", [None] * len(df)), df["phase"], df["role"])]
    if "parent" not in df.columns:
        df["parent"] = None
    kept: list[Any] = []
    for _, grp in df.groupby(["source", *PROCESS_KEYS], sort=False, dropna=False):
        parent_of: dict[str, str | None] = {}
        stage_of: dict[str, str] = {}
        for ph, par, st in zip(grp["phase"], grp["parent"], grp["stage"]):
            parent_of.setdefault(ph, par if isinstance(par, str) else None)
            stage_of.setdefault(ph, st)
        memo: dict[str, frozenset[str]] = {}

        def chain(name: str) -> frozenset[str]:
            """Stages of `name` and of all its ancestors (cycle-safe: a name is visited once)."""
            if name in memo:
                return memo[name]
            seen: set[str] = set()
            stages: set[str] = set()
            cur: str | None = name
            while cur is not None and cur not in seen:
                seen.add(cur)
                if cur in memo:
                    stages |= memo[cur]
                    break
                stages.add(stage_of.get(cur) or canonical_stage(cur))
                cur = parent_of.get(cur)
            memo[name] = frozenset(stages)
            return memo[name]

        for idx, par, st in zip(grp.index, grp["parent"], grp["stage"]):
            anc = chain(par) if isinstance(par, str) else frozenset()
            if (not (anc - {"step", "other"})) if st == "other" else (st not in anc):
                kept.append(idx)
    return _unfill(df.loc[kept].copy(), ("source", *PROCESS_KEYS))


def process_stage_totals(phases: Any) -> pd.DataFrame:
    """Per process, step and stage: summed metrics of the counted rows (nulls count as 0)."""
    df = counted_rows(phases)
    cols = [*PROCESS_KEYS, "step", "stage"]
    if df.empty:
        return pd.DataFrame(columns=[*cols, *METRICS])
    df = _fill_keys(df, ("step",))
    for m in METRICS:
        df[m] = pd.to_numeric(df[m], errors="coerce").fillna(0).astype("int64") if m in df.columns else 0
    out = df.groupby(cols, dropna=False, sort=False)[list(METRICS)].sum().reset_index()
    return _unfill(out, cols)


def stage_totals(phases: Any) -> pd.DataFrame:
    """Per (stage, role): the stage value of one run (slowest process, mean over steps)."""
    per = process_stage_totals(phases)
    cols = ["stage", "role", "source_kind", *METRICS, "processes", "steps"]
    if per.empty:
        return pd.DataFrame(columns=cols)
    per = _fill_keys(per, (*PROCESS_KEYS, "step"))
    per = _preferred_kind(per, ["role"])
    by_step = per.groupby(["stage", "role", "source_kind", "step"], sort=False)
    agg = by_step[list(METRICS)].max().reset_index()
    nproc = by_step.size().reset_index(name="processes")
    agg = agg.merge(nproc, on=["stage", "role", "source_kind", "step"])
    g = agg.groupby(["stage", "role", "source_kind"], sort=False)
    out = g[list(METRICS)].mean().round().astype("int64").reset_index()
    out["processes"] = g["processes"].max().values
    out["steps"] = g.size().values
    out = _unfill(out, ["role", "source_kind"])
    order = {s: i for i, s in enumerate(STAGES)}
    out["_o"] = out["stage"].map(lambda s: order.get(s, len(order)))
    return out.sort_values(["_o", "role"], na_position="first", key=None).drop(columns="_o").reset_index(drop=True)[cols]


def kernel_totals(kernels: Any) -> pd.DataFrame:
    """Per kernel: summed time per step over every process (preferred source kind only)."""
    df = to_frame(kernels)
    cols = ["kernel", "kernel_short", "category", "total_ns", "count"]
    if df.empty:
        return pd.DataFrame(columns=cols)
    df = _fill_keys(df, ("step", "source_kind"))
    df = _preferred_kind(df, [])
    for c in ("kernel_short", "category"):
        if c not in df.columns:
            df[c] = None
    df["total_ns"] = pd.to_numeric(df["total_ns"], errors="coerce").fillna(0)
    df["count"] = pd.to_numeric(df.get("count", 0), errors="coerce").fillna(0)
    nsteps = max(1, df["step"].nunique())
    g = df.groupby("kernel", sort=False)
    out = pd.DataFrame({
        "kernel": list(g.groups.keys()),
        "kernel_short": g["kernel_short"].first().values,
        "category": g["category"].first().values,
        "total_ns": (g["total_ns"].sum() / nsteps).round().astype("int64").values,
        "count": (g["count"].sum() / nsteps).round().astype("int64").values,
    })
    return out.sort_values("total_ns", ascending=False).reset_index(drop=True)[cols]


def _rel(delta: float | None, base: float | None) -> float | None:
    if delta is None or base is None or pd.isna(base) or pd.isna(delta) or base == 0:
        return None
    return float(delta) / float(base)


def compare_stages(totals: Mapping[str, pd.DataFrame], baseline: str) -> pd.DataFrame:
    """Long table: per (stage, role, metric, run) the value, the baseline value and the deltas.

    `totals` maps run id -> `stage_totals(...)` in run order. A (stage, role) missing from a run
    has a null value there; one missing from the baseline has null deltas.
    """
    if baseline not in totals:
        raise KeyError(baseline)
    keys: list[tuple[str, Any]] = []
    for t in totals.values():
        for st, role in zip(t["stage"], t["role"]):
            if (st, role) not in keys:
                keys.append((st, role))
    order = {s: i for i, s in enumerate(STAGES)}
    keys.sort(key=lambda k: (order.get(k[0], len(order)), k[1] or ""))
    index = {run: {(st, role): row for st, role, row in zip(t["stage"], t["role"], t.to_dict("records"))}
             for run, t in totals.items()}
    rows: list[dict[str, Any]] = []
    for st, role in keys:
        base_row = index[baseline].get((st, role))
        for metric in METRICS:
            base = base_row[metric] if base_row is not None else None
            for run in totals:
                row = index[run].get((st, role))
                val = row[metric] if row is not None else None
                delta = None if val is None or base is None else int(val) - int(base)
                rows.append({
                    "stage": st, "role": role, "metric": metric, "run": run,
                    "source_kind": row["source_kind"] if row is not None else None,
                    "value_ns": None if val is None else int(val),
                    "baseline": baseline, "baseline_ns": None if base is None else int(base),
                    "delta_ns": delta, "delta_rel": _rel(delta, base),
                })
    return pd.DataFrame(rows, columns=list(COMPARE_SCHEMA.names))


def kernel_changes(totals: Mapping[str, pd.DataFrame], baseline: str, top: int = 20) -> pd.DataFrame:
    """Per run (not the baseline): the `top` kernels whose per-step time changed the most.

    A kernel present on one side only counts as 0 on the other; unchanged kernels are left out.
    """
    cols = list(KERNEL_COMPARE_SCHEMA.names)
    empty = pd.DataFrame(columns=["kernel", "kernel_short", "category", "total_ns"])
    base = totals.get(baseline, empty)[["kernel", "kernel_short", "category", "total_ns"]]
    out: list[pd.DataFrame] = []
    for run, t in totals.items():
        if run == baseline:
            continue
        m = t[["kernel", "kernel_short", "category", "total_ns"]].merge(
            base, on="kernel", how="outer", suffixes=("", "_b"))
        if m.empty:
            continue
        m["kernel_short"] = m["kernel_short"].where(m["kernel_short"].notna(), m["kernel_short_b"])
        m["category"] = m["category"].where(m["category"].notna(), m["category_b"])
        m["value_ns"] = m["total_ns"].fillna(0).astype("int64")
        m["baseline_ns"] = m["total_ns_b"].fillna(0).astype("int64")
        m["delta_ns"] = m["value_ns"] - m["baseline_ns"]
        m = m[m["delta_ns"] != 0]
        m = m.reindex(m["delta_ns"].abs().sort_values(ascending=False, kind="stable").index).head(top)
        m["delta_rel"] = [_rel(d, b) for d, b in zip(m["delta_ns"], m["baseline_ns"])]
        m["run"], m["baseline"] = run, baseline
        out.append(m[cols])
    if not out:
        return pd.DataFrame(columns=cols)
    return pd.concat(out, ignore_index=True)


COMPARE_SCHEMA = pa.schema([
    ("stage", pa.string()), ("role", pa.string()), ("metric", pa.string()), ("run", pa.string()),
    ("source_kind", pa.string()), ("value_ns", pa.int64()), ("baseline", pa.string()),
    ("baseline_ns", pa.int64()), ("delta_ns", pa.int64()), ("delta_rel", pa.float64()),
], metadata={"verlprof.schema": "compare"})

KERNEL_COMPARE_SCHEMA = pa.schema([
    ("run", pa.string()), ("baseline", pa.string()), ("kernel", pa.string()), ("kernel_short", pa.string()),
    ("category", pa.string()), ("value_ns", pa.int64()), ("baseline_ns", pa.int64()),
    ("delta_ns", pa.int64()), ("delta_rel", pa.float64()),
], metadata={"verlprof.schema": "kernel_compare"})
