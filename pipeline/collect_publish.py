"""The publish pass of `verlprof collect`: summarize and cut the chosen window, scrub, write, check.

Why these belong together: everything here makes what enters the bundle, only from the run's one
window and one pseudonym map (pipeline/collect_survey.py chose them), and only into the staging
folder; `publish` alone touches OUT, after `check` found nothing (pipeline/collect.py's card).
"""
from __future__ import annotations

import os
import shutil
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Callable

from ..stages import doctor as doctor_stage
from ..stages.core import formats
from ..stages import scrub as scrub_stage
from ..stages.scrub import merge_named
from ..stages import summarize as summarize_stage
from ..stages.core import atomic
from ..stages.core.errors import IncompleteRunError, NothingSummarizedError, RefusedError, VerlprofError, plain_reason
from ..stages.core.hashing import sha256_file
from ..stages.core.model import FAILED, SKIPPED, Artifact, StageOutcome
from .collect_manifest import after_run_findings, artifact_statuses, build_manifest
from .collect_run import CollectResult, Progress, Run, Window, plain
from .collect_survey import splits_lone_source
from .collect_tasks import (
    MemoryWork,
    PublishOptions,
    Published,
    RawInput,
    SourceWork,
    Survey,
    absorb,
    check_written,
    is_summarized_kind,
    oom_note,
    summarize_and_publish,
    summarize_memory,
)
from .bundle_tables import (
    TablesWork,
    move_ranks_in,
    prepare_tables,
    write_ranks_checked,
    write_run_report,
    write_summaries_checked,
)
from .executors import InlineExecutor, Job, TaskResult, run_jobs, start_jobs
from .merged_trace import Spool, write_merged_trace

Rows = dict[str, Any]


def summarize_and_cut(run: Run, window: Window, surveys: list[tuple[RawInput, Survey]],
                      scrub_options: scrub_stage.ScrubOptions) -> tuple[Rows, list[dict[str, Any]], RunValues]:
    """Pass 2 where each input lies: rows of the chosen step, scrubbed; window traces cut, scrubbed
    and written into staging. Every source leaves one `summarize` outcome (done, skipped: why,
    failed: why). Meanwhile the driver scrubs the run-level values (`scrub_run_values`). Returns
    (scrubbed rows, trace facts, the run-level values)."""
    run.staging.mkdir(parents=True)
    run.spool = Spool(run.opts.work_dir)
    step = window.step
    sopts = summarize_stage.SummarizeOptions(step=step if step is not None else run.opts.step, top=run.opts.top,
                                             step_range=run.opts.step_range, ranges_cache=run.ranges_cache())
    popts = PublishOptions(sopts, scrub_options, ship=run.opts.ray is not None, work_dir=str(run.opts.work_dir))
    task = run.progress.add_task("summarize", total=max(1, len(window.work)), last="")

    def on_done(res: TaskResult) -> None:
        run.progress.advance(task)
        if res.value is not None and res.value.files:       # shipped from another node
            _write_files(run.staging, res.value.files)
            res.value.files = {}
        if res.value is not None and res.value.piece is not None and res.value.trace_error is None:
            run.spool.keep(res.value.piece)

    values: list[RunValues] = []

    def meanwhile() -> None:   # the driver's own work while the pool runs this pass
        prepare_tables()
        values.append(scrub_run_values(run, window, surveys, scrub_options))

    by_rel = {w.rel: Published(w.rel) for w in window.work}
    for w, r in zip(*_pass2_jobs(run, window, popts, on_done, meanwhile)):
        absorb(by_rel[w.rel], r.value if r.error is None else Published(
            w.rel, rows_error=r.error if w.summary else None, trace_error=r.error if w.trace else None))
    published = list(by_rel.values())
    for p in published:
        run.counts.update(p.counts)
        run.review.append(p.review)
        merge_named(run.named, p.named, f"{p.rel}: ")
        run.findings += p.findings
        if p.trace_error is None:      # a window that failed on the way is checked at run level
            run.checked.update(p.checked)
            run.pieces += [p.piece] if p.piece is not None else []
    rows = summarize_stage.merge_rows([p.rows for p in published if p.rows is not None])
    rows = _add_memory(run, rows, [(i, s) for i, s in surveys if i.format.attaches_memory], step, popts)
    run.outcomes += _source_outcomes(run, window, published, rows)
    traces = []
    for w, p in zip(window.work, published):
        if w.trace is None:
            continue
        if p.trace_error is not None:
            run.outcomes.append(StageOutcome("traces", w.rel, "failed", "its step window was not published: "
                                             + plain_reason(p.trace_error, path=w.rel)))
        elif p.trace is not None:
            rep = p.trace.pop("scrub", None)
            if rep is not None:   # the window's scrub report (JSON-safe), for scrub_report.json
                merge_named(run.named, {o: tuple(v) for o, v in rep.get("named", {}).items()}, f"{w.rel} window: ")
                run.scrub_results.append(scrub_stage.ScrubResult(**{**rep, "dst": ""}))
            traces.append(_trace_facts(p.trace))
    run.progress.update(task, completed=max(1, len(window.work)))
    return rows, traces, values[0]


def _pass2_jobs(run: Run, window: Window, popts: PublishOptions, on_done: Callable[[TaskResult], None],
                meanwhile: Callable[[], None]) -> tuple[list[SourceWork], list[TaskResult]]:
    """Run pass 2: one job per source (it opens a raw export once), the largest first so that the
    last job to start is a small one. Two exceptions: a run with one window makes no merged trace,
    so no piece of it is made; and a lone source on several cores runs its summary and its window
    as two jobs side by side, each opening the export once (in one job the second core idles)."""
    size = {a.rel: a.size for a in run.artifacts}
    todo = sorted((w for w in window.work if w.summary or w.trace),
                  key=lambda w: -size.get(w.rel, 0))
    merge = sum(1 for w in todo if w.trace is not None) > 1
    todo = [replace(w, piece=merge) for w in todo]
    if splits_lone_source(run, len(todo)) and todo[0].summary is not None and todo[0].trace is not None:
        todo = [replace(todo[0], trace=None), replace(todo[0], summary=None)]
    jobs = [run.job(summarize_and_publish, w, popts, w.rel) for w in todo]
    return todo, run_jobs(run.executor, jobs, on_done, meanwhile=meanwhile)


def _write_files(root: Path, files: dict[str, bytes]) -> None:
    """Window files scrubbed on another node, written into staging (names are ours: traces/<stem>)."""
    for rel, data in files.items():
        parts = Path(rel).parts
        if Path(rel).is_absolute() or ".." in parts or not parts or parts[0] != "traces":
            raise VerlprofError(rel, "unexpected window file name from a node")
        dst = root / rel
        dst.parent.mkdir(parents=True, exist_ok=True)
        atomic.write_bytes(dst, data)


def _add_memory(run: Run, rows: Rows, memory: list[tuple[RawInput, Survey]], step: int | None,
                popts: PublishOptions) -> Rows:
    """Fill `mem_peak_bytes` of the chosen step's phases from torch memory snapshots of that step
    (where each snapshot lies); each snapshot leaves a `summarize` outcome (done, skipped: another
    step, failed: why)."""
    if not memory:
        return rows
    phases = list(rows.get("phases", []))
    todo: list[tuple[Artifact, list[int]]] = []
    jobs: list[Job] = []
    mopts = replace(popts, summarize=replace(popts.summarize, step=step))
    ooms = [item for item, _s in memory if "oom" in item.artifact.notes]
    for item, res in zip(ooms, run_jobs(run.executor, [run.job(oom_note, i, None, i.artifact.rel) for i in ooms])):
        # an OOM snapshot is the memory at a failure, not a step's: said, never put in a step's rows
        run.outcomes.append(StageOutcome("summarize", item.artifact.rel, "failed" if res.error else "skipped",
                                         plain(res.error, item.artifact) if res.error else res.value))
    for item, _s in memory:
        art = item.artifact
        if "oom" in art.notes:
            continue
        if step is None or (art.step is not None and art.step != step):
            run.outcomes.append(StageOutcome("summarize", art.rel, "skipped",
                                             _not_in_window([art.step] if art.step else None, step)))
            continue
        idx = [k for k, r in enumerate(phases) if art.pid is not None and r.get("pid") == art.pid]
        todo.append((art, idx))
        jobs.append(run.job(summarize_memory, MemoryWork(item, tuple(phases[k] for k in idx)), mopts,
                            art.rel))
    for (art, idx), res in zip(todo, run_jobs(run.executor, jobs)):
        if res.error is not None:
            run.outcomes.append(StageOutcome("summarize", art.rel, "failed", plain(res.error, art)))
            continue
        new_rows, counts = res.value
        run.counts.update(counts)
        for k, r in zip(idx, new_rows):
            phases[k] = r
        phases += new_rows[len(idx):]   # the snapshot's own rows (all of them where idx is empty)
        run.outcomes.append(StageOutcome("summarize", art.rel, "done"))
    return {**rows, "phases": phases}


def _source_outcomes(run: Run, window: Window, published: list[Published], rows: Rows) -> list[StageOutcome]:
    """One `summarize` outcome per nsys/torch source: failed, done (rows), or skipped and why."""
    errors = dict(window.errors)
    errors.update({p.rel: p.rows_error for p in published if p.rows_error})
    with_rows = {r.get("source") for name in ("phases", "kernels") for r in rows.get(name, [])}
    # by raw name too: a row's `source` is the published name (a user or host in it replaced)
    with_rows |= {p.rel for p in published if p.rows and (p.rows.get("phases") or p.rows.get("kernels"))}
    steps_of = {src.ident.source: sorted({sp.step for sp in src.steps if sp.step is not None})
                for src in window.resolved}
    # A torch trace read without error but with no event verlprof reads (every one lacked a numeric
    # "ts", or the trace holds none): a broken file, not one outside the window.
    untimed = {src.ident.source for src in window.resolved
               if formats.get(src.ident.source_kind).no_event_is_broken and src.span is None and not src.steps}
    readable = {rel for rel in steps_of} | set(errors)
    out = []
    for art in run.artifacts:
        if not is_summarized_kind(art) or art.rel not in readable:
            continue
        if art.rel in errors:
            out.append(StageOutcome("summarize", art.rel, "failed", plain(errors[art.rel], art)))
        elif art.rel in untimed:
            out.append(StageOutcome("summarize", art.rel, "failed", "no usable event in it: no annotation, "
                                    'CUDA call or kernel with a numeric "ts" (a damaged or foreign trace?)'))
        elif art.rel in with_rows:
            out.append(StageOutcome("summarize", art.rel, "done"))
        else:
            out.append(StageOutcome("summarize", art.rel, "skipped", _not_in_window(
                steps_of.get(art.rel), window.step, window.choice.reason if window.choice is not None else None)))
    return out


def _not_in_window(steps: list[int] | None, step: int | None, why: str | None = None) -> str:
    """Why a readable source gave no rows, in the user's words (steps, not spans); `why`: the
    window line, when no step was chosen."""
    if step is None:
        return why or "no step found in this run (no step ranges, no step in the file names)"
    if not steps:
        return f"no step found in it; the summary is of step {step}"
    held = f"step {steps[0]}" if len(steps) == 1 else "steps " + ", ".join(map(str, steps))
    if step in steps:
        return f"no ranges inside step {step}"
    return f"holds {held} only; the summary is of step {step}"


@dataclass
class RunValues:
    """The run-level values made from the survey alone, scrubbed with the run's pseudonym map:
    the steps rows, the summaries' metadata and the window (None without a window), and the
    scrubber that scrubbed them, which `scrub_published` goes on with (its counts are the
    `summaries` entry of scrub_report.json)."""

    scrubber: scrub_stage.Scrubber
    steps: list[dict[str, Any]] | None = None
    metadata: dict[str, str] | None = None
    window: dict[str, Any] | None = None


def scrub_run_values(run: Run, window: Window, surveys: list[tuple[RawInput, Survey]],
                     scrub_options: scrub_stage.ScrubOptions) -> RunValues:
    """Scrub the run-level values that pass 2 does not change. Why apart from `scrub_published`:
    they wait for nothing pass 2 makes, so the driver scrubs them while the pool runs pass 2
    instead of after it (issue 30: the driver's serial tail); scrubbed in the same order by the
    same scrubber, they are the same values."""
    sc = scrub_stage.Scrubber(scrub_options.policy, scrub_options.pseudonyms)
    if window.choice is None:
        return RunValues(sc)
    steps, _ = scrub_stage.scrub_summary_rows(
        {"steps": summarize_stage.steps_rows(window.resolved, window.choice)}, scrub_options, scrubber=sc)
    versions: dict[str, list[str]] = {"cuda_runtime": [], "cupti": []}
    for _i, s in surveys:
        for k, v in s.versions.items():
            versions[k].append(v)
    meta = summarize_stage.summary_metadata(
        inputs=[(scrub_stage.publish_name(i.artifact.rel, scrub_options), i.artifact.sha256)   # names as published
                for i, _s in surveys if i.format.profile],
        tools={"nsys": [o.info.get("nsys_version", "") for o in run.outcomes if o.stage == "export"],
               **versions},
        choice=window.choice)
    return RunValues(sc, steps["steps"], scrub_stage.scrub_values(meta, sc, "summaries.metadata"),
                     scrub_stage.scrub_values(window.choice.to_manifest(), sc, "manifest.window"))


def scrub_published(run: Run, window: Window, rows: Rows, traces: list[dict[str, Any]],
                    values: RunValues) -> dict[str, Any]:
    """The run-level values into the rows and the manifest's extras, and the trace facts scrubbed
    by the same scrubber; one `summaries` entry counts every value replaced."""
    task = run.progress.add_task("scrub", total=1, last="summaries")
    sc = values.scrubber
    extra: dict[str, Any] = {"executor": run.executor.name}
    if run.nodes:
        extra["cluster"] = {"nodes": [n.to_manifest() for n in run.nodes]}
    if window.choice is not None:
        rows["steps"] = values.steps
        run.summary_metadata = values.metadata
        extra["window"] = values.window
        if run.opts.traces and window.work:
            extra["traces"] = scrub_stage.scrub_values(traces, sc, "manifest.traces")
    sc.counts.update(run.counts)
    for review in run.review:
        sc.add_review(review)
    merge_named(run.named, sc.named_list(), "run: ")
    run.scrub_results.insert(0, scrub_stage.values_report(sc))
    run.progress.update(task, completed=1)
    return extra


def _trace_facts(info: dict[str, Any]) -> dict[str, Any]:
    """Trace outputs and event counts for the manifest; header key names stay out (they are the
    source's, unvetted, and not needed to read the bundle)."""
    counts = {k: ({kk: vv for kk, vv in v.items() if kk not in ("header_keys", "dropped_keys")}
                  if isinstance(v, dict) else v) for k, v in info.get("counts", {}).items()}
    return {**info, "counts": counts}


def write_bundle(run: Run, rows: Rows, extra: dict[str, Any], scrub_options: scrub_stage.ScrubOptions) -> CollectResult:
    """summaries/, scrub_report.json, manifest.json and (--html) report.html into staging; refuse
    (nothing written to OUT) when nothing was summarized, or with --strict when anything failed."""
    staging = run.staging
    # issue 23: summaries/ and the run across ranks, from the scrubbed rows, each written and
    # checked where it is made: summaries/ by a job on the pool, ranks.parquet here (issue 30)
    wait_tables = _start_tables(run, rows, scrub_options) if "window" in extra else None
    tables: list[TaskResult] | None = None
    try:
        scrub_stage.write_report(staging / "scrub_report.json", run.scrub_results, scrub_options)
        listed = [*run.artifacts, *run.gathered.rejected]   # the unreadable candidates: failed artifacts
        statuses = artifact_statuses(listed, run.outcomes)
        manifest = build_manifest(run.gathered, run.outcomes, run.salt, extra, statuses)
        manifest = scrub_stage.publish_manifest(manifest, scrub_options)   # file names and SOURCEs as published
        merge_named(run.named, scrub_stage.publish_namer(scrub_options).named_list(), "manifest: ")
        rejected = {a.rel for a in run.gathered.rejected}
        result = CollectResult(run.opts.out, listed, run.outcomes,
                               [(rel, why) for rel, why in run.gathered.skipped if rel not in rejected], manifest,
                               rows=rows if "window" in extra else None, statuses=statuses, published=False,
                               nodes=run.nodes)
        _refuse_incomplete(result, run.opts.strict, after_run_findings(run.gathered), run.t0)
    finally:   # never leave a job writing into a staging folder that is about to be removed
        if wait_tables is not None:
            tables = wait_tables()
    culprits = _tables_written(run, tables) if tables is not None else []
    if result.rows and manifest.get("traces"):   # issue 23: every rank's window on one clock
        merged = write_merged_trace(staging, run.pieces, lambda files: check_written(files, scrub_options),
                                    run.opts.work_dir, run.spool, culprits, rows.get("phases") or [])
        if merged:
            manifest["merged_trace"], run.checked[merged[0]], found = merged
            run.findings += found
    atomic.write_json(staging / "manifest.json", manifest)
    if run.opts.html and result.rows:
        write_run_report(staging, rows, manifest)
    return result


def _start_tables(run: Run, rows: Rows,
                  scrub_options: scrub_stage.ScrubOptions) -> Callable[[], list[TaskResult]]:
    """The other summaries, written and checked by a job on the run's pool (here under Ray: staging
    is local), while ranks.parquet is made and checked here, where pass 2 imported pandas
    (pipeline/bundle_tables.py); each gets only the rows it writes. Returns the wait for both."""
    ranks_rows = {"phases": rows.get("phases") or [], "step_phases": rows.get("step_phases") or []}
    summary_rows = {k: v for k, v in rows.items() if k != "step_phases"}
    staging, meta = str(run.staging), run.summary_metadata
    ranks_work = TablesWork(staging, ranks_rows, meta, run.opts.noise_floor)
    wait_summaries = start_jobs(run.executor, [Job(write_summaries_checked, TablesWork(staging, summary_rows, meta),
                                                   scrub_options)], here=run.opts.ray is not None)
    ranks = run_jobs(InlineExecutor(), [Job(write_ranks_checked, ranks_work, scrub_options)])
    return lambda: ranks + wait_summaries()


def _tables_written(run: Run, results: list[TaskResult]) -> list[dict[str, Any]]:
    """ranks.parquet moved into summaries/; what the jobs checked (and found) counts at `check`.
    Returns the chosen step's culprit rows (for the merged trace's marks)."""
    failed = [r.error for r in results if r.error is not None]
    if failed:
        raise VerlprofError(None, f"the summaries could not be written: {failed[0]}")
    move_ranks_in(run.staging)
    culprits: list[dict[str, Any]] = []
    for res in results:
        run.checked.update(res.value.checked)
        run.findings += res.value.findings
        culprits += res.value.culprits
    return culprits


def _refuse_incomplete(result: CollectResult, strict: bool, doctor: list[doctor_stage.Finding], t0: float) -> None:
    """Publish nothing when nothing was summarized (exit 4), or, with --strict, when anything
    failed (exit 3). The error carries the result, so the CLI still prints every row and reason."""
    failed = result.with_status(FAILED)
    if result.summarized and not (strict and failed):
        return
    result.seconds = time.perf_counter() - t0
    result.doctor = doctor
    if not result.summarized:
        skipped = result.with_status(SKIPPED)
        why = failure_list(result) if failed else (
            f"all {len(result.statuses)} artifacts skipped ({skipped[0].rel}: {skipped[0].reason})" if skipped
            else f"{len(result.statuses)} artifacts")
        raise NothingSummarizedError(None, f"nothing could be summarized: {why}; no bundle written", result)
    raise IncompleteRunError(None, f"--strict: {failure_list(result)}; no bundle written", result)


def failure_list(result: CollectResult, limit: int = 3) -> str:
    """`2 of 9 artifacts failed (a.sqlite: why; b.json.gz: why)`: one line, names each file."""
    failed = result.with_status(FAILED)
    if not failed:
        return f"0 of {len(result.statuses)} artifacts failed"
    shown = "; ".join(f"{s.rel}: {s.reason}" for s in failed[:limit])
    more = f"; and {len(failed) - limit} more (manifest.json lists them)" if len(failed) > limit else ""
    return f"{len(failed)} of {len(result.statuses)} artifacts failed ({shown}{more})"


def verify(staging: Path, progress: Progress, known: scrub_stage.Pseudonyms | None = None,
           checked: dict[str, str] | None = None, findings: list[Any] | None = None,
           policy: scrub_stage.Policy | None = None) -> None:
    """Refuse to publish a bundle in which the checker still finds a secret (the staging folder is
    then removed, so nothing unsafe is ever left at OUT). `checked`: staged names already checked
    (by sha256), `findings` what that check found; the rest (summaries, manifest, report: small)
    is checked here."""
    task = progress.add_task("check", total=1, last="")
    files = []
    for p in sorted(p for p in staging.rglob("*") if p.is_file() or p.is_symlink()):
        rel = p.relative_to(staging).as_posix()
        if rel not in (checked or {}) or p.is_symlink() or sha256_file(p) != checked[rel]:
            files.append(p)
    found = [replace(f, path=str(staging / f.path)) for f in findings or []]
    try:
        found += scrub_stage.check_paths(files, policy, known=known) if files else []
    except Exception as exc:  # noqa: BLE001 - an unreadable bundle is never published
        raise RefusedError(None, f"refusing to publish: the check could not read the bundle ({exc})") from None
    progress.update(task, completed=1)
    if found:
        where = "; ".join(f"{Path(f.path).relative_to(staging) if Path(f.path).is_relative_to(staging) else f.path}"
                          f" {f.location} ({f.kind})" for f in found[:5])
        raise RefusedError(None, f"refusing to publish: the checker found {len(found)} possible secret(s) "
                             f"in the bundle: {where}")


def prepare_out(out: Path) -> None:
    """Refuse to replace a folder that is not a verlprof bundle (never clobber user data)."""
    if out.exists():
        if not out.is_dir():
            raise VerlprofError(out, "exists and is not a folder; choose another -o")
        if any(out.iterdir()) and not (out / "manifest.json").exists():
            raise VerlprofError(out, "exists, is not empty and is not a verlprof bundle; choose another -o")


def swap_onto(staging: Path, out: Path) -> None:
    """Swap the verified staging folder onto OUT (old bundle moved aside first, then removed)."""
    old = None
    if out.exists():
        old = atomic.temp_sibling(out)
        os.replace(out, old)
    os.replace(staging, out)
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)


def check(run: Run, scrub_options: scrub_stage.ScrubOptions) -> None:
    """Re-scan every staged file before publishing (the bundle is here, also on Ray). The window
    traces and the merged trace were checked in pass 2, in parallel where each source lies: their
    findings count here, and each is read again only if its bytes are no longer the ones checked."""
    verify(run.staging, run.progress, scrub_options.pseudonyms, checked=run.checked, findings=run.findings,
           policy=scrub_options.policy)


def publish(run: Run) -> None:
    """The checked staging folder becomes OUT."""
    swap_onto(run.staging, run.opts.out)
