"""Atomic outputs: every file verlprof writes appears complete or not at all.

Why: a crash (or Ctrl-C) in the middle of a long export must never leave a half-written file that a
re-run would mistake for finished work. Writers produce `<name>.tmp-<pid>-<rand>` in the same folder
and `os.replace` it onto the final name, which is atomic on POSIX file systems.
"""
from __future__ import annotations

import contextlib
import json
import os
import secrets
import shutil
from pathlib import Path
from typing import Any, Iterator


def temp_sibling(path: Path) -> Path:
    """A unique temporary name beside `path` (same file system, so the final rename is atomic)."""
    return path.with_name(f".{path.name}.tmp-{os.getpid()}-{secrets.token_hex(4)}")


@contextlib.contextmanager
def atomic_path(path: str | Path) -> Iterator[Path]:
    """Yield a temp path to write; rename it onto `path` only if the block finishes without error."""
    final = Path(path)
    final.parent.mkdir(parents=True, exist_ok=True)
    tmp = temp_sibling(final)
    try:
        yield tmp
        if tmp.is_dir():
            if final.exists():
                shutil.rmtree(final)
        os.replace(tmp, final)
    finally:
        if tmp.exists():
            if tmp.is_dir():
                shutil.rmtree(tmp, ignore_errors=True)
            else:
                tmp.unlink(missing_ok=True)


def write_bytes(path: str | Path, data: bytes) -> None:
    with atomic_path(path) as tmp:
        tmp.write_bytes(data)


def write_text(path: str | Path, text: str) -> None:
    write_bytes(path, text.encode("utf-8"))


def write_json(path: str | Path, obj: Any) -> None:
    write_text(path, json.dumps(obj, indent=2, sort_keys=False, default=str) + "\n")


def _writer_alive(temp_name: str) -> bool:
    """Whether the process that owns a temp file (pid in its name) still runs on this machine."""
    try:
        pid = int(temp_name.rsplit(".tmp-", 1)[1].split("-", 1)[0])
    except (IndexError, ValueError):
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def clean_stale_temps(folder: str | Path) -> int:
    """Remove temp files a crashed earlier run left behind in `folder` (only verlprof's own).

    Temps of a writer that is still alive (another collect sharing the work dir) are left alone.
    """
    removed = 0
    root = Path(folder)
    if not root.is_dir():
        return 0
    for p in root.rglob(".*.tmp-*"):
        if _writer_alive(p.name):
            continue
        with contextlib.suppress(OSError):
            shutil.rmtree(p) if p.is_dir() else p.unlink()
            removed += 1
    return removed
