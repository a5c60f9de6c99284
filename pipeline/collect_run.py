"""The records of one `verlprof collect`: what was asked, the run in progress, what came out.

Why a module of its own: both passes (pipeline/collect_survey.py, pipeline/collect_publish.py)
read and fill one `Run`, and pipeline/collect.py, which runs them in order, must import both; the
records they share live below all three.
"""
from __future__ import annotations

import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Protocol

from ..stages import doctor as doctor_stage
from ..stages import gather as gather_stage
from ..stages import scrub as scrub_stage
from ..stages import window as window_stage
from ..stages.core.done_records import default_work_dir
from ..stages.core.errors import ExitCode, plain_reason
from ..stages.core.model import DONE, FAILED, REUSED, Artifact, ArtifactStatus, StageOutcome
from .cluster import NodeRow
from .collect_tasks import SourceWork
from .executors import Executor, Job
from .merged_trace import Piece, Spool


@dataclass
class CollectOptions:
    """Everything `verlprof collect` was asked to do."""

    sources: list[Path]
    out: Path
    work_dir: Path = field(default_factory=default_work_dir)
    jobs: int | None = None
    nsys: str | None = None
    ray: str | None = None      # a Ray address: every input is read on the node that holds it
    step: int | str = 2
    top: int = 50
    html: bool = False
    pack: bool = False
    traces: bool = True
    strict: bool = False      # a failed artifact fails the run: no bundle (exit 3)
    step_range: str | None = None   # --step-range REGEX: ranges that mark a step (issue 10)
    noise_floor: str | None = None  # --noise-floor SHARE,TIME: below it nobody is a culprit (issue 32)
    keep_names: tuple[str, ...] = ()  # --keep-names FILE: user-written strings the owner approved (issue 39)


@dataclass
class CollectResult:
    """What happened, for the end-of-run table and for tests."""

    out: Path
    artifacts: list[Artifact]
    outcomes: list[StageOutcome]
    skipped: list[tuple[str, str]]
    manifest: dict[str, Any]
    seconds: float = 0.0
    rows: dict[str, Any] | None = None   # the summary rows (phases/kernels/steps) written to OUT/summaries
    doctor: list[doctor_stage.Finding] = field(default_factory=list)   # after-run findings of `verlprof doctor`
    statuses: list[ArtifactStatus] = field(default_factory=list)   # one final status per artifact
    published: bool = True    # False: nothing (or, with --strict, not everything) was summarized
    nodes: list[NodeRow] = field(default_factory=list)   # --ray: one row per node
    named: int = 0                       # user-written names published as pseudonyms (issue 39)
    review_list: Path | None = None      # WORK/names_review.txt: their originals, for the owner alone

    def count(self, stage: str, status: str) -> int:
        return sum(1 for o in self.outcomes if o.stage == stage and o.status == status)

    def with_status(self, *statuses: str) -> list[ArtifactStatus]:
        return [s for s in self.statuses if s.status in statuses]

    @property
    def summarized(self) -> bool:
        """Some artifact's rows are in the summary (an artifact whose window failed still counts)."""
        return bool(self.with_status(DONE, REUSED)) or self.count("summarize", "done") > 0

    @property
    def exit_code(self) -> int:
        """0 every artifact summarized (or skipped on purpose); 3 some failed; 4 none summarized."""
        if not self.summarized:
            return int(ExitCode.NOTHING)
        return int(ExitCode.PARTIAL) if self.with_status(FAILED) else int(ExitCode.OK)


class Progress(Protocol):
    """What collect needs of a progress display (rich's Progress, or progress.NoProgress)."""

    add_task: Callable[..., Any]
    update: Callable[..., Any]
    advance: Callable[..., Any]


@dataclass
class Run:
    """One collect in progress: its options, where tasks run, and what each stage left behind."""

    opts: CollectOptions
    executor: Executor
    progress: Progress
    salt: str
    staging: Path
    t0: float = field(default_factory=time.perf_counter)
    gathered: gather_stage.GatherResult | None = None
    node_of: dict[str, str] = field(default_factory=dict)   # --ray: artifact rel -> node id
    nodes: list[NodeRow] = field(default_factory=list)
    outcomes: list[StageOutcome] = field(default_factory=list)
    scrub_results: list[scrub_stage.ScrubResult] = field(default_factory=list)  # scrub_report.json entries
    counts: Counter = field(default_factory=Counter)        # values pass 2 replaced in the rows
    review: list[dict[str, dict[str, int]]] = field(default_factory=list)  # free text pass 2 kept in the rows
    named: dict[str, Any] = field(default_factory=dict)   # user-written original -> (pseudonym, where -> n)
    summary_metadata: dict[str, str] | None = None           # Parquet metadata, scrubbed
    checked: dict[str, str] = field(default_factory=dict)     # staged name -> sha256 checked in a pass-2 job
    findings: list[Any] = field(default_factory=list)         # the checker's findings in those files
    pieces: list[Piece] = field(default_factory=list)         # the merged trace's piece of every window, checked
    spool: Spool | None = None                                # the pieces' bodies

    @property
    def artifacts(self) -> list[Artifact]:
        return self.gathered.artifacts if self.gathered else []

    def job(self, fn: Callable[[Any, Any], Any], item: Any, options: Any, rel: str) -> Job:
        """A Job pinned (on Ray) to the node that holds artifact `rel`."""
        return Job(fn, item, options, self.node_of.get(rel))

    def ranges_cache(self) -> str:
        """Where each export's NVTX ranges are kept from pass 1 (steps) to pass 2 (summary), so a
        range-heavy export is read once (issue 25); in the work dir: they are raw, unscrubbed texts."""
        return str(self.opts.work_dir / "ranges")


@dataclass
class Window:
    """The run's one window: the chosen step, every input's steps, pass 2's work."""

    choice: window_stage.WindowChoice | None      # None: nothing readable
    resolved: list[window_stage.SourceSteps]      # every readable source, steps numbered
    work: list[SourceWork]
    errors: dict[str, str]                        # rel -> why its steps could not be read

    @property
    def step(self) -> int | None:
        return self.choice.step if self.choice is not None else None


def plain(detail: str, art: Artifact | None) -> str:
    """A failure's detail in plain words (errors.plain_reason), sized and kinded by its artifact."""
    if art is None:
        return plain_reason(detail)
    return plain_reason(detail, path=art.rel, size=art.size, kind=str(art.kind))
