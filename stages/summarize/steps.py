"""steps.parquet rows: every step a source holds, and why it was (not) the one summarized.

Why a module of its own: every format's adapter, when it chooses a step from its own source alone,
and the pipeline, after choosing one step for the whole run, write the same rows; the adapters
share this module instead of one importing the other.
"""
from __future__ import annotations

from typing import Any, Iterable, Sequence

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




def with_phase_identity(steps: list[dict[str, Any]], phases: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    """The steps rows with the process identity their source's phases rows carry (issue 32).

    Why: a step is found per source (an export, a trace), before the summary learns each process's
    rank (`report_identity.process_ranks`: RANK env, CUDA device ...; a trace's distributedInfo), so
    a steps row keeps only what the file name said. Here each row takes the `rank` of its source's
    phases rows of the same `pid`; a row with no pid (a step of the whole capture) becomes one row
    per process its source's phases rows name. Rows of sources without phases rows stay as they are."""
    procs: dict[Any, dict[Any, Any]] = {}
    for row in phases:
        if row.get("pid") is not None:
            mine = procs.setdefault(row.get("source"), {})
            if mine.get(row["pid"]) is None:
                mine[row["pid"]] = row.get("rank")
    out: list[dict[str, Any]] = []
    for row in steps:
        mine = procs.get(row.get("source"))
        if not mine:
            out.append(row)
        elif row.get("pid") is None:
            out.extend({**row, "pid": pid, "rank": rank} for pid, rank in sorted(mine.items()))
        elif row["pid"] in mine:
            out.append({**row, "rank": mine[row["pid"]]})
        else:
            out.append(row)
    return out
