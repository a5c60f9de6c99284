"""A timeline of the chosen step: one lane per process on one absolute time axis.

Why: a bar per process says how long each phase took, not *when*. RL steps go wrong in time:
a straggler rank everyone waits for, a GPU idle while its process waits on the rollout, a
collective that is not hidden behind compute. Lanes on one axis (collect aligns every source's
clock to UTC) show all of that at a glance. Each lane has the process's top-level phase boxes
and, under them, its GPU activity (kernel/copy intervals merged to pixel size, coloured by
category), so the page stays small with 64 ranks and thousands of kernels.

Static SVG: hover is the SVG `<title>`, a click on a lane opens that process's window trace.
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime, timezone
from typing import Any

from .gpu_lanes import LANE_CATEGORIES, LANE_COLORS, GpuIntervals, busy_ns, coverage_pixels
from .processes import ProcessId, ProcessStep
from .template import axis, esc, fmt_ms, nice_ticks, open_process, stage_color

#: Above this many lanes they are drawn thinner and the chart scrolls inside its box.
COMPACT_LANES = 16


def origin_text(t0_ns: int) -> str:
    """What 0 on the time axis is, in words (UTC, ms precision)."""
    t = datetime.fromtimestamp(t0_ns // 1_000_000_000, timezone.utc)
    return f"{t:%Y-%m-%d %H:%M:%S}.{(t0_ns // 1_000_000) % 1000:03d} UTC"


def time_range(procs: Sequence[ProcessStep]) -> tuple[int, int]:
    """[t0, t1]: the earliest start and latest end of any step window or phase."""
    starts = [p.start_ns for p in procs] + [ph.start_ns for p in procs for ph in p.phases]
    ends = [p.end_ns for p in procs] + [ph.end_ns for p in procs for ph in p.phases]
    return min(starts), max(ends)


def svg_timeline(procs: Sequence[ProcessStep], gpu: Mapping[ProcessId, GpuIntervals | None],
                 hrefs: Mapping[ProcessId, str | None], *, plot_w: int = 760,
                 marks: Mapping[tuple[Any, int], Sequence[Any]] | None = None) -> str:
    """The lanes as one SVG (`g.lane` per process, `rect.ph` per phase box, `g.gpulane` for GPU);
    `marks` ((role, rank) -> culprit_marks.Mark): the culprit's lane label in red and its lost range
    outlined (`rect.culprit-mark`), each victim's wait shaded (`rect.victim-mark`)."""
    marks = marks or {}
    if not procs:
        return ""
    compact = len(procs) > COMPACT_LANES
    ph_h, gpu_h, gap = (7, 5, 3) if compact else (14, 8, 8)
    label_w = int(min(260, max(140, 6.5 * max(len(p.label) for p in procs) + 14)))
    t0, t1 = time_range(procs)
    vmax, n_ticks = nice_ticks(t1 - t0)
    scale = plot_w / vmax
    top = 22
    lane_h = ph_h + 1 + gpu_h + gap
    height = top + len(procs) * lane_h + 4
    width = label_w + plot_w + 20
    x0 = float(label_w)
    parts = [f'<svg role="img" class="timeline" width="{width}" height="{height}" viewBox="0 0 {width} {height}">',
             '<defs><pattern id="waiting" width="6" height="6" patternUnits="userSpaceOnUse" '
             'patternTransform="rotate(45)"><rect width="6" height="6" fill="#fff" fill-opacity=".55"/>'
             '<line x1="0" y1="0" x2="0" y2="6" stroke="#d62728" stroke-width="2.5"/></pattern></defs>']
    parts += axis(x0, plot_w, vmax, top - 4, height, "ms", n_ticks, label_y=top - 8)
    parts.append(f'<text x="{x0 - 6}" y="{top - 8}" text-anchor="end" class="dim">ms from step start</text>')
    y = top
    for p in procs:
        href = hrefs.get(p.ident)
        parts += open_process("lane", p.label, href)
        size = ' style="font-size:8px"' if compact else ""
        mine = marks.get((p.role, p.rank), []) if p.rank is not None else []
        kinds = {m.kind for m in mine}
        cls = "lbl culprit-lane" if "culprit" in kinds else ("lbl victim-lane" if "victim" in kinds else "lbl")
        parts.append(f'<text class="{cls}" x="{x0 - 6}" y="{y + ph_h - 2 if not compact else y + 7}" '
                     f'text-anchor="end"{size}>{esc(p.label)}</text>')
        sx, sw = x0 + (p.start_ns - t0) * scale, p.wall_ns * scale
        parts.append(f'<rect class="stepwin" x="{sx:.2f}" y="{y}" width="{sw:.2f}" height="{ph_h}" fill="none" '
                     f'stroke="#999" stroke-dasharray="2,2"><title>{esc(p.label)} · step: '
                     f'+{esc(fmt_ms(p.start_ns - t0))} ms, {esc(fmt_ms(p.wall_ns))} ms ({esc(p.step_from)})</title></rect>')
        for ph in p.phases:
            x, w = x0 + (ph.start_ns - t0) * scale, ph.wall_ns * scale
            gpu_txt = ""
            if ph.gpu_inherited_ns is not None:
                gpu_txt = f", GPU busy {fmt_ms(ph.gpu_inherited_ns)} ms (inherited rule: its worker threads included)"
                if ph.gpu_busy_ns is not None:
                    gpu_txt += f"; NVIDIA's same-thread rule: {fmt_ms(ph.gpu_busy_ns)} ms"
            elif ph.gpu_busy_ns is not None:
                gpu_txt = f", GPU busy {fmt_ms(ph.gpu_busy_ns)} ms (same-thread rule)"
            parts.append(f'<rect class="ph" data-phase="{esc(ph.name)}" x="{x:.2f}" y="{y}" width="{max(w, 0.5):.2f}" '
                         f'height="{ph_h}" fill="{stage_color(ph.stage)}">'
                         f'<title>{esc(p.label)} · {esc(ph.name)} ({esc(ph.stage)}): starts +{esc(fmt_ms(ph.start_ns - t0))} ms, '
                         f'{esc(fmt_ms(ph.wall_ns))} ms{esc(gpu_txt)}</title></rect>')
            if not compact and w > 6.5 * len(ph.name) + 6:
                parts.append(f'<text x="{x + 3:.2f}" y="{y + ph_h - 3}" font-size="10" style="fill:#fff">{esc(ph.name)}</text>')
        for m in mine:
            mx, mw = x0 + (m.start_ns - t0) * scale, max((m.end_ns - m.start_ns) * scale, 1.0)
            if m.kind == "culprit":
                parts.append(f'<rect class="culprit-mark" x="{mx - 1:.2f}" y="{y - 1.5}" width="{mw + 2:.2f}" '
                             f'height="{ph_h + 3}" fill="none" stroke="#d62728" stroke-width="2.5">'
                             f'<title>{esc(m.title)}</title></rect>')
            else:
                parts.append(f'<rect class="victim-mark" x="{mx:.2f}" y="{y}" width="{mw:.2f}" height="{ph_h}" '
                             f'fill="url(#waiting)" stroke="#d62728" stroke-width="1"><title>{esc(m.title)}</title></rect>')
        parts.append(_gpu_lane(p, gpu.get(p.ident), t0, scale, x0, y + ph_h + 1, gpu_h, compact))
        if href:
            parts.append("</a>")
        parts.append("</g>")
        y += lane_h
    parts.append("</svg>")
    return "".join(parts)


def _gpu_lane(p: ProcessStep, iv: GpuIntervals | None, t0: int, scale: float, x0: float, y: float, h: int,
              compact: bool) -> str:
    sx, sw = x0 + (p.start_ns - t0) * scale, p.wall_ns * scale
    if iv is None:
        return (f'<g class="gpulane"><rect x="{sx:.2f}" y="{y}" width="{sw:.2f}" height="{h}" fill="#fafafa">'
                f'<title>{esc(p.label)} · GPU: no window trace to read</title></rect></g>')
    total = busy_ns(iv, p.start_ns, p.end_ns)
    per = {c: busy_ns(iv, p.start_ns, p.end_ns, [i]) for i, c in enumerate(LANE_CATEGORIES)}
    share = f" ({100 * total / p.wall_ns:.0f}%)" if p.wall_ns > 0 else ""
    detail = ", ".join(f"{c} {fmt_ms(v)} ms" for c, v in per.items() if v)
    title = (f"{p.label} · GPU busy {fmt_ms(total)} of {fmt_ms(p.wall_ns)} ms{share}"
             + (f": {detail}" if detail else ": no GPU activity in the step"))
    out = [(f'<g class="gpulane"><title>{esc(title)}</title>'
            f'<rect x="{sx:.2f}" y="{y}" width="{sw:.2f}" height="{h}" fill="#f1f1f1"/>')]
    # whole pixel columns, painted in proportion to the busy time (gpu_lanes.coverage_pixels)
    by_cat: dict[int, list[str]] = {}
    for x, w, c in coverage_pixels(iv, p.start_ns, p.end_ns, sx, scale):
        by_cat.setdefault(c, []).append(f"M{x} {y}h{w}v{h}h-{w}z")
    for c, d in sorted(by_cat.items()):
        name = LANE_CATEGORIES[c]
        out.append(f'<path class="gpu-{name}" d="{"".join(d)}" fill="{LANE_COLORS[name]}" shape-rendering="crispEdges"/>')
    out.append("</g>")
    return "".join(out)
