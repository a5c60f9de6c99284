"""One unit of per-item work and the one failure policy every executor applies to it.

Why a module of its own: the local executors (pipeline/executors.py) and the Ray executor
(pipeline/ray_executor.py) both ship `run_item` to where the work runs, and both yield
`TaskResult`s; keeping them here lets the executors import each other in one direction only.

The policy: an `Exception` raised by one item becomes that item's one-line error (`TaskResult.error`)
so one bad input never takes the run down; anything else (KeyboardInterrupt, the interrupt of
pipeline/signals.py, SystemExit) stops the run. A task lost with its worker or node is the
executor's to report, as an error of that item.
"""
from __future__ import annotations

import os
import time
from dataclasses import dataclass
from typing import Any, Callable

#: Where each item's start and end go, one line per item, when set (bench/bench_collect.py
#: --timeline): which pass waited on which job, measured where the job ran.
JOB_LOG = os.environ.get("VERLPROF_JOB_LOG")


@dataclass
class TaskResult:
    """The result of one item: its value, or the one-line error it raised."""

    index: int
    value: Any = None
    error: str | None = None


def one_line(exc: BaseException) -> str:
    """An exception as one line (VerlprofError's str already is; others may span lines)."""
    return " ".join((str(exc) or type(exc).__name__).split())


def attempt(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> tuple[Any, str | None]:
    """`(fn(*args, **kwargs), None)`, or `(None, its one-line error)`: the one failure policy.

    Used by `run_item` for a whole item and by an item whose parts fail alone (pass 1's steps and
    identities, pass 2's rows and window: collect_tasks.py), so a part's failure is data exactly
    as an item's is, and a KeyboardInterrupt or the signal interrupt still stops the run."""
    try:
        return fn(*args, **kwargs), None
    except Exception as exc:  # noqa: BLE001 - reported per item or part, never swallowed silently
        return None, one_line(exc)


def run_item(fn: Callable[[Any, Any], Any], index: int, item: Any, options: Any) -> TaskResult:
    """`fn(item, options)` as a TaskResult: the one place where per-item failures become data."""
    start = time.time() if JOB_LOG else 0.0
    try:
        value, error = attempt(fn, item, options)
        return TaskResult(index, value, error)
    finally:
        if JOB_LOG:
            _log_job(getattr(item, "fn", fn), start)


def _log_job(fn: Callable[..., Any], start: float) -> None:
    """One line (pid, function, start, end; epoch seconds) appended to JOB_LOG: short enough that
    workers appending at once never interleave."""
    line = f"{os.getpid()} {getattr(fn, '__module__', '')}.{getattr(fn, '__qualname__', fn)} {start:.6f} {time.time():.6f}\n"
    fd = os.open(JOB_LOG, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, line.encode())
    finally:
        os.close(fd)


@dataclass(frozen=True)
class Job:
    """One unit of work for a mixed queue: `fn(item, options)`, and the Ray node that holds the
    item's input (None: anywhere). Lets one executor run several kinds of work side by side, and
    the Ray executor run each job where its raw input lies."""

    fn: Callable[[Any, Any], Any]
    item: Any
    options: Any = None
    node: str | None = None


def run_job(job: Job, _options: Any = None) -> Any:
    """Run one Job (module level, so every executor can ship it)."""
    return job.fn(job.item, job.options)
