"""Where per-artifact work runs: inline, a local process pool, or (later) Ray tasks.

Why: following nsys_recipe, each stage's per-artifact work is a plain picklable function
`fn(item, options) -> result`; the executor alone decides where it runs. The Ray executor plugs in
behind the same `Executor.map` interface, so stages never import Ray.
"""
from __future__ import annotations

import os
from concurrent.futures import Future, ProcessPoolExecutor, as_completed
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Iterator, Protocol, TypeVar

T = TypeVar("T")
R = TypeVar("R")


@dataclass
class TaskResult:
    """The result of one item: its value, or the one-line error it raised."""

    index: int
    value: Any = None
    error: str | None = None


class Executor(Protocol):
    name: str

    def map_unordered(self, fn: Callable[[T, Any], R], items: list[T], options: Any) -> Iterator[TaskResult]:
        """Run fn(item, options) for every item; yield results as they finish (any order)."""
        ...

    def runs_here(self, n_items: int) -> bool:
        """True when `n_items` would run in this process (so nothing forks meanwhile)."""
        ...


def _call(fn: Callable[[Any, Any], Any], index: int, item: Any, options: Any) -> TaskResult:
    # Errors become data so one bad input never takes the batch down; VerlprofError's str is one line.
    try:
        return TaskResult(index, fn(item, options))
    except Exception as exc:  # noqa: BLE001 - reported per item, never swallowed silently
        msg = str(exc) or type(exc).__name__
        return TaskResult(index, error=" ".join(msg.split()))


class InlineExecutor:
    """Runs everything in this process, in order: for tests, debugging and `--jobs 1`."""

    name = "inline"
    jobs = 1

    def runs_here(self, n_items: int) -> bool:
        """True: `n_items` run in this process (no fork, no other node)."""
        return True

    def map_unordered(self, fn, items, options):
        for i, item in enumerate(items):
            yield _call(fn, i, item, options)


class ProcessPoolExecutorBackend:
    """A local process pool: the default, no cluster needed."""

    name = "process-pool"

    def __init__(self, jobs: int | None = None) -> None:
        self.jobs = max(1, jobs or os.cpu_count() or 1)

    def runs_here(self, n_items: int) -> bool:
        """True: `n_items` run in this process (one item, or one job: a pool would not pay)."""
        return n_items <= 1 or self.jobs == 1

    def map_unordered(self, fn, items, options):
        if self.runs_here(len(items)):
            yield from InlineExecutor().map_unordered(fn, items, options)
            return
        with ProcessPoolExecutor(max_workers=min(self.jobs, len(items))) as pool:
            futures: dict[Future, int] = {pool.submit(_call, fn, i, it, options): i for i, it in enumerate(items)}
            for fut in as_completed(futures):
                yield fut.result()


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


def run_jobs(executor: "Executor", jobs: Iterable[Job],
             on_done: Callable[[TaskResult], None] | None = None) -> list[TaskResult]:
    """`run_all` over Jobs: results in input order, errors as data."""
    return run_all(executor, run_job, list(jobs), None, on_done)


def make_executor(jobs: int | None = None, ray_address: str | None = None) -> Executor:
    """Pick the executor from CLI flags. `ray_address` (e.g. "auto") selects Ray tasks."""
    if ray_address is not None:
        from .ray_executor import RayExecutor

        return RayExecutor(ray_address)
    if jobs == 1:
        return InlineExecutor()
    return ProcessPoolExecutorBackend(jobs)


def run_all(executor: Executor, fn: Callable[[T, Any], R], items: Iterable[T], options: Any = None,
            on_done: Callable[[TaskResult], None] | None = None) -> list[TaskResult]:
    """Run every item, call `on_done` as each finishes (progress bars), return results in input order."""
    items = list(items)
    out: list[TaskResult | None] = [None] * len(items)
    for res in executor.map_unordered(fn, items, options):
        out[res.index] = res
        if on_done:
            on_done(res)
    return [r for r in out if r is not None]
