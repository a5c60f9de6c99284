"""Compatibility face: the HTML reports moved to `pipeline/report/` (issue 13).

Kept so existing callers (`collect --html`, `summarize --html`, `summarize`'s terminal table) and
their imports keep working; new code imports from `.report`.
"""
from __future__ import annotations

from .report import (
    STAGE_COLORS,
    esc,
    fmt_ms,
    fmt_rel,
    isnull,
    kernel_labels,
    render_bundle_report,
    render_compare_report,
    render_run_report,
    svg_grouped_bars,
    trace_href,
)

__all__ = [
    "STAGE_COLORS", "esc", "fmt_ms", "fmt_rel", "isnull", "kernel_labels", "render_bundle_report",
    "render_compare_report", "render_run_report", "svg_grouped_bars", "trace_href",
]
