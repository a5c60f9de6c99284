"""The one-step pins: the settings that must agree for verl to profile the steps asked for.
"""
from __future__ import annotations

from .config import (
    ProfileConfig,
    fmt_value,
    global_tool,
    int_steps,
    profile_steps,
    profiling_requested,
    set_word,
)
from .findings import Finding, Severity

#: The steps doctor recommends profiling: step 1 carries start-up (CUDA/NCCL init, profiler start,
#: first-touch allocations), so collect's window summarizes step 2, and step 3 shows whether step 2
#: was typical. `[1]` alone is the lightest footprint; collect then says it summarizes a warm-up step.
STEADY_STATE_STEPS = [1, 2, 3]
RECOMMENDATION = ("Profile steps [1,2,3] with trainer.total_training_steps=3: collect summarizes the "
                  "steady-state step 2; steps [1] with total_training_steps=1 is the lightest, and collect "
                  "then summarizes step 1, a warm-up step")


def recommended_words(cfg: ProfileConfig) -> str:
    """The steady-state recommendation as override words for this config (`+` where a key is new)."""
    return (set_word(cfg, "global_profiler.steps", STEADY_STATE_STEPS) + " "
            + set_word(cfg, "trainer.total_training_steps", STEADY_STATE_STEPS[-1]))


def check_pins(cfg: ProfileConfig) -> list[Finding]:
    """One-step profile pins: total_training_steps, save_freq, test_freq, resume_mode, steps."""
    if not profiling_requested(cfg):
        return []
    out: list[Finding] = []
    steps = profile_steps(cfg)
    ints = int_steps(cfg)
    last = max(ints) if ints else STEADY_STATE_STEPS[-1]

    # global_profiler.steps
    key = "global_profiler.steps"
    if not steps:
        sev: Severity = "warning" if cfg.origin(key) == "missing" and cfg.base_kind == "none" else "error"
        out.append(Finding("pin-profile-steps", sev,
                           "global_profiler.steps is not set: no step is profiled, the run finishes with empty "
                           f"traces. {RECOMMENDATION}",
                           recommended_words(cfg), key))
    else:
        bad = [s for s in steps if not isinstance(s, int) or s < 1]
        if bad:
            out.append(Finding("pin-profile-steps", "error",
                               f"global_profiler.steps names {fmt_value(bad)}: steps count from 1, so these never run",
                               set_word(cfg, key, [s for s in ints if s >= 1] or [1]), key))
    if not global_tool(cfg):
        sev = "warning" if cfg.base_kind == "none" else "error"
        out.append(Finding("profiler-tool", sev,
                           "global_profiler.tool is not set: every role's profiler is a no-op",
                           set_word(cfg, "global_profiler.tool", "nsys") + " (or torch)", "global_profiler.tool"))

    # trainer.total_training_steps
    key = "trainer.total_training_steps"
    total, origin = cfg.get(key), cfg.origin(key)
    if origin == "missing" and cfg.base_kind == "none":
        out.append(Finding("pin-total-steps", "warning",
                           f"{key} is not pinned: the run trains for all of trainer.total_epochs",
                           set_word(cfg, key, last), key))
    elif total is None:
        out.append(Finding("pin-total-steps", "error",
                           f"{key} is null: the run trains every epoch and ends long after the profiled step",
                           set_word(cfg, key, last), key))
    else:
        try:
            total_i = int(total)
        except (TypeError, ValueError):
            total_i = None
        if total_i is not None and ints and total_i < last:
            never = [s for s in ints if s > total_i]
            out.append(Finding("pin-profile-steps", "error",
                               f"global_profiler.steps names {fmt_value(never)} but the run stops at step {total_i}: "
                               "those steps never run",
                               f"{key}={last}", "global_profiler.steps"))
        elif total_i is not None and total_i > last:
            out.append(Finding("pin-total-steps", "warning",
                               f"{key}={total_i} runs {total_i - last} step(s) past the last profiled step {last}",
                               f"{key}={last}", key))

    # save_freq / test_freq: the last step forces a save / a validation when > 0
    for key, code, what in (("trainer.save_freq", "pin-save-freq",
                             "the last step saves a checkpoint (inside the profiled window), and the next launch "
                             "auto-resumes from it past the profiled step, so profiling is silently skipped"),
                            ("trainer.test_freq", "pin-test-freq",
                             "the last step forces a validation pass, which lands inside the profiled window")):
        v, origin = cfg.get(key), cfg.origin(key)
        try:
            positive = v is not None and int(v) > 0
        except (TypeError, ValueError):
            positive = False
        if positive:
            out.append(Finding(code, "error", f"{key}={v}: {what}", f"{key}=-1", key))
        elif origin == "missing":
            out.append(Finding(code, "warning", f"{key} is not pinned; if the trainer config sets it > 0, {what}",
                               set_word(cfg, key, -1), key))
        elif origin == "default":
            out.append(Finding(code, "info", f"{key} is not pinned; verl's default {fmt_value(v)} applies, "
                               "a recipe config may differ", f"{key}=-1", key))

    key = "trainer.resume_mode"
    v, origin = cfg.get(key), cfg.origin(key)
    if origin == "missing" and cfg.base_kind == "none":
        out.append(Finding("pin-resume-mode", "warning",
                           f"{key} is not pinned: verl defaults to auto, which resumes from a leftover checkpoint "
                           "past the profiled step", set_word(cfg, key, "disable"), key))
    elif v != "disable":
        out.append(Finding("pin-resume-mode", "error",
                           f"{key}={fmt_value(v)}: a leftover checkpoint resumes the run past the profiled step, so "
                           "profiling is silently skipped", f"{key}=disable", key))
    return out
