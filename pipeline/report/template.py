"""The small shared template of both HTML pages: CSS, escaping, number formats, tables, legends,
axes and the one-page frame.

Why one module: the bundle page (`collect --html`) and the comparison page (`summarize --html`)
must look alike and format numbers alike, and every string that came from a profile (range and
kernel names, run ids) must be escaped in exactly one way. The page is one file with inline CSS and
inline SVG: no CDN, no script, no external font, nothing fetched, so it opens from a mail
attachment or on an air-gapped cluster.
"""
from __future__ import annotations

import html
import math
import re
import zlib
from collections.abc import Iterable, Sequence
from datetime import datetime, timezone
from typing import Any

from ...stages.core.phases import STAGES

# One fixed colour per canonical stage (same colour on every page), and a palette for runs.
STAGE_COLORS: dict[str, str] = {
    "step": "#4e79a7", "generation": "#f28e2b", "reward": "#e15759", "old_log_prob": "#76b7b2",
    "ref_log_prob": "#59a14f", "values": "#edc948", "advantage": "#b07aa1", "actor_update": "#ff9da7",
    "critic_update": "#9c755f", "weight_sync": "#bab0ac", "checkpoint": "#86bcb6", "validation": "#d37295",
    "other": "#8c8c8c",
}
#: Colours for stage names the table above does not know yet (summarize may add stages).
_EXTRA_COLORS = ("#1f9e89", "#6a51a3", "#b5651d", "#2b8cbe", "#c51b8a", "#7a9a01", "#e6550d", "#3182bd")
RUN_COLORS = ("#4e79a7", "#f28e2b", "#59a14f", "#e15759", "#b07aa1", "#76b7b2", "#edc948",
              "#ff9da7", "#9c755f", "#bab0ac")
#: Wall time between a process's top-level phases (inside its step, outside every phase).
GAP_COLOR = "#e3e3e3"

CSS = """
body{font:14px/1.4 system-ui,-apple-system,Segoe UI,Roboto,sans-serif;margin:24px;color:#222;max-width:1400px;overflow-wrap:break-word}
h1{font-size:22px;margin:0 0 4px}h2{font-size:17px;margin:28px 0 8px;border-bottom:1px solid #ddd}
.meta{color:#666;font-size:12px}table{border-collapse:collapse;margin:6px 0;font-size:13px}
th,td{padding:3px 8px;border-bottom:1px solid #eee;text-align:right;white-space:nowrap}
td.l{white-space:normal}@media (max-width:1500px){th{white-space:normal}}
@media (max-width:1000px){th,td{padding:3px 4px}}
th{background:#f6f6f6;position:sticky;top:0}td.l,th.l{text-align:left}
td.k{max-width:520px;overflow-wrap:anywhere;white-space:normal;text-align:left}
.up{color:#b22}.down{color:#272}.scroll{overflow-x:auto}
.lanes{overflow:auto;max-height:720px;border:1px solid #eee}
.legend span{display:inline-block;margin-right:14px;font-size:12px}
.legend i{display:inline-block;width:11px;height:11px;margin-right:4px;vertical-align:-1px}
svg text{font:11px system-ui,sans-serif;fill:#333}svg text.dim{fill:#777}svg text.small{font-size:10px}
svg[viewBox]{max-width:100%;height:auto}svg text.culprit-lane{fill:#b22;font-weight:600}
svg text.victim-lane{fill:#8a4b00}
a{color:#1558b0}svg a text.lbl{fill:#1558b0;text-decoration:underline}svg a:hover rect,svg a:hover path{opacity:.75}
.note{font-size:12px;color:#555;margin:4px 0 8px}code{font-size:12px}small{color:#777}
.headline{border:1px solid #c9d6e8;background:#f4f8fd;border-radius:6px;padding:8px 12px;margin:10px 0 6px}
.headline .fact{display:flex;gap:12px;padding:2px 0}.headline .k{flex:0 0 130px;color:#555;font-size:12px;padding-top:2px}
.headline .v{flex:1 1 0;min-width:0;overflow-wrap:anywhere}.headline a{color:#123f7a;text-decoration:none}
.headline a:hover{text-decoration:underline}b[class|=straggler]{color:#b22}details.facts{margin:6px 0}
details.facts summary{cursor:pointer;color:#555;font-size:13px}
"""


def stage_color(stage: str) -> str:
    """A stage's fixed colour; a stage unknown here gets a stable one of its own (by name hash)."""
    return STAGE_COLORS.get(stage) or _EXTRA_COLORS[zlib.crc32(stage.encode()) % len(_EXTRA_COLORS)]


def stage_order(stages: Iterable[str]) -> list[str]:
    """Stages in pipeline order (stages/core/phases.py), unknown ones after, by name."""
    known = {s: i for i, s in enumerate(STAGES) if s != "other"}
    return sorted(set(stages), key=lambda s: (0, known[s], "") if s in known else (2 if s == "other" else 1, 0, s))


def isnull(v: Any) -> bool:
    """None or NaN (what pandas makes of a null in a numeric column)."""
    return v is None or (isinstance(v, float) and math.isnan(v))


def esc(value: Any) -> str:
    """HTML-escape anything (None -> empty)."""
    return "" if value is None else html.escape(str(value), quote=True)


def fmt_ms(ns: Any) -> str:
    """Nanoseconds as milliseconds, readable at any magnitude."""
    if isnull(ns):
        return "–"
    ms = float(ns) / 1e6
    return f"{ms:,.0f}" if abs(ms) >= 1000 else f"{ms:,.2f}" if abs(ms) >= 1 else f"{ms:,.3f}"


def fmt_rel(rel: Any) -> str:
    """A relative change as a signed percentage."""
    if isnull(rel):
        return "–"
    return f"{rel * 100:+.1f}%"


def delta_class(delta: Any) -> str:
    """CSS class of a change: every compared metric is "lower is better", so up is red."""
    if isnull(delta) or delta == 0:
        return ""
    return "up" if delta > 0 else "down"


def text_width(text: str, font_px: float) -> float:
    """A generous estimate of how wide `text` draws in the page's sans-serif font (0.62 em a
    character: wider than the average glyph of system-ui, Arial or DejaVu Sans, so an SVG sized
    with it never clips a label drawn after its longest bar)."""
    return 0.62 * font_px * len(text)


def nice_ticks(v: float, most: int = 6) -> tuple[float, int]:
    """(axis end, number of intervals) for a value: the interval is a 1/2/2.5/5 x 10^k step and at
    most `most` of them cover `v`, so the axis ends just past the data (105 ms -> 0..125 by 25)."""
    if v <= 0:
        return 1.0, 1
    raw = v / most
    exp = 10 ** math.floor(math.log10(raw))
    step = next(m * exp for m in (1, 2, 2.5, 5, 10) if raw <= m * exp)
    n = max(1, math.ceil(v / step - 1e-9))
    return step * n, n


def tick_label(ms: float) -> str:
    return "0" if ms == 0 else f"{ms:,.0f}" if abs(ms) >= 1000 else f"{ms:.4g}"


def axis(x0: float, width: float, vmax_ns: float, y_top: float, y_bot: float, unit: str, n: int = 4,
         label_y: float | None = None) -> list[str]:
    """Vertical grid lines with their labels (ms) below: each tick is a `<g class="tick">` whose
    line sits at the value its text names, so a reader (or a test) can read the scale off the page."""
    parts = []
    for i in range(n + 1):
        v = vmax_ns * i / n
        x = x0 + width * i / n
        parts.append(f'<g class="tick"><line x1="{x:.2f}" y1="{y_top:.1f}" x2="{x:.2f}" y2="{y_bot:.1f}" '
                     f'stroke="#e4e4e4"/><text x="{x:.2f}" y="{y_bot + 13 if label_y is None else label_y:.1f}" '
                     f'text-anchor="middle">{tick_label(v / 1e6)}</text></g>')
    if label_y is None:
        parts.append(f'<text x="{x0 + width:.1f}" y="{y_bot + 27:.1f}" text-anchor="end">{esc(unit)}</text>')
    return parts


def legend(items: Iterable[tuple[str, str]]) -> str:
    return '<div class="legend">' + "".join(f'<span><i style="background:{c}"></i>{esc(n)}</span>' for n, c in items) + "</div>"


def table(headers: Sequence[tuple[str, str]], rows: Iterable[Sequence[tuple[str, str]]]) -> str:
    """headers: (text, css class); rows: cells as (already-escaped html, css class)."""
    h = "".join(f'<th class="{c}">{esc(t)}</th>' for t, c in headers)
    b = "".join("<tr>" + "".join(f'<td class="{c}">{v}</td>' for v, c in row) + "</tr>" for row in rows)
    return f'<div class="scroll"><table><thead><tr>{h}</tr></thead><tbody>{b}</tbody></table></div>'


def page(title: str, body: Sequence[str]) -> str:
    """The whole document: one file, inline CSS, no script."""
    now = datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    return ("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
            f"<title>{esc(title)}</title><style>{CSS}</style></head><body>"
            f"<h1>{esc(title)}</h1><div class=\"meta\">verlprof report · generated {esc(now)} · "
            "times are per RL step; lower is better</div>" + "".join(body) + "</body></html>\n")


def cell(v: Any) -> str:
    """A manifest/runs value as plain text (lists joined)."""
    if isnull(v):
        return ""
    if isinstance(v, (list, tuple)) or (hasattr(v, "tolist") and not isinstance(v, str)):
        v = v.tolist() if hasattr(v, "tolist") else v
        return ", ".join(str(x) for x in v)
    return str(v)


# ----------------------------------------------------------------------------------------------
# Kernel names: two kernels with one short name must read differently in a table
# ----------------------------------------------------------------------------------------------

_WORD = re.compile(r"[A-Za-z_][A-Za-z0-9_]{2,}")
_NOISE = frozenset({"void", "int", "unsigned", "long", "float", "double", "char", "bool", "const", "short",
                    "signed", "std", "native", "detail", "anonymous", "namespace", "auto", "true", "false",
                    "Half", "BFloat16", "c10", "cuda", "at", "TensorIteratorBase", "TensorIterator",
                    "Array", "OffsetCalculator", "LoadWithoutCast", "StoreWithoutCast"})


def kernel_labels(kernels: Sequence[tuple[Any, Any]]) -> list[str]:
    """Display names for (demangled, short) kernel pairs: the short name, plus, where several rows
    share it, the first word of the demangled name that tells this one from the others
    (`vectorized_elementwise_kernel · FillFunctor`), or `#n` when nothing does."""
    shorts = [str(s) if not isnull(s) and s else str(k) for k, s in kernels]
    groups: dict[str, list[int]] = {}
    for i, s in enumerate(shorts):
        groups.setdefault(s, []).append(i)
    out = list(shorts)
    for s, idx in groups.items():
        if len(idx) < 2:
            continue
        words = []
        for i in idx:
            full = "" if isnull(kernels[i][0]) else str(kernels[i][0])
            words.append([w for w in dict.fromkeys(_WORD.findall(full)) if w != s and w not in _NOISE
                          and w not in s])
        for n, i in enumerate(idx):
            others = [set(w) for j, w in enumerate(words) if j != n]
            hint = [w for w in words[n] if any(w not in o for o in others)][:1]
            out[i] = f"{s} · {' '.join(hint)}" if hint else f"{s} #{n + 1}"
        # Two rows may still read alike (same first hints): number them.
        seen: dict[str, int] = {}
        for i in idx:
            seen[out[i]] = seen.get(out[i], 0) + 1
        for i in idx:
            if seen[out[i]] > 1:
                out[i] = f"{out[i]} #{idx.index(i) + 1}"
    return out


def open_process(css_class: str, label: str, href: str | None) -> list[str]:
    """The opening SVG of one process's row (bar or lane): a group named for the process, wrapped
    in a link to its window trace when it has one (close with `</a>` if href, then `</g>`)."""
    out = [f'<g class="{css_class}" data-proc="{esc(label)}">']
    if href:
        out.append(f'<a href="{esc(href)}"><title>{esc(label)}: open the window trace</title>')
    return out
