"""The one rule for how many workers any verlprof command starts.

Why one rule in one place: a user who types `--jobs 100000` on a shared login node must not take
it down (issue 41: one process per requested worker, 5,600 processes, 24 GB gone). Every pool is
sized here, by the executor's constructor (pipeline/executors.py), never by its callers: at most
min(requested, usable cores, inputs), and at least 1. Usable cores are the CPU affinity capped by
the cgroup's CPU quota (stages/core/cores.py). `--jobs` below 1 is refused in one line (exit 2) by
the option's callback, before any work starts.
"""
from __future__ import annotations

from typing import Any, Optional

from ..stages.core.cores import usable_cores
from ..stages.core.errors import VerlprofError

__all__ = ["JOBS_HELP", "MEMORY_PER_WORKER", "check_jobs", "jobs_option", "usable_cores", "worker_count"]

#: What one worker holds at its peak: one input at a time (an export's tables, a trace streamed in
#: blocks). Measured (psutil, peak RSS per process) on a collect of the shared H200 fixtures
#: (4-13 MB inputs, --jobs 2): workers 197 and 525 MB, the driver 172 MB; it grows with the
#: largest single input.
MEMORY_PER_WORKER = "0.2-0.5 GB on the H200 fixtures, more for larger inputs; one input at a time"

JOBS_HELP = ("Parallel worker processes: at most min(JOBS, usable cores, inputs); default {default}. "
             f"Memory per worker: {MEMORY_PER_WORKER}.")


def worker_count(requested: Optional[int] = None, inputs: Optional[int] = None) -> int:
    """Workers to start: min(requested (default: usable cores), usable cores, inputs), at least 1."""
    n = usable_cores()
    if requested is not None:
        n = min(n, int(requested))
    if inputs is not None:
        n = min(n, int(inputs))
    return max(1, n)


def check_jobs(value: Optional[int]) -> Optional[int]:
    """Typer callback of every `--jobs`: refuse < 1 in one line (exit 2) before any work starts."""
    if value is not None and value < 1:
        raise VerlprofError(None, f"--jobs must be 1 or more (it is capped at the usable cores, "
                                  f"{usable_cores()} here), not {value}")
    return value


def jobs_option(default: Optional[int] = None, default_said: str = "usable cores") -> Any:
    """The `--jobs/-j` option of every command that runs workers (one wording, one check)."""
    import typer

    return typer.Option(default, "--jobs", "-j", callback=check_jobs, metavar="JOBS",
                        help=JOBS_HELP.format(default=default_said))
