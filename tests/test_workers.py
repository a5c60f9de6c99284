"""The one worker rule (pipeline/workers.py, issue 41): no pool holds more workers than
min(requested, usable cores, inputs), whatever a caller passes; the cgroup quota is read from real
files in both cgroup layouts."""
from __future__ import annotations

import os
from pathlib import Path

import psutil

from verlprof.pipeline.executors import InlineExecutor, ProcessPoolExecutorBackend, make_executor, run_all
from verlprof.pipeline.workers import usable_cores, worker_count
from verlprof.stages.core.cores import _cgroup_quota_cores


def _pid(_item: object, _options: object = None) -> int:
    return os.getpid()


def test_worker_count_is_min_of_requested_cores_and_inputs() -> None:
    cores = usable_cores()
    assert 1 <= cores <= (os.cpu_count() or 1)
    assert cores <= len(os.sched_getaffinity(0))
    assert worker_count(100000) == cores
    assert worker_count(None) == cores
    assert worker_count(100000, inputs=1) == 1
    assert worker_count(1, inputs=50) == 1
    assert worker_count(None, inputs=0) == 1


def test_the_constructor_clamps_so_no_caller_can_bypass_it() -> None:
    pool = ProcessPoolExecutorBackend(100000)
    assert pool.jobs == usable_cores()
    assert isinstance(make_executor(1), InlineExecutor)
    me = psutil.Process()
    with pool:
        pids = {r.value for r in run_all(pool, _pid, list(range(40)))}
        workers = me.children(recursive=True)
    assert len(workers) <= usable_cores()
    assert pids <= {w.pid for w in workers}
    pool.expect(1)   # a pool already started keeps its size; a new one is cut to the inputs
    fresh = ProcessPoolExecutorBackend(100000)
    fresh.expect(1)
    assert fresh.jobs == 1 and fresh.runs_here(5)


def test_cgroup_quota_v2_and_v1(tmp_path: Path) -> None:
    v2 = tmp_path / "v2"
    v2.mkdir()
    (v2 / "cpu.max").write_text("150000 100000\n")
    assert _cgroup_quota_cores(v2) == 2
    (v2 / "cpu.max").write_text("max 100000\n")
    assert _cgroup_quota_cores(v2) is None
    v1 = tmp_path / "v1"
    (v1 / "cpu").mkdir(parents=True)
    (v1 / "cpu" / "cpu.cfs_quota_us").write_text("50000\n")
    (v1 / "cpu" / "cpu.cfs_period_us").write_text("100000\n")
    assert _cgroup_quota_cores(v1) == 1
    (v1 / "cpu" / "cpu.cfs_quota_us").write_text("-1\n")
    assert _cgroup_quota_cores(v1) is None
    assert _cgroup_quota_cores(tmp_path / "none") is None

