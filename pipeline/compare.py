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
  bundle may summarize the same process from both an nsys report and a torch trace.
- Stage value = per process and step, the sum over counted rows; then the maximum over the
  processes of a role (ranks synchronise, the slowest bounds the stage); then the mean over steps.
- Kernel value = per step, the sum of `total_ns` over all processes of the preferred source kind.
"""
from __future__ import annotations

from typing import Any, Iterable, Mapping

import pandas as pd
import pyarrow as pa

from ..stages.core.phases import STAGES, canonical_stage
from .rank_inputs import UNATTRIBUTED
from ..stages.core import formats

#: Metrics compared per (stage, role); all nanoseconds, all "lower is better".
METRICS: tuple[str, ...] = ("wall_ns", "gpu_busy_inherited_ns", "gpu_busy_ns", "kernel_ns", "comm_ns")

#: Identity of one profiled process inside a run.
PROCESS_KEYS: tuple[str, ...] = ("source_kind", "role", "rank", "pid")

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
    rank = formats.preference()
    order = df["source_kind"].map(lambda k: rank.get(k, len(rank)))
    best = order.groupby([df[c] for c in by], dropna=False).transform("min") if by else order.min()
    return df[order == best]


#: Stages that are no stage of their own: the step itself and unknown ranges.
_NOT_A_STAGE = frozenset({"step", "other"})
#: Extra per-process figures next to METRICS (not compared as deltas of sums: a peak is a max).
PEAK = "mem_peak_bytes"
#: The launch-time span GPU % is taken over (phases.parquet `launch_span_ns`): carried next to
#: METRICS, never compared (it is the denominator of a share, not a cost).
SPAN = "launch_span_ns"


def gpu_percent(gpu: Any, span: Any) -> str:
    """GPU % as every view prints it: GPU busy (inherited rule) over the launch span, `""` when
    either is unknown. Why not over wall: GPU work launched in a range may outlive it (an optimizer
    step, graph replays), and busy / wall then passes 100; every operation a row's GPU figure counts
    lies inside its launch span, so this share never does (issue 32)."""
    try:
        if gpu is None or span is None or pd.isna(gpu) or pd.isna(span) or float(span) <= 0:
            return ""
    except (TypeError, ValueError):
        return ""
    return f"{100 * float(gpu) / float(span):.0f}%"


def ancestor_paths(path: Any, phase: str, parent: Any, parent_of: Mapping[str, Any]) -> list[str]:
    """The ancestors of a row as path prefixes (outermost first): from `path` when the row has one,
    else rebuilt through `parent` names (older bundles), cycle-safe."""
    if isinstance(path, str) and path:
        parts = path.split(" > ")
        return [" > ".join(parts[:i]) for i in range(1, len(parts))]
    chain: list[str] = []
    cur = parent if isinstance(parent, str) else None
    while cur is not None and cur not in chain:
        chain.append(cur)
        nxt = parent_of.get(cur)
        cur = nxt if isinstance(nxt, str) else None
    return list(reversed(chain))


def _exclusive_union(intervals: list[tuple[int, int, str]]) -> dict[str, int]:
    """Per label, the time it owns when every instant goes to one label only: the interval that
    started last among those covering it (the innermost when ranges nest, the later one when two
    threads overlap). The values therefore never add up to more than the union of all intervals."""
    if not intervals:
        return {}
    bounds = sorted({b for s, e, _ in intervals for b in (s, e)})
    owned: dict[str, int] = {}
    ordered = sorted(intervals)
    for a, b in zip(bounds[:-1], bounds[1:]):
        best: tuple[int, str] | None = None
        for s, e, lab in ordered:
            if s > a:
                break
            if e >= b and (best is None or s >= best[0]):
                best = (s, lab)
        if best is not None:
            owned[best[1]] = owned.get(best[1], 0) + (b - a)
    return owned


def _num(v: Any) -> int:
    try:
        return 0 if v is None or pd.isna(v) else int(v)
    except (TypeError, ValueError):
        return 0


def _span(r: Mapping[str, Any]) -> int | None:
    """A row's launch span; None in rows older than the column (their GPU % is left blank)."""
    v = r.get(SPAN)
    return None if v is None or pd.isna(v) else _num(v)


def _add(a: int | None, b: int | None) -> int | None:
    """a + b, unknown when either is."""
    return None if a is None or b is None else a + b


def process_stage_rows(recs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The stage split of one process's step (see `process_stage_totals`) from its phase rows as
    dicts: one dict per stage, the `other` row and the `step` row, each with METRICS,
    `mem_peak_bytes` and `launch_span_ns` (a stage's: the sum over its top ranges, as its GPU
    figures are, so its GPU % stays at most 100; `other`'s: null)."""
    parent_of = {r["phase"]: r.get("parent") for r in recs}
    by_path = {}
    for r in recs:
        key = r.get("path") if isinstance(r.get("path"), str) and r.get("path") else r["phase"]
        by_path.setdefault(key, r)
    step_row = next((r for r in recs if r.get("stage") == "step" and _num(r.get("depth")) == 0), None)
    unattr = next((r for r in recs if r["phase"] == UNATTRIBUTED), None)
    tops: list[dict[str, Any]] = []
    for r in recs:
        st = r.get("stage")
        if r["phase"] == UNATTRIBUTED or st in _NOT_A_STAGE or not isinstance(st, str):
            continue
        anc = ancestor_paths(r.get("path"), r["phase"], r.get("parent"), parent_of)
        anc_stages = {(by_path[a].get("stage") if a in by_path else canonical_stage(a.rsplit(" > ", 1)[-1]))
                      for a in anc}
        if not (anc_stages - _NOT_A_STAGE):
            tops.append(r)
    if step_row is not None:
        lo, hi = _num(step_row["start_ns"]), _num(step_row["start_ns"]) + _num(step_row["wall_ns"])
    elif unattr is not None:
        lo, hi = _num(unattr["start_ns"]), _num(unattr["start_ns"]) + _num(unattr["wall_ns"])
    else:
        ends = [(_num(r["start_ns"]), _num(r["start_ns"]) + _num(r["wall_ns"])) for r in recs
                if _num(r.get("depth")) == 0]
        lo, hi = (min(e[0] for e in ends), max(e[1] for e in ends)) if ends else (0, 0)
    step_wall = max(0, hi - lo)
    ivs = [(max(lo, _num(r["start_ns"])), min(hi, _num(r["start_ns"]) + _num(r["wall_ns"])), r["stage"])
           for r in tops] if step_wall else [(_num(r["start_ns"]), _num(r["start_ns"]) + _num(r["wall_ns"]),
                                              r["stage"]) for r in tops]
    ivs = [iv for iv in ivs if iv[1] > iv[0]]
    owned = _exclusive_union(ivs)
    if not step_wall:
        step_wall = sum(owned.values())
    out: dict[str, dict[str, Any]] = {}
    for r in tops:
        o = out.setdefault(r["stage"], {m: 0 for m in METRICS} | {PEAK: None, SPAN: 0})
        for m in METRICS:
            if m != "wall_ns":
                o[m] += _num(r.get(m))
        o[SPAN] = _add(o[SPAN], _span(r))
        if _num(r.get(PEAK)):
            o[PEAK] = max(_num(o[PEAK]), _num(r.get(PEAK)))
    for st, o in out.items():
        o["wall_ns"] = owned.get(st, 0)
    # the step's own figures: its row, else the top-level rows plus what no range claimed
    if step_row is not None:
        total = {m: _num(step_row.get(m)) for m in METRICS} | {PEAK: step_row.get(PEAK), SPAN: _span(step_row)}
    else:
        total = {m: sum(_num(r.get(m)) for r in recs if _num(r.get("depth")) == 0 and r["phase"] != UNATTRIBUTED)
                 for m in METRICS}
        total[SPAN] = 0
        for r in recs:
            if _num(r.get("depth")) == 0 and r["phase"] != UNATTRIBUTED:
                total[SPAN] = _add(total[SPAN], _span(r))
        if unattr is not None:
            total["gpu_busy_inherited_ns"] += _num(unattr.get("gpu_busy_inherited_ns"))
            total[SPAN] = _add(total[SPAN], _span(unattr))
        peaks = [_num(r.get(PEAK)) for r in recs if _num(r.get(PEAK))]
        total[PEAK] = max(peaks) if peaks else None
    total["wall_ns"] = step_wall
    # `other` is no range: it has no launch span, so no GPU % (its GPU work may run under the stages)
    other = {m: max(0, total[m] - sum(o[m] for o in out.values())) for m in METRICS} | {PEAK: None, SPAN: None}
    other["wall_ns"] = max(0, step_wall - sum(owned.values()))
    rows = [{"stage": st, **o} for st, o in out.items()]
    rows.append({"stage": "other", **other})
    rows.append({"stage": "step", **total})
    return rows


def process_stage_totals(phases: Any) -> pd.DataFrame:
    """Per process, step and stage: the one rule for totals, shared by every view.

    Per process and step, a stage's wall time is the union of the intervals of its *top* ranges
    (ranges with a known stage and no ancestor with a known stage, `path` ancestry), clipped to the
    step; an instant covered by two stages (two threads) goes to the one that started last, so the
    stages never add up to more than the step. `other` = step - attributed stages (never negative);
    `step` is the step itself. GPU and kernel figures of a stage are the sums over its top ranges
    (inclusive figures, so nested ranges are not added twice); `other` holds the rest of the
    step's own figure. Peak memory is the maximum over the stage's top ranges. The row
    `(unattributed)` is never a stage (its time is in `other`).
    """
    df = to_frame(phases)
    cols = [*PROCESS_KEYS, "step", "stage"]
    if df.empty:
        return pd.DataFrame(columns=[*cols, *METRICS, PEAK, SPAN])
    df = df.copy()
    if "stage" not in df.columns or df["stage"].isna().any():
        roles = df["role"] if "role" in df.columns else [None] * len(df)
        df["stage"] = [s if isinstance(s, str) and s else canonical_stage(str(p), r if isinstance(r, str) else None)
                       for s, p, r in zip(df.get("stage", [None] * len(df)), df["phase"], roles)]
    for c in ("parent", "path", "depth", "start_ns", PEAK, *METRICS):
        if c not in df.columns:
            df[c] = None
    df = _fill_keys(df, ("source", *PROCESS_KEYS, "step"))
    keys = ["source", *PROCESS_KEYS, "step"]
    groups: dict[tuple[Any, ...], list[dict[str, Any]]] = {}
    for r in df.to_dict("records"):   # one conversion, then plain dicts (fast at 1,000 ranks)
        # A known process's step is one step however many files captured it (verl's discrete
        # mode: one report per stage call): its files' rows form one group.
        key = tuple(r[k] for k in keys)
        groups.setdefault(key if r["pid"] == _NONE else (_NONE, *key[1:]), []).append(r)
    out: list[dict[str, Any]] = []
    for key, recs in groups.items():
        ident = dict(zip(keys, key))
        for r in process_stage_rows(recs):
            out.append({**{k: ident[k] for k in (*PROCESS_KEYS, "step")}, **r})
    res = pd.DataFrame(out, columns=[*cols, *METRICS, PEAK, SPAN])
    for m in METRICS:
        res[m] = res[m].astype("int64")
    res[SPAN] = pd.to_numeric(res[SPAN], errors="coerce")
    return _unfill(res, cols)


def stage_totals(phases: Any, per: pd.DataFrame | None = None) -> pd.DataFrame:
    """Per (stage, role): the stage value of one run, so that a role's stages add up to its step.

    Per role and step, the *slowest process* (longest step: ranks synchronise, the slowest bounds
    the step) lends all its stage rows; then the mean over steps. `processes` counts the role's
    processes; `mem_peak_bytes` is the peak over all of them. `spread_ns`: half the range of the
    stage's values over steps 2..N when two or more of them were profiled, else null (the noise
    `compare_stages` measures changes against).
    """
    df = to_frame(phases)
    memory = df[df["source_kind"].isin(formats.untimed_kinds())] if "source_kind" in df.columns else df.iloc[:0]
    if per is None:   # `per`: process_stage_totals of the same rows, when the caller has it
        per = process_stage_totals(df.drop(memory.index) if len(memory) else df)
    else:
        per = per[~per["source_kind"].isin(formats.untimed_kinds())] if "source_kind" in per.columns else per
    cols = ["stage", "role", "source_kind", *METRICS, PEAK, SPAN, "processes", "steps", "spread_ns"]
    if per.empty:
        return pd.DataFrame(columns=cols)
    per = _fill_keys(per, (*PROCESS_KEYS, "step"))
    per = _preferred_kind(per, ["role"])
    per[PEAK] = pd.to_numeric(per[PEAK], errors="coerce")
    per[SPAN] = pd.to_numeric(per[SPAN], errors="coerce") if SPAN in per.columns else float("nan")
    keys = ["role", "source_kind", "step"]
    steps = per[per["stage"] == "step"]
    slowest = steps.loc[steps.groupby(keys, sort=False)["wall_ns"].idxmax()]
    rep = per.merge(slowest[[*keys, "rank", "pid"]], on=[*keys, "rank", "pid"])
    nproc = steps.groupby(keys, sort=False).size().rename("processes").reset_index()
    peak = per.groupby(["stage", *keys], sort=False)[PEAK].max().rename("_peak").reset_index()
    rep = rep.merge(nproc, on=keys).merge(peak, on=["stage", *keys])
    g = rep.groupby(["stage", "role", "source_kind"], sort=False)
    out = g[list(METRICS)].mean().round().astype("int64").reset_index()
    out[PEAK] = g["_peak"].max().values
    # the span like the GPU figures: the mean over steps of the same rows (unknown if any step's is)
    out[SPAN] = g[SPAN].apply(lambda v: None if v.isna().any() else round(float(v.mean()))).values
    out["processes"] = g["processes"].max().values
    out["steps"] = g.size().values

    def spread(frame: pd.DataFrame) -> float | None:
        steady = frame[[(s != _NONE and int(s) >= 2) for s in frame["step"]]]["wall_ns"]
        return float(steady.max() - steady.min()) / 2 if len(steady) >= 2 else None

    out["spread_ns"] = [spread(grp) for _, grp in g]
    out = _unfill(out, ["role", "source_kind"])
    if len(memory):
        out = _with_snapshot_peaks(out, memory)
    order = {s: i for i, s in enumerate(STAGES)}
    out["_o"] = out["stage"].map(lambda s: order.get(s, len(order)))
    return out.sort_values(["_o", "role"], na_position="first", key=None).drop(columns="_o").reset_index(drop=True)[cols]


def with_step_noise(totals: pd.DataFrame, steps: pd.DataFrame) -> pd.DataFrame:
    """Fill `spread_ns` from steps.parquet where phases hold one step only (collect summarizes the
    chosen step): per role, the slowest process's wall of each profiled step 2..N; their half-range
    relative to their median, times the stage's value, is the stage's noise. Needs two such steps."""
    if totals.empty or steps.empty or not {"step", "wall_ns"} <= set(steps.columns):
        return totals
    st = steps.copy()
    st["role"] = st["role"].where(st["role"].notna(), None) if "role" in st.columns else None
    st = st[pd.to_numeric(st["step"], errors="coerce") >= 2]
    rel: dict[Any, float] = {}
    for role, grp in st.groupby(st["role"].fillna(_NONE), sort=False):
        per_step = grp.groupby("step")["wall_ns"].max()
        if len(per_step) >= 2 and per_step.median() > 0:
            rel[None if role == _NONE else role] = float(per_step.max() - per_step.min()) / 2 / float(per_step.median())
    if not rel:
        return totals
    out = totals.copy()
    vals = []
    for role, wall, cur in zip(out["role"], out["wall_ns"], out["spread_ns"]):
        r = rel.get(role if isinstance(role, str) else None)
        vals.append(cur if cur is not None and not pd.isna(cur) else (None if r is None else r * float(wall)))
    out["spread_ns"] = vals
    return out


def _with_snapshot_peaks(out: pd.DataFrame, memory: pd.DataFrame) -> pd.DataFrame:
    """Memory-snapshot rows lend only their peaks (their ranges are allocator phases, not wall
    time): per stage, the snapshot's peak where the role's own figure is missing or lower; a
    snapshot without a role applies to every role. `step` gets the snapshot's overall peak."""
    peaks = pd.to_numeric(memory.get(PEAK), errors="coerce")
    if peaks is None or peaks.isna().all():
        return out
    roles = memory["role"] if "role" in memory.columns else pd.Series([None] * len(memory), index=memory.index)
    best: dict[tuple[str, Any], float] = {}
    for st, role, pk in zip(memory["stage"], roles, peaks):
        if pd.isna(pk):
            continue
        role = role if isinstance(role, str) else None
        for key in ((st, role), ("step", role)):
            best[key] = max(best.get(key, 0), float(pk))
    out = out.copy()
    vals = []
    for st, role, cur in zip(out["stage"], out["role"], out[PEAK]):
        role = role if isinstance(role, str) else None
        cand = max(best.get((st, role), 0), best.get((st, None), 0))
        vals.append(max(cand, 0 if pd.isna(cur) else cur) or None)
    out[PEAK] = vals
    return out


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


#: Default noise threshold of a change when a run profiled one steady step only: both must be
#: exceeded (`summarize --noise-rel/--noise-ms`).
NOISE_REL = 0.05
NOISE_ABS_NS = 100_000
#: The figures compared per (stage, role): the METRICS (ns) and the peak memory (bytes).
COMPARED: tuple[str, ...] = (*METRICS, PEAK)


def _noise(base_row: Any, row: Any) -> float | None:
    """The step-to-step noise of a stage: the larger half-range of steps 2..N of the two runs."""
    vals = [r.get("spread_ns") for r in (base_row, row) if r is not None]
    vals = [float(v) for v in vals if v is not None and not pd.isna(v)]
    return max(vals) if vals else None


def compare_stages(totals: Mapping[str, pd.DataFrame], baseline: str, *, noise_rel: float = NOISE_REL,
                   noise_abs_ns: int = NOISE_ABS_NS) -> pd.DataFrame:
    """Long table: per (stage, role, metric, run) the value, the baseline value and the deltas.

    `totals` maps run id -> `stage_totals(...)` in run order. A (stage, role) missing from a run
    has a null value there; one missing from the baseline has null deltas. `flagged`: the change
    is above the noise: where both runs profiled several steady steps (2..N), |delta| must exceed
    their step-to-step spread (`noise_ns`, wall time; the other metrics scale it by their share of
    the wall); else |delta| must exceed both `noise_rel` of the baseline and `noise_abs_ns`
    (memory: `noise_rel` only).
    """
    if baseline not in totals:
        raise KeyError(baseline)
    keys: list[tuple[str, Any]] = []
    for t in totals.values():
        for st, role in zip(t["stage"], t["role"]):
            keys.append((st, role if isinstance(role, str) else None))
    keys = list(dict.fromkeys(keys))
    order = {s: i for i, s in enumerate(STAGES)}
    keys.sort(key=lambda k: (order.get(k[0], len(order)), k[1] or ""))
    index = {run: {(st, role if isinstance(role, str) else None): row
                   for st, role, row in zip(t["stage"], t["role"], t.to_dict("records"))}
             for run, t in totals.items()}
    rows: list[dict[str, Any]] = []
    for st, role in keys:
        base_row = index[baseline].get((st, role))
        for metric in COMPARED:
            base = base_row.get(metric) if base_row is not None else None
            base = None if base is None or pd.isna(base) else int(base)
            for run in totals:
                row = index[run].get((st, role))
                val = row.get(metric) if row is not None else None
                val = None if val is None or pd.isna(val) else int(val)
                delta = None if val is None or base is None else val - base
                noise = _noise(base_row, row) if run != baseline else None
                if noise is not None and metric != "wall_ns" and metric != PEAK:
                    wall = base_row.get("wall_ns") if base_row is not None else None
                    noise = noise * (base or 0) / wall if wall else None
                if metric == PEAK:
                    noise = None
                if delta is None or run == baseline:
                    flagged = False
                elif noise is not None:
                    flagged = abs(delta) > noise
                else:
                    flagged = abs(delta) > noise_rel * abs(base or 0) and (metric == PEAK or abs(delta) > noise_abs_ns)
                rows.append({
                    "stage": st, "role": role, "metric": metric, "run": run,
                    "source_kind": row["source_kind"] if row is not None else None,
                    "value_ns": val, "baseline": baseline, "baseline_ns": base,
                    "delta_ns": delta, "delta_rel": _rel(delta, base),
                    "unit": "B" if metric == PEAK else "ns",
                    "noise_ns": None if noise is None else int(noise), "flagged": flagged,
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
    ("unit", pa.string()), ("noise_ns", pa.int64()), ("flagged", pa.bool_()),
], metadata={"verlprof.schema": "compare"})

KERNEL_COMPARE_SCHEMA = pa.schema([
    ("run", pa.string()), ("baseline", pa.string()), ("kernel", pa.string()), ("kernel_short", pa.string()),
    ("category", pa.string()), ("value_ns", pa.int64()), ("baseline_ns", pa.int64()),
    ("delta_ns", pa.int64()), ("delta_rel", pa.float64()),
], metadata={"verlprof.schema": "kernel_compare"})
