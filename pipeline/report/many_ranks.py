"""Past a few dozen processes: draw the ones that matter, a distribution for the rest, and every
process one click away.

Why: a bar and a timeline lane per process made report.html 64.9 MB at 10,240 ranks, and nobody
reads 10,240 lanes. Above `MANY` processes the step bars and the timeline show only the *selected*
processes: every culprit of the chosen step (ranks.parquet `culprit` rows) and the ranks that waited
longest for it, the slowest and the fastest steps, and the median one; a histogram per role of
the step walls says where everybody else lies; the per-phase spread across all ranks is the Ranks
section's skew chart. Every process stays one click away in a collapsed table (`<details>`): its
step wall, each top-level stage's wall and a link to its window trace, ~150 bytes a row.
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import pandas as pd

from .processes import ProcessId, ProcessStep
from .template import esc, fmt_ms, stage_color, stage_order

#: More processes than this: draw the selection, not everyone.
MANY = 64
SLOWEST = 8
FASTEST = 2


def select(procs: Sequence[ProcessStep], ranks_df: pd.DataFrame | None) -> list[ProcessStep]:
    """The processes worth drawing, in the page's order: culprits (and their first victims), the
    slowest and the fastest steps of each role, its median step."""
    if len(procs) <= MANY:
        return list(procs)
    want: set[int] = set()
    by_role: dict[Any, list[int]] = {}
    for i, p in enumerate(procs):
        by_role.setdefault(p.role, []).append(i)
    culprits: set[tuple[Any, Any]] = set()
    if ranks_df is not None and not ranks_df.empty and "row_kind" in ranks_df.columns:
        c = ranks_df[(ranks_df["row_kind"] == "culprit") & ranks_df["rank"].notna()]
        for r in c.to_dict("records"):
            role = r["role"] if isinstance(r["role"], str) else None
            culprits.add((role, int(r["rank"])))
            for v in str(r.get("victim_ranks") or "").split(",")[:2]:
                if v.strip().lstrip("-").isdigit():
                    culprits.add((role, int(v)))
    for i, p in enumerate(procs):
        if (p.role, p.rank) in culprits:
            want.add(i)
    for idx in by_role.values():
        walls = np.array([procs[i].wall_ns for i in idx])
        order = np.argsort(-walls, kind="stable")
        want.update(idx[j] for j in order[:SLOWEST])
        want.update(idx[j] for j in order[-FASTEST:])
        want.add(idx[int(order[len(order) // 2])])
    return [procs[i] for i in sorted(want)]


def histogram(procs: Sequence[ProcessStep], shown: Sequence[ProcessStep], bins: int = 40) -> str:
    """SVG per role: how many processes had each step wall (bins of equal width), the drawn ones
    marked under the axis."""
    out: list[str] = []
    roles: dict[Any, list[ProcessStep]] = {}
    for p in procs:
        roles.setdefault(p.role, []).append(p)
    shown_ids = {p.ident for p in shown}
    w, h, x0, top = 640, 90, 60, 14
    for role, ps in roles.items():
        walls = np.array([p.wall_ns for p in ps], dtype=np.float64)
        lo, hi = float(walls.min()), float(walls.max())
        span = hi - lo or max(hi, 1.0) * 0.01 or 1.0
        counts, edges = np.histogram(walls, bins=bins, range=(lo, lo + span))
        cmax = max(int(counts.max()), 1)
        bw = w / bins
        parts = [f'<svg class="hist" role="img" width="{x0 + w + 20}" height="{h + top + 44}" '
                 f'viewBox="0 0 {x0 + w + 20} {h + top + 44}">',
                 f'<text x="0" y="10">{esc(role or "?")}: {len(ps):,} processes, step wall '
                 f'{fmt_ms(lo)} - {fmt_ms(hi)} ms</text>']
        for i, c in enumerate(counts):
            if not c:
                continue
            bh = h * c / cmax
            parts.append(f'<rect x="{x0 + i * bw:.1f}" y="{top + h - bh:.1f}" width="{max(bw - 1, 1):.1f}" '
                         f'height="{bh:.1f}" fill="#6b8fbf"><title>{c:,} processes with a step of '
                         f'{fmt_ms(edges[i])} - {fmt_ms(edges[i + 1])} ms</title></rect>')
        for p in ps:
            if p.ident in shown_ids:
                x = x0 + w * (p.wall_ns - lo) / span
                parts.append(f'<line x1="{x:.1f}" x2="{x:.1f}" y1="{top + h + 2}" y2="{top + h + 9}" stroke="#d62728">'
                             f'<title>{esc(p.label)}: {fmt_ms(p.wall_ns)} ms (drawn above)</title></line>')
        parts.append(f'<text class="small" x="{x0}" y="{top + h + 22}">{fmt_ms(lo)} ms</text>'
                     f'<text class="small" x="{x0 + w}" y="{top + h + 22}" text-anchor="end">{fmt_ms(lo + span)} ms</text>'
                     f'<text class="small" x="0" y="{top + h / 2}">{cmax:,}</text></svg>')
        out.append("".join(parts))
    return "".join(out)


def all_processes(procs: Sequence[ProcessStep], hrefs: Mapping[ProcessId, str | None]) -> str:
    """Every process in one collapsed table: step wall, each stage's wall (its top-level phases),
    the window trace."""
    stages = stage_order({ph.stage for p in procs for ph in p.phases})
    head = "".join(f'<th title="{esc(s)}"><i style="background:{stage_color(s)}"></i>{esc(s[:14])}</th>' for s in stages)
    rows = []
    for p in procs:
        per: dict[str, int] = {}
        for ph in p.phases:
            per[ph.stage] = per.get(ph.stage, 0) + ph.wall_ns
        href = hrefs.get(p.ident)
        name = f'<a href="{esc(href)}">{esc(p.label)}</a>' if href else esc(p.label)
        rows.append(f"<tr><td class=l>{name}</td><td>{fmt_ms(p.wall_ns)}</td>"
                    + "".join(f"<td>{fmt_ms(per[s]) if s in per else ''}</td>" for s in stages) + "</tr>")
    return (f'<details id="all-processes"><summary>All {len(procs):,} processes (step wall and stage walls, ms; '
            f'click to open)</summary><div class="scroll"><table><thead><tr><th class=l>process</th><th>step</th>'
            f'{head}</tr></thead><tbody>{"".join(rows)}</tbody></table></div></details>')


def note(n_all: int, n_shown: int) -> str:
    return (f'<p class="note">{n_all:,} processes: drawn below are {n_shown} of them: the culprits of the step and '
            'the ranks that waited for them, the slowest and fastest steps of each role and its median one. The '
            'histogram says where all the others lie; the Ranks section has the spread of every phase across all '
            'ranks; <a href="#all-processes">every process</a> is listed, with its trace, in a collapsed table.</p>')
