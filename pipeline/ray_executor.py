"""Ray tasks behind the executor interface: `--ray` runs per-artifact / per-run work on a cluster.

Why: verl itself runs on Ray, so a verl user already has a cluster. The stages never import Ray:
this executor takes the same plain picklable `fn(item, options)` as the process pool and submits
one Ray task per item, keeping a bounded number in flight (memory and object store stay flat no
matter how many items) and yielding results as they finish. Errors inside `fn` come back as data
(one line), exactly as with the local pool; a task lost with its worker or node is reported as an
error of that item, never a crash of the batch.

Addresses: "auto" = the running cluster (`ray start` / `RAY_ADDRESS`), "local" = start a private
local Ray for this process, anything else is passed to `ray.init(address=...)` (`ray://...` too).
If Ray is already initialised in this process (a driver that called `ray.init`), it is reused.
Workers must be able to import verlprof (true on the nodes of a verl cluster that installed it;
otherwise pass `runtime_env`).
"""
from __future__ import annotations

import logging
from typing import Any, Callable, Iterator

from ..stages.core.errors import ToolMissingError, VerlprofError
from ..stages.core.cores import usable_cores
from .work import TaskResult, run_item


def _one_line(exc: BaseException, limit: int = 300) -> str:
    """A Ray error's first meaningful line (Ray's own str() carries a whole remote traceback)."""
    text = str(exc) or type(exc).__name__
    first = next((ln.strip() for ln in text.splitlines() if ln.strip()), type(exc).__name__)
    return " ".join(f"{type(exc).__name__}: {first}".split())[:limit]


def import_ray() -> Any:
    try:
        import ray  # noqa: PLC0415 - optional dependency
    except ImportError:
        raise ToolMissingError(None, "Ray is not installed: pip install 'verlprof[ray]' (or ray>=2.9)") from None
    return ray


def connect(address: str | None = "auto", **init_kwargs: Any) -> bool:
    """Make sure this process is connected to Ray; True when this call started the connection.

    One-line VerlprofError when no cluster answers at `address`.
    """
    ray = import_ray()
    if ray.is_initialized():
        return False
    kwargs: dict[str, Any] = {"logging_level": logging.WARNING, "log_to_driver": False,
                              "include_dashboard": False, **init_kwargs}
    if address == "local":
        kwargs.setdefault("num_cpus", usable_cores())   # Ray starts a new local instance
    else:
        kwargs.pop("include_dashboard", None)   # only valid when starting a new cluster
    try:
        ray.init(address=address, **kwargs)
    except (ConnectionError, RuntimeError, ValueError) as exc:
        where = "a running Ray cluster (`ray start --head`, or RAY_ADDRESS)" if address == "auto" else f"Ray at {address}"
        raise VerlprofError(None, f"cannot connect to {where}: {_one_line(exc)}") from None
    return True


class RayExecutor:
    """One Ray task per item; results yielded as they finish (any order), errors as data."""

    name = "ray"

    def __init__(self, address: str | None = "auto", *, num_cpus: float = 1, max_in_flight: int | None = None,
                 max_retries: int = 1, init_kwargs: dict[str, Any] | None = None) -> None:
        self.address = address or "auto"
        self.num_cpus = num_cpus
        self.max_in_flight = max_in_flight
        self.max_retries = max_retries
        self.init_kwargs = dict(init_kwargs or {})
        self._started = False
        self._pending: dict[Any, int] = {}

    def _ensure(self) -> Any:
        ray = import_ray()
        if not ray.is_initialized():
            self._started = connect(self.address, **self.init_kwargs) or self._started
        return ray

    def ensure(self) -> Any:
        """The `ray` module, connected (for callers that list the cluster's nodes)."""
        return self._ensure()

    def _window(self, ray: Any) -> int:
        """Tasks kept in flight: enough to fill the cluster twice, so results stream back steadily."""
        if self.max_in_flight:
            return max(1, self.max_in_flight)
        try:
            cpus = float(ray.cluster_resources().get("CPU", 1))
        except Exception:  # noqa: BLE001 - a best-effort sizing hint only
            cpus = 1.0
        return max(2, int(2 * cpus / max(self.num_cpus, 0.01)))

    def runs_here(self, n_items: int) -> bool:
        """Never: tasks run in Ray's workers, on any node."""
        return False

    def map_unordered(self, fn: Callable[[Any, Any], Any], items: list[Any], options: Any) -> Iterator[TaskResult]:
        if not items:
            return
        ray = self._ensure()
        remote = ray.remote(run_item)
        opt_ref = ray.put(options)
        fn_ref = ray.put(fn)
        window = self._window(ray)
        pending = self._pending = {}
        next_i = 0
        while next_i < len(items) or pending:
            while next_i < len(items) and len(pending) < window:
                pending[self._submit(remote, fn_ref, next_i, items[next_i], opt_ref)] = next_i
                next_i += 1
            ready, _ = ray.wait(list(pending), num_returns=1)
            for ref in ready:
                index = pending.pop(ref)
                try:
                    yield ray.get(ref)
                except Exception as exc:  # noqa: BLE001 - a lost worker/node is this item's error
                    yield TaskResult(index, error=f"ray task failed: {_one_line(exc)}")

    def _submit(self, remote: Any, fn_ref: Any, index: int, item: Any, opt_ref: Any) -> Any:
        """Submit one item; a Job with a `node` runs on that node only (its input lies there), and
        is not retried: a node that died leaves the item failed, it is never run elsewhere."""
        node = getattr(item, "node", None)
        if not node:
            return remote.options(num_cpus=self.num_cpus, max_retries=self.max_retries).remote(
                fn_ref, index, item, opt_ref)
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        pinned = remote.options(num_cpus=self.num_cpus, max_retries=0,
                                scheduling_strategy=NodeAffinitySchedulingStrategy(node_id=node, soft=False))
        return pinned.remote(fn_ref, index, item, opt_ref)

    def close(self, kill: bool = False) -> None:
        """Disconnect if this executor made the connection (a driver's own `ray.init` is left alone);
        `kill`: cancel (force) the tasks still in flight first (an interrupted or failed run)."""
        pending, self._pending = self._pending, {}
        if kill and pending:
            ray = import_ray()
            for ref in pending:
                try:
                    ray.cancel(ref, force=True)
                except Exception:  # noqa: BLE001 - a task that already ended cannot be cancelled
                    pass
        if self._started:
            import_ray().shutdown()
            self._started = False

    def __enter__(self) -> "RayExecutor":
        return self

    def __exit__(self, exc_type: Any = None, *exc: Any) -> None:
        self.close(kill=exc_type is not None)
