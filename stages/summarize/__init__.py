"""summarize: phases, kernels, steps and memory of the chosen step as rows of the declared schema
(nsys exports by NVIDIA's projection rule; torch traces and memory snapshots alike), every format
through one event model (readers/events.py) and one summarizer (phases.py)."""
from .dispatch import SummarizeResult, SummaryItem, summarize_any_item, summarize_job, summarize_steps
from .kernel_category import CATEGORIES, categorize
from .memory_history import HISTORY_PHASE
from .phases import UNATTRIBUTED
from .nsys import NsysItem, summarize_nsys_steps
from .render import render_phase_table
from .steps import steps_rows
from .torch_profile import MemoryItem, TorchItem, summarize_memory_item, summarize_memory_snapshot, summarize_torch_item, summarize_torch_steps
from .types import StepSummaries, SummarizeOptions, SummaryRows, empty_rows, merge_rows
from .write import summary_metadata, write_summaries

__all__ = [
    "HISTORY_PHASE", "UNATTRIBUTED",
    "SummarizeResult", "SummaryItem", "NsysItem", "TorchItem", "MemoryItem", "render_phase_table",
    "steps_rows", "summarize_any_item", "summarize_steps", "StepSummaries", "summarize_job", "summary_metadata",
    "write_summaries", "summarize_memory_snapshot", "summarize_nsys_steps", "summarize_torch_steps",
    "summarize_memory_item", "summarize_torch_item", "empty_rows",
    "SummarizeOptions", "SummaryRows", "merge_rows", "CATEGORIES", "categorize",
]
