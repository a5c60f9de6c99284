"""SIGINT and SIGTERM during a run: stop the workers, publish nothing, say so in one line.

Why: collect runs under job schedulers that interrupt with SIGTERM, and under people who press
Ctrl-C. Python's default turns SIGINT into a KeyboardInterrupt wherever the main thread is, and
multiprocessing then joins workers that block on the pool's queue lock forever; SIGTERM kills the
process and leaves the pool's workers running. Here both signals raise `Interrupted` in the main
thread; the run's executor kills its workers on the way out (pipeline/executors.py), the staging
folder and the temp files of dead writers are removed, and the CLI prints `LINE` and exits
128 + the signal (130 for SIGINT, 143 for SIGTERM). Exports and the ranges cache finished before
the signal stay in the WORK dir, so a re-run resumes. A second signal while this cleans up is
ignored (the cleanup takes a moment; killing it half-way would leave what it removes).
"""
from __future__ import annotations

import contextlib
import signal
import threading
from pathlib import Path
from types import FrameType
from typing import Iterator

from ..stages.core import atomic

LINE = "interrupted: nothing published; a re-run resumes"
SIGNALS = (signal.SIGINT, signal.SIGTERM)


class Interrupted(BaseException):
    """The run was stopped by a signal (a BaseException, so no per-item `except Exception` of the
    failure policy in pipeline/work.py turns it into an item's error)."""

    def __init__(self, signum: int) -> None:
        super().__init__(LINE)
        self.signum = signum

    @property
    def exit_code(self) -> int:
        return 128 + self.signum


def _raise(signum: int, _frame: FrameType | None) -> None:
    for s in SIGNALS:                  # the first one wins; the cleanup that follows runs to its end
        signal.signal(s, signal.SIG_IGN)
    raise Interrupted(signum)


@contextlib.contextmanager
def interruptible() -> Iterator[None]:
    """While inside: SIGINT and SIGTERM raise `Interrupted` (the main thread only: elsewhere,
    signals cannot be handled and the block runs as it is). Nested blocks keep the outer's."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    before = {s: signal.getsignal(s) for s in SIGNALS}
    if all(h is _raise for h in before.values()):
        yield
        return
    for s in SIGNALS:
        signal.signal(s, _raise)
    try:
        yield
    finally:
        for s, h in before.items():
            signal.signal(s, h if h is not None else signal.SIG_DFL)


@contextlib.contextmanager
def stopped_cleanly(*folders: Path | str) -> Iterator[None]:
    """`interruptible`, and on the way out of an interrupt the temp files of killed writers in
    `folders` are removed (an executor entered inside the block has killed its workers by then).
    Every command that runs workers (scrub, window, summarize) stops through this, as collect does."""

    try:
        with interruptible():
            yield
    except Interrupted:
        for folder in folders:
            with contextlib.suppress(OSError):
                atomic.clean_stale_temps(folder)
        raise
