"""Issue 30: the driver's own work while a pass runs (`executors.run_jobs(..., meanwhile=)`), on a
real process pool.

Why: the ranks table needs pandas (0.3-0.5 s to import). Imported before the pass it was serial
time; collect's driver imports it on a thread while pass 2's jobs run on the pool, where it only
waits. The thread may start only once every job is submitted (the pool forks its workers at
submission; a fork in the middle of an import could leave the child's import lock held).
"""
from __future__ import annotations

import os
import threading
import time

import pytest

from verlprof.pipeline.executors import InlineExecutor, Job, ProcessPoolExecutorBackend, run_jobs


def _work(seconds: float, _options: object = None) -> tuple[int, float, float]:
    start = time.time()
    time.sleep(seconds)
    return os.getpid(), start, time.time()


def test_meanwhile_overlaps_the_jobs_on_a_thread_after_every_worker_forked() -> None:
    pool = ProcessPoolExecutorBackend(3)
    n = pool.jobs   # 3, or the usable cores when fewer (pipeline/workers.py: never more workers than cores)
    seen: dict[str, object] = {}

    def meanwhile() -> None:
        seen["thread"] = threading.current_thread().name
        seen["workers"] = len(pool._pool._processes)   # noqa: SLF001 - what has forked by now
        seen["start"] = time.time()
        time.sleep(0.6)
        seen["end"] = time.time()

    with pool:
        t0 = time.time()
        res = run_jobs(pool, [Job(_work, 0.8) for _ in range(n)], meanwhile=meanwhile)
        took = time.time() - t0
        assert [r.error for r in res] == [None] * n
        assert seen["thread"] != threading.main_thread().name
        assert seen["workers"] == n            # every worker forked before the thread began
        assert "end" in seen                   # joined before run_jobs returned
        # it ran while the jobs ran: overlapping them, not after
        assert seen["start"] < max(r.value[2] for r in res)
        assert took < 0.8 + 0.6
        assert os.getpid() not in {r.value[0] for r in res}


def test_meanwhile_runs_once_after_the_jobs_where_they_run_here() -> None:
    """Inline (--jobs 1), one job, or a pool outside a run: it runs after the jobs, once."""
    for executor, n in ((InlineExecutor(), 2), (ProcessPoolExecutorBackend(2), 1), (ProcessPoolExecutorBackend(2), 2)):
        calls: list[float] = []
        res = run_jobs(executor, [Job(_work, 0.0) for _ in range(n)], meanwhile=lambda: calls.append(time.time()))
        assert [r.error for r in res] == [None] * n
        assert len(calls) == 1 and calls[0] >= max(r.value[2] for r in res)


def test_what_meanwhile_raises_is_raised_once_the_jobs_are_done() -> None:
    """The driver's own work failing is the run's failure, on the pool's thread as inline, and
    only after every job has finished (none is left writing)."""
    def failing() -> None:
        raise ValueError("meanwhile failed")

    pool = ProcessPoolExecutorBackend(2)
    with pool:
        t0 = time.time()
        with pytest.raises(ValueError, match="meanwhile failed"):
            run_jobs(pool, [Job(_work, 0.5) for _ in range(2)], meanwhile=failing)
        assert time.time() - t0 >= 0.5
    with pytest.raises(ValueError, match="meanwhile failed"):
        run_jobs(InlineExecutor(), [Job(_work, 0.0)], meanwhile=failing)
