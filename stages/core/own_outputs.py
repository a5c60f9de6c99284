"""verlprof's own outputs are never its inputs: a bundle and a WORK folder are recognised and skipped.

Why: `collect RUN -o RUN/bundle` and then `collect RUN -o OTHER` used to read the first bundle's
window traces as new artifacts (3 failed, step 1 doubled, a whole role gone; issue 41). Every
command that walks folders (collect, scrub, window, summarize of raw runs) goes through the gather
stage's walk, which asks `own_output_reason` of every folder it enters, the SOURCE itself too.

How a folder is known, by content, never by name alone:
- a bundle holds `manifest.json` whose first bytes carry verlprof's `manifest_version` and
  `verlprof_version` keys (pipeline/collect_manifest.py writes them first);
- a WORK folder holds `CACHEDIR.TAG` (the cache-directory standard, so backup tools skip it too)
  whose text names verlprof; every command that uses a WORK folder writes it (`mark_work_dir`).
  A WORK folder made before the tag existed is known by its `salt` beside its caches;
- a bundle still being published is a temp sibling (`.NAME.tmp-PID-HEX`, stages/core/atomic.py).
"""
from __future__ import annotations

import contextlib
from pathlib import Path

from . import atomic

WORK_TAG = "CACHEDIR.TAG"
_TAG_TEXT = ("Signature: 8a477f597d28d172789f06886806bc55\n"
             "# This file is a cache directory tag created by verlprof: its WORK folder of raw\n"
             "# exports and done records (may hold unscrubbed data; never an input, never shared).\n")


def mark_work_dir(work_dir: str | Path) -> None:
    """Create `work_dir` and tag it as verlprof's WORK folder (once; atomically)."""
    tag = Path(work_dir) / WORK_TAG
    if tag.is_file():
        return
    with contextlib.suppress(OSError):   # an unwritable WORK is reported by the command's own checks
        atomic.write_text(tag, _TAG_TEXT)


def _head(path: Path, n: int = 4096) -> bytes:
    try:
        with open(path, "rb") as f:
            return f.read(n)
    except OSError:
        return b""


def is_bundle_manifest(path: Path) -> bool:
    """True when `path` is a manifest.json that a verlprof collect wrote."""
    head = _head(path)
    return b'"manifest_version"' in head and b'"verlprof_version"' in head


def own_output_reason(folder: Path) -> str | None:
    """Why `folder` is verlprof's own output (one phrase), or None when it may hold inputs (an
    unreadable folder too: the walk that reads it next says why it cannot)."""
    try:
        return _reason(folder)
    except OSError:
        return None


def _reason(folder: Path) -> str | None:
    name = folder.name
    if name.startswith(".") and ".tmp-" in name:
        return "verlprof's own output (being written: a temp folder), never an input"
    if is_bundle_manifest(folder / "manifest.json"):
        return "verlprof's own output (a bundle: its manifest.json), never an input"
    if b"verlprof" in _head(folder / WORK_TAG, 1024):
        return "verlprof's own output (its WORK folder: CACHEDIR.TAG), never an input"
    if (folder / "salt").is_file() and _holds_work_folders(folder):
        return "verlprof's own output (its WORK folder: salt and caches), never an input"
    return None


#: What a WORK folder holds beside its salt (done records, exports, caches of ranges and windows).
_WORK_FOLDERS = ("done", "exports", "imports", "ranges", "windows", "summarize")


def _holds_work_folders(folder: Path) -> bool:
    return any((folder / name).is_dir() for name in _WORK_FOLDERS)
