"""Where per-item work runs: inline, one local process pool for the whole run, or Ray tasks.

Why: following nsys_recipe, each stage's per-item work is a plain picklable function
`fn(item, options) -> result`; the executor alone decides where it runs, and `work.run_item` is
the one failure policy around it. An executor is a context manager with the lifetime of a run:
the local pool is started at the run's first parallel map and every later map (export, both
passes of collect, `window`, `summarize`) reuses its workers, which keep what they imported. On
the way out of a run that failed or was interrupted (pipeline/signals.py) the workers are killed,
never joined: a worker busy with a 1 GB export is not waited for.
"""
from __future__ import annotations

import contextlib
import os
import signal
import threading
from concurrent.futures import Future, ProcessPoolExecutor, as_completed
from typing import Any, Callable, Iterable, Iterator, Protocol, TypeVar

from .ray_executor import RayExecutor
from .workers import worker_count
from .work import Job, TaskResult, run_item, run_job

__all__ = ["Executor", "InlineExecutor", "Job", "ProcessPoolExecutorBackend", "TaskResult", "make_executor",
           "run_all", "run_jobs", "start_jobs"]

T = TypeVar("T")
R = TypeVar("R")


class Executor(Protocol):
    name: str

    def map_unordered(self, fn: Callable[[T, Any], R], items: list[T], options: Any) -> Iterator[TaskResult]:
        """Run fn(item, options) for every item; yield results as they finish (any order)."""
        ...

    def runs_here(self, n_items: int) -> bool:
        """True when `n_items` would run in this process (so nothing forks meanwhile)."""
        ...

    def __enter__(self) -> "Executor":
        ...

    def __exit__(self, *exc: Any) -> None:
        ...


class InlineExecutor:
    """Runs everything in this process, in order: for tests, debugging and `--jobs 1`."""

    name = "inline"
    jobs = 1

    def runs_here(self, n_items: int) -> bool:
        """True: `n_items` run in this process (no fork, no other node)."""
        return True

    def map_unordered(self, fn: Callable[[Any, Any], Any], items: list[Any], options: Any) -> Iterator[TaskResult]:
        for i, item in enumerate(items):
            yield run_item(fn, i, item, options)

    def __enter__(self) -> "InlineExecutor":
        return self

    def __exit__(self, *exc: Any) -> None:
        return None


def _worker_init() -> None:
    """In each pool worker: a process group of its own, so that killing the group ends what the
    worker started too (an `nsys export`); a Ctrl-C to the terminal reaches the driver only, which
    decides (it kills the workers); SIGTERM does its default (the driver's handler is not inherited)."""
    os.setpgid(0, 0)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)


class ProcessPoolExecutorBackend:
    """A local process pool: the default, no cluster needed.

    Inside `with`, one pool serves every map until the block ends; outside, each map starts and
    ends its own (a caller that maps once needs no `with`). One item, or one job, runs inline.
    The constructor clamps `jobs` by the one rule (pipeline/workers.py): whatever a caller asks,
    no pool holds more workers than usable cores, nor more than the items of its first map.
    """

    name = "process-pool"

    def __init__(self, jobs: int | None = None) -> None:
        self.jobs = worker_count(jobs)
        self._pool: ProcessPoolExecutor | None = None
        self._depth = 0

    def runs_here(self, n_items: int) -> bool:
        """True: `n_items` run in this process (one item, or one job: a pool would not pay)."""
        return n_items <= 1 or self.jobs == 1

    def map_unordered(self, fn: Callable[[Any, Any], Any], items: list[Any], options: Any) -> Iterator[TaskResult]:
        if self.runs_here(len(items)):
            yield from InlineExecutor().map_unordered(fn, items, options)
            return
        if self._depth:
            yield from self._map(self._started(), fn, items, options)
            return
        with self:
            yield from self._map(self._started(len(items)), fn, items, options)

    def _started(self, n_items: int | None = None) -> ProcessPoolExecutor:
        if self._pool is None:
            workers = worker_count(self.jobs, n_items)
            self._pool = ProcessPoolExecutor(max_workers=workers, initializer=_worker_init)
        return self._pool

    def expect(self, n_inputs: int) -> None:
        """The run's inputs are known: a pool not yet started gets no more workers than them."""
        if self._pool is None:
            self.jobs = worker_count(self.jobs, n_inputs)

    @property
    def in_run(self) -> bool:
        """True inside `with`: the pool outlives a single map (work can be started and awaited later)."""
        return self._depth > 0

    def submit_all(self, fn: Callable[[Any, Any], Any], items: list[Any], options: Any) -> Iterator[TaskResult]:
        """Submit every item now, on the calling thread (any fork of workers happens here), and
        return the iterator of their results; only inside `with`. A map submits when iterated, so
        a caller with its own work to do meanwhile starts the work here and reads the results later."""
        return self._results(self._submitted(self._started(), fn, items, options))

    @staticmethod
    def _submitted(pool: ProcessPoolExecutor, fn: Callable[[Any, Any], Any], items: list[Any],
                   options: Any) -> dict[Future[TaskResult], int]:
        return {pool.submit(run_item, fn, i, it, options): i for i, it in enumerate(items)}

    @classmethod
    def _map(cls, pool: ProcessPoolExecutor, fn: Callable[[Any, Any], Any], items: list[Any],
             options: Any) -> Iterator[TaskResult]:
        yield from cls._results(cls._submitted(pool, fn, items, options))

    @staticmethod
    def _results(futures: dict[Future[TaskResult], int]) -> Iterator[TaskResult]:
        try:
            for fut in as_completed(futures):
                try:
                    yield fut.result()
                except Exception as exc:  # noqa: BLE001 - a worker that died is this item's error
                    yield TaskResult(futures[fut], error=f"worker lost: {type(exc).__name__}: {exc}")
        finally:
            for fut in futures:
                fut.cancel()

    def __enter__(self) -> "ProcessPoolExecutorBackend":
        self._depth += 1
        return self

    def __exit__(self, exc_type: Any = None, *exc: Any) -> None:
        self._depth -= 1
        if self._depth == 0:
            self.close(kill=exc_type is not None)

    def close(self, kill: bool = False) -> None:
        """End the pool: join idle workers, or (`kill`) kill them all now, busy or not."""
        pool, self._pool = self._pool, None
        if pool is None:
            return
        if not kill:
            pool.shutdown(wait=True)
            return
        procs = list((getattr(pool, "_processes", None) or {}).values())   # no public way to kill them
        for p in procs:
            with contextlib.suppress(OSError):   # the worker's group: it and what it started
                os.killpg(p.pid, signal.SIGKILL)
            with contextlib.suppress(OSError):
                p.kill()
        pool.shutdown(wait=False, cancel_futures=True)
        for p in procs:
            p.join(timeout=5)


def make_executor(jobs: int | None = None, ray_address: str | None = None) -> Executor:
    """Pick the executor from CLI flags. `ray_address` (e.g. "auto") selects Ray tasks (Ray's own
    scheduler bounds them by the cluster's CPUs); a local pool follows pipeline/workers.py."""
    if ray_address is not None:
        return RayExecutor(ray_address)
    if worker_count(jobs) == 1:
        return InlineExecutor()
    return ProcessPoolExecutorBackend(jobs)


def run_all(executor: Executor, fn: Callable[[T, Any], R], items: Iterable[T], options: Any = None,
            on_done: Callable[[TaskResult], None] | None = None) -> list[TaskResult]:
    """Run every item, call `on_done` as each finishes (progress bars), return results in input order."""
    items = list(items)
    return _in_order(executor.map_unordered(fn, items, options), len(items), on_done)


def _in_order(results: Iterable[TaskResult], n: int,
              on_done: Callable[[TaskResult], None] | None) -> list[TaskResult]:
    """Results as they finish (`on_done` called for each), returned in input order."""
    out: list[TaskResult | None] = [None] * n
    for res in results:
        out[res.index] = res
        if on_done:
            on_done(res)
    return [r for r in out if r is not None]


def run_jobs(executor: Executor, jobs: Iterable[Job], on_done: Callable[[TaskResult], None] | None = None,
             meanwhile: Callable[[], Any] | None = None) -> list[TaskResult]:
    """`run_all` over Jobs: results in input order, errors as data.

    `meanwhile`: this process's own work while the jobs run elsewhere (collect's driver imports
    what its next step needs: bundle_tables.prepare_tables), on a thread started once every job
    is submitted, so that no worker is forked while it runs (a fork in the middle of an import
    could leave the child's import lock held); joined before this returns, and what it raises is
    raised here once the jobs are done. Only on a run's pool: elsewhere (inline, one job, Ray, a
    pool that a map forks as it goes) it runs after the jobs."""
    jobs = list(jobs)
    if meanwhile is None or not isinstance(executor, ProcessPoolExecutorBackend) or not executor.in_run \
            or executor.runs_here(len(jobs)):
        out = run_all(executor, run_job, jobs, None, on_done)
        if meanwhile is not None:
            meanwhile()
        return out
    pending = executor.submit_all(run_job, jobs, None)
    raised: list[BaseException] = []

    def own_work() -> None:
        try:
            meanwhile()
        except BaseException as exc:  # noqa: BLE001 - raised again here, as if it ran on this thread
            raised.append(exc)
    thread = threading.Thread(target=own_work, name="verlprof-meanwhile", daemon=True)
    thread.start()
    try:
        out = _in_order(pending, len(jobs), on_done)
    finally:
        thread.join()
    if raised:
        raise raised[0]
    return out


def start_jobs(executor: Executor, jobs: list[Job], here: bool = False) -> Callable[[], list[TaskResult]]:
    """Start `jobs` and return the wait for their results (input order, errors as data).

    Why: a caller with work of its own (collect's driver making ranks.parquet and the manifest
    while a worker writes summaries/) needs the jobs running before it waits. On a run's pool
    they are submitted now, even one alone (the caller's own work runs beside it); where the
    executor runs everything here (`--jobs 1`), or `here` (their output must land on this
    machine: Ray), they run now, before this returns."""
    if here or not isinstance(executor, ProcessPoolExecutorBackend) or not executor.in_run \
            or executor.jobs == 1:
        done = run_jobs(InlineExecutor(), jobs)
        return lambda: done
    pending = executor.submit_all(run_job, list(jobs), None)

    def wait() -> list[TaskResult]:
        return sorted(pending, key=lambda r: r.index)
    return wait
