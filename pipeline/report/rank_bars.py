"""Per rank, labelled bars: how long each rank worked and how long it waited in the step (issue 42).

Why: the per-phase skew chart says how far apart the ranks are, not which rank is which; the
question on a multi-rank run is "whom did everybody wait for". One bar per rank: its own time in
the role's stages (wall minus its waits in collectives, ranks.parquet `rank` rows, the same figures
the culprit rule reads) and, after it, the time it waited, each labelled in ms; the culprit's bar is
outlined in red and named, the victims' are marked. Readable at 4 ranks and at 1,024: past `MANY`
ranks only the culprits, their first victims, the slowest, the fastest and the median rank are
drawn (as the step bars do, many_ranks.py), with a histogram of every rank's own time beside them.
"""
from __future__ import annotations

import math
from typing import Any

import numpy as np
import pandas as pd

from .template import axis, esc, fmt_ms, nice_ticks, text_width

#: More ranks than this: draw a selection and a histogram.
MANY = 48
OWN_COLOR, WAIT_COLOR = "#4e79a7", "#c9c9c9"


def per_rank(rows: pd.DataFrame) -> pd.DataFrame:
    """rank -> own_ns, wait_ns over the role's top stage ranges (a known stage, no ancestor with
    one) of one step, from `rank` rows."""
    known = rows[~rows["stage"].isin(["step", "other", "collective"]) & rows["stage"].notna() & rows["rank"].notna()]
    if known.empty:
        return pd.DataFrame(columns=["rank", "own_ns", "wait_ns"])
    have = set(known["path"])
    top = known[[not any(" > ".join(p.split(" > ")[:i]) in have for i in range(1, p.count(" > ") + 1))
                 for p in known["path"]]]
    wall = pd.to_numeric(top["wall_ns"], errors="coerce").fillna(0)
    wait = pd.to_numeric(top["wait_ns"], errors="coerce").fillna(0).clip(lower=0)
    g = pd.DataFrame({"rank": top["rank"].astype(int), "own_ns": (wall - wait).clip(lower=0), "wait_ns": wait})
    return g.groupby("rank", sort=True)[["own_ns", "wait_ns"]].sum().reset_index()


def _selection(d: pd.DataFrame, marked: dict[int, str]) -> pd.DataFrame:
    if len(d) <= MANY:
        return d
    want = set(k for k in marked if marked[k] == "culprit")
    want |= set(list(k for k in marked if marked[k] == "victim")[:2])
    order = d.sort_values("own_ns", ascending=False, kind="stable")["rank"].tolist()
    want |= set(order[:8]) | set(order[-2:]) | {order[len(order) // 2]}
    return d[d["rank"].isin(want)]


def _histogram(d: pd.DataFrame, bins: int = 40) -> str:
    own = d["own_ns"].to_numpy(np.float64)
    lo, hi = float(own.min()), float(own.max())
    span = hi - lo or max(hi, 1.0) * 0.01 or 1.0
    counts, edges = np.histogram(own, bins=bins, range=(lo, lo + span))
    w, h, x0, top = 640, 70, 50, 18
    cmax = max(int(counts.max()), 1)
    bw = w / bins
    parts = [f'<svg class="rankhist" role="img" width="{x0 + w + 10}" height="{h + top + 30}" '
             f'viewBox="0 0 {x0 + w + 10} {h + top + 30}">',
             f'<text x="0" y="12">all {len(d):,} ranks: own time {fmt_ms(lo)} - {fmt_ms(hi)} ms</text>']
    for i, c in enumerate(counts):
        if c:
            bh = h * c / cmax
            parts.append(f'<rect x="{x0 + i * bw:.1f}" y="{top + h - bh:.1f}" width="{max(bw - 1, 1):.1f}" '
                         f'height="{bh:.1f}" fill="#6b8fbf"><title>{c:,} ranks with {fmt_ms(edges[i])} - '
                         f'{fmt_ms(edges[i + 1])} ms own time</title></rect>')
    parts.append(f'<text x="{x0}" y="{top + h + 16}">{fmt_ms(lo)} ms</text>'
                 f'<text x="{x0 + w}" y="{top + h + 16}" text-anchor="end">{fmt_ms(lo + span)} ms</text>'
                 f'<text x="{x0 - 6}" y="{top + 10}" text-anchor="end">{cmax:,}</text></svg>')
    return "".join(parts)


def rank_bars(rows: pd.DataFrame, culprit: dict[str, Any] | None) -> str:
    """HTML: the bars of one role's ranks in one step (`rows`: its `rank` rows), and past `MANY`
    ranks the histogram; '' when fewer than two ranks."""
    d = per_rank(rows)
    if len(d) < 2:
        return ""
    marked: dict[int, str] = {}
    if culprit and culprit.get("rank") is not None and not pd.isna(culprit.get("rank")):
        for v in str(culprit.get("victim_ranks") or "").split(","):
            if v.strip().lstrip("-").isdigit():
                marked[int(v)] = "victim"
        marked[int(culprit["rank"])] = "culprit"
    shown = _selection(d, marked)
    total = (shown["own_ns"] + shown["wait_ns"])
    vmax, n_ticks = nice_ticks(float(total.max()) if len(total) else 0.0)
    label_w, plot_w, bar_h, gap, top = 96, 520, 14, 6, 6
    notes = {int(r["rank"]): (f"{fmt_ms(r['own_ns'])} ms own · {fmt_ms(r['wait_ns'])} ms waiting"
                              + {"culprit": " · culprit", "victim": " · waited for the culprit"}.get(marked.get(int(r["rank"])), ""))
             for r in shown.to_dict("records")}
    height = top + len(shown) * (bar_h + gap) + 34
    ends = [label_w + plot_w * float(o + w) / vmax + 4 + text_width(notes[int(k)], 11) for k, o, w in
            zip(shown["rank"], shown["own_ns"], shown["wait_ns"])]
    width = int(math.ceil(max([label_w + plot_w + 20.0, *ends]))) + 4
    parts = [f'<svg role="img" class="rankbars" width="{width}" height="{height}" viewBox="0 0 {width} {height}">']
    parts += axis(label_w, plot_w, vmax, top, height - 34, "ms", n_ticks)
    y = top
    for r in shown.to_dict("records"):
        k = int(r["rank"])
        kind = marked.get(k, "")
        ow, ww = plot_w * float(r["own_ns"]) / vmax, plot_w * float(r["wait_ns"]) / vmax
        cls = f' class="{kind}-lane"' if kind else ""
        parts.append(f'<g class="rankbar" data-rank="{k}"><text x="{label_w - 6}" y="{y + bar_h - 3}" text-anchor="end"{cls}>'
                     f'rank {k}</text>'
                     f'<rect x="{label_w}" y="{y}" width="{max(ow, 0.5):.1f}" height="{bar_h}" fill="{OWN_COLOR}">'
                     f'<title>rank {k}: {fmt_ms(r["own_ns"])} ms own time</title></rect>'
                     f'<rect x="{label_w + ow:.1f}" y="{y}" width="{ww:.1f}" height="{bar_h}" fill="{WAIT_COLOR}">'
                     f'<title>rank {k}: {fmt_ms(r["wait_ns"])} ms waiting in collectives</title></rect>')
        if kind == "culprit":
            parts.append(f'<rect x="{label_w - 1}" y="{y - 1.5}" width="{ow + ww + 2:.1f}" height="{bar_h + 3}" '
                         'fill="none" stroke="#d62728" stroke-width="2.5"/>')
        parts.append(f'<text x="{label_w + ow + ww + 4:.1f}" y="{y + bar_h - 3}">{esc(notes[k])}</text></g>')
        y += bar_h + gap
    parts.append("</svg>")
    note = ""
    if len(shown) < len(d):
        note = (f'<p class="note">{len(d):,} ranks: drawn are {len(shown)}: the culprit and its first victims, '
                "the 8 slowest, the 2 fastest and the median rank; the histogram says where all the others lie.</p>")
    legend = (f'<div class="legend"><span><i style="background:{OWN_COLOR}"></i>own time (wall minus waits)</span>'
              f'<span><i style="background:{WAIT_COLOR}"></i>waiting in collectives</span>'
              '<span><i style="border:2px solid #d62728;box-sizing:border-box"></i>culprit</span></div>')
    return legend + note + "".join(parts) + (_histogram(d) if len(shown) < len(d) else "")
