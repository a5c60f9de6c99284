"""The memory-snapshot format: `torch.cuda.memory._dump_snapshot` pickles, as verl's memory
profiler names them (`{step<N>|steps<a>-<b>|oom_<ts>}/<tag>_rank<R>_pid<P>.pickle`).

Why it takes no part in the window choice: a snapshot is one process's memory over time, not a
timeline of steps; collect attaches its peak to the phase rows of the same process in the chosen
step (`attaches_memory`), or summarizes its own timeline when no trace of that process was read.
It is loaded through the restricted unpickler (readers/memory_snapshot.py) and scrubbed by
scrub/snapshot.py.
"""
from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any, Sequence

from ...core.formats import register
from ...core.model import ArtifactKind
from ...readers.naming import NameInfo
from ...scrub import find_snapshot_identities, scrub_snapshot
from ...summarize import MemoryItem, StepSummaries, summarize_memory_item, summarize_memory_snapshot
from ...window import SourceIdentity, SourceSteps, memory_source_steps
from ..base import BaseFormat, spans_of

SNAPSHOT = ArtifactKind.MEMORY_SNAPSHOT


class MemorySnapshotFormat(BaseFormat):
    kind = "memory"
    file_kinds = (SNAPSHOT,)
    labels = {SNAPSHOT: "memory"}
    suffixes = (".pickle", ".pkl")
    empty_hints = {SNAPSHOT: "the snapshot was never written (the process was killed before the dump?)"}
    #: its peak is attached to the phase rows of its process (collect_publish's memory pass)
    attaches_memory = True
    timing = False

    def check_header(self, path: Path, info: NameInfo) -> str | None:
        with open(path, "rb") as f:
            return None if f.read(1) == b"\x80" else "not a pickle (bad header)"

    def refine_identity(self, ident: SourceIdentity, artifact: Any) -> SourceIdentity:
        """verl's OOM observer's snapshot (`oom_<ts>/`): the memory at a failure, no step."""
        return dataclasses.replace(ident, scope="oom") if "oom" in artifact.notes else ident

    def source_steps(self, handle: Any, ident: SourceIdentity, options: Any) -> SourceSteps:
        return memory_source_steps(handle, ident)

    def summarize_job(self, path: str, ident: SourceIdentity, steps: SourceSteps, step: int | None,
                      others: Sequence[int]) -> MemoryItem:
        spans, _ = spans_of(steps, step, ())
        return MemoryItem(path, steps.ident, None, spans)

    def summarize_chosen(self, item: MemoryItem, options: Any, handle: Any) -> Any:
        return summarize_memory_item(item, options)

    def summarize_steps(self, item: MemoryItem, options: Any, handle: Any) -> StepSummaries:
        return StepSummaries(summarize_memory_item(item, options))

    def memory_rows(self, path: Path, ident: SourceIdentity, options: Any,
                    phases_rows: list[dict[str, Any]] | None) -> Any:
        """`mem_peak_bytes` filled into the phase rows of its process, or (None) its own rows."""
        return summarize_memory_snapshot(path, ident, options, phases_rows)

    def find_identities(self, path: Path, policy: Any) -> Any:
        return find_snapshot_identities(path, policy)

    def scrub_file(self, src: Path, tmp: Path, dst: Path, scrubber: Any, options: Any) -> dict[str, Any]:
        return scrub_snapshot(src, tmp, scrubber)


FORMAT = register(MemorySnapshotFormat())
