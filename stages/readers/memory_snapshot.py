"""Read torch CUDA caching-allocator snapshots (`torch.cuda.memory._dump_snapshot` pickles) safely.

Why: a snapshot is a pickle, and unpickling an untrusted pickle runs arbitrary code. Real snapshots
hold only builtin containers (dict, list, str, int, float, bool, None), so the unpickler below
refuses every global lookup except a tiny allowlist of harmless containers; a hostile pickle fails
with a one-line error before anything executes.
"""
from __future__ import annotations

import io
import pickle
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..core.errors import BadInputError

# (module, name) pairs a snapshot may legitimately reference. Nothing callable with side effects.
_ALLOWED_GLOBALS: frozenset[tuple[str, str]] = frozenset({
    ("collections", "OrderedDict"),
    ("builtins", "set"),
    ("builtins", "frozenset"),
})


class RestrictedUnpickler(pickle.Unpickler):
    """An unpickler that resolves no globals outside `_ALLOWED_GLOBALS`."""

    def find_class(self, module: str, name: str) -> Any:  # noqa: D401 - pickle API
        if (module, name) in _ALLOWED_GLOBALS:
            return super().find_class(module, name)
        raise pickle.UnpicklingError(f"refused global {module}.{name}")

    def persistent_load(self, pid: Any) -> Any:
        raise pickle.UnpicklingError("refused persistent id")


def loads_restricted(data: bytes) -> Any:
    return RestrictedUnpickler(io.BytesIO(data)).load()


def load_snapshot(path: str | Path) -> dict[str, Any]:
    """Load a memory snapshot; raise BadInputError (one line, names the file) on anything odd."""
    p = Path(path)
    try:
        data = p.read_bytes()
    except OSError as exc:
        raise BadInputError(p, f"cannot read: {exc.strerror or exc}") from None
    if not data:
        raise BadInputError(p, "empty file, not a torch memory snapshot")
    try:
        obj = loads_restricted(data)
    except pickle.UnpicklingError as exc:
        raise BadInputError(p, f"not a safe torch memory snapshot pickle ({exc})") from None
    except (EOFError, ValueError, TypeError, IndexError, KeyError, AttributeError, MemoryError,
            OverflowError, UnicodeDecodeError, RecursionError) as exc:
        raise BadInputError(p, f"corrupt or truncated pickle ({type(exc).__name__})") from None
    if not isinstance(obj, dict) or "segments" not in obj:
        raise BadInputError(p, "pickle is not a torch memory snapshot (no 'segments' key)")
    return obj


@dataclass
class Annotation:
    """One `external_annotations` START/END pair (a record_function range), absolute ns."""

    name: str
    device: int
    start: int
    end: int
    parent: int = -1
    depth: int = 0


def snapshot_annotations(snap: dict[str, Any]) -> list[Annotation]:
    """START/END pairs of a snapshot's external_annotations, nested per device (parent, depth),
    sorted by (device, start, -end)."""
    open_: dict[tuple[int, str], list[int]] = {}
    out: list[Annotation] = []
    events = [a for a in snap.get("external_annotations") or [] if isinstance(a, dict)]
    events.sort(key=lambda a: a.get("time_us") if isinstance(a.get("time_us"), (int, float)) else 0)
    for a in events:
        name, stage, t = a.get("name"), a.get("stage"), a.get("time_us")
        if not isinstance(name, str) or not isinstance(t, (int, float)):
            continue
        dev = a.get("device", 0) if isinstance(a.get("device"), int) else 0
        if stage == "START":
            out.append(Annotation(name, dev, int(t * 1000), -1))
            open_.setdefault((dev, name), []).append(len(out) - 1)
        elif stage == "END" and open_.get((dev, name)):
            out[open_[(dev, name)].pop()].end = int(t * 1000)
    out = [a for a in out if a.end >= a.start]
    out.sort(key=lambda a: (a.device, a.start, -a.end))
    stack: list[int] = []
    for i, a in enumerate(out):
        while stack and (out[stack[-1]].device != a.device or out[stack[-1]].end <= a.start):
            stack.pop()
        if stack:
            a.parent, a.depth = stack[-1], out[stack[-1]].depth + 1
        stack.append(i)
    return out
