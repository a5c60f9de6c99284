"""`verlprof collect`: run every stage over one verl run and leave a bundle that is safe to share.

The design card, as `passes` below runs it (local and `--ray` alike; only where each task runs
differs, see pipeline/cluster.py):

    survey pass (pipeline/collect_survey.py): nothing is written to the bundle
      gather    find the artifacts (on Ray: on every node, each artifact remembers its node)
      export    raw SQLite of every nsys report, in the WORK dir (raw: it still holds secrets)
      identify  pass 1, one task per raw input (`collect_tasks.survey_input`): role/rank from
                inside each report, the hosts/users/secret values, the steps
      pseudonym map   ONE for the whole run, from every input's identities
      window    ONE step for the whole run, chosen from every input's steps (stages/window)
    publish pass (pipeline/collect_publish.py): only into the staging folder, then OUT
      summarize and cut   pass 2, one task per input, one open of it
                (`collect_tasks.summarize_and_publish`): the chosen step's rows, scrubbed in the
                worker, its window trace cut, scrubbed, converted and checked, with its piece of
                the merged trace (pipeline/merged_trace.py); meanwhile the driver imports
                pandas for ranks.parquet and scrubs the run-level values that pass 2 does not
                change (steps rows, metadata, window)
      scrub     the trace facts, by the same scrubber; one count of every value replaced
      write     summaries/ (a job on the pool) and ranks.parquet (here: pandas was imported on
                a thread while pass 2 ran), each checked where it was written
                (pipeline/bundle_tables.py); scrub_report.json, manifest.json, the merged trace,
                report.html
      check     re-scan every staged file no job checked; a finding refuses (exit 1)
      publish   the staging folder is renamed onto OUT; `--pack` adds OUT.tar.gz

Every raw input travels through both passes as one handle (`collect_tasks.RawInput`: its path,
opened once per pass by the task that reads it). Every task runs on the run's one executor
(pipeline/executors.py: inline, one process pool for the whole run, or Ray), which turns an
item's exception into that item's failure, one policy for every stage.

Why a staging folder: the bundle is assembled in a temp folder beside OUT, checked, and only then
renamed onto OUT. A crash, a refusal or a signal (pipeline/signals.py: SIGINT exits 130, SIGTERM
143, the workers killed) leaves no half-written or unsafe OUT behind; exports stay in the WORK
dir and a re-run reuses them.
"""
from __future__ import annotations

import shutil
import time
from pathlib import Path

from ..stages.core import atomic
from ..stages.scrub import write_review
from ..stages.core.errors import VerlprofError
from . import signals
from .collect_manifest import after_run_findings, bundle_salt
from .collect_publish import (
    check,
    failure_list,
    prepare_out,
    publish,
    scrub_published,
    summarize_and_cut,
    verify,
    write_bundle,
)
from .collect_run import CollectOptions, CollectResult, Progress, Run
from .collect_survey import choose_window, export, gather, identify, nsys_inputs, pseudonym_map, raw_inputs
from ..stages.core.own_outputs import mark_work_dir
from .executors import Executor, make_executor
from .out_lock import out_locked
from .pack import pack_bundle
from .progress import NoProgress

__all__ = ["CollectOptions", "CollectResult", "check", "choose_window", "export", "failure_list", "gather",
           "identify", "nsys_inputs", "passes", "pseudonym_map", "publish", "raw_inputs", "run_collect",
           "scrub_published", "start_run", "summarize_and_cut", "verify", "write_bundle"]


def run_collect(opts: CollectOptions, progress: Progress | None = None,
                executor: Executor | None = None) -> CollectResult:
    """Run the design card of this module's docstring and publish OUT.

    `progress` is a rich Progress (or anything with add_task/update/advance; None shows nothing).
    Raises VerlprofError for problems that stop the whole run (per-artifact problems become
    outcomes in the table), and `signals.Interrupted` after SIGINT/SIGTERM, with the workers
    killed and nothing published. One collect at a time writes an OUT (pipeline/out_lock.py).
    """
    with out_locked(Path(opts.out).expanduser().absolute()):
        return _run_locked(opts, progress, executor)


def _run_locked(opts: CollectOptions, progress: Progress | None, executor: Executor | None) -> CollectResult:
    run = start_run(opts, progress, executor)
    try:
        with signals.interruptible(), run.executor:
            result = passes(run)
    except signals.Interrupted:
        atomic.clean_stale_temps(run.opts.work_dir)   # what the killed workers were writing
        raise
    finally:
        if run.spool is not None:
            run.spool.close()
        if run.staging.exists():
            shutil.rmtree(run.staging, ignore_errors=True)
    if opts.pack:
        pack_bundle(opts.out)
    result.published = True
    result.seconds = time.perf_counter() - run.t0
    result.doctor = after_run_findings(run.gathered)
    return result


def passes(run: Run) -> CollectResult:
    """The survey pass, then the publish pass (module docstring)."""
    gather(run)
    exports = export(run)
    surveys = identify(run, raw_inputs(run.artifacts, exports))
    scrub_options = pseudonym_map(run, surveys)
    window = choose_window(run, surveys, scrub_options)

    rows, traces, values = summarize_and_cut(run, window, surveys, scrub_options)
    extra = scrub_published(run, window, rows, traces, values)
    result = write_bundle(run, rows, extra, scrub_options)
    check(run, scrub_options)
    # the originals of the names published as pseudonyms: WORK only, for the owner to approve
    result.named, result.review_list = len(run.named), write_review(run.opts.work_dir, run.named)
    publish(run)
    return result


def start_run(opts: CollectOptions, progress: Progress | None, executor: Executor | None) -> Run:
    """Check OUT and the WORK dir, and pick where tasks run (one process pool, or Ray)."""
    opts.out = Path(opts.out).expanduser().absolute()
    opts.work_dir = Path(opts.work_dir).expanduser().absolute()
    if opts.work_dir == opts.out or opts.out in opts.work_dir.parents:
        raise VerlprofError(opts.work_dir, "the work dir holds unscrubbed data and must lie outside OUT")
    prepare_out(opts.out)
    opts.work_dir.mkdir(parents=True, exist_ok=True)
    mark_work_dir(opts.work_dir)   # never read back as input (stages/core/own_outputs.py)
    atomic.clean_stale_temps(opts.work_dir)
    return Run(opts, executor or make_executor(opts.jobs, opts.ray), progress or NoProgress(),
               bundle_salt(opts.work_dir), atomic.temp_sibling(opts.out))
