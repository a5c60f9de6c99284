"""Who wrote an input, from its gathered artifact or its file name alone: the `SourceIdentity`
every step and row of the input carries.

Why a module of its own: the window stage's identity is read from names (stages/readers/naming.py)
and from what gather learned (the run config's profiled steps, a rollout trace's replica and GPU),
and both steps.py (numbering) and series.py (which files are one process's series) depend on it.
"""
from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from ..core import formats
from ..readers.naming import classify_name
from .types import SourceIdentity

#: Namings whose writer steps the torch profiler per update mini-batch: verl 0.5 / 0.6 / 0.7's
#: `Profiler` (`verl/utils/profiler/profile.py`, a `torch.profiler.schedule` driven by
#: `MegatronPPOActor.update_policy`), whose ProfilerStep#N count mini-batches.
_MINI_BATCH_STEPPERS = frozenset({"torch_verl_05", "torch_verl_phase"})
_CAPTURE_RE = re.compile(r"^(?P<base>.+?)\.(?P<k>\d+)(?:\.nsys-rep|\.sqlite|\.qdstrm)?$")
_STEP_IN_NAME = re.compile(r"(?:^|[^a-z])step[_-]?(\d+)(?:[^0-9]|$)", re.IGNORECASE)


def identity_from_path(path: str | Path, source_kind: str | None = None) -> SourceIdentity:
    """A best-effort identity from a file name alone: verl's naming patterns
    (`stages/readers/naming.py`: role, rank, pid, capture range, step), else `<base>.<k>` ->
    capture range k and a trailing number -> pid."""

    name = Path(path).name
    fmt = formats.get(source_kind) if source_kind is not None else formats.for_name(name)
    source_kind = fmt.kind
    stem = name
    for suf in formats.capture_suffixes():
        if stem.endswith(suf):
            stem = stem[: -len(suf)]
    cap = None
    m = _CAPTURE_RE.match(stem)
    if m and fmt.capture_suffixes:   # `<base>.<k>`: capture range k (nsys's --capture-range=repeat)
        cap = int(m.group("k"))
    pid = None
    mp = re.search(r"(?:^|_)(?:pid)?(\d{2,})(?:\.\d+)?$", stem)
    if mp:
        pid = int(mp.group(1))
    hint = None
    ms = _STEP_IN_NAME.search(stem)
    if ms:
        hint = int(ms.group(1))
    role = rank = None
    try:
        info = classify_name(name)
    except Exception:  # noqa: BLE001 - a name we cannot classify still gets the fallbacks above
        info = None
    if info is not None:
        role, rank = info.role, info.rank
        pid = info.pid if info.pid is not None else pid
        cap = info.capture_range if info.capture_range is not None else cap
        hint = info.step if info.step is not None else hint
    return SourceIdentity(source=name, source_kind=source_kind, role=role, rank=rank, pid=pid,  # type: ignore[arg-type]
                          step_hint=hint, capture_range=cap)


def identity_from_artifact(a: Any) -> SourceIdentity:
    """SourceIdentity of a gathered `Artifact` (stages/core/model.py)."""
    fmt = formats.for_file_kind(a.kind)
    steps = getattr(a, "steps", None)
    notes = dict(n.split("=", 1) for n in getattr(a, "notes", ()) if "=" in n)
    profiled = tuple(range(steps[0], steps[1] + 1)) if steps else None
    if profiled is None and notes.get("profiled_steps"):   # gather: the config's global_profiler.steps
        profiled = tuple(int(x) for x in notes["profiled_steps"].split(",") if x.strip().isdigit()) or None
    ident = SourceIdentity(
        source=a.rel, source_kind=fmt.kind, role=a.role, rank=a.rank, pid=a.pid,  # type: ignore[arg-type]
        step_hint=a.step, capture_range=a.capture_range,
        profiled_steps=profiled,
        step_range=tuple(steps) if steps else None,  # type: ignore[arg-type]
        world_size=getattr(a, "world_size", None),
        token_window=next((n.split("=", 1)[1] for n in getattr(a, "notes", ()) if n.startswith("token_window=")),
                          None),
        scope=getattr(a, "scope", None),
        mini_batch_markers=getattr(a, "naming", None) in _MINI_BATCH_STEPPERS)
    return fmt.refine_identity(ident, a)   # what its format adds (a trace's process key, an OOM scope)
