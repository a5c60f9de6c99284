"""Records of the summarize stage shared by its nsys and torch halves.

Why a module of its own: the nsys half (`summarize/nsys.py`) and the torch half
(`summarize/torch_profile.py`) are written apart but must hand the pipeline the same shapes, so one
`collect` merges their rows without glue. Changes are additive only.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Union

from ..window import DEFAULT_STEP, StepArg

if TYPE_CHECKING:
    import pyarrow as pa

# schema name ("phases" | "kernels" | "steps") -> rows matching stages/schema.py. Rows may be a list
# of dicts (column name -> value; missing columns become null) or an already-built Arrow table.
SummaryRows = dict[str, Union[list[dict[str, Any]], "pa.Table"]]

DEFAULT_TOP = 50


DEFAULT_TOP_PHASES = 15


@dataclass(frozen=True)
class SummarizeOptions:
    """What the user asked for: which step (`--step N` or `auto`), how many top kernels per phase
    go to kernels.parquet (`--top`), how many phases per process the terminal shows
    (`--top-phases`), and which ranges mark a step when the capture has no markers verlprof knows
    (`--step-range REGEX`)."""

    step: StepArg = DEFAULT_STEP
    top: int = DEFAULT_TOP
    # Added later (additive)
    step_range: str | None = None
    top_phases: int = DEFAULT_TOP_PHASES
    # A work-dir folder where an export's NVTX ranges, once read, are kept for the next pass
    # (collect reads them for the steps, then for the summary): `NsysExport.ranges_cache`.
    ranges_cache: str | None = None


@dataclass
class StepSummaries:
    """What one scan of a source gives (`dispatch.summarize_steps`): the chosen step's rows (None
    when the item asks for other steps only) and the phases and kernels rows of each of the item's
    `other_steps`, in the order asked. Device memory figures are the chosen step's only."""

    chosen: SummaryRows | None
    others: list[SummaryRows] = field(default_factory=list)


def empty_rows() -> SummaryRows:
    """A SummaryRows with every schema present and no rows."""
    return {"phases": [], "kernels": [], "steps": []}


def merge_rows(parts: list[SummaryRows]) -> SummaryRows:
    """Concatenate several sources' rows per schema (tables become row dicts)."""
    out: SummaryRows = empty_rows()
    for part in parts:
        for name, rows in part.items():
            bucket = out.setdefault(name, [])
            assert isinstance(bucket, list)
            bucket.extend(rows.to_pylist() if hasattr(rows, "to_pylist") else rows)   # an Arrow table
    return out
