"""The run/bundle model: typed records every stage passes along.

Why: stages are plain functions over these records (like nsys_recipe's mappers), so the same work
runs inline, in a process pool or as a Ray task. Records are frozen dataclasses: picklable, easy to
compare, and serialisable into `manifest.json` without leaking absolute paths or host names.
"""
from __future__ import annotations

import dataclasses
import enum
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .hashing import salted_hash

MANIFEST_VERSION = 1


class ArtifactKind(enum.StrEnum):
    """What a file is, decided from its name and a peek at its header: the file kinds of the
    built-in formats (stages/formats/<kind>/ owns each; a plugin format's file kind is a plain
    string, so `Artifact.kind` is a str and this enum, a StrEnum, compares and prints as one)."""

    NSYS_REPORT = "nsys_report"          # .nsys-rep (needs `nsys export`)
    NSYS_QDSTRM = "nsys_qdstrm"          # unfinished report: import with QdstrmImporter
    NSYS_SQLITE = "nsys_sqlite"          # an export (given alone or lying beside its report)
    TORCH_TRACE = "torch_trace"          # torch.profiler chrome trace (.json / .json.gz)
    MEMORY_SNAPSHOT = "memory_snapshot"  # torch.cuda.memory._dump_snapshot pickle
    HYDRA_CONFIG = "hydra_config"        # the run's composed .hydra/config.yaml


@dataclass(frozen=True)
class Artifact:
    """One input file and everything knowable about where it came from.

    `path` is the absolute local path and is never written to a shared output; `rel` is the name
    relative to the source root it was found under, which is what manifests and reports show.
    """

    kind: str                                # a file kind of a registered format (ArtifactKind)
    path: Path
    rel: str
    size: int
    sha256: str = ""
    mtime: float = 0.0
    role: str | None = None
    rank: int | None = None
    world_size: int | None = None
    pid: int | None = None
    host: str | None = None
    capture_range: int | None = None
    step: int | None = None
    steps: tuple[int, int] | None = None     # steps<a>-<b>/ memory snapshot folders
    scope: str | None = None                 # torch trace scope (train, infer, rollout ...)
    naming: str | None = None                # which file-name pattern matched
    source_index: int = 0                    # which SOURCE argument it came from
    notes: tuple[str, ...] = ()

    @property
    def key(self) -> str:
        """A stable id of this artifact inside one bundle (content hash, else its relative name)."""
        return self.sha256[:16] if self.sha256 else self.rel

    def replace(self, **changes: Any) -> "Artifact":
        return dataclasses.replace(self, **changes)

    def to_manifest(self, salt: str) -> dict[str, Any]:
        """A JSON-safe record: relative names only, host as a salted hash, no absolute path."""
        d: dict[str, Any] = {
            "kind": str(self.kind),
            "rel": self.rel,
            "source_index": self.source_index,
            "size": self.size,
            "sha256": self.sha256,
            "role": self.role,
            "rank": self.rank,
            "world_size": self.world_size,
            "pid": self.pid,
            "host": salted_hash(self.host, salt) if self.host else None,
            "capture_range": self.capture_range,
            "step": self.step,
            "steps": list(self.steps) if self.steps else None,
            "scope": self.scope,
            "naming": self.naming,
            "notes": list(self.notes),
        }
        return d


@dataclass
class StageOutcome:
    """What one stage did to one artifact: for the end-of-run table and the manifest."""

    stage: str
    artifact: str                 # Artifact.rel
    status: str                   # done | cached | skipped | failed
    detail: str = ""
    outputs: dict[str, str] = field(default_factory=dict)  # name -> path (local, not for manifest)
    info: dict[str, Any] = field(default_factory=dict)     # JSON-safe facts for the manifest


# ------------------------------------------------------------------------------------------------
# Final status of one artifact
# ------------------------------------------------------------------------------------------------

#: The four final statuses an artifact's row ends with (README "Exit codes").
DONE, REUSED, SKIPPED, FAILED = "done", "reused", "skipped", "failed"
FINAL_STATUSES = (DONE, REUSED, SKIPPED, FAILED)

#: Stages whose failure means a part of the artifact is missing from the bundle: its summary, or its
#: window trace (issue 21: a window that cannot be cut or published is a failure, never a silent
#: done). A failed `identify` (role and rank unknown) still leaves it summarized: a note.
DATA_STAGES = ("export", "scrub", "summarize", "traces")
_FAILED = ("failed", "refused")
_FRESH = ("exported", "done")      # stage statuses that mean work was done in this run
_REUSED = ("cached",)              # ... and those that mean a finished result was reused


@dataclass(frozen=True)
class ArtifactStatus:
    """Where one artifact ended: its final status and, unless done, one line in plain words why.

    Why a record of its own: the table row, the closing line, manifest.json and the exit code all
    read this one verdict, so they cannot disagree.
    """

    rel: str
    status: str                   # done | reused | skipped | failed
    reason: str = ""              # plain words; empty when done
    stage: str = ""               # the stage that failed or skipped it

    def to_manifest(self) -> dict[str, Any]:
        return {"status": self.status, "reason": self.reason, **({"stage": self.stage} if self.stage else {})}


def final_status(rel: str, outcomes: list[StageOutcome], empty_reason: str | None = None) -> ArtifactStatus:
    """Reduce one artifact's stage outcomes (in stage order) to its final status.

    Failed: a data stage failed or refused it, or export/scrub skipped it (its data is missing).
    Skipped: summarize left it out on purpose (it holds no part of the chosen step).
    `empty_reason`, when given, is why the artifact never entered a stage (an empty file): failed.
    An artifact no stage touched and that is not empty (a Hydra config, an export read through its
    report) is done. Details are expected in plain words already (see errors.plain_reason).
    """
    if empty_reason:
        return ArtifactStatus(rel, FAILED, empty_reason, "gather")
    for o in outcomes:
        # export/scrub skipping an artifact (a .qdstrm nothing can import) leaves a hole in the run
        missing = o.status in _FAILED or (o.status == "skipped" and o.stage != "summarize")
        if o.stage in DATA_STAGES and missing:
            return ArtifactStatus(rel, FAILED, o.detail or f"{o.stage} failed", o.stage)
    for o in outcomes:
        if o.stage == "summarize" and o.status == "skipped":
            return ArtifactStatus(rel, SKIPPED, o.detail or f"skipped by {o.stage}", o.stage)
    work = [o.status for o in outcomes if o.stage in ("export", "scrub")]
    if any(s in _REUSED for s in work) and not any(s in _FRESH for s in work):
        return ArtifactStatus(rel, REUSED)
    return ArtifactStatus(rel, DONE)
