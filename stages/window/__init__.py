"""window: find the steps in every source and choose the steady-state one (step 2 by default),
with one line saying why."""
from .steps import (
    SourceSteps,
    TopRange,
    compile_step_range,
    gpu_only_spans,
    identity_from_artifact,
    identity_from_path,
    is_phase_range,
    nsys_source_steps,
    run_window,
    source_steps_from_ranges,
    window_spans,
)
from .types import DEFAULT_STEP, SourceIdentity, SourceKind, StepArg, StepSpan, WindowChoice

__all__ = [
    "SourceSteps", "TopRange", "compile_step_range", "gpu_only_spans", "identity_from_artifact", "identity_from_path", "is_phase_range",
    "nsys_source_steps", "run_window", "source_steps_from_ranges", "window_spans", "DEFAULT_STEP",
    "SourceIdentity", "SourceKind", "StepArg", "StepSpan", "WindowChoice",
]
