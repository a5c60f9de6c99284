"""Choosing the window: one step for the whole run, from every source's numbered steps, and one
line saying why.

Why a module of its own: steps.py finds and numbers steps (markers, capture series, discrete
calls); choosing is one cheap pure function over all sources that every caller (collect, `window`,
`summarize`, a lone source's summary) runs the same way (`pick_window`), and the window line it
writes gathers what the numbering noted (series rule, fully-async re-syncs, OOM snapshots).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable, Sequence

from ..core.errors import VerlprofError
from .series import numbering_note
from .steps import (NO_MARKERS, OOM_NOTE, PARAM_SYNC_RANGE, RESYNC_NOTE, STEP_RANGE_UNMATCHED, SourceSteps,
                    resolve_steps)
from .types import DEFAULT_STEP, StepArg, StepSpan, WindowChoice


# ----------------------------------------------------------------------------------------------
# Choosing
# ----------------------------------------------------------------------------------------------


def is_empty(src: SourceSteps) -> bool:
    """A source with nothing to summarize: no ranges and no GPU work (an idle capture range, a
    report of a process that never reached CUDA or NVTX)."""
    return src.span is None and not src.gpu_spans and not src.steps


def step_walls(sources: Iterable[SourceSteps]) -> dict[int, int]:
    """Step number -> wall ns: the longest span any source saw for that step."""
    walls: dict[int, int] = {}
    for src in sources:
        for s in src.steps:
            walls[s.step] = max(walls.get(s.step, 0), s.wall_ns)
    return walls


def _fmt_ms(ns: int) -> str:
    ms = ns / 1e6
    return f"{ms:.0f} ms" if ms >= 100 else f"{ms:.1f} ms"


def _listing(nums: Sequence[int], walls: dict[int, int], most: int = 8) -> str:
    """`1: 4182 ms, 2: 223 ms, ...`: every step up to `most`, else the first and last few and how
    many lie between (a capture of hundreds of steps must still read as one line)."""
    def one(n: int) -> str:
        return f"{n}: {_fmt_ms(walls[n])}"
    if len(nums) <= most:
        return ", ".join(one(n) for n in nums)
    head, tail = nums[: most // 2], nums[-(most // 2):]
    return f"{', '.join(map(one, head))}, ... {len(nums) - len(head) - len(tail)} more ..., {', '.join(map(one, tail))}"


def choose_window(sources: Sequence[SourceSteps], step: StepArg = DEFAULT_STEP) -> WindowChoice:
    """Pick the steady-state step for the whole run and explain it in one line."""
    walls = step_walls(sources)
    all_spans = tuple(s for src in sources for s in src.steps)
    if not walls:
        empty = [src for src in sources if is_empty(src)]
        if empty and len(empty) == len(sources):
            what = empty[0].ident.source if len(empty) == 1 else f"any of its {len(empty)} sources"
            return WindowChoice(None, f"nothing to summarize: no GPU work and no ranges in {what}",
                                all_spans, ("the capture holds no GPU work and no ranges",))
        extra = f"; {len(empty)} of {len(sources)} sources hold no GPU work and no ranges" if empty else ""
        return WindowChoice(None, "no step boundaries found (no step ranges, capture ranges or step names)"
                            + extra, all_spans, ("no steps found",))
    nums = sorted(walls)
    listing = _listing(nums, walls)
    warnings: list[str] = []
    if all(s.boundary == "whole_file" for s in all_spans):
        chosen = nums[0]
        reason = f"the whole capture ({_fmt_ms(walls[chosen])}, labelled step {chosen}): {NO_MARKERS}"
    elif nums == [1]:
        # the lightest footprint doctor offers: said as a choice, not warned about as a surprise
        chosen = 1
        reason = (f"step 1, a warm-up step, on purpose: the only profiled step ({listing}); profile steps "
                  "[1,2,3] with trainer.total_training_steps=3 for the steady-state step 2")
    elif len(nums) == 1:
        chosen = nums[0]
        warnings.append(f"only one step was profiled (step {chosen}): it may include warm-up costs")
        reason = f"step {chosen}: the only profiled step ({listing})"
    elif step == "auto":
        later = nums[1:]
        ordered = sorted(later, key=lambda n: (walls[n], n))
        chosen = ordered[(len(ordered) - 1) // 2]
        reason = (f"step {chosen}: median duration ({_fmt_ms(walls[chosen])}) of the steps after the first "
                  f"({listing})")
    else:
        want = int(step)
        if want not in walls:
            if step == DEFAULT_STEP and want == DEFAULT_STEP:
                # The first profiled step carries the profiler's and CUDA's start-up whatever its
                # number (`global_profiler.steps=[5,10,15]`), so the second profiled one is the
                # steady-state sample, as step 2 is for [1,2,3]: a rule by position, never by
                # measured durations, so the choice does not move with scheduler noise.
                chosen = nums[1]
                reason = (f"step {chosen}: step {want} was not profiled, so the second profiled step "
                          f"(the first after the warm-up step {nums[0]}; {listing})")
            else:
                raise VerlprofError(None, f"step {want} was not profiled; profiled steps: {listing}")
        else:
            chosen = want
            how = "default" if want == DEFAULT_STEP else "--step"
            extra = f"; step {nums[0]} warms up" if nums[0] < chosen else ""
            reason = f"step {chosen} ({how}, {_fmt_ms(walls[chosen])}{extra}; profiled: {listing})"
    # Where the step number is not the marker's own (ProfilerStep#5 is step 6), say which marker it is.
    labels = sorted({s.label for s in all_spans if s.step == chosen and s.label
                     and s.boundary in ("profiler_step", "step_range")})
    if labels:
        reason += f"; marked by {', '.join(labels[:3])}"
    if any(s.boundary == "param_sync" for s in all_spans if s.step == chosen):
        reason += (f"; fully-async: step {chosen} is parameter version {chosen}, from the weight sync before "
                   f"it to the end of its own ({PARAM_SYNC_RANGE})")
    ooms = sorted({n for src in sources for n in src.notes if n.startswith(OOM_NOTE)})
    if ooms:
        reason += "; " + "; ".join(ooms)
    resyncs = sorted({n for src in sources for n in src.notes if n.startswith(RESYNC_NOTE)})
    if resyncs:
        reason += "; " + "; ".join(resyncs)
    reason += numbering_note(sources, chosen)
    windows = sorted({src.ident.token_window for src in sources if src.ident.token_window
                      and any(s.step == chosen for s in src.steps)})
    if windows:
        said = ", ".join(f"{w.split('-')[0] or 'the first'} to {w.split('-')[1] or 'the last'}" for w in windows)
        reason += (f"; the rollout engine traces hold response tokens {said} only (profile_token_start/end), "
                   "not the whole generation")
    unmatched = [src for src in sources if any(n.startswith(STEP_RANGE_UNMATCHED) for n in src.notes)]
    if unmatched:
        pattern = next(n for n in unmatched[0].notes if n.startswith(STEP_RANGE_UNMATCHED))
        pattern = pattern[len(STEP_RANGE_UNMATCHED):].strip()
        used = sorted({s.boundary for src in unmatched for s in src.steps}) or ["none"]
        reason += (f"; --step-range {pattern} matched no range in {len(unmatched)} of {len(sources)} sources "
                   f"(their steps: {', '.join(used)})")
    flags = sorted({f for s in all_spans if s.step == chosen for f in s.flags})
    if flags:
        warnings.append(f"step {chosen} contains {', '.join(flags)} ranges: not a steady-state step")
    return WindowChoice(chosen, reason, all_spans, tuple(warnings))


def window_spans(src: SourceSteps, step: int | None) -> list[StepSpan]:
    """The spans of `step` in one source (one per process; empty when the source lacks it)."""
    if step is None:
        return []
    return [s for s in src.steps if s.step == step]


@dataclass(frozen=True)
class ChosenWindow:
    """The window of a run: every source's steps numbered across the run, the one step chosen
    (with its one line why), and each source's spans of that step."""

    sources: tuple[SourceSteps, ...]
    choice: WindowChoice

    def spans_of(self, i: int) -> list[StepSpan]:
        """Source i's spans of the chosen step (one per process; empty when it lacks the step)."""
        return window_spans(self.sources[i], self.choice.step)


def pick_window(sources: Sequence[SourceSteps], step: StepArg = DEFAULT_STEP) -> ChosenWindow:
    """THE function that chooses the window, for collect, `window`, `summarize` and a lone
    source alike: number the steps across all sources (`resolve_steps`), choose one step
    (`choose_window`), and hand each source's spans of it (`ChosenWindow.spans_of`)."""
    resolved = resolve_steps(sources)
    return ChosenWindow(tuple(resolved), choose_window(resolved, step))


def run_window(sources: Sequence[SourceSteps], step: StepArg = DEFAULT_STEP) -> tuple[list[SourceSteps], WindowChoice]:
    """`pick_window` as the (sources, choice) pair older callers unpack."""
    w = pick_window(sources, step)
    return list(w.sources), w.choice
