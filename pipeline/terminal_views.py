"""What collect prints about a run: by role, not by rank, in at most about 60 lines at any rank count.

Why a module of its own: the artifact list and the phase tables used to grow with every file and
rank (245 lines for 32 ranks). Here the artifacts collapse to one line per (kind, status, step)
with failures always named, and each role gets one table of its phases with min / median / max
across its ranks, GPU busy and peak memory, and one line naming the straggler (pipeline/ranks.py
decides it). Per-rank tables stay available with `per_rank=True` (`collect --per-rank`).
Everything here is plain text over the phases rows and the ranks table; the caller prints it.
"""
from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any, Iterable

import pandas as pd
from rich.text import Text

from ..stages.core import formats
from ..stages.core.errors import cut_at_word
from . import compare, ranks
from .commands.wrap import fit_lines
from .headline import headline, headline_roles

#: Phase rows per role table.
TOP_PHASES = 12
#: Failed artifacts named one by one before the rest are counted.
MAX_FAILED = 8
GPU_NOTE = ("GPU % = GPU busy / launch span (start to the end of the last GPU work the phase\n"
            "launched), so never above 100; inherited rule: work launched from the phase and\n"
            "its worker threads. NVIDIA's same-thread rule: gpu_busy_ns in phases.parquet.")


def _ms(ns: Any) -> str:
    return "" if ns is None or pd.isna(ns) else f"{ns / 1e6:,.1f}"


def _mb(b: Any) -> str:
    return "" if b is None or pd.isna(b) or not b else f"{b / 2**20:,.0f}"


def artifact_summary(statuses: Iterable[Any], artifacts: Iterable[Any], width: int = 80) -> list[str]:
    """One line per (kind, status, step) with the count and size; each failed file by name; every
    line at most `width` columns (reasons and names wrapped at words, `fit`).

    `statuses`: objects with `rel`, `status`, `reason`; `artifacts`: objects with `rel`, `kind`,
    `size`, `step` (collect's ArtifactStatus and Artifact)."""
    arts = {a.rel: a for a in artifacts}
    groups: Counter[tuple[str, str, str]] = Counter()
    sizes: Counter[tuple[str, str, str]] = Counter()
    why: dict[tuple[str, str, str], Counter[str]] = {}
    failed: list[str] = []
    for st in statuses:
        a = arts.get(st.rel)
        kind = getattr(getattr(a, "kind", None), "value", "?")
        step = getattr(a, "step", None)
        key = (kind, st.status, "-" if step is None else str(step))
        groups[key] += 1
        sizes[key] += int(getattr(a, "size", 0) or 0)
        if st.reason:
            why.setdefault(key, Counter())[cut_at_word(st.reason.split(";")[0], 60)] += 1
        if st.status == "failed":
            failed.append(f"  failed: {st.rel}: {st.reason or ''}".rstrip(": "))
    lines = []
    for key in sorted(groups, key=lambda k: (k[1] != "failed", k[0], k[2], k[1])):
        kind, status, step = key
        reason = why.get(key, Counter()).most_common(1)
        lines += fit(f"{status:8} {groups[key]:>5} x {kind:15} step {step:>3}  {sizes[key] / 2**20:8.1f} MB"
                     + (f"  ({reason[0][0]})" if reason and status != "done" else ""), width, 10)
    if len(failed) > MAX_FAILED:
        failed = failed[:MAX_FAILED] + [f"  ... and {len(failed) - MAX_FAILED} more failed (manifest.json lists them)"]
    return lines + [piece for line in failed for piece in fit(line, width, 4)]


def role_tables(phases: Any, ranks_rows: Any = None, top: int = TOP_PHASES, width: int = 80) -> list[str]:
    """Per role: a header line, a table of its top phases across ranks, the straggler line."""
    df = compare.to_frame(phases)
    if df.empty:
        return []
    full = compare.to_frame(ranks_rows) if ranks_rows is not None else ranks.ranks_table(df).to_pandas()
    table = ranks.chosen_rows(full)   # the step of phases.parquet; recurrence rows speak of every step
    across = table[table["row_kind"] == "ranks"] if not table.empty else table
    totals = compare.stage_totals(df)

    out: list[str] = headline_lines(df, full, width)
    stated = set(headline_roles(full))   # their culprit and recurrence are in the headline already
    name_w = max(16, width - 52)
    for role, grp in across.groupby(across["role"].fillna("?"), sort=False):
        step = grp["step"].dropna().max()
        grp = grp[grp["step"] == step] if not pd.isna(step) else grp
        n = int(grp["ranks"].max())
        out += fit(f"{role}: {n} rank{'s' if n != 1 else ''}, step {'' if pd.isna(step) else int(step)}"
                   f" (ms across ranks; GPU % inh., mem MB)", width, 2)
        out.append(f"  {'phase':{name_w}} {'min':>8} {'median':>8} {'max':>8} {'GPU %':>6} {'mem':>7}")
        rows = grp.sort_values("wall_median_ns", ascending=False, kind="stable").head(top)
        keep = set(rows["path"])
        keep |= {" > ".join(p.split(" > ")[:i]) for p in keep for i in range(1, p.count(" > ") + 1)}
        rows = grp[grp["path"].isin(keep)]   # with their enclosing phases, in tree order (depth-first)
        for r in rows.to_dict("records"):
            depth = r["path"].count(" > ")
            label = ("  " * depth + r["path"].rsplit(" > ", 1)[-1])
            label = label if len(label) <= name_w else label[:name_w - 1] + "…"
            pct = compare.gpu_percent(r["gpu_busy_inherited_ns"], r.get("launch_span_ns"))
            out.append(f"  {label:{name_w}} {_ms(r['wall_min_ns']):>8} {_ms(r['wall_median_ns']):>8} "
                       f"{_ms(r['wall_max_ns']):>8} {pct:>6} {_mb(r['mem_peak_bytes']):>7}")
        tot = totals[(totals["role"].fillna("?") == role)]
        other = tot[tot["stage"] == "other"]["wall_ns"]
        stepw = tot[tot["stage"] == "step"]["wall_ns"]
        if len(other) and len(stepw) and stepw.iloc[0]:
            # where the whole comes from: the process with the slowest step lends every stage row
            # (compare.stage_totals); its step is its `step` range, else its step window
            out += fit(f"  other (in no stage): {_ms(other.iloc[0])} ms of {_ms(stepw.iloc[0])} ms, the step window "
                       "of the slowest rank", width)
        if role not in stated:
            out += culprit_lines(table, role, width)
    out += critical_path_lines(table, width)
    out += [piece for line in dispatch_lines(table) + snapshot_lines(df) for piece in fit(line, width)]
    if out:
        out += GPU_NOTE.splitlines()
    return out


def headline_lines(phases: Any, ranks_rows: Any, width: int = 80) -> list[str]:
    """The answer at a glance, first (pipeline/headline.py: the same facts as the report's
    headline): the step and what bounds it, the culprit, its recurrence, the GPU's largest idle."""

    facts = headline(phases, ranks_rows)
    if not facts:
        return []
    out = ["at a glance:"]
    for f in facts:
        out += fit(f"  {f.label + ':':8} {f.text}", width, 11)
    return out


def snapshot_lines(df: pd.DataFrame) -> list[str]:
    """Memory snapshots (their rows are allocator phases, not wall time): the peak per process
    (an untimed snapshot's: over its recorded history, `mem_scope`)."""
    if "source_kind" not in df.columns:
        return []
    mem = df[df["source_kind"].isin(formats.untimed_kinds())]
    if mem.empty or "mem_peak_bytes" not in mem.columns or mem["mem_peak_bytes"].isna().all():
        return []
    out = []
    for (rank, pid), grp in mem.groupby([mem["rank"].fillna(-1), mem["pid"].fillna(-1)], sort=True):
        top = grp.loc[grp["mem_peak_bytes"].idxmax()]
        who = f"rank {int(rank)}" if rank >= 0 else f"pid {int(pid)}"
        if top.get("mem_scope") == "recorded_history":   # torch < 2.2: no times, no phases
            out.append(f"memory snapshot, {who}: peak {_mb(top['mem_peak_bytes'])} MB allocated, "
                       f"{_mb(top['mem_reserved_peak_bytes'])} MB reserved, over its recorded history "
                       "(no times in it: not per phase)")
            continue
        out.append(f"memory snapshot, {who}: peak {_mb(top['mem_peak_bytes'])} MB in {top['phase']}")
    return out[:4] + ([f"... {len(out) - 4} more snapshots in phases.parquet"] if len(out) > 4 else [])


def dispatch_lines(table: pd.DataFrame, limit: int = 8) -> list[str]:
    """Controller against workers, one line per verl driver stage of the (chosen) step."""
    if table.empty or "dispatch_ns" not in table.columns:
        return []
    d = table[table["row_kind"] == "dispatch"]
    if d.empty:
        return []
    d = d[d["step"] == d["step"].max()].head(limit)
    first = d.iloc[0]
    out = [f"controller ({first['driver_role']}) vs workers ({first['role']}), step {int(first['step'])}, ms:"]
    for r in d.to_dict("records"):
        who = "" if pd.isna(r["slowest_rank"]) else f" (rank {int(r['slowest_rank'])})"
        out.append(f"  {r['path']:24.24} {_ms(r['wall_ns']):>8} {_ms(r['wall_max_ns']):>8}{who:10} "
                   f"dispatch {_ms(r['dispatch_ns'])}")
    return out


def fit(line: str, width: int, indent: int = 4) -> list[str]:
    """One plain line in lines of at most `width` columns (continuations indented by `indent`),
    broken at words, never between a number and its unit (commands/wrap.py); a word wider than
    the line (a long name) stays whole."""
    return [t.plain.rstrip() for t in fit_lines(Text(line), width, indent)]


def _wrapped(text: str, width: int, first: str, rest: str = "    ", clauses: bool = True) -> list[str]:
    """`text` in lines of at most `width` columns, broken after `; ` first (`clauses`), then at
    words (never after a number: `fit`)."""
    out: list[str] = []
    parts = text.split("; ") if clauses else [text]
    for i, part in enumerate(parts):
        part = part + (";" if i < len(parts) - 1 else "")
        out += fit((first if i == 0 else rest) + part, width, len(rest))
    return out


def culprit_lines(table: pd.DataFrame, role: Any, width: int = 80) -> list[str]:
    """The role's culprit statement of the chosen step and its recurrence over the profiled steps
    (pipeline/ranks.py decides both); the old per-phase straggler line where neither exists."""
    out: list[str] = []
    for text in ranks.statements(table, role, "culprit")[:1]:
        out += _wrapped(text, width, "  " if text.startswith("no ") else "  culprit: ")
    for text in ranks.statements(table, role, "recurrence")[:1]:
        out += _wrapped(text, width, "  across steps: ", clauses=False)
    if not out:
        across = table[(table["row_kind"] == "ranks") & (table["role"].fillna("?") == role)]
        out += fit("  " + straggler_line(across), width)
    return out


def critical_path_lines(table: pd.DataFrame, width: int = 80) -> list[str]:
    """The RL step as a critical path across roles: which stage bounds it, busy / idle per role."""
    if table.empty or "row_kind" not in table.columns:
        return []
    c = table[table["row_kind"] == "critical_path"]
    if c.empty:
        return []
    c = c[c["step"] == c["step"].max()]
    out = _wrapped(str(c["statement"].iloc[0]), width, "critical path: ")
    parts = [f"{'?' if r is None or pd.isna(r) else r} {_ms(b)}/{_ms(i)}" for r, b, i in zip(c["role"], c["busy_ns"], c["idle_ns"])]
    out += _wrapped("busy/idle ms: " + ", ".join(parts[:6]) + (f" (+{len(parts) - 6} roles)" if len(parts) > 6 else ""),
                    width, "  ", "    ")
    return out


def straggler_line(across: pd.DataFrame) -> str:
    """`straggler: rank R (+X ms in <phase>)`, or why none can be named."""
    s = ranks.stragglers(across)
    if s.empty:
        why = across["straggler_by"].dropna()
        reason = why.iloc[0] if len(why) else "none"
        return f"straggler: none named ({reason.removeprefix('none: ')})"
    top = s.iloc[0]
    return (f"straggler: rank {int(top['straggler_rank'])} (+{_ms(top['straggler_ns'])} ms in "
            f"{top['path'].rsplit(' > ', 1)[-1]}; by {top['straggler_by']})")


def per_rank_tables(phases: Any, top: int = TOP_PHASES) -> list[str]:
    """The old view, one small table per process (only with --per-rank)."""
    df = compare.to_frame(phases)
    out: list[str] = []
    if df.empty:
        return out
    if "source_kind" in df.columns:   # memory snapshots: allocator phases, not ranges (snapshot_lines)
        df = df[~df["source_kind"].isin(formats.untimed_kinds())]
    keys = [k for k in ("role", "rank", "pid") if k in df.columns]
    for key, grp in df.groupby([df[k].astype(object).fillna(-1) for k in keys], sort=False):
        out.append(" ".join(f"{k} {v}" for k, v in zip(keys, key)))
        grp = grp[grp["phase"] != compare.UNATTRIBUTED]
        g = grp.sort_values("wall_ns", ascending=False).head(top)
        if "path" in grp.columns and grp["path"].notna().all():
            keep = set(g["path"])
            keep |= {" > ".join(p.split(" > ")[:i]) for p in keep for i in range(1, p.count(" > ") + 1)}
            recs = [r for r in grp.to_dict("records") if r["path"] in keep]
            starts = {(r.get("step"), r["path"]): r.get("start_ns") for r in recs}
            recs = ranks.depth_first([{**r, "role": None} for r in recs],
                                     lambda r, p: starts.get((r.get("step"), p)))
        else:   # older rows without paths: as stored
            recs = grp.loc[[i for i in grp.index if i in set(g.index)]].to_dict("records")
        for r in recs:
            d = int(r["path"].count(" > ")) if isinstance(r.get("path"), str) else int(r.get("depth") or 0)
            out.append(f"  {'  ' * d + str(r['phase']):40.40} {_ms(r['wall_ns']):>9} ms")
    return out


def ranks_of_bundle(bundle: Path) -> pd.DataFrame | None:
    p = Path(bundle) / "summaries" / "ranks.parquet"
    return pd.read_parquet(p) if p.is_file() else None
