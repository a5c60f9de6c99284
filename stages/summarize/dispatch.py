"""The per-item dispatcher: one summary job per source, run by the adapter of its format.

Why outside the adapters: the pipeline hands any source to one function (`summarize_any_item`,
picklable, for an executor), and the adapters (`nsys.py`, `torch_profile.py`, a plugin's) must
never import each other; the format registry (stages/core/formats.py) knows which adapter an item
belongs to, by its identity's `source_kind`, so this module branches on no kind.
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Sequence, Union

from ..core import formats
from ..core.errors import VerlprofError
from ..window import SourceIdentity, SourceSteps, WindowChoice
from .nsys import NsysItem
from .torch_profile import MemoryItem, TorchItem
from .types import StepSummaries, SummarizeOptions, SummaryRows

#: what `summarize_job` makes and `summarize_any_item` / `summarize_steps` run
SummaryItem = Union[NsysItem, TorchItem, MemoryItem]


@dataclass
class SummarizeResult:
    """What summarizing several sources produced."""

    sources: list[SourceSteps]
    choice: WindowChoice
    rows: SummaryRows
    errors: list[tuple[str, str]] = field(default_factory=list)   # (source, one-line error)


def _format(item: SummaryItem) -> formats.Format:
    return formats.get(item.ident.source_kind)


def summarize_any_item(item: SummaryItem, options: SummarizeOptions, export: object = None) -> SummaryRows:
    """The chosen step's rows of one source of any format (its `summarize_job`'s item); the
    item's other steps are not read (`summarize_steps` reads them in the same scan).
    `export`: the input its format opened in this pass (collect's pass 2 opens an export once)."""
    return _format(item).summarize_chosen(item, options, export)


def summarize_steps(item: SummaryItem, options: SummarizeOptions, export: object = None) -> StepSummaries:
    """Every step one source is asked for (the chosen step and the item's `other_steps`) in ONE
    read of it: one projection of an export, one parse of a trace.

    The other steps are a refinement (ranks.parquet's culprit across steps): when the read of all
    of them fails on bad input (a corrupt row in another step's window), the chosen step is read
    alone and the other steps are left out, as before they were read apart."""
    fmt = _format(item)
    try:
        return fmt.summarize_steps(item, options, export)
    except VerlprofError:
        if not getattr(item, "other_steps", ()):
            raise
    if not item.chosen:
        return StepSummaries(None, [])
    return fmt.summarize_steps(replace(item, other_steps=()), options, export)


def summarize_job(path: str, ident: SourceIdentity, src: SourceSteps, step: int | None,
                  others: Sequence[int] = ()) -> SummaryItem:
    """The summary job of one source for the chosen step (its spans in it), by the source's format.
    `others`: other steps to summarize in the same read (those with a span in the source); the job
    `chosen` says whether the chosen step has a span in the source (a source that missed it still
    gives its other steps)."""
    return formats.get(ident.source_kind).summarize_job(path, ident, src, step, others)
