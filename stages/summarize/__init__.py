"""summarize: phases, kernels, steps and memory of the chosen step as rows of the declared schema
(nsys exports by NVIDIA's projection rule; torch traces and memory snapshots alike)."""
from .kernel_category import CATEGORIES, categorize
from .nsys import (
    SummarizeResult,
    render_phase_table,
    steps_rows,
    summarize_any_item,
    summarize_job,
    summary_metadata,
    write_summaries,
)
from .torch_profile import summarize_memory_snapshot
from .types import SummarizeOptions, SummaryRows, merge_rows

__all__ = [
    "SummarizeResult", "render_phase_table", "steps_rows", "summarize_any_item",
    "summarize_job", "summary_metadata", "write_summaries", "summarize_memory_snapshot",
    "SummarizeOptions", "SummaryRows", "merge_rows", "CATEGORIES", "categorize",
]
