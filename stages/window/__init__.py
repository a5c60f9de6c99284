"""window: find the steps in every source and choose the steady-state one (step 2 by default),
with one line saying why."""
from .choice import ChosenWindow, choose_window, pick_window, run_window, window_spans
from .steps import (
    SourceSteps,
    TopRange,
    compile_step_range,
    gpu_only_spans,
    identity_from_artifact,
    identity_from_path,
    is_phase_range,
    nsys_source_steps,
    source_steps_from_ranges,
)
from .series import process_key
from .torch_steps import (
    memory_source_steps,
    snapshot_spans,
    source_steps_item,
    thread_gtids,
    torch_source_steps,
    trace_ident,
    trace_ranges,
    trace_source_steps,
)
from .types import DEFAULT_STEP, SourceIdentity, SourceKind, StepArg, StepSpan, WindowChoice

__all__ = [
    "SourceSteps", "TopRange", "choose_window", "compile_step_range", "gpu_only_spans", "identity_from_artifact", "identity_from_path", "is_phase_range",
    "nsys_source_steps", "pick_window", "ChosenWindow", "run_window", "source_steps_from_ranges", "window_spans", "DEFAULT_STEP",
    "SourceIdentity", "SourceKind", "StepArg", "StepSpan", "WindowChoice", "memory_source_steps",
    "snapshot_spans", "source_steps_item", "thread_gtids", "torch_source_steps", "trace_ident", "trace_ranges",
    "trace_source_steps", "process_key",
]
