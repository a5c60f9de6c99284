"""steps.parquet rows: every step a source holds, and why it was (not) the one summarized.

Why a module of its own: every format's adapter, when it chooses a step from its own source alone,
and the pipeline, after choosing one step for the whole run, write the same rows; the adapters
share this module instead of one importing the other.
"""
from __future__ import annotations

from typing import Any, Sequence

from ..window import SourceIdentity, SourceSteps, StepSpan, WindowChoice


def steps_rows(sources: Sequence[SourceSteps], choice: WindowChoice) -> list[dict[str, Any]]:
    """One steps.parquet row per (source, process, step) found, with why it was (not) chosen."""
    rows = []
    for src in sources:
        for s in sorted(src.steps, key=lambda s: (s.pid or 0, s.step)):
            chosen = s.step == choice.step
            if chosen:
                reason = choice.reason
            elif choice.step is None:
                reason = "not chosen: " + choice.reason
            else:
                reason = f"not chosen: step {choice.step} is summarized"
            if s.flags:
                reason += f" (contains {', '.join(s.flags)})"
            keys = src.ident.keys(s.step)
            if s.pid is not None:
                keys["pid"] = s.pid
            rows.append({**keys, "start_ns": s.start_ns, "wall_ns": s.wall_ns, "boundary": s.boundary,
                         "chosen": chosen, "reason": reason, "label": step_label(s, src.ident)})
    return rows


def step_label(s: StepSpan, ident: SourceIdentity) -> str:
    """The step's marker as the source names it (steps.parquet `label`)."""
    if s.label:
        return s.label
    if s.boundary == "capture_range":
        return f"capture range .{ident.capture_range if ident.capture_range is not None else s.step}"
    if s.boundary == "file_name":
        return f"step{s.step} in the file name"
    if s.boundary == "snapshot_dir":
        return f"step{s.step} of the snapshot folder"
    if s.boundary == "whole_file":
        return "whole capture"
    return f"{s.boundary.replace('_', ' ')} {s.step}"


