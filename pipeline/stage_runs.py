"""Stage runs over many items: where each stage's per-item functions meet an executor.

Why here and not in the stages: a stage knows how to handle one item (`export_one`, `scrub_task`,
`summarize_any_item`) and how to plan and finish a run (pure functions); *where* the items run
(inline, a process pool, Ray) is the pipeline's choice, so the loops that take an executor live in
pipeline/ and the stages never import it.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any, Sequence

from ..stages import scrub as scrub_stage
from ..stages import summarize as summarize_stage
from ..stages.core import atomic
from ..stages.core.done_records import DoneRecords, default_work_dir
from ..stages.core.errors import VerlprofError
from ..stages.core.hashing import sha256_file
from ..stages.window import SourceIdentity, SourceSteps, pick_window, source_steps_item
from .executors import Executor, InlineExecutor, make_executor, run_all
from . import signals
from .progress import say_own_outputs


def scrub_inputs(inputs: list[Path], out: Path, policy: Any, jobs: int | None = 1,
                 work_dir: Path | None = None, salt: str | None = None, verify: bool = True,
                 include_local: bool | None = None, on_done: Any = None) -> scrub_stage.ScrubRun:
    """Scrub files/folders into `out` (a folder, or a file for one input file). Never edits inputs.

    Identities are found in every input first (one pass, in parallel), so one pseudonym map serves
    the whole output; finished items are reused from the work dir's done records; the result is
    re-checked and anything the check flags is removed.
    """
    S = scrub_stage
    items, skipped, single, own = S.plan_inputs([Path(p) for p in inputs], Path(out))
    say_own_outputs(own)
    out = Path(out)
    if not single:
        out.mkdir(parents=True, exist_ok=True)
        atomic.clean_stale_temps(out)
    hashes = {str(src): sha256_file(src) for src, _rel, k in items if k in S.SCRUBBABLE}
    salt = salt or S.bundle_salt(hashes.values())
    ex = make_executor(jobs)
    _expect(ex, len(items))
    # SIGINT/SIGTERM stop it as they stop collect (pipeline/signals.py): the workers are killed on
    # the way out of `with ex`, the temp files they were writing are removed below, the finished
    # outputs stay (each complete, atomically renamed) and a re-run reuses them.
    with signals.stopped_cleanly(out if not single else out.parent, work_dir or default_work_dir()), ex:
        pre = [S.ScrubTask(str(src), "", kind, rel) for src, rel, kind in items]
        id_results = run_all(ex, S.identities_task, [t for t in pre if t.kind in S.SCRUBBABLE], policy)
        # An unreadable input is not fatal here: its own scrub task fails below with its reason, and
        # the others are still scrubbed (exit 3, not 2: `verlprof scrub` follows collect's exit codes).
        options = S.build_options([r.value for r in id_results if r.error is None], policy, salt, include_local)
        namer = S.Scrubber(policy, options.pseudonyms)
        tasks: list[S.ScrubTask] = []
        for t in pre:
            dst = out if single else out / namer.scrub(S.output_name(t.rel, t.kind), "file name")
            tasks.append(S.ScrubTask(t.src, str(dst), t.kind, namer.scrub(t.rel, "file name")))
        done = DoneRecords(Path(work_dir) if work_dir else default_work_dir(), "scrub")
        results: dict[int, S.ScrubResult] = {}
        todo: list[tuple[int, S.ScrubTask]] = []
        for i, t in enumerate(tasks):
            rec = done.lookup(f"{hashes[t.src][:16]}-{t.kind}", {"fp": options.fingerprint(), "dst": t.dst}) \
                if t.kind in S.SCRUBBABLE else None
            if rec is not None:
                results[i] = S.ScrubResult.from_record(rec, t.dst)
            else:
                todo.append((i, t))
        for tr in run_all(ex, S.scrub_task, [t for _i, t in todo], options, on_done=on_done):
            i, t = todo[tr.index]
            res = tr.value if tr.value is not None else S.ScrubResult(t.rel, t.kind, t.dst, "failed", tr.error or "")
            results[i] = res
            if res.status == "done":
                done.record(f"{hashes[t.src][:16]}-{t.kind}", {"fp": options.fingerprint(), "dst": t.dst},
                            {"dst": t.dst}, res.to_report())
        ordered = [results[i] for i in range(len(tasks))]
    run = S.finish_scrub(ordered, skipped, out, single, namer, options, policy, verify,
                         Path(work_dir) if work_dir else default_work_dir())
    run.display = {t.rel: p.rel for t, p in zip(tasks, pre)}   # the owner's terminal names their own files
    return run


def summarize_sources(items: Sequence[tuple[str | Path, SourceIdentity]],
                      options: summarize_stage.SummarizeOptions | None = None,
                      executor: Executor | None = None,
                      unreadable_raises: bool = True) -> summarize_stage.SummarizeResult:
    """Window + summarize several sources (nsys exports; torch traces when their identity says
    `source_kind="torch"`): steps found in all of them, one step chosen for the run, each source
    summarized in parallel on `executor` (inline by default). Used by `verlprof window`; collect
    runs its own two passes (pipeline/collect.py), which also scrub what they publish.

    When no source is readable: raises a one-line VerlprofError, or, with `unreadable_raises=False`,
    returns a result with no sources, no choice (`choice=None`) and every source's error."""
    options = options or summarize_stage.SummarizeOptions()
    ex = executor or InlineExecutor()
    _expect(ex, len(items))
    errors: list[tuple[str, str]] = []
    with signals.stopped_cleanly(), ex:   # one pool for the steps and the summaries; a signal kills it
        found = run_all(ex, source_steps_item, [(str(p), ident) for p, ident in items], options)
        srcs: list[SourceSteps] = []
        kept: list[tuple[str, SourceIdentity]] = []
        for (p, ident), res in zip(items, found):
            if res.error:
                errors.append((ident.source, res.error))
            else:
                srcs.append(res.value)
                kept.append((str(p), ident))
        if not srcs and errors:
            if not unreadable_raises:
                return summarize_stage.SummarizeResult([], None, {}, errors)  # type: ignore[arg-type]
            raise VerlprofError(None, f"no readable input: {errors[0][0]}: {errors[0][1]}")
        win = pick_window(srcs, options.step)
        resolved, choice = list(win.sources), win.choice
        jobs = [summarize_stage.summarize_job(p, ident, src, choice.step) for (p, ident), src in zip(kept, resolved)]
        jobs = [j for j in jobs if j.spans]
        parts = []
        for job, res in zip(jobs, run_all(ex, summarize_stage.summarize_any_item, jobs, options)):
            if res.error:
                errors.append((job.ident.source, res.error))
            else:
                parts.append(res.value)
        rows = summarize_stage.merge_rows(parts)
        rows["steps"] = summarize_stage.steps_rows(resolved, choice)
        return summarize_stage.SummarizeResult(resolved, choice, rows, errors)


def _expect(executor: Executor, n_inputs: int) -> None:
    """Tell a pool the run's inputs before it starts: no more workers than them (pipeline/workers.py)."""
    expect = getattr(executor, "expect", None)
    if expect is not None:
        expect(max(1, n_inputs))
