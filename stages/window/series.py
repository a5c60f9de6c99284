"""Series of captures: which files are the same process's successive profiled steps, and which
step each one is. The ONE place a capture's position in its series becomes a step number.

Why: verl starts and stops a profiler once per profiled step, and most of what it writes names no
step: nsys writes `worker_process_<pid>.<k>` per capture range; the rollout engines (vLLM, SGLang)
write one trace per profiled step and GPU under a timestamp or an id (`RayPPOTrainer.fit`:
`llm_server_manager.start_profile()` / `stop_profile()` around `generate_sequences`, reaching the
async servers' `start_profile` / `stop_profile`);
verl 0.8's discrete mode writes one `<role>/prof_rank-<R>_<pid>_<ts>.json.gz` per stage call. Read
one by one, every such file is "the whole capture, step 1", and a run of three profiled steps sums
three steps' work into step 1. So the files are numbered as a series, by one rule:

- **A series** is the files of one process: for torch traces the process the name says (pid, with
  its host when named; a rollout engine's replica and tensor-parallel rank) and the pid the trace
  itself records; for nsys reports the recording host and process read from the report
  (`steps.report_series`), else the name's `<base>.<k>`. Its members must follow one another in
  time; files of one process that overlap are not one series (copies, two tools).
- **Order** is each file's own start time, read from its content (the session start of a report,
  the first event of a trace), never the name: timestamps in names are the engines' and may be
  anything.
- **Steps**: the k-th step of the series is the k-th profiled step of the run, the config's
  `global_profiler.steps[k-1]` when the run's Hydra config is there (`[5, 10, 15]`: steps 5, 10,
  15), else k. A file whose name states its step (`step<N>`) keeps it and takes no part.
- **Several files per step** (verl 0.8 discrete mode: one file per stage call, its folder the stage):
  a new step starts when a stage that already ran in the current step runs again, as each verl
  stage runs once per training step (`ray_trainer.fit`: ref, old log-prob, update, in this order);
  a rollout engine's or a whole step's traces (`e2e`, `rollout`) are each a step of their own.

The window line says which rule numbered the chosen step (`numbering_note`).
"""
from __future__ import annotations

import re
from dataclasses import replace
from typing import Any, Sequence

from ..core import formats
from .types import SourceIdentity

#: A `steps.SourceSteps` (steps.py imports this module, so it is not imported back here).
SourceSteps = Any

#: A torch trace numbered by its place in its process's series.
TRACE_ORDER = "trace_order"
_CAPTURE_RE = re.compile(r"^(?P<base>.+?)\.(?P<k>\d+)(?:\.nsys-rep|\.sqlite|\.qdstrm)?$")
#: File names whose file is rewritten at every profiled call (verl 0.7 / early 2026
#: `<role>/prof_rank-<R>.json.gz`): each holds the last call, there is no series to number.
_NO_SERIES_NAMINGS = frozenset({"torch_verl_phase"})
#: Scopes a whole step's trace carries (one file per profiled step, whatever else it holds).
_STEP_SCOPES = frozenset({"e2e", "train", "rollout", "async_rollout"})


# ----------------------------------------------------------------------------------------------
# The numbering rule
# ----------------------------------------------------------------------------------------------


def step_numbers(count: int, profiled_steps: Sequence[int] | None, first: int = 1) -> list[int]:
    """The step numbers of the `count` successive steps of a series: the config's profiled steps
    in order (a series longer than the list continues after its last entry), else `first`,
    `first + 1` ... (`first` is a step the name states, else 1)."""
    ps = list(profiled_steps or ())
    if ps:
        return [ps[k] if k < len(ps) else ps[-1] + (k - len(ps) + 1) for k in range(count)]
    return list(range(first, first + count))


def numbering_rule(profiled_steps: Sequence[int] | None) -> str:
    """The numbering rule in words, for the window line."""
    if profiled_steps:
        return (f"the k-th is global_profiler.steps[k-1] of the run's config "
                f"({list(profiled_steps)})")
    return "the k-th is step k (no global_profiler.steps in a run config)"


#: Boundaries of steps a capture-range series (nsys) numbered.
_CAPTURE_BOUNDARIES = frozenset({"capture_range", "discrete"})


def numbering_note(sources: Sequence[SourceSteps], chosen: int | None) -> str:
    """`; ...` for the window line when series numbering gave the chosen step, else ''."""
    said = []
    idents = [src.ident for src in sources if any(s.step == chosen and s.boundary == TRACE_ORDER
                                                  for s in src.steps)]
    if idents:
        ps = next((i.profiled_steps for i in idents if i.profiled_steps), None)
        what = sorted({i.role or "unknown role" for i in idents})
        said.append(f"{', '.join(what)} traces name no step: each process's traces in start order are its "
                    f"profiled steps, {numbering_rule(ps)}")
    if any(s.step == chosen and s.boundary in _CAPTURE_BOUNDARIES for src in sources for s in src.steps):
        said.append("capture-range reports numbered in session-start order per process (a report, or in "
                    "discrete mode a run of stage calls, per profiled step; the k-th is "
                    "global_profiler.steps[k-1] where gather found the run's config, else step k)")
    return "".join(f"; {s}" for s in said)


# ----------------------------------------------------------------------------------------------
# torch traces: a process's successive traces
# ----------------------------------------------------------------------------------------------


def process_key(artifact: Any) -> str | None:
    """Which process wrote a torch trace, as its name says: host and pid where named (verl's
    `..._pid<P>_...`, 0.8's `prof_rank-<R>_<pid>_<ts>`, `<host>_<pid>` engine names), else a rollout
    replica and the GPU's tensor-parallel (or global) rank. None where the file is rewritten per
    call (no series) or the name says nothing of it."""
    if getattr(artifact, "naming", None) in _NO_SERIES_NAMINGS:
        return None
    notes = dict(n.split("=", 1) for n in getattr(artifact, "notes", ()) if "=" in n)
    rank = f" rank {artifact.rank}" if artifact.rank is not None else ""
    if artifact.pid is not None:   # a process plays one rank: the rank only tells more apart
        return f"pid {artifact.pid}@{artifact.host or ''}{rank}"
    if "replica" in notes:
        gpu = f"tp{notes['tp_rank']}" if "tp_rank" in notes else (
            f"rank{artifact.rank}" if artifact.rank is not None else "")
        return f"replica {notes['replica']} {gpu}".rstrip()
    if artifact.naming and artifact.naming.startswith("torch_verl") and artifact.rank is not None:
        return rank.strip()
    return None


def _series_members(sources: Sequence[SourceSteps]) -> dict[tuple[str, int | None], list[int]]:
    """Torch sources that are one whole capture each and name their process, by (process, the pid
    the trace records)."""
    groups: dict[tuple[str, int | None], list[int]] = {}
    for i, src in enumerate(sources):
        if (not formats.get(src.ident.source_kind).file_series or src.ident.process is None or not src.steps
                or any(s.boundary != "whole_file" for s in src.steps)):
            continue
        pids = {s.pid for s in src.steps}
        groups.setdefault((src.ident.process, pids.pop() if len(pids) == 1 else None), []).append(i)
    return groups


def _start(src: SourceSteps) -> int:
    return min(s.start_ns for s in src.steps)


def _step_groups(sources: Sequence[SourceSteps], members: Sequence[int]) -> list[int]:
    """The step group (0, 1, ...) of each member, in order: a new group where the member's stage
    (its scope) already ran in the current one; a whole step's trace is a group of its own."""
    out: list[int] = []
    seen: set[str] = set()
    group = -1
    for j in members:
        scope = (sources[j].ident.scope or "").replace("-", "_").lower()
        whole = not scope or scope in _STEP_SCOPES
        if group < 0 or whole or scope in seen:
            group, seen = group + 1, set()
        if not whole:
            seen.add(scope)
        out.append(group)
    return out


def number_trace_series(sources: Sequence[SourceSteps]) -> list[SourceSteps]:
    """Every torch trace that names no step, numbered by its place in its process's series (module
    docstring). A lone trace stays the whole capture, step 1, unless the config says which step
    was profiled; traces of one process that overlap in time stay as they are."""
    out = list(sources)
    for (_key, _pid), members in _series_members(sources).items():
        members.sort(key=lambda j: (_start(sources[j]), sources[j].ident.source))
        ps = next((sources[j].ident.profiled_steps for j in members if sources[j].ident.profiled_steps), None)
        if len(members) == 1 and not ps:
            continue
        spans = [(_start(sources[j]), max(s.end_ns for s in sources[j].steps)) for j in members]
        if not _disjoint_spans(spans):
            continue
        groups = _step_groups(sources, members)
        nums = step_numbers(max(groups) + 1, ps)
        n = len(set(groups))
        for j, g in zip(members, groups):
            src = sources[j]
            label = f"profiled step {g + 1} of {n} of its process"
            out[j] = replace(src, steps=tuple(replace(s, step=nums[g], boundary=TRACE_ORDER, label=label)
                                              for s in src.steps))
    return out


def _disjoint_spans(spans: Sequence[tuple[int, int]]) -> bool:
    spans = sorted(spans)
    return all(a[1] <= b[0] for a, b in zip(spans, spans[1:]))


# ----------------------------------------------------------------------------------------------
# nsys capture-range reports
# ----------------------------------------------------------------------------------------------


def chain_key(src: SourceSteps) -> str:
    """Files of one capture-range series share this key (`worker_process_1983` of `.1`, `.2` ...)."""
    name = src.ident.source
    for suf in (".sqlite", ".nsys-rep", ".qdstrm"):
        if name.endswith(suf):
            name = name[: -len(suf)]
    m = _CAPTURE_RE.match(name)
    return m.group("base") if m and src.ident.capture_range is not None else name


def series_numbers(count: int, ident: SourceIdentity, first_default: int = 1) -> list[int]:
    """Step numbers for `count` consecutive step units of a source or series: the config's
    profiled steps when it lists enough, else from the name's step (else `first_default`) on."""
    if ident.profiled_steps and len(ident.profiled_steps) >= count:
        return step_numbers(count, ident.profiled_steps)
    return step_numbers(count, None, ident.step_hint if ident.step_hint is not None else first_default)


def capture_series(sources: Sequence[SourceSteps]) -> list[list[int]]:
    """The capture-range series among nsys sources, each as source indexes in capture order.

    Reports belong to one series when their content says they come from one process (`series`:
    recording host and pid read from the report); the file name (`<base>.<k>`) is only a hint, used
    where a report cannot say (several processes, none): a renamed series (`capture_0042.<k>`) is
    the same series as `worker_process_<pid>.<k>`. A lone report is a series when its name says it
    is one capture range of several. Order: session start (each capture-range report has its own),
    then the name's k."""
    by_content: dict[str, list[int]] = {}
    groups: dict[tuple[str, str], list[int]] = {}
    for i, src in enumerate(sources):
        if not formats.get(src.ident.source_kind).numbers_steps or (src.steps and not src.has_step_ranges):
            continue
        if src.series is not None:
            by_content.setdefault(src.series, []).append(i)
        elif src.ident.capture_range is not None:
            groups.setdefault(("name", chain_key(src)), []).append(i)
    for key, members in by_content.items():
        if _disjoint(sources, members):
            groups[("content", key)] = members
        else:  # one process's reports that overlap in time (copies, two tools): not one series
            for i in members:
                if sources[i].ident.capture_range is not None:
                    groups.setdefault(("name", chain_key(sources[i])), []).append(i)
    chains = []
    for members in groups.values():
        if len(members) == 1 and sources[members[0]].ident.capture_range is None:
            continue  # one report of its process, its name says nothing of capture ranges
        members.sort(key=lambda j: (sources[j].offset_ns, sources[j].ident.capture_range or 0,
                                    sources[j].ident.source))
        chains.append(members)
    return chains


def _disjoint(sources: Sequence[SourceSteps], members: Sequence[int]) -> bool:
    """Whether the reports follow one another in time, as the capture ranges of one process do."""
    return _disjoint_spans([sources[j].span or (sources[j].offset_ns, sources[j].offset_ns) for j in members])


def capture_orders(sources: Sequence[SourceSteps], members: Sequence[int]) -> list[int]:
    """The capture number of each member (1-based): the names' `.<k>` where they agree with the
    session-start order (a series gathered without its first reports keeps its numbers), else the
    position in that order."""
    ks = [sources[j].ident.capture_range for j in members]
    if all(k is not None for k in ks) and all(a < b for a, b in zip(ks, ks[1:])):  # type: ignore[operator]
        return [int(k) for k in ks]  # type: ignore[arg-type]
    return list(range(1, len(members) + 1))


def capture_step(ident: SourceIdentity, first: SourceIdentity, k: int) -> int:
    """Step of the k-th one-step capture of a series: a step the name states, else the series rule
    (`step_numbers`: the config's k-th profiled step, else k)."""
    if ident.step_hint is not None:
        return ident.step_hint
    return step_numbers(k, ident.profiled_steps or first.profiled_steps)[k - 1]

