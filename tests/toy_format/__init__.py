"""A toy input format, all of it in this one folder: a plain CSV of CPU ranges,

    name,start_ns,end_ns,rank,step

one file per rank, named `<role>_rank<R>.ranges.csv`. A range named `step` marks a step; the
others are its phases. Times are absolute UTC ns. tests/test_toy_format.py registers it and
collects a folder of such files end to end: that a new format is one folder, with no other file
of the project touched, is what the test proves.
"""
from __future__ import annotations

import csv
import re
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from verlprof.stages.core.errors import BadInputError
from verlprof.stages.formats import BaseFormat
from verlprof.stages.formats.base import spans_of
from verlprof.stages.readers.events import NVTX_PUSHPOP, PID_SHIFT, EventModel, GpuOps, NvtxRanges, Span
from verlprof.stages.readers.naming import NameInfo, normalize_role
from verlprof.stages.readers.nvtx_tree import RangeIndex
from verlprof.stages.summarize import StepSummaries
from verlprof.stages.summarize.phases import phase_rows
from verlprof.stages.window import SourceIdentity, SourceSteps, StepSpan

KIND, FILE_KIND = "toy", "toy_ranges"
_NAME = re.compile(r"(?:^|/)(?P<role>[a-z_]+)_rank(?P<rank>\d+)\.ranges\.csv$")
_HEADER = ["name", "start_ns", "end_ns", "rank", "step"]
_PID_BASE = 4000   # one made-up process per rank: the CSV has no pid


def read_ranges(path: str | Path) -> list[tuple[str, int, int, int, int]]:
    """The rows, checked: one line naming the file and the fault, else the ranges."""
    with open(path, newline="", encoding="utf-8") as f:
        rows = list(csv.reader(f))
    if not rows or rows[0] != _HEADER:
        raise BadInputError(path, f"not a ranges CSV (header must be {','.join(_HEADER)})")
    try:
        return [(r[0], int(r[1]), int(r[2]), int(r[3]), int(r[4])) for r in rows[1:] if r]
    except (ValueError, IndexError):
        raise BadInputError(path, "a row is not name,start_ns,end_ns,rank,step") from None


@dataclass(frozen=True)
class ToyItem:
    """The summary job of one CSV (what `summarize_job` makes, `summarize_steps` reads)."""

    path: str
    ident: SourceIdentity
    spans: tuple[StepSpan, ...] = ()
    other_steps: tuple[tuple[StepSpan, ...], ...] = ()
    chosen: bool = True


class ToyRangesFormat(BaseFormat):
    kind = KIND
    file_kinds = (FILE_KIND,)
    summarized = has_steps = True

    def classify(self, rel: str) -> NameInfo | None:
        m = _NAME.search(rel)
        if m is None:
            return None
        return NameInfo(FILE_KIND, "toy_ranges", role=normalize_role(m["role"]), rank=int(m["rank"]))

    def check_header(self, path: Path, info: NameInfo) -> str | None:
        with open(path, "rb") as f:
            return None if f.readline().strip() == ",".join(_HEADER).encode() else "not a ranges CSV (bad header)"

    def source_steps(self, handle: Any, ident: SourceIdentity, options: Any) -> SourceSteps:
        rows = read_ranges(handle)
        rank = rows[0][3] if rows else ident.rank
        pid = _PID_BASE + (rank or 0)
        spans = [StepSpan(step, start, end, "step_range", ident.source, (), pid)
                 for name, start, end, _rank, step in rows if name == "step"]
        return SourceSteps.from_spans(replace(ident, rank=rank, pid=pid), spans, str(handle))

    def surveyed(self, artifact: Any, steps: SourceSteps | None, path: str) -> tuple[Any, dict[str, str]]:
        if steps is not None and artifact.rank is None:   # the rank the content states
            artifact = artifact.replace(rank=steps.ident.rank)
        return artifact, {}

    def summary_identity(self, artifact: Any, steps: SourceSteps) -> SourceIdentity:
        return steps.ident

    def summarize_job(self, path: str, ident: SourceIdentity, steps: SourceSteps, step: int | None,
                      others: Sequence[int]) -> ToyItem:
        spans, other = spans_of(steps, step, others)
        return ToyItem(path, ident, spans, other, bool(spans))

    def summarize_steps(self, item: ToyItem, options: Any, handle: Any) -> StepSummaries:
        """The one event model (readers/events.py) filled from the CSV, read by the one summarizer."""
        model = event_model(item.path, item.ident)
        out = []
        for group in (item.spans, *item.other_steps):
            spans = [Span(s.start_ns, s.end_ns, s.pid, s.step) for s in group]
            phases, kernels = phase_rows(model, spans, options.top) if spans else ([], [])
            out.append({"phases": phases, "kernels": kernels})
        return StepSummaries(out[0] if item.chosen else None, out[1:])


def event_model(path: str, ident: SourceIdentity) -> EventModel:
    """CPU ranges only (no GPU work): sorted by (thread, start, -end) as NvtxRanges requires."""
    rows = sorted(read_ranges(path), key=lambda r: (r[1], -r[2]))
    n = len(rows)
    gtid = np.array([((_PID_BASE + r[3]) << PID_SHIFT) | (_PID_BASE + r[3]) for r in rows], np.int64)
    ranges = NvtxRanges(start=np.array([r[1] for r in rows], np.int64), end=np.array([r[2] for r in rows], np.int64),
                        gtid=gtid, event_type=np.full(n, NVTX_PUSHPOP, np.int64), same_thread=np.ones(n, bool),
                        rowid=np.arange(n, dtype=np.int64), text=[r[0] for r in rows], domain=[None] * n)
    return EventModel(ident, 0, ranges, RangeIndex.build(ranges), GpuOps.empty(), np.zeros(n, np.int64), {})


FORMAT = ToyRangesFormat()
