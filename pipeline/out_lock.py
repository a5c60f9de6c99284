"""One writer per bundle: a collect holds an exclusive lock on its OUT for the whole run.

Why: two collects started at once into the same OUT (a job array, a re-run while the first still
runs) each staged their bundle and swapped it onto OUT; the loser's windows vanished under it and
both ended `2 failed` (issue 41). The second now stops before any work, in one line naming OUT
and the pid that holds it (exit 2). The lock is `flock` on a small file beside OUT (`.NAME.lock`,
the pid inside): the kernel releases it when its holder dies, so a killed collect never leaves
OUT locked; the file is removed when the run ends.
"""
from __future__ import annotations

import contextlib
import fcntl
import os
from pathlib import Path
from typing import Iterator

from ..stages.core.errors import VerlprofError


def lock_path(out: Path) -> Path:
    return out.with_name(f".{out.name}.lock")


@contextlib.contextmanager
def out_locked(out: Path) -> Iterator[None]:
    """Hold OUT for this process, or raise VerlprofError (exit 2) when another process holds it."""
    path = lock_path(out)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            holder = os.pread(fd, 32, 0).decode(errors="replace").strip() or "?"
            raise VerlprofError(out, f"another verlprof (pid {holder}) is writing this bundle now; "
                                     "wait for it to end, or choose another -o") from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        try:
            yield
        finally:
            with contextlib.suppress(OSError):
                path.unlink()
    finally:
        os.close(fd)
