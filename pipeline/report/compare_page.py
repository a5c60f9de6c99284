"""The comparison page (`summarize --html`): per stage a bar per run with its change against the
baseline, the comparison table, and each run's largest kernel-time changes.

Numbers come from pipeline/compare.py, so the page, the terminal table and compare.parquet agree.
"""
from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from .. import compare
from .template import (
    RUN_COLORS,
    axis,
    cell,
    delta_class,
    esc,
    fmt_ms,
    fmt_rel,
    isnull,
    kernel_labels,
    legend,
    nice_ticks,
    page,
    table,
    text_width,
)


def svg_grouped_bars(groups: Sequence[str], series: Sequence[str], value: Callable[[str, str], float | None],
                     colors: Mapping[str, str], *, unit: str = "ms", bar_h: int = 12, label_w: int = 200,
                     plot_w: int = 520, note: Callable[[str, str], str | None] | None = None) -> str:
    """Horizontal grouped bars: one group per label, one bar per series (run) inside it; `note`
    adds text after a bar's value (the change against the baseline)."""
    vals = [v for g in groups for s in series if (v := value(g, s)) is not None]
    vmax, n_ticks = nice_ticks(max(vals) if vals else 0)
    gap = 10
    group_h = len(series) * bar_h + gap
    top = 6
    height = top + len(groups) * group_h + 34
    # wide enough for the value and note after the longest bar (issue 34: a fixed 150 px cut them)
    ends = [label_w + max(0.5, plot_w * v / vmax) + 3 + text_width(f"{fmt_ms(v)} {(note(g, s) if note else None) or ''}", 10) + 8
            for g in groups for s in series if (v := value(g, s)) is not None] if len(series) <= 12 else []
    width = int(math.ceil(max([label_w + plot_w + 20.0, *ends])))
    parts = [f'<svg role="img" width="{width}" height="{height}" viewBox="0 0 {width} {height}">']
    parts += axis(label_w, plot_w, vmax, top, height - 34, unit, n_ticks)
    y = top
    for g in groups:
        parts.append(f'<text x="{label_w - 6}" y="{y + len(series) * bar_h / 2 + 4:.1f}" text-anchor="end">{esc(g)}</text>')
        for s in series:
            v = value(g, s)
            if v is not None:
                w = max(0.5, plot_w * v / vmax)
                extra = (note(g, s) if note else None) or ""
                parts.append(
                    f'<rect x="{label_w}" y="{y}" width="{w:.1f}" height="{bar_h - 1}" fill="{colors[s]}">'
                    f'<title>{esc(g)} · {esc(s)}: {esc(fmt_ms(v))} {esc(unit)}{esc(" " + extra if extra else "")}'
                    '</title></rect>')
                if len(series) <= 12:
                    parts.append(f'<text class="small" x="{label_w + w + 3:.1f}" y="{y + bar_h - 2}">'
                                 f'{esc(fmt_ms(v))}{esc(" " + extra if extra else "")}</text>')
            y += bar_h
        y += gap
    parts.append("</svg>")
    return "".join(parts)


def _label(stage: str, role: Any) -> str:
    return f"{stage} ({role})" if not isnull(role) and role else stage


def _delta_bar(delta: float, scale: float, width: int = 120) -> str:
    """A tiny diverging bar for a table cell: right/red = slower, left/green = faster."""
    half = width / 2
    w = 0 if scale <= 0 else min(half, half * abs(delta) / scale)
    x = half if delta >= 0 else half - w
    color = "#d62728" if delta > 0 else "#2ca02c"
    return (f'<svg width="{width}" height="10"><line x1="{half}" y1="0" x2="{half}" y2="10" stroke="#999"/>'
            f'<rect x="{x:.1f}" y="1" width="{w:.1f}" height="8" fill="{color}"/></svg>')


_TABLE_METRICS = (("wall_ns", "wall", "ms"), ("gpu_busy_inherited_ns", "GPU busy (inherited rule)", "ms"),
                  ("mem_peak_bytes", "peak device memory", "MB"))
NOISE_NOTE = ("A change is coloured only above the noise: the step-to-step spread of steps 2..N where "
              "several steps were profiled, else 5% of the baseline and 0.1 ms (summarize --noise-rel, "
              "--noise-ms); below it the cell says <i>noise</i>. GPU busy is the inherited figure: GPU work "
              "launched from the stage's ranges and their worker threads (NVIDIA's same-thread figure: "
              "metric gpu_busy_ns in compare.parquet).")


def _fmt(v: Any, unit: str) -> str:
    if isnull(v):
        return "–"
    return f"{float(v) / 2**20:,.0f}" if unit == "MB" else fmt_ms(v)


def _stage_tables(cmp_df: Any, run_ids: list[str], baseline: str) -> str:
    """Wall, GPU busy and memory per stage and role, one table each, changes flagged over noise."""
    out = [f"<p class=note>{NOISE_NOTE}</p>"]
    for metric, name, unit in _TABLE_METRICS:
        m = cmp_df[cmp_df["metric"] == metric] if not cmp_df.empty else cmp_df
        if m.empty or m["value_ns"].isna().all():
            continue
        if (m["value_ns"].fillna(0) == 0).all():   # a table of zeros says nothing: one line instead
            out.append(f'<p class="note folded">{esc(name)}: zero in every run and stage, not drawn'
                       f'{" (no GPU work was recorded: CPU-only captures)" if metric.startswith("gpu") else ""}.</p>')
            continue
        rows_by: dict[str, dict[str, Any]] = {}
        for r in m.to_dict("records"):
            rows_by.setdefault(_label(r["stage"], r["role"]), {"_base": r["baseline_ns"]})[r["run"]] = r
        heads = [("stage (role)", "l"), (f"{baseline} {unit}", "")] + [(f"{r}", "") for r in run_ids if r != baseline]
        rows = []
        for g, by in rows_by.items():
            cells = [(esc(g), "l"), (_fmt(by["_base"], unit), "")]
            for r in run_ids:
                if r == baseline:
                    continue
                c = by.get(r)
                if c is None or isnull(c["value_ns"]):
                    cells.append(("–", ""))
                elif isnull(c["delta_ns"]) or c.get("flagged", True):
                    cells.append(((f'{_fmt(c["value_ns"], unit)} <span class="{delta_class(c["delta_ns"])}">'
                                   f'({fmt_rel(c["delta_rel"])})</span>'), ""))
                else:
                    cells.append((f'{_fmt(c["value_ns"], unit)} <span class="noise">(noise)</span>', ""))
            rows.append(cells)
        out.append(f"<h3>{esc(name)} ({unit})</h3>" + table(heads, rows))
    return "".join(out)


def _culprits_table(culprit_rows: Any, run_ids: list[str]) -> str:
    """Per run and role: the culprit statement of the summarized step and its recurrence over the
    profiled steps (ranks.parquet `culprit` / `recurrence` rows): whether the same rank holds
    every run back."""
    df = compare.to_frame(culprit_rows)
    if df.empty or "statement" not in df.columns:
        return ""
    rows = []
    for run in run_ids:
        d = df[df["run"] == run]
        for role, g in d.groupby(d["role"].fillna("?"), sort=False):
            cul = g[(g["row_kind"] == "culprit") & (g["chosen"] == True)]["statement"]   # noqa: E712
            rec = g[g["row_kind"] == "recurrence"]["statement"]
            rows.append([(esc(run), "l"), (esc(role), "l"), (esc(cul.iloc[0]) if len(cul) else "", "l"),
                         (esc(rec.iloc[0]) if len(rec) else "", "l")])
    if not rows:
        return ""
    return ("<h2>Who held the step back</h2><p class=note>Per run and role, the culprit of the summarized step "
            "and how often it was the culprit over the profiled steps (docs/summaries.md).</p>"
            + table([("run", "l"), ("role", "l"), ("summarized step", "l"), ("across the profiled steps", "l")], rows))


def render_compare_report(compare_rows: Any, kernel_change_rows: Any, runs_rows: Any, *, baseline: str,
                          metric: str = "wall_ns", title: str | None = None, top: int = 20,
                          culprit_rows: Any = None) -> str:
    """Many runs' page: grouped bars of stage times per run (each labelled with its change against
    the baseline), the comparison table, who held each run's step back (`culprit_rows`: the
    runs' ranks.parquet `culprit` and `recurrence` rows with a `run` column) and the largest
    kernel-time changes of each run."""
    cmp_df = compare.to_frame(compare_rows)
    runs_df = compare.to_frame(runs_rows)
    kc = compare.to_frame(kernel_change_rows)
    run_ids: list[str] = list(runs_df["run"]) if "run" in runs_df.columns else list(dict.fromkeys(cmp_df.get("run", [])))
    colors = {r: RUN_COLORS[i % len(RUN_COLORS)] for i, r in enumerate(run_ids)}
    body: list[str] = []

    body.append("<h2>Runs</h2>")
    cols = [c for c in ("model", "verl_version", "world_size", "tool", "profiled_steps", "window_step", "date",
                        "config_hash") if c in runs_df.columns]
    body.append(table(
        [("run", "l")] + [(c.replace("_", " "), "l") for c in cols],
        [[((f'<i style="display:inline-block;width:10px;height:10px;background:{colors[r["run"]]}"></i>&nbsp;'
            f'{esc(r["run"])}{" (baseline)" if r["run"] == baseline else ""}'), "l")]
         + [(esc(cell(r.get(c))), "l") for c in cols] for r in runs_df.to_dict("records")]))

    m = cmp_df[cmp_df["metric"] == metric] if not cmp_df.empty else cmp_df
    groups: list[str] = []
    values: dict[tuple[str, str], float] = {}
    table_rows: dict[str, dict[str, Any]] = {}
    for r in m.to_dict("records"):
        g = _label(r["stage"], r["role"])
        if g not in groups:
            groups.append(g)
        if not isnull(r["value_ns"]):
            values[(g, r["run"])] = float(r["value_ns"])
        table_rows.setdefault(g, {"baseline_ns": r["baseline_ns"]})[r["run"]] = r

    def change(g: str, run: str) -> str | None:
        c = table_rows.get(g, {}).get(run)
        if run == baseline or c is None or isnull(c.get("delta_rel")):
            return None
        return f"({fmt_rel(c['delta_rel'])})" if c.get("flagged", True) else "(noise)"

    body.append(f"<h2>Stage time per run ({esc(metric.removesuffix('_ns'))}, ms)</h2>")
    if groups:
        body.append(legend([(r, colors[r]) for r in run_ids]))
        body.append(svg_grouped_bars(groups, run_ids, lambda g, s: values.get((g, s)), colors, note=change))
        body.append(_stage_tables(cmp_df, run_ids, baseline))
    else:
        body.append("<p>No stage times to compare.</p>")

    body.append(_culprits_table(culprit_rows, run_ids))
    body.append(f"<h2>Largest kernel-time changes against {esc(baseline)}</h2>")
    if kc.empty:
        body.append("<p>No other run, or no kernel rows.</p>")
    for run in run_ids:
        part = kc[kc["run"] == run] if not kc.empty else kc
        if part.empty:
            continue
        part = part.head(top)
        # bars scale to at least 1 ms, so +-5 µs changes stay specks (issue 23)
        scale = max(float(part["delta_ns"].abs().max() or 0), 1e6)
        recs = part.to_dict("records")
        names = kernel_labels([(r["kernel"], r["kernel_short"]) for r in recs])
        body.append(f"<h3>{esc(run)}</h3>")
        body.append(table(
            [("kernel", "l"), ("category", "l"), (f"{baseline} ms", ""), (f"{run} ms", ""), ("Δ ms", ""),
             ("Δ", ""), ("", "l")],
            [[(f'<span title="{esc(r["kernel"])}">{esc(name)}</span>', "k"),
              (esc(r["category"]), "l"), (fmt_ms(r["baseline_ns"]), ""), (fmt_ms(r["value_ns"]), ""),
              (f'<span class="{delta_class(r["delta_ns"])}">{fmt_ms(r["delta_ns"])}</span>', ""),
              (f'<span class="{delta_class(r["delta_ns"])}">{fmt_rel(r["delta_rel"])}</span>', ""),
              (_delta_bar(float(r["delta_ns"]), scale), "l")] for r, name in zip(recs, names)]))
    return page(title or f"verlprof comparison of {len(run_ids)} runs", body)
