"""report: the static, offline HTML pages of verlprof.

`render_run_report` / `render_bundle_report`: one bundle (`collect --html`): step bars that add up,
a timeline per rank, stage table, window traces, top kernels. `render_compare_report`: many runs
(`summarize --html`). Both share `template` (CSS, escaping, number formats, frame).
"""
from .compare_page import render_compare_report, svg_grouped_bars
from .links import trace_href
from .run_page import render_bundle_report, render_run_report
from .template import STAGE_COLORS, esc, fmt_ms, fmt_rel, isnull, kernel_labels

__all__ = [
    "STAGE_COLORS", "esc", "fmt_ms", "fmt_rel", "isnull", "kernel_labels", "render_bundle_report",
    "render_compare_report", "render_run_report", "svg_grouped_bars", "trace_href",
]
