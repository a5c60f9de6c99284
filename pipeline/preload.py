"""Import what the later stages need while this process only waits (`nsys export`).

Why: a collect of one `.nsys-rep` spends its first seconds in `nsys export`, a child process, while
collect's own process sleeps and the second core idles; then the stages import numpy, pyarrow,
pandas, the scrub rules and the summarizer (about 0.6 s here) on the critical path, and each
pass-2 pool worker imports again what its parent never loaded. Importing them on a thread during
the wait costs nothing, and workers forked afterwards inherit them (issue 25).

Rules that keep it safe:
- start only where no process is forked while it runs (the export ran in this process) and join it
  before anything forks: a fork while a thread is inside an import would leave the child with a
  module lock no thread of its own will release;
- an import that fails here is ignored: the stage that needs the module imports it again and
  reports the failure where it belongs.
"""
from __future__ import annotations

import importlib
import threading
from typing import Iterable

#: What a collect loads after its export (measured with sys.modules around a real collect of a
#: range-heavy report): each package imports its submodules.
AFTER_EXPORT = (
    "numpy",
    "pyarrow.parquet",
    "verlprof.stages.scrub",
    "verlprof.stages.summarize",
    "verlprof.stages.window",
    "verlprof.stages.traces",
    "verlprof.pipeline.collect_tasks",
    "verlprof.pipeline.merged_trace",
    "verlprof.pipeline.ranks",
)


class Preload:
    """A daemon thread importing `modules` in order; `join()` waits for it (idempotent)."""

    def __init__(self, modules: Iterable[str]) -> None:
        self.modules = tuple(modules)
        self._thread = threading.Thread(target=self._run, name="verlprof-preload", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        for name in self.modules:
            try:
                importlib.import_module(name)
            except Exception:  # noqa: BLE001 - the stage that needs it imports it again and says why
                pass

    def join(self) -> None:
        self._thread.join()
