"""Records of the window stage: who produced an input (`SourceIdentity`), the steps found in it
(`StepSpan`) and the step chosen for the run (`WindowChoice`).

Why here: the window stage produces them, and summarize and traces consume them; everything is a
frozen, picklable dataclass or a plain alias, so per-artifact work `fn(item, options) -> result` can
run in a process pool or on Ray.

Stability: other modules import these names. Changes are additive only (new optional fields with
defaults at the end, new helpers); never rename or reorder existing fields.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal, Union

#: a format's kind, the registry's key (stages/core/formats.py); any registered format's, not a closed set
SourceKind = str
StepArg = Union[int, Literal["auto"]]

DEFAULT_STEP = 2


@dataclass(frozen=True)
class SourceIdentity:
    """Who produced one input file: the key columns every summary row carries.

    `source` is the artifact's relative name in the bundle (never an absolute path). `step_hint` is
    the RL step the file name/folder states (`step<N>` trace names, `step<N>/` snapshot folders);
    `capture_range` is k in `<base>.<k>.nsys-rep` (1-based); `profiled_steps` are the run's
    `global_profiler.steps` when the Hydra config is known, so capture range k maps to step
    `profiled_steps[k-1]`; `step_range` is the (first, last) step of a continuous-mode window
    (`Artifact.steps`). Unknown facts stay None.
    """

    source: str
    source_kind: SourceKind = "nsys"
    role: str | None = None
    rank: int | None = None
    pid: int | None = None
    step_hint: int | None = None
    capture_range: int | None = None
    profiled_steps: tuple[int, ...] | None = None
    # Added later (additive): the (first, last) steps a continuous-mode window holds, when known.
    step_range: tuple[int, int] | None = None
    # Added later (additive): the number of ranks, where the file name or the file itself says
    # (`rank0-of-4`, a torch trace's `distributedInfo.world_size`); not a row key.
    world_size: int | None = None
    # Added later (additive): a rollout engine trace's token window ("start-end" of verl's
    # profile_token_start/end): the engine profiled those response tokens only.
    token_window: str | None = None
    # Added later (additive): the process that wrote a torch trace, as its name says (host and pid,
    # or a rollout replica and GPU; `series.process_key`), and the scope (stage) it profiled: a
    # process's traces that name no step are numbered as its series (window/series.py).
    process: str | None = None
    scope: str | None = None
    # Added later (additive): the writer calls profiler.step() per update mini-batch (verl 0.5-0.7's
    # scheduled Profiler), so the trace's ProfilerStep#N ranges are mini-batches, not RL steps.
    mini_batch_markers: bool = False

    def keys(self, step: int | None) -> dict[str, Any]:
        """The key columns (`source, source_kind, role, rank, pid, step`) of a summary row."""
        return {
            "source": self.source, "source_kind": self.source_kind, "role": self.role,
            "rank": self.rank, "pid": self.pid, "step": step,
        }


@dataclass(frozen=True)
class StepSpan:
    """One RL step found in one source, on the absolute UTC time axis (ns since the epoch).

    `boundary` says how it was found: nvtx_step | capture_range | file_name | discrete |
    snapshot_dir | stage_sequence | profiler_step | step_name | step_range | aligned | param_sync |
    trace_order (the k-th trace of its process: window/series.py) | whole_file. `flags` carries warnings such as
    `save_checkpoint` or `testing` when such ranges lie inside the step.
    """

    step: int
    start_ns: int
    end_ns: int
    boundary: str
    source: str = ""
    flags: tuple[str, ...] = ()
    # Added later (additive): the process the span belongs to when one file holds several.
    pid: int | None = None
    # The marker as the trace names it (`ProfilerStep#104`, `step`), when a range marked the step.
    label: str | None = None

    @property
    def wall_ns(self) -> int:
        return self.end_ns - self.start_ns


@dataclass(frozen=True)
class WindowChoice:
    """The chosen steady-state step and one line saying why (for the manifest and the terminal)."""

    step: int | None
    reason: str
    steps: tuple[StepSpan, ...] = ()
    warnings: tuple[str, ...] = field(default_factory=tuple)

    def to_manifest(self) -> dict[str, Any]:
        """JSON-safe record for manifest.json."""
        return {
            "step": self.step,
            "reason": self.reason,
            "warnings": list(self.warnings),
            "steps": [
                {"step": s.step, "source": s.source, "pid": s.pid, "start_ns": s.start_ns,
                 "wall_ns": s.wall_ns, "boundary": s.boundary, "flags": list(s.flags)}
                for s in self.steps
            ],
        }
