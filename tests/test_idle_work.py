"""Issue 30: work for idle workers (`executors.run_jobs(..., then=)`), on a real process pool.

Why: the ranks job imports pandas (0.3-0.5 s); on the run's critical path that import was serial
time. Pass 2 queues it behind its jobs for the workers that finish early; it is never awaited,
and what no worker has started when pass 2's last job is done is cancelled, so the next step's
jobs never queue behind it.
"""
from __future__ import annotations

import os
import time
from pathlib import Path

from verlprof.pipeline.executors import InlineExecutor, Job, ProcessPoolExecutorBackend, run_jobs


def _work(seconds: float, _options: object = None) -> int:
    time.sleep(seconds)
    return os.getpid()


def _note(folder: str, _options: object = None) -> None:
    """An idle-time job: leaves a file named by its worker's pid and a counter, then takes a while."""
    path = Path(folder) / f"{os.getpid()}-{time.monotonic_ns()}"
    path.write_text("ran")
    time.sleep(0.2)


def test_idle_work_runs_on_the_pool_after_the_jobs_and_is_never_awaited(tmp_path: Path) -> None:
    pool = ProcessPoolExecutorBackend(2)
    with pool:
        t0 = time.monotonic()
        # one long job and one short: the short job's worker idles for ~1.4 s and takes idle work
        res = run_jobs(pool, [Job(_work, 1.5), Job(_work, 0.1)], then=[Job(_note, str(tmp_path))] * 20)
        took = time.monotonic() - t0
        assert [r.error for r in res] == [None, None] and len(res) == 2
        pids = {r.value for r in res}
        ran = list(tmp_path.iterdir())
        # idle work ran while the long job ran, in the pool's workers, never in this process
        assert ran, "no idle work ran while a worker idled"
        assert {int(p.name.split("-")[0]) for p in ran} <= pids and os.getpid() not in pids
        # cancelled once the long job was done: 20 jobs of 0.2 s could not all have started in ~1.5 s
        # on one idle worker, and run_jobs did not wait for them
        assert len(ran) < 20
        assert took < 1.5 + 20 * 0.2 / 2
        later = run_jobs(pool, [Job(_work, 0.0), Job(_work, 0.0)])   # the pool serves the next step
        assert [r.error for r in later] == [None, None]
    time.sleep(0.5)
    assert len(list(tmp_path.iterdir())) < 20   # the cancelled ones never ran, even later


def test_idle_work_is_not_run_where_no_worker_idles(tmp_path: Path) -> None:
    """Inline (--jobs 1), or a pool outside a run (one map, its own pool): nothing to fill."""
    for executor in (InlineExecutor(), ProcessPoolExecutorBackend(2)):
        res = run_jobs(executor, [Job(_work, 0.0), Job(_work, 0.0)], then=[Job(_note, str(tmp_path))])
        assert [r.error for r in res] == [None, None]
    assert not list(tmp_path.iterdir())
