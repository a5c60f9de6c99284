"""The report's "Ranks" section: per role the straggler line and a rank-skew chart per stage.

Why: on a many-rank run the question is which rank the others wait for and how far apart the ranks
are, not one table per rank. The chart is one row per phase (depth <= 2, pipeline/ranks.py): a
line from the fastest to the slowest rank, a box from the median to the 90th percentile, a tick at
the median and a red dot at the straggler's wall; its size does not grow with the rank count.
"""
from __future__ import annotations

import re
from typing import Any

import pandas as pd

from .. import ranks as ranks_mod
from .rank_bars import rank_bars
from .template import esc, fmt_ms

_ROW_H = 18
_LABEL_W = 230
_PLOT_W = 520


def _x(v: float, vmax: float) -> float:
    return _LABEL_W + (_PLOT_W * v / vmax if vmax > 0 else 0)


def skew_chart(across: pd.DataFrame) -> str:
    """SVG: one row per phase of one role and step (tree order), walls across ranks."""
    across = across[across["ranks"].fillna(0) >= 1]
    if across.empty:
        return ""
    vmax = float(across["wall_max_ns"].max() or 0) or 1.0
    h = _ROW_H * len(across) + 24
    w = _LABEL_W + _PLOT_W + 250
    parts = [f'<svg class="skew" width="{w}" height="{h}" viewBox="0 0 {w} {h}" role="img">']
    for i, r in enumerate(across.to_dict("records")):
        y = 4 + i * _ROW_H
        mid = y + _ROW_H / 2
        depth = str(r["path"]).count(" > ")
        name = str(r["path"]).rsplit(" > ", 1)[-1]
        lo, med, p90, hi = (float(r[c] or 0) for c in ("wall_min_ns", "wall_median_ns", "wall_p90_ns", "wall_max_ns"))
        title = (f"{r['path']}: {int(r['ranks'])} ranks, min {fmt_ms(lo)} / median {fmt_ms(med)} / p90 "
                 f"{fmt_ms(p90)} / max {fmt_ms(hi)} ms (rank {r['slowest_rank']}), skew {fmt_ms(r['skew_ns'])} ms")
        parts.append(f'<g><title>{esc(title)}</title>'
                     f'<text x="{4 + 10 * depth}" y="{mid + 4:.1f}">{esc(name[:34])}</text>'
                     f'<line x1="{_x(lo, vmax):.1f}" y1="{mid}" x2="{_x(hi, vmax):.1f}" y2="{mid}" stroke="#888"/>'
                     f'<rect x="{_x(med, vmax):.1f}" y="{y + 4}" width="{max(_x(p90, vmax) - _x(med, vmax), 1):.1f}" '
                     f'height="{_ROW_H - 8}" fill="#9ecae1"/>'
                     f'<line x1="{_x(med, vmax):.1f}" y1="{y + 2}" x2="{_x(med, vmax):.1f}" y2="{y + _ROW_H - 2}" stroke="#08519c"/>'
                     f'<text class="small" x="{_LABEL_W + _PLOT_W + 6}" y="{mid + 4:.1f}">median {fmt_ms(med)} · max '
                     f'{fmt_ms(hi)} ms{" (" + _rank_of(r).strip() + ")" if _rank_of(r) else ""}</text>')
        if not pd.isna(r.get("straggler_rank")):
            parts.append(f'<circle class="straggler" cx="{_x(hi if r["straggler_by"] in ("excess", "arrival") else lo, vmax):.1f}" '
                         f'cy="{mid}" r="4" fill="#d62728"><title>straggler: rank {int(r["straggler_rank"])} '
                         f'({esc(r["straggler_by"])}, +{fmt_ms(r["straggler_ns"])} ms)</title></circle>')
        parts.append("</g>")
    parts.append(f'<text class="small" x="{_LABEL_W}" y="{h - 4}">0</text>'
                 f'<text class="small" x="{_LABEL_W + _PLOT_W}" y="{h - 4}" text-anchor="end">{fmt_ms(vmax)} ms</text>')
    parts.append("</svg>")
    return "".join(parts)


def _rank_of(r: dict[str, Any]) -> str:
    return "" if pd.isna(r["slowest_rank"]) else f" rank {int(r['slowest_rank'])}"


def dispatch_section(df: pd.DataFrame) -> str:
    """HTML: per verl driver stage, the controller's wall, the slowest worker's and the gap."""
    if df.empty or "row_kind" not in df.columns:
        return ""
    d = df[df["row_kind"] == "dispatch"]
    if d.empty:
        return ""
    d = d[d["step"] == d["step"].max()]
    rows = "".join(
        f"<tr><td class=l>{esc(r['path'])}</td><td class=l>{esc(r['driver_role'])}</td><td>{fmt_ms(r['wall_ns'])}</td>"
        f"<td class=l>{esc(r['role'])}{_rank_of(r)}</td>"
        f"<td>{fmt_ms(r['wall_max_ns'])}</td><td>{fmt_ms(r['dispatch_ns'])}</td></tr>"
        for r in d.to_dict("records"))
    return ("<h2 id=\"dispatch\">Controller and workers</h2><p class=note>For each verl driver stage: the single "
            "controller's wall, the slowest worker's matching stage, and the gap (<b>dispatch</b>: dispatch, "
            "data transfer, waiting for the slowest worker). ranks.parquet rows with <code>row_kind</code> = <code>dispatch</code>.</p>"
            '<div class="scroll"><table><thead><tr><th class=l>stage</th><th class=l>controller</th><th>wall ms</th>'
            "<th class=l>slowest worker</th><th>its wall ms</th><th>dispatch ms</th></tr></thead>"
            f"<tbody>{rows}</tbody></table></div>")


def _statement_html(text: str) -> str:
    """A culprit statement with its culprit rank marked (`<b class="straggler-rank">rank R</b>`)."""
    m = re.match(r"rank (\d+) ", text)
    if not m:
        return esc(text)
    return f'<b class="straggler-rank">rank {m.group(1)}</b> ' + esc(text[m.end():])


def culprit_html(df: pd.DataFrame, role: Any) -> str:
    """The culprit statement of the chosen step and the recurrence line of one role, as HTML."""
    chosen = ranks_mod.chosen_rows(df)
    out = []
    for text in ranks_mod.statements(chosen, role, "culprit")[:1]:
        out.append(f'<p class="culprit">{"" if text.startswith("no ") else "culprit: "}{_statement_html(text)}</p>')
    for text in ranks_mod.statements(df, role, "recurrence")[:1]:
        out.append(f'<p class="recurrence">across the profiled steps: {esc(text)}</p>')
    steps = df[(df["row_kind"] == "culprit") & (df["role"].fillna("?") == role)] if "statement" in df.columns else df.iloc[:0]
    if len(steps) > 1:
        items = "".join(f"<li>step {int(r['step'])}{' (summarized)' if r.get('chosen') is True else ''}: "
                        f"{esc(r['statement'])}</li>" for r in steps.sort_values("step").to_dict("records")[:16])
        out.append(f"<details><summary>every profiled step</summary><ul>{items}</ul></details>")
    return "".join(out)


def critical_path_section(df: pd.DataFrame) -> str:
    """HTML: the RL step as a critical path across roles: which stage bounds it, busy and idle per role."""
    if df.empty or "row_kind" not in df.columns:
        return ""
    c = ranks_mod.chosen_rows(df)
    c = c[c["row_kind"] == "critical_path"]
    if c.empty:
        return ""
    c = c[c["step"] == c["step"].max()]
    rows = "".join(
        f"<tr><td class=l>{esc(r['role'])}</td><td>{fmt_ms(r['busy_ns'])}</td><td>{fmt_ms(r['idle_ns'])}</td>"
        f"<td>{100 * float(r['busy_ns']) / float(r['wall_ns']):.0f}%</td></tr>"
        for r in c.to_dict("records") if r["wall_ns"])
    return ("<h2 id=\"critical-path\">Critical path of the RL step</h2>"
            f'<p class="critical">{esc(c["statement"].iloc[0])}</p>'
            "<p class=note>The stages of an RL step run one after the other: the longest stage on the controller "
            "(else the longest own time of any rank, its waits for others left out) bounds the step. Per role: "
            "<b>busy</b> is the median rank's own time in its stages (collective waits left out; the controller: "
            "its own stages), <b>idle</b> the rest of the step (waiting, dispatch, gaps). ranks.parquet rows "
            "with <code>row_kind</code> = <code>critical_path</code>.</p>"
            '<table><thead><tr><th class=l>role</th><th>busy ms</th><th>idle ms</th><th>busy %</th></tr></thead>'
            f"<tbody>{rows}</tbody></table>")


def ranks_section(table: Any) -> str:
    """HTML: per role, the culprit, its recurrence and the skew chart of the summarized step."""
    full = table if isinstance(table, pd.DataFrame) else pd.DataFrame(table)
    if full.empty:
        return ""
    df = ranks_mod.chosen_rows(full)
    across = df[df["row_kind"] == "ranks"]
    if across.empty or across["ranks"].max() < 2:
        return critical_path_section(full) + dispatch_section(df)
    out = ["<h2 id=\"ranks\">Ranks</h2>",
           '<p class=note>The <b>culprit</b> is the rank that lost the time: its own time in a phase (wall minus '
           'its waits in collectives) over the other ranks\' median, above the noise floor (5% of the phase and '
           '1 ms, 5% of the step) in most of the profiled steps; the victims are the ranks that then waited for it, and where. Per phase, walls across the '
           'role\'s ranks: grey line fastest to slowest rank, blue box median to 90th percentile, dark tick the '
           'median; red dot: that phase\'s straggler. The slowest rank is often one that waited '
           '(docs/summaries.md).</p>']
    for role, grp in across.groupby(across["role"].fillna("?"), sort=False):
        step = grp["step"].dropna().max()
        grp = grp[grp["step"] == step] if not pd.isna(step) else grp
        line = culprit_html(full, role)
        if not line:
            s = ranks_mod.stragglers(grp)
            if s.empty:
                why = grp["straggler_by"].dropna()
                line = f"<p>straggler: none named ({esc(str(why.iloc[0]).removeprefix('none: ')) if len(why) else 'none'})</p>"
            else:
                t = s.iloc[0]
                line = (f'<p>straggler: <b class="straggler-rank">rank {int(t["straggler_rank"])}</b> '
                        f'(+{fmt_ms(t["straggler_ns"])} ms in {esc(str(t["path"]).rsplit(" > ", 1)[-1])}; '
                        f'by {esc(t["straggler_by"])})</p>')
        out.append(f"<h3>{esc(role)}: {int(grp['ranks'].max())} ranks, step {'' if pd.isna(step) else int(step)}</h3>"
                   f"{line}")
        mine = df[(df["row_kind"] == "rank") & (df["role"].fillna("?") == role) & (df["step"] == step)]
        cul = df[(df["row_kind"] == "culprit") & (df["role"].fillna("?") == role) & (df["step"] == step)]
        bars = rank_bars(mine, cul.iloc[0].to_dict() if len(cul) else None)
        if bars:
            out.append(f"<h4>Per rank: own time and waiting</h4>{bars}")
        out.append("<h4>Per phase: spread across the ranks</h4>")
        out.append(skew_chart(grp))
    out.append(critical_path_section(full))
    out.append(dispatch_section(df))
    return "".join(out)
