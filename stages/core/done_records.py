"""The stage runner: skip up-to-date work, resume after a crash.

Why: a profiled run yields many reports and exporting each takes seconds to minutes. Each finished
(stage, input) pair leaves a small *done record* in the work directory, written atomically after the
outputs themselves. A re-run finds the record, checks the outputs still exist, and skips the work;
a crash leaves no record, so that item is simply redone. Keys are content hashes plus the stage's
options, never mtimes.
"""
from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from . import atomic
from .own_outputs import mark_work_dir


def default_work_dir() -> Path:
    """Where intermediates that may still hold secrets live: outside any share bundle."""
    env = os.environ.get("VERLPROF_CACHE")
    if env:
        return Path(env).expanduser()
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "verlprof"


def options_fingerprint(options: Any) -> str:
    """A short hash of a stage's options, so changed options invalidate done records."""
    blob = json.dumps(options, sort_keys=True, default=str).encode()
    return hashlib.sha256(blob).hexdigest()[:12]


@dataclass
class DoneRecords:
    """Done records of one stage under `<work>/done/<stage>/`."""

    work_dir: Path
    stage: str

    @property
    def folder(self) -> Path:
        return self.work_dir / "done" / self.stage

    def _path(self, key: str, options: Any) -> Path:
        return self.folder / f"{key}-{options_fingerprint(options)}.json"

    def lookup(self, key: str, options: Any = None) -> dict[str, Any] | None:
        """The record of finished work, or None when the work must (re)run."""
        p = self._path(key, options)
        try:
            rec = json.loads(p.read_text())
        except (OSError, ValueError):
            return None
        outputs = rec.get("outputs", {})
        if not all(Path(v).exists() for v in outputs.values()):
            return None  # an output was removed since: redo
        return rec

    def record(self, key: str, options: Any, outputs: dict[str, str], info: dict[str, Any] | None = None) -> None:
        """Mark work finished. Call only after every output has been atomically written."""
        mark_work_dir(self.work_dir)
        atomic.write_json(self._path(key, options), {"key": key, "outputs": outputs, "info": info or {}})
