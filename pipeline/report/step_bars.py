"""Bars that add up: per process, one bar as long as its step, cut into top-level phases and gaps.

Why: the old chart stacked every phase row, so nested ranges and the whole-window `(unattributed)`
row were counted on top of the phases and a 223 ms step drew as 446 ms. Here a bar is the tiling
of the step window (processes.py), so its length *is* the step wall. GPU time is not wall time of
the process: it is drawn as a thin bar of its own under the wall bar, on the same scale, and the
GPU time of kernels launched outside every range is a labelled figure, never a segment.
"""
from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

from ..compare import gpu_percent
from .processes import ProcessId, ProcessStep
from .template import GAP_COLOR, axis, esc, fmt_ms, nice_ticks, open_process, stage_color, text_width

GPU_BAR_COLOR = "#404040"


def svg_step_bars(procs: Sequence[ProcessStep], hrefs: Mapping[ProcessId, str | None], *,
                  plot_w: int = 600, bar_h: int = 18, gpu_h: int = 5) -> str:
    """One `<g class="proc">` per process: `g.wall` (the segments, summing to the step wall) and
    `g.gpu` (GPU busy in the step), the label linked to the process's window trace."""
    label_w = int(min(360, max(140, 6.5 * max((len(p.label) for p in procs), default=0) + 14)))
    vmax, n_ticks = nice_ticks(max((p.wall_ns for p in procs), default=0))
    scale = plot_w / vmax
    gap, top = 8, 6
    notes = {id(p): _note(p) for p in procs}
    # a note goes after its bar when it fits beside the plot (wide enough for it: issue 34 cut it at a
    # fixed 330 px), else on a line of its own under the bar, so a long note never widens the chart
    # (which would scale every label down in a narrow window, issue 42)
    limit = label_w + plot_w + 170.0
    after = {id(p): label_w + p.wall_ns * scale + 4 + text_width(notes[id(p)], 11) + 8 <= limit for p in procs}
    under = 0 if all(after.values()) else 13
    row_h = bar_h + gpu_h + 2 + gap + under
    height = top + len(procs) * row_h + 34
    width = int(math.ceil(max([label_w + plot_w + 20.0]
                              + [label_w + p.wall_ns * scale + 4 + text_width(notes[id(p)], 11) + 8
                                 if after[id(p)] else label_w + text_width(notes[id(p)], 11) + 8 for p in procs])))
    parts = [f'<svg role="img" class="stepbars" width="{width}" height="{height}" viewBox="0 0 {width} {height}">']
    parts += axis(label_w, plot_w, vmax, top, height - 34, "ms", n_ticks)
    y = top
    for p in procs:
        href = hrefs.get(p.ident)
        parts += open_process("proc", p.label, href)
        parts.append(f'<text class="lbl" x="{label_w - 6}" y="{y + bar_h / 2 + 4:.1f}" text-anchor="end">{esc(p.label)}</text>')
        parts.append('<g class="wall">')
        for seg in p.segments():
            x = label_w + (seg.start_ns - p.start_ns) * scale
            w = seg.wall_ns * scale
            if seg.phase is None:
                fill, what = GAP_COLOR, "between phases"
            else:
                fill = stage_color(seg.phase.stage)
                what = f"{seg.phase.name} ({seg.phase.stage})"
                if seg.wall_ns != seg.phase.wall_ns:
                    what += f", range {fmt_ms(seg.phase.wall_ns)} ms, overlaps its neighbour"
                if seg.phase.gpu_busy_ns is not None:
                    what += f", GPU {fmt_ms(seg.phase.gpu_busy_ns)} ms"
                    if seg.phase.gpu_inherited_ns is not None:
                        what += f" ({fmt_ms(seg.phase.gpu_inherited_ns)} ms with kernels of other threads)"
            parts.append(f'<rect x="{x:.2f}" y="{y}" width="{w:.2f}" height="{bar_h}" fill="{fill}">'
                         f'<title>{esc(p.label)} · {esc(what)}: {esc(fmt_ms(seg.wall_ns))} ms</title></rect>')
        parts.append("</g>")
        gy = y + bar_h + 2
        gpu = p.gpu_busy_ns
        if gpu is not None:
            pct = gpu_percent(gpu, p.launch_span_ns)   # over the launch span: never above 100
            share = f" ({pct} of the step's launch span)" if pct else ""
            parts.append(f'<g class="gpu"><rect x="{label_w}" y="{gy}" width="{gpu * scale:.2f}" height="{gpu_h}" '
                         f'fill="{GPU_BAR_COLOR}"><title>{esc(p.label)} · GPU busy: {esc(fmt_ms(gpu))} ms{share}'
                         f'</title></rect></g>')
        if href:
            parts.append("</a>")
        nx, ny = ((label_w + p.wall_ns * scale + 4, y + bar_h / 2 + 4) if after[id(p)]
                  else (float(label_w), y + bar_h + gpu_h + 2 + 11))
        parts.append(f'<text x="{nx:.1f}" y="{ny:.1f}">{esc(notes[id(p)])}</text>')
        parts.append("</g>")
        y += row_h
    parts.append("</svg>")
    return "".join(parts)


def _note(p: ProcessStep) -> str:
    """The text after a process's bar: its wall, GPU busy and unattributed GPU time."""
    note = f"{fmt_ms(p.wall_ns)} ms"
    if p.gpu_busy_ns is not None:
        note += f" · GPU {fmt_ms(p.gpu_busy_ns)} ms"
    if p.unattributed_gpu_ns:
        note += f" · unattributed GPU {fmt_ms(p.unattributed_gpu_ns)} ms"
        if p.unattributed_left_ns is not None:
            note += f" ({fmt_ms(p.unattributed_left_ns)} ms after inheritance)"
    return note
