"""Static, offline HTML reports: one run (`collect --html`) and many runs (`summarize --html`).

Why: a report must open from a mail attachment or an air-gapped cluster, so the page is one file
with inline CSS and inline SVG drawn here in Python: no CDN, no script, no external font, nothing
fetched. Every string that came from a profile (range and kernel names, run ids) is HTML-escaped,
since kernel names contain `<`/`>` (C++ templates) and range names are user text.

Both pages use the numbers of `pipeline/compare.py`, so the page, the terminal table and
compare.parquet agree.

The run page links every process (bar, label, stage row) to the window traces `collect` wrote
beside it (`manifest["traces"]`, bundle-relative `traces/...` hrefs), so the bundle folder (or the
unpacked `pack` archive) is browsable from the page. Perfetto is named in text only, so the page
holds no outside URL at all.
"""
from __future__ import annotations

import html
import math
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any, Callable, Iterable, Mapping, Sequence
from urllib.parse import quote

import pandas as pd

from ..stages.core.phases import STAGES
from . import compare

# One fixed colour per canonical stage (same colour on every page), and a palette for runs.
STAGE_COLORS: dict[str, str] = dict(zip(STAGES, (
    "#4e79a7", "#f28e2b", "#e15759", "#76b7b2", "#59a14f", "#edc948", "#b07aa1",
    "#ff9da7", "#9c755f", "#bab0ac", "#86bcb6", "#d37295", "#8c8c8c",
)))
RUN_COLORS = ("#4e79a7", "#f28e2b", "#59a14f", "#e15759", "#b07aa1", "#76b7b2", "#edc948",
              "#ff9da7", "#9c755f", "#bab0ac")

_CSS = """
body{font:14px/1.4 system-ui,-apple-system,Segoe UI,Roboto,sans-serif;margin:24px;color:#222;max-width:1400px}
h1{font-size:22px;margin:0 0 4px}h2{font-size:17px;margin:28px 0 8px;border-bottom:1px solid #ddd}
.meta{color:#666;font-size:12px}table{border-collapse:collapse;margin:6px 0;font-size:13px}
th,td{padding:3px 8px;border-bottom:1px solid #eee;text-align:right;white-space:nowrap}
th{background:#f6f6f6;position:sticky;top:0}td.l,th.l{text-align:left}
td.k{max-width:520px;overflow:hidden;text-overflow:ellipsis;text-align:left}
.up{color:#b22}.down{color:#272}.scroll{overflow-x:auto}
.legend span{display:inline-block;margin-right:14px;font-size:12px}
.legend i{display:inline-block;width:11px;height:11px;margin-right:4px;vertical-align:-1px}
svg text{font:11px system-ui,sans-serif;fill:#333}
a{color:#1558b0}svg a text.lbl{fill:#1558b0;text-decoration:underline}svg a:hover rect{opacity:.75}
.note{font-size:12px;color:#555;margin:4px 0 8px}code{font-size:12px}
"""


def esc(value: Any) -> str:
    """HTML-escape anything (None -> empty)."""
    return "" if value is None else html.escape(str(value), quote=True)


def fmt_ms(ns: Any) -> str:
    """Nanoseconds as milliseconds, readable at any magnitude."""
    if ns is None or (isinstance(ns, float) and math.isnan(ns)):
        return "–"
    ms = float(ns) / 1e6
    return f"{ms:,.0f}" if abs(ms) >= 1000 else f"{ms:,.2f}" if abs(ms) >= 1 else f"{ms:,.3f}"


def fmt_rel(rel: Any) -> str:
    if rel is None or (isinstance(rel, float) and math.isnan(rel)):
        return "–"
    return f"{rel * 100:+.1f}%"


def _cls(delta: Any) -> str:
    if delta is None or (isinstance(delta, float) and math.isnan(delta)) or delta == 0:
        return ""
    return "up" if delta > 0 else "down"   # every compared metric is "lower is better"


def _isnull(v: Any) -> bool:
    return v is None or (isinstance(v, float) and math.isnan(v))


def _label(stage: str, role: Any) -> str:
    return f"{stage} ({role})" if not _isnull(role) and role else stage


# ----------------------------------------------------------------------------------------------
# SVG primitives
# ----------------------------------------------------------------------------------------------


def _nice_max(v: float) -> float:
    if v <= 0:
        return 1.0
    exp = 10 ** math.floor(math.log10(v))
    for m in (1, 2, 2.5, 5, 10):
        if v <= m * exp:
            return m * exp
    return 10 * exp


def _tick(ms: float) -> str:
    return "0" if ms == 0 else f"{ms:,.0f}" if abs(ms) >= 1000 else f"{ms:.4g}"


def _axis(x0: float, width: float, vmax: float, y_top: float, y_bot: float, unit: str) -> list[str]:
    parts = []
    for i in range(5):
        v = vmax * i / 4
        x = x0 + width * i / 4
        parts.append(f'<line x1="{x:.1f}" y1="{y_top:.1f}" x2="{x:.1f}" y2="{y_bot:.1f}" stroke="#e4e4e4"/>')
        parts.append(f'<text x="{x:.1f}" y="{y_bot + 13:.1f}" text-anchor="middle">{_tick(v / 1e6)}</text>')
    parts.append(f'<text x="{x0 + width:.1f}" y="{y_bot + 27:.1f}" text-anchor="end">{esc(unit)}</text>')
    return parts


def svg_grouped_bars(groups: Sequence[str], series: Sequence[str], value: Callable[[str, str], float | None],
                     colors: Mapping[str, str], *, unit: str = "ms", bar_h: int = 9, label_w: int = 200,
                     plot_w: int = 720) -> str:
    """Horizontal grouped bars: one group per label, one bar per series (run) inside it."""
    vals = [v for g in groups for s in series if (v := value(g, s)) is not None]
    vmax = _nice_max(max(vals) if vals else 0)
    gap = 10
    group_h = len(series) * bar_h + gap
    top = 6
    height = top + len(groups) * group_h + 34
    width = label_w + plot_w + 90
    parts = [f'<svg role="img" width="{width}" height="{height}" viewBox="0 0 {width} {height}">']
    parts += _axis(label_w, plot_w, vmax, top, height - 34, unit)
    y = top
    for g in groups:
        parts.append(f'<text x="{label_w - 6}" y="{y + len(series) * bar_h / 2 + 4:.1f}" text-anchor="end">{esc(g)}</text>')
        for s in series:
            v = value(g, s)
            if v is not None:
                w = max(0.5, plot_w * v / vmax)
                parts.append(
                    f'<rect x="{label_w}" y="{y}" width="{w:.1f}" height="{bar_h - 1}" fill="{colors[s]}">'
                    f'<title>{esc(g)} · {esc(s)}: {esc(fmt_ms(v))} {esc(unit)}</title></rect>')
                if len(series) <= 12:
                    parts.append(f'<text x="{label_w + w + 3:.1f}" y="{y + bar_h - 1.5}" font-size="9">{esc(fmt_ms(v))}</text>')
            y += bar_h
        y += gap
    parts.append("</svg>")
    return "".join(parts)


def svg_stacked_bars(bars: Sequence[tuple[str, Sequence[tuple[str, float]], float | None]],
                     colors: Mapping[str, str], *, unit: str = "ms", bar_h: int = 18, label_w: int | None = None,
                     plot_w: int = 760, links: Sequence[str | None] | None = None) -> str:
    """Horizontal stacked bars: (label, [(segment, value)], marker) per bar; marker = a total tick.

    links: an optional href per bar (already URL-quoted); the bar's label and segments then open it.
    """
    totals = [max(sum(v for _, v in segs), marker or 0) for _, segs, marker in bars]
    if label_w is None:   # room for the longest label (~6.5 px a character at 11 px), within limits
        label_w = int(min(360, max(120, 6.5 * max((len(b[0]) for b in bars), default=0) + 14)))
    vmax = _nice_max(max(totals) if totals else 0)
    gap = 6
    top = 6
    height = top + len(bars) * (bar_h + gap) + 34
    width = label_w + plot_w + 90
    parts = [f'<svg role="img" width="{width}" height="{height}" viewBox="0 0 {width} {height}">']
    parts += _axis(label_w, plot_w, vmax, top, height - 34, unit)
    y = top
    hrefs = list(links) if links is not None else [None] * len(bars)
    for (label, segs, marker), total, href in zip(bars, totals, hrefs):
        if href:
            parts.append(f'<a href="{esc(href)}"><title>{esc(label)}: open the window trace</title>')
        parts.append(f'<text class="lbl" x="{label_w - 6}" y="{y + bar_h / 2 + 4:.1f}" text-anchor="end">{esc(label)}</text>')
        x = float(label_w)
        for seg, v in segs:
            w = plot_w * v / vmax
            parts.append(f'<rect x="{x:.1f}" y="{y}" width="{max(w, 0.3):.1f}" height="{bar_h}" fill="{colors.get(seg, "#999")}">'
                         f'<title>{esc(label)} · {esc(seg)}: {esc(fmt_ms(v))} {esc(unit)}</title></rect>')
            x += w
        if marker:
            mx = label_w + plot_w * marker / vmax
            parts.append(f'<line x1="{mx:.1f}" y1="{y - 2}" x2="{mx:.1f}" y2="{y + bar_h + 2}" stroke="#000" stroke-width="2">'
                         f'<title>{esc(label)} · step: {esc(fmt_ms(marker))} {esc(unit)}</title></line>')
        parts.append(f'<text x="{label_w + plot_w * total / vmax + 4:.1f}" y="{y + bar_h / 2 + 4:.1f}">{esc(fmt_ms(total))}</text>')
        if href:
            parts.append("</a>")
        y += bar_h + gap
    parts.append("</svg>")
    return "".join(parts)


def _delta_bar(delta: float, scale: float, width: int = 120) -> str:
    """A tiny diverging bar for a table cell: right/red = slower, left/green = faster."""
    half = width / 2
    w = 0 if scale <= 0 else min(half, half * abs(delta) / scale)
    x = half if delta >= 0 else half - w
    color = "#d62728" if delta > 0 else "#2ca02c"
    return (f'<svg width="{width}" height="10"><line x1="{half}" y1="0" x2="{half}" y2="10" stroke="#999"/>'
            f'<rect x="{x:.1f}" y="1" width="{w:.1f}" height="8" fill="{color}"/></svg>')


def _legend(items: Iterable[tuple[str, str]]) -> str:
    return '<div class="legend">' + "".join(f'<span><i style="background:{c}"></i>{esc(n)}</span>' for n, c in items) + "</div>"


def _page(title: str, body: Sequence[str]) -> str:
    now = datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    return ("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
            f"<title>{esc(title)}</title><style>{_CSS}</style></head><body>"
            f"<h1>{esc(title)}</h1><div class=\"meta\">verlprof report · generated {esc(now)} · "
            "times are per RL step; lower is better</div>" + "".join(body) + "</body></html>\n")


def _table(headers: Sequence[tuple[str, str]], rows: Iterable[Sequence[tuple[str, str]]]) -> str:
    """headers: (text, css class); rows: cells as (already-escaped html, css class)."""
    h = "".join(f'<th class="{c}">{esc(t)}</th>' for t, c in headers)
    b = "".join("<tr>" + "".join(f'<td class="{c}">{v}</td>' for v, c in row) + "</tr>" for row in rows)
    return f'<div class="scroll"><table><thead><tr>{h}</tr></thead><tbody>{b}</tbody></table></div>'


# ----------------------------------------------------------------------------------------------
# One run (collect --html)
# ----------------------------------------------------------------------------------------------


def _proc_label(role: Any, rank: Any, pid: Any, kind: Any) -> str:
    r = role if not _isnull(role) else "?"
    k = f"rank {int(rank)}" if not _isnull(rank) else (f"pid {int(pid)}" if not _isnull(pid) else "")
    return f"{r} {k} [{kind}]".replace("  ", " ") if not _isnull(kind) else f"{r} {k}"


ProcKey = tuple[Any, Any, Any, Any]   # (source_kind, role, rank, pid), nulls as None, numbers as int


def _proc_key(kind: Any, role: Any, rank: Any, pid: Any) -> ProcKey:
    """One hashable key per process whatever the frame made of nulls (None/NaN) and ints (0/0.0)."""
    def norm(v: Any, number: bool) -> Any:
        if v is None or (not isinstance(v, (str, bytes)) and bool(pd.isna(v))):
            return None
        try:
            return int(v) if number else str(v)
        except (TypeError, ValueError):
            return str(v)
    return (norm(kind, False), norm(role, False), norm(rank, True), norm(pid, True))


def trace_href(rel: Any) -> str | None:
    """A manifest trace path as a safe relative href, or None.

    Only `traces/...` names written by collect are linked: no scheme, no absolute path, no `..`;
    the name is URL-quoted, so `#`, `?`, `%` or `:` in a source name stay part of the file name and
    a name can never turn into a URL pointing elsewhere."""
    if not isinstance(rel, str) or not rel.startswith("traces/") or "\\" in rel:
        return None
    parts = rel.split("/")
    if any(p in ("", ".", "..") for p in parts):
        return None
    return quote(rel, safe="/")


@dataclass
class _Trace:
    """One source's window traces, as the page shows them."""
    source: str
    kind: str
    chrome: str | None
    sqlite: str | None
    events: int | None
    sizes: dict[str, int] = field(default_factory=dict)


def _traces_of(manifest: Mapping[str, Any]) -> dict[str, _Trace]:
    """source rel -> its window traces, from `manifest["traces"]` (malformed entries are skipped)."""
    out: dict[str, _Trace] = {}
    entries = manifest.get("traces")
    for t in entries if isinstance(entries, list) else []:
        if not isinstance(t, Mapping) or not isinstance(t.get("source"), str):
            continue
        outputs = t.get("outputs") if isinstance(t.get("outputs"), Mapping) else {}
        counts = t.get("counts") if isinstance(t.get("counts"), Mapping) else {}
        chrome, sqlite = trace_href(outputs.get("chrome")), trace_href(outputs.get("sqlite"))
        if chrome is None and sqlite is None:
            continue
        events = t.get("events")
        n = (sum(v for k, v in events.items() if k != "metadata" and isinstance(v, int))
             if isinstance(events, Mapping) else None)
        sizes = {k: int(c["size"]) for k, c in counts.items()
                 if isinstance(c, Mapping) and isinstance(c.get("size"), int)}
        out.setdefault(t["source"], _Trace(t["source"], str(t.get("kind") or ""), chrome, sqlite, n, sizes))
    return out


def _sources_of_processes(phases_rows: Any) -> dict[ProcKey, list[str]]:
    """Which sources each process's phase rows came from (first seen first)."""
    df = compare.to_frame(phases_rows)
    out: dict[ProcKey, list[str]] = {}
    if df.empty or "source" not in df.columns:
        return out
    cols = [df[c] if c in df.columns else [None] * len(df) for c in compare.PROCESS_KEYS]
    for src, *key in zip(df["source"], *cols):
        if isinstance(src, str):
            lst = out.setdefault(_proc_key(*key), [])
            if src not in lst:
                lst.append(src)
    return out


def _fmt_bytes(n: int | None) -> str:
    if n is None:
        return ""
    for unit in ("B", "KB", "MB", "GB"):
        if n < 1024 or unit == "GB":
            return f"{n:,.0f} {unit}" if unit == "B" else f"{n:,.1f} {unit}"
        n /= 1024
    return ""


_TRACE_NOTE = ('<p class="note">Each process opens its own window trace (the summarised step, scrubbed). '
               'Open a <code>.trace.json.gz</code> in Perfetto (ui.perfetto.dev, <i>Open trace file</i>; '
               'it runs in your browser and uploads nothing) or in <code>chrome://tracing</code> '
               '(<i>Load</i>); a <code>.sqlite</code> is the nsys export of the window, for SQL or '
               "nsys's own stats scripts. The links are relative: keep this page inside the bundle folder.</p>")


def render_run_report(phases_rows: Any, kernels_rows: Any, manifest: Mapping[str, Any] | None, *,
                      title: str | None = None, top: int = 20) -> str:
    """One bundle's page: stacked stage times per rank (step as a tick), each process linked to its
    window trace, the stage table, the trace files and the top kernels."""
    manifest = manifest or {}
    per = compare.process_stage_totals(phases_rows)
    traces = _traces_of(manifest)
    sources = _sources_of_processes(phases_rows)

    def trace_of(key: ProcKey) -> _Trace | None:
        return next((traces[s] for s in sources.get(key, []) if s in traces), None)

    body: list[str] = []
    window = manifest.get("window") if isinstance(manifest.get("window"), dict) else {}
    cfg = manifest.get("config") if isinstance(manifest.get("config"), dict) else {}
    facts = [("created", manifest.get("created")), ("verlprof", manifest.get("verlprof_version")),
             ("tool", cfg.get("tool")), ("profiled steps", cfg.get("profiled_steps")),
             ("summarised step", window.get("step")), ("why this step", window.get("reason")),
             ("artifacts", len(arts) if isinstance(arts := manifest.get("artifacts"), list) else None),
             ("window traces", f'<a href="#traces">{len(traces)} source(s)</a>' if traces else None)]
    body.append(_table([("fact", "l"), ("value", "l")],
                       [[(esc(k), "l"), (v if k == "window traces" else esc(v), "l")]
                        for k, v in facts if v not in (None, "", [])]))

    body.append("<h2>Stage time per process</h2>")
    if per.empty:
        body.append("<p>No phase rows.</p>")
    else:
        per = per.copy()
        bars: list[tuple[str, list[tuple[str, float]], float | None]] = []
        links: list[str | None] = []
        present: list[str] = []
        keys = list(compare.PROCESS_KEYS)
        for key, grp in per.groupby(keys, dropna=False, sort=True):
            nsteps = max(1, grp["step"].nunique(dropna=False))
            by_stage = grp.groupby("stage")["wall_ns"].sum() / nsteps
            segs = [(s, float(by_stage[s])) for s in STAGES if s != "step" and s in by_stage.index and by_stage[s] > 0]
            present += [s for s, _ in segs if s not in present]
            step = float(by_stage["step"]) if "step" in by_stage.index else None
            kind, role, rank, pid = key
            bars.append((_proc_label(role, rank, pid, kind), segs, step))
            t = trace_of(_proc_key(kind, role, rank, pid))
            links.append((t.chrome or t.sqlite) if t else None)
        body.append(_legend([(s, STAGE_COLORS[s]) for s in STAGES if s in present] + [("step (tick)", "#000")]))
        if any(links):
            body.append('<p class="note">Click a process (label or bar) to open its window trace; '
                        'see <a href="#traces">Window traces</a> for how to view it.</p>')
        body.append(svg_stacked_bars(bars, STAGE_COLORS, links=links))

        # The stage table shows the slowest process's value: link that process's trace.
        slowest: dict[tuple[Any, Any, Any], tuple[float, ProcKey]] = {}
        for r in per.to_dict("records"):
            pk = _proc_key(r["source_kind"], r["role"], r["rank"], r["pid"])
            k3 = (r["stage"], pk[1], pk[0])
            v = float(r["wall_ns"] or 0)
            if k3 not in slowest or v > slowest[k3][0]:
                slowest[k3] = (v, pk)

        def trace_cell(r: Mapping[str, Any]) -> str:
            k3 = (r["stage"], None if _isnull(r["role"]) else str(r["role"]),
                  None if _isnull(r["source_kind"]) else str(r["source_kind"]))
            if k3 not in slowest:
                return ""
            pk = slowest[k3][1]
            t = trace_of(pk)
            if t is None:
                return ""
            label = _proc_label(pk[1], pk[2], pk[3], None).removeprefix("? ").strip()
            return f'<a href="{esc(t.chrome or t.sqlite)}" title="slowest process: {esc(t.source)}">{esc(label)}</a>'

        totals = compare.stage_totals(phases_rows)
        body.append("<h2>Stages (slowest process, mean over steps)</h2>")
        body.append(_table(
            [("stage", "l"), ("role", "l"), ("source", "l"), ("wall ms", ""), ("GPU busy ms", ""),
             ("kernel ms", ""), ("comm ms", ""), ("idle ms", ""), ("processes", ""), ("trace (slowest)", "l")],
            [[(esc(r["stage"]), "l"), (esc(r["role"]), "l"), (esc(r["source_kind"]), "l"),
              (fmt_ms(r["wall_ns"]), ""), (fmt_ms(r["gpu_busy_ns"]), ""), (fmt_ms(r["kernel_ns"]), ""),
              (fmt_ms(r["comm_ns"]), ""), (fmt_ms(r["idle_ns"]), ""), (esc(r["processes"]), ""),
              (trace_cell(r), "l")]
             for r in totals.to_dict("records")]))

    if traces:
        body.append('<h2 id="traces">Window traces</h2>')
        body.append(_TRACE_NOTE)
        procs_of: dict[str, list[str]] = {}
        for key, srcs in sources.items():
            for s in srcs:
                procs_of.setdefault(s, []).append(_proc_label(key[1], key[2], key[3], None).removeprefix("? ").strip())
        body.append(_table(
            [("process", "l"), ("source", "l"), ("kind", "l"), ("events", ""), ("Chrome trace", "l"),
             ("nsys SQLite", "l")],
            [[(esc(", ".join(procs_of.get(t.source, []))), "l"),
              (f'<span title="{esc(t.source)}">{esc(t.source)}</span>', "k"), (esc(t.kind), "l"),
              (f"{t.events:,}" if t.events is not None else "", ""),
              (f'<a href="{esc(t.chrome)}">{esc(_leaf(t.chrome))}</a> {esc(_fmt_bytes(t.sizes.get("chrome")))}'
               if t.chrome else "", "l"),
              (f'<a href="{esc(t.sqlite)}">.sqlite</a> {esc(_fmt_bytes(t.sizes.get("sqlite")))}'
               if t.sqlite else "", "l")]
             for t in traces.values()]))

    kt = compare.kernel_totals(kernels_rows)
    body.append(f"<h2>Top {top} kernels (per step, all processes)</h2>")
    if kt.empty:
        body.append("<p>No kernel rows.</p>")
    else:
        grand = float(kt["total_ns"].sum()) or 1.0
        body.append(_table(
            [("kernel", "l"), ("category", "l"), ("count", ""), ("total ms", ""), ("share", "")],
            [[(f'<span title="{esc(r["kernel"])}">{esc(r["kernel_short"] or r["kernel"])}</span>', "k"),
              (esc(r["category"]), "l"), (f'{int(r["count"]):,}', ""), (fmt_ms(r["total_ns"]), ""),
              (f'{100 * r["total_ns"] / grand:.1f}%', "")] for r in kt.head(top).to_dict("records")]))
    return _page(title or "verlprof run report", body)


def _leaf(href: str) -> str:
    """The file-name part of an href, for link text (`.trace.json.gz` kept: it says what opens it)."""
    return ".trace.json.gz" if href.endswith(".trace.json.gz") else href.rsplit("/", 1)[-1]


# ----------------------------------------------------------------------------------------------
# Many runs (summarize --html)
# ----------------------------------------------------------------------------------------------


def render_compare_report(compare_rows: Any, kernel_change_rows: Any, runs_rows: Any, *, baseline: str,
                          metric: str = "wall_ns", title: str | None = None, top: int = 20) -> str:
    """Many runs' page: grouped bars of stage times per run, the comparison table and the
    largest kernel-time changes of each run against the baseline."""
    cmp_df = compare.to_frame(compare_rows)
    runs_df = compare.to_frame(runs_rows)
    kc = compare.to_frame(kernel_change_rows)
    run_ids: list[str] = list(runs_df["run"]) if "run" in runs_df.columns else list(dict.fromkeys(cmp_df.get("run", [])))
    colors = {r: RUN_COLORS[i % len(RUN_COLORS)] for i, r in enumerate(run_ids)}
    body: list[str] = []

    body.append("<h2>Runs</h2>")
    cols = [c for c in ("model", "verl_version", "world_size", "tool", "profiled_steps", "window_step", "date",
                        "config_hash") if c in runs_df.columns]
    body.append(_table(
        [("run", "l")] + [(c.replace("_", " "), "l") for c in cols],
        [[(f'<i style="display:inline-block;width:10px;height:10px;background:{colors[r["run"]]}"></i> '
           f'{esc(r["run"])}{" (baseline)" if r["run"] == baseline else ""}', "l")]
         + [(esc(_cell(r.get(c))), "l") for c in cols] for r in runs_df.to_dict("records")]))

    m = cmp_df[cmp_df["metric"] == metric] if not cmp_df.empty else cmp_df
    groups: list[str] = []
    values: dict[tuple[str, str], float] = {}
    table_rows: dict[str, dict[str, Any]] = {}
    for r in m.to_dict("records"):
        g = _label(r["stage"], r["role"])
        if g not in groups:
            groups.append(g)
        if not _isnull(r["value_ns"]):
            values[(g, r["run"])] = float(r["value_ns"])
        table_rows.setdefault(g, {"baseline_ns": r["baseline_ns"]})[r["run"]] = r
    body.append(f"<h2>Stage time per run ({esc(metric.removesuffix('_ns'))}, ms)</h2>")
    if groups:
        body.append(_legend([(r, colors[r]) for r in run_ids]))
        body.append(svg_grouped_bars(groups, run_ids, lambda g, s: values.get((g, s)), colors))
        heads = [("stage (role)", "l"), (f"{baseline} ms", "")] + [(f"{r}", "") for r in run_ids if r != baseline]
        rows = []
        for g in groups:
            cells = [(esc(g), "l"), (fmt_ms(table_rows[g]["baseline_ns"]), "")]
            for r in run_ids:
                if r == baseline:
                    continue
                c = table_rows[g].get(r)
                if c is None or _isnull(c["value_ns"]):
                    cells.append(("–", ""))
                else:
                    cells.append((f'{fmt_ms(c["value_ns"])} <span class="{_cls(c["delta_ns"])}">'
                                  f'({fmt_rel(c["delta_rel"])})</span>', ""))
            rows.append(cells)
        body.append(_table(heads, rows))
    else:
        body.append("<p>No stage times to compare.</p>")

    body.append(f"<h2>Largest kernel-time changes against {esc(baseline)}</h2>")
    if kc.empty:
        body.append("<p>No other run, or no kernel rows.</p>")
    for run in run_ids:
        part = kc[kc["run"] == run] if not kc.empty else kc
        if part.empty:
            continue
        part = part.head(top)
        scale = float(part["delta_ns"].abs().max() or 0)
        body.append(f"<h3>{esc(run)}</h3>")
        body.append(_table(
            [("kernel", "l"), ("category", "l"), (f"{baseline} ms", ""), (f"{run} ms", ""), ("Δ ms", ""),
             ("Δ", ""), ("", "l")],
            [[(f'<span title="{esc(r["kernel"])}">{esc(r["kernel_short"] or r["kernel"])}</span>', "k"),
              (esc(r["category"]), "l"), (fmt_ms(r["baseline_ns"]), ""), (fmt_ms(r["value_ns"]), ""),
              (f'<span class="{_cls(r["delta_ns"])}">{fmt_ms(r["delta_ns"])}</span>', ""),
              (f'<span class="{_cls(r["delta_ns"])}">{fmt_rel(r["delta_rel"])}</span>', ""),
              (_delta_bar(float(r["delta_ns"]), scale), "l")] for r in part.to_dict("records")]))
    return _page(title or f"verlprof comparison of {len(run_ids)} runs", body)


def _cell(v: Any) -> str:
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return ""
    if isinstance(v, (list, tuple)) or (hasattr(v, "tolist") and not isinstance(v, str)):
        v = v.tolist() if hasattr(v, "tolist") else v
        return ", ".join(str(x) for x in v)
    return str(v)


__all__ = ["render_run_report", "render_compare_report", "svg_grouped_bars", "svg_stacked_bars", "esc", "fmt_ms",
           "trace_href"]
