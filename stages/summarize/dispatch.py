"""The per-item dispatcher: one summary job per source, run by the adapter of its format.

Why outside the adapters: the pipeline hands any source to one function (`summarize_any_item`,
picklable, for an executor), and the adapters (`nsys.py`, `torch_profile.py`) must never import
each other; only this module knows them both.
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Sequence, Union

from ..core.errors import VerlprofError
from ..readers.nsys_sqlite import NsysExport
from ..window import SourceIdentity, SourceSteps, WindowChoice, window_spans
from .nsys import NsysItem, summarize_nsys_steps
from .torch_profile import (
    MemoryItem,
    TorchItem,
    summarize_memory_item,
    summarize_torch_item,
    summarize_torch_steps,
)
from .types import StepSummaries, SummarizeOptions, SummaryRows, empty_rows

#: what `summarize_job` makes and `summarize_any_item` / `summarize_steps` run
SummaryItem = Union[NsysItem, TorchItem, MemoryItem]


@dataclass
class SummarizeResult:
    """What summarizing several sources produced."""

    sources: list[SourceSteps]
    choice: WindowChoice
    rows: SummaryRows
    errors: list[tuple[str, str]] = field(default_factory=list)   # (source, one-line error)


def summarize_any_item(item: SummaryItem, options: SummarizeOptions, export: NsysExport | None = None
                       ) -> SummaryRows:
    """The chosen step's rows of one source of any kind (NsysItem, TorchItem or MemoryItem); the
    item's other steps are not read (`summarize_steps` reads them in the same scan).
    `export`: an NsysItem's export already open in this pass (collect's pass 2 opens it once)."""
    if isinstance(item, MemoryItem):
        return summarize_memory_item(item, options)
    if not item.chosen:
        return empty_rows()
    if isinstance(item, TorchItem):
        return summarize_torch_item(item, options)
    return summarize_nsys_steps(replace(item, other_steps=()), options, export).chosen or empty_rows()


def summarize_steps(item: SummaryItem, options: SummarizeOptions, export: NsysExport | None = None
                    ) -> StepSummaries:
    """Every step one source is asked for (the chosen step and the item's `other_steps`) in ONE
    read of it: one projection of an export, one parse of a trace.

    The other steps are a refinement (ranks.parquet's culprit across steps): when the read of all
    of them fails on bad input (a corrupt row in another step's window), the chosen step is read
    alone and the other steps are left out, as before they were read apart."""
    try:
        return _steps(item, options, export)
    except VerlprofError:
        if isinstance(item, MemoryItem) or not item.other_steps:
            raise
    if not item.chosen:
        return StepSummaries(None, [])
    return _steps(replace(item, other_steps=()), options, export)


def _steps(item: SummaryItem, options: SummarizeOptions, export: NsysExport | None) -> StepSummaries:
    if isinstance(item, NsysItem):
        return summarize_nsys_steps(item, options, export)
    if isinstance(item, MemoryItem):
        return StepSummaries(summarize_memory_item(item, options))
    return summarize_torch_steps(item, options)


def summarize_job(path: str, ident: SourceIdentity, src: SourceSteps, step: int | None,
                  others: Sequence[int] = ()) -> SummaryItem:
    """The summary job of one source for the chosen step (its spans in it), by the source's kind.
    `others`: other steps to summarize in the same read (those with a span in the source); the job
    `chosen` says whether the chosen step has a span in the source (a source that missed it still
    gives its other steps)."""
    spans = tuple(window_spans(src, step))
    other = tuple(g for g in (tuple(window_spans(src, s)) for s in others) if g)
    chosen = bool(spans)
    if ident.source_kind == "memory":
        return MemoryItem(path, src.ident, None, spans)
    if ident.source_kind == "torch":
        return TorchItem(path, src.ident, spans, other, chosen)
    return NsysItem(path, ident, spans, src.offset_ns, other, chosen)
