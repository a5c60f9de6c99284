"""The per-item dispatcher: one summary job per source, run by the adapter of its format.

Why outside the adapters: the pipeline hands any source to one function (`summarize_any_item`,
picklable, for an executor), and the adapters (`nsys.py`, `torch_profile.py`) must never import
each other; only this module knows them both.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Union

from ..readers.nsys_sqlite import NsysExport
from ..window import SourceIdentity, SourceSteps, WindowChoice, window_spans
from .nsys import NsysItem, summarize_item
from .torch_profile import MemoryItem, TorchItem, summarize_memory_item, summarize_torch_item
from .types import SummarizeOptions, SummaryRows

#: what `summarize_job` makes and `summarize_any_item` runs
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
    """Summarize one source of any kind (NsysItem, TorchItem or MemoryItem).
    `export`: an NsysItem's export already open in this pass (collect's pass 2 opens it once)."""
    if isinstance(item, NsysItem):
        return summarize_item(item, options, export)
    if isinstance(item, MemoryItem):
        return summarize_memory_item(item, options)
    return summarize_torch_item(item, options)


def summarize_job(path: str, ident: SourceIdentity, src: SourceSteps, step: int | None) -> SummaryItem:
    """The summary job of one source for the chosen step (its spans in it), by the source's kind."""
    spans = tuple(window_spans(src, step))
    if ident.source_kind in ("torch", "memory"):
        return TorchItem(path, src.ident, spans) if ident.source_kind == "torch" else MemoryItem(
            path, src.ident, None, spans)
    return NsysItem(path, ident, spans, src.offset_ns)
