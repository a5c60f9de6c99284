"""`verlprof collect`: run every stage over one verl run and leave a bundle that is safe to share.

The sequence, top to bottom in this file (local and `--ray` alike; only where each task runs
differs, see pipeline/cluster.py):

    gather -> export -> identify -> window -> summarize and cut -> scrub what is published
           -> check -> publish

- gather: find the artifacts (on Ray: on every node, each artifact remembers its node).
- export: raw SQLite of every nsys report, in the WORK dir (raw: it still holds secrets).
- identify (pass 1, `collect_tasks.survey_input`, one task per raw input): role/rank from inside
  each report, the hosts/users/secret values for the run's ONE pseudonym map, and the steps.
- window: ONE step for the whole run, chosen from every input's steps (stages/window).
- summarize and cut (pass 2, `collect_tasks.summarize_and_publish`, one task per input, one open
  of it): the chosen step's rows, scrubbed in the worker, and its window trace cut, scrubbed,
  converted and checked, with its piece of the merged trace (pipeline/merged_trace.py).
- scrub what is published: the run-level values (steps rows, metadata, window, trace facts).
- check: re-scan every staged file pass 2 did not check; any finding refuses to publish (exit 1).
- publish: the staging folder is renamed onto OUT; `--pack` adds OUT.tar.gz.

Why a staging folder: the bundle is assembled in a temp folder beside OUT, checked, and only then
renamed onto OUT. A crash or a refusal leaves no half-written or unsafe OUT behind; exports stay
in the WORK dir and a re-run reuses them.
"""
from __future__ import annotations

import os
import shutil
import time
from collections import Counter
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from ..stages import gather as gather_stage
from ..stages.core import atomic
from ..stages.core.done_records import default_work_dir
from ..stages.core.errors import (
    ExitCode,
    IncompleteRunError,
    NothingSummarizedError,
    RefusedError,
    VerlprofError,
    plain_reason,
)
from ..stages.core.model import (
    DONE,
    FAILED,
    REUSED,
    SKIPPED,
    Artifact,
    ArtifactKind,
    ArtifactStatus,
    StageOutcome,
)
from .collect_tasks import (
    CONFIG,
    MEMORY,
    NSYS,
    TORCH,
    MemoryWork,
    PublishOptions,
    Published,
    RawInput,
    SourceWork,
    Survey,
    SurveyOptions,
    absorb,
    summarize_and_publish,
    summarize_memory,
    survey_input,
)
from .collect_manifest import after_run_findings, artifact_statuses, build_manifest, bundle_salt
from .executors import Executor, Job, TaskResult, make_executor, run_jobs
from .preload import AFTER_EXPORT, Preload

NSYS_KINDS = (ArtifactKind.NSYS_REPORT, ArtifactKind.NSYS_QDSTRM, ArtifactKind.NSYS_SQLITE)


@dataclass
class CollectOptions:
    """Everything `verlprof collect` was asked to do."""

    sources: list[Path]
    out: Path
    work_dir: Path = field(default_factory=default_work_dir)
    jobs: int | None = None
    nsys: str | None = None
    ray: str | None = None      # a Ray address: every input is read on the node that holds it
    step: int | str = 2
    top: int = 50
    html: bool = False
    pack: bool = False
    traces: bool = True
    strict: bool = False      # a failed artifact fails the run: no bundle (exit 3)
    step_range: str | None = None   # --step-range REGEX: ranges that mark a step (issue 10)


@dataclass
class CollectResult:
    """What happened, for the end-of-run table and for tests."""

    out: Path
    artifacts: list[Artifact]
    outcomes: list[StageOutcome]
    skipped: list[tuple[str, str]]
    manifest: dict[str, Any]
    seconds: float = 0.0
    rows: Any = None          # the summary rows (phases/kernels/steps) written to OUT/summaries
    doctor: list[Any] = field(default_factory=list)   # after-run findings of `verlprof doctor`
    statuses: list[ArtifactStatus] = field(default_factory=list)   # one final status per artifact
    published: bool = True    # False: nothing (or, with --strict, not everything) was summarized
    nodes: list[Any] = field(default_factory=list)   # --ray: one cluster.NodeRow per node

    def count(self, stage: str, status: str) -> int:
        return sum(1 for o in self.outcomes if o.stage == stage and o.status == status)

    def with_status(self, *statuses: str) -> list[ArtifactStatus]:
        return [s for s in self.statuses if s.status in statuses]

    @property
    def summarized(self) -> bool:
        """Some artifact's rows are in the summary (an artifact whose window failed still counts)."""
        return bool(self.with_status(DONE, REUSED)) or self.count("summarize", "done") > 0

    @property
    def exit_code(self) -> int:
        """0 every artifact summarized (or skipped on purpose); 3 some failed; 4 none summarized."""
        if not self.summarized:
            return int(ExitCode.NOTHING)
        return int(ExitCode.PARTIAL) if self.with_status(FAILED) else int(ExitCode.OK)


@dataclass
class Run:
    """One collect in progress: its options, where tasks run, and what each stage left behind."""

    opts: CollectOptions
    executor: Executor
    progress: Any
    salt: str
    staging: Path
    t0: float = field(default_factory=time.perf_counter)
    gathered: gather_stage.GatherResult | None = None
    node_of: dict[str, str] = field(default_factory=dict)   # --ray: artifact rel -> node id
    nodes: list[Any] = field(default_factory=list)          # --ray: cluster.NodeRow
    outcomes: list[StageOutcome] = field(default_factory=list)
    scrub_results: list[Any] = field(default_factory=list)  # scrub_report.json entries
    counts: Counter = field(default_factory=Counter)        # values pass 2 replaced in the rows
    summary_metadata: dict[str, str] | None = None           # Parquet metadata, scrubbed
    checked: dict[str, str] = field(default_factory=dict)     # staged name -> sha256 checked in a pass-2 job
    findings: list[Any] = field(default_factory=list)         # the checker's findings in those files
    pieces: list[Any] = field(default_factory=list)           # merged_trace.Piece of every window, checked
    spool: Any = None                                         # merged_trace.Spool: the pieces' bodies

    @property
    def artifacts(self) -> list[Artifact]:
        return self.gathered.artifacts if self.gathered else []

    def job(self, fn: Any, item: Any, options: Any, rel: str) -> Job:
        """A Job pinned (on Ray) to the node that holds artifact `rel`."""
        return Job(fn, item, options, self.node_of.get(rel))


@dataclass
class Window:
    """The run's one window: the chosen step, every input's steps, pass 2's work."""

    choice: Any                                   # stages.window.WindowChoice (None: nothing readable)
    resolved: list[Any]                           # SourceSteps of every readable source, steps numbered
    work: list[SourceWork]
    errors: dict[str, str]                        # rel -> why its steps could not be read


def run_collect(opts: CollectOptions, progress: Any = None, executor: Executor | None = None) -> CollectResult:
    """Run the sequence of this module's docstring and publish OUT.

    `progress` is a rich Progress (or anything with add_task/update/advance; None shows nothing). Raises VerlprofError
    for problems that stop the whole run; per-artifact problems become outcomes in the table.
    """
    run = start_run(opts, progress, executor)
    try:
        gather(run)
        exports = export(run)
        surveys = identify(run, raw_inputs(run.artifacts, exports))
        scrub_options = pseudonym_map(run, surveys)
        window = choose_window(run, surveys, scrub_options)
        rows, traces = summarize_and_cut(run, window, surveys, scrub_options)
        manifest_extra = scrub_published(run, window, surveys, rows, traces, scrub_options)
        result = write_bundle(run, rows, manifest_extra, scrub_options)
        check(run, scrub_options)
        publish(run)
    finally:
        if run.spool is not None:
            run.spool.close()
        if run.staging.exists():
            shutil.rmtree(run.staging, ignore_errors=True)
    if opts.pack:
        from .pack import pack_bundle

        pack_bundle(opts.out)
    result.published = True
    result.seconds = time.perf_counter() - run.t0
    result.doctor = after_run_findings(run.gathered)
    return result


def start_run(opts: CollectOptions, progress: Any, executor: Executor | None) -> Run:
    """Check OUT and the WORK dir, and pick where tasks run (a process pool, or Ray)."""
    if progress is None:
        from .progress import NoProgress

        progress = NoProgress()
    opts.out = Path(opts.out).expanduser().absolute()
    opts.work_dir = Path(opts.work_dir).expanduser().absolute()
    if opts.work_dir == opts.out or opts.out in opts.work_dir.parents:
        raise VerlprofError(opts.work_dir, "the work dir holds unscrubbed data and must lie outside OUT")
    _prepare_out(opts.out)
    opts.work_dir.mkdir(parents=True, exist_ok=True)
    atomic.clean_stale_temps(opts.work_dir)
    executor = executor or make_executor(opts.jobs, opts.ray)
    return Run(opts, executor, progress, bundle_salt(opts.work_dir), atomic.temp_sibling(opts.out))


# ------------------------------------------------------------------------------------------------
# gather and export
# ------------------------------------------------------------------------------------------------


def gather(run: Run) -> None:
    """Find the artifacts: in the SOURCE folders here, or (`--ray`) on every node of the cluster."""
    opts = run.opts
    task = run.progress.add_task("gather", total=None, last="")
    if opts.ray is not None:
        from .cluster import gather_on_nodes

        found = gather_on_nodes(run.executor, opts.sources, run.salt, exclude=[opts.out, opts.work_dir])
        run.gathered, run.node_of, run.nodes = found.gathered, found.node_of, found.nodes
    else:
        def on_hash(done: int, total: int, rel: str) -> None:
            run.progress.update(task, completed=done, total=total, last=rel[-40:])

        run.gathered = gather_stage.gather(opts.sources, with_hashes=True, progress=on_hash,
                                           exclude=[opts.out, opts.work_dir], host_salt=run.salt)
    n = max(1, len(run.artifacts))
    run.progress.update(task, total=n, completed=n, last="")
    if not run.artifacts:
        where = ", ".join(run.gathered.roots) or ("the Ray nodes" if opts.ray is not None else "the default locations")
        raise NothingSummarizedError(None, f"no profiler artifacts found in {where}; no bundle written")


def nsys_inputs(artifacts: list[Artifact]) -> list[Artifact]:
    """nsys artifacts to export: reports, leftover .qdstrm, and SQLite given alone.

    A SQLite lying beside its report (`export_of=`) is not a separate input: the export stage picks
    it up for the report.
    """
    return [a for a in artifacts if a.kind in NSYS_KINDS
            and not any(n.startswith("export_of=") for n in a.notes)]


def export(run: Run) -> list[Any]:
    """Raw SQLite of every nsys input, in the WORK dir of the node that holds it (cached by hash)."""
    from ..stages import export as export_stage

    inputs = nsys_inputs(run.artifacts)
    if not inputs:
        return []
    opts = run.opts
    task = run.progress.add_task("export", total=len(inputs), last="")
    tool = None
    if opts.ray is None and any(a.kind != ArtifactKind.NSYS_SQLITE for a in inputs):
        try:
            tool = export_stage.find_nsys(opts.nsys)   # on Ray each node finds its own nsys
        except VerlprofError:
            tool = None  # each report then says, in its own row, that nsys is missing
    eopts = export_stage.ExportOptions(work_dir=opts.work_dir, nsys=opts.nsys, jobs=opts.jobs, tool=tool,
                                        out_dir=opts.out)

    def on_done(res: TaskResult) -> None:
        run.progress.advance(task)
        run.progress.update(task, last=inputs[res.index].rel[-40:])

    waits = any(a.kind != ArtifactKind.NSYS_SQLITE for a in inputs) and run.executor.runs_here(len(inputs))
    preload = Preload(AFTER_EXPORT) if waits else None   # imports while this process waits for nsys
    try:
        results = run_jobs(run.executor, [run.job(export_stage.export_one, a, eopts, a.rel) for a in inputs], on_done)
    finally:
        if preload is not None:
            preload.join()   # before anything forks (preload.py says why)
    out = []
    for art, res in zip(inputs, results):
        if res.error is not None:
            out.append(export_stage.ExportResult(artifact=art.rel, status="failed", detail=res.error))
        else:
            out.append(res.value)
    run.outcomes += _export_outcomes(out, run.artifacts)
    return out


def _export_outcomes(results: list[Any], artifacts: list[Artifact]) -> list[StageOutcome]:
    by_rel = {a.rel: a for a in artifacts}
    out = []
    for r in results:
        info = {k: v for k, v in (("nsys_version", r.nsys_version), ("export_schema", r.export_schema),
                                  ("seconds", round(r.seconds, 3))) if v}
        detail = _plain(r.detail, by_rel.get(r.artifact)) if r.status in ("failed", "skipped") else r.detail
        out.append(StageOutcome("export", r.artifact, r.status, detail, info=info))
    return out


def _plain(detail: str, art: Artifact | None) -> str:
    """A failure's detail in plain words (errors.plain_reason), sized and kinded by its artifact."""
    if art is None:
        return plain_reason(detail)
    return plain_reason(detail, path=art.rel, size=art.size, kind=art.kind.value)


def raw_inputs(artifacts: list[Artifact], exports: list[Any]) -> list[RawInput]:
    """What collect reads, where it lies: each usable raw export (WORK dir), torch trace and memory
    snapshot. Nothing is copied; only what is made from them is scrubbed and published."""
    by_rel = {a.rel: a for a in artifacts}
    out: list[RawInput] = []
    for r in exports:
        if r.sqlite is None or r.status in ("failed", "skipped"):
            continue
        art = by_rel[r.artifact]
        out.append(RawInput(art, str(r.sqlite), NSYS, identify=art.role is None or art.rank is None))
    for art in artifacts:
        if art.kind in (ArtifactKind.TORCH_TRACE, ArtifactKind.MEMORY_SNAPSHOT) and art.size > 0:
            out.append(RawInput(art, str(art.path), TORCH if art.kind == ArtifactKind.TORCH_TRACE else MEMORY))
        elif art.kind == ArtifactKind.HYDRA_CONFIG:      # its secret values become known values
            out.append(RawInput(art, str(art.path), CONFIG))
    return out


# ------------------------------------------------------------------------------------------------
# identify (pass 1) and the run's one pseudonym map
# ------------------------------------------------------------------------------------------------


def ranges_cache(run: Run) -> str:
    """Where each export's NVTX ranges are kept from pass 1 (steps) to pass 2 (summary), so a
    range-heavy export is read once (issue 25); in the work dir: they are raw, unscrubbed texts."""
    return str(run.opts.work_dir / "ranges")


def identify(run: Run, inputs: list[RawInput]) -> list[tuple[RawInput, Survey]]:
    """Pass 1 over every raw input, in parallel where it lies: role/rank from inside each report,
    identities for the pseudonym map, steps. Fills the artifacts' role/rank."""
    from ..stages import scrub as scrub_stage
    from ..stages.summarize import SummarizeOptions

    parts = _pass1_parts(run, inputs)
    task = run.progress.add_task("identify", total=max(1, len(parts)), last="")
    sopts = SurveyOptions(scrub_stage.load_policy(),
                          SummarizeOptions(step=run.opts.step, top=run.opts.top, step_range=run.opts.step_range,
                                           ranges_cache=ranges_cache(run)))
    results = run_jobs(run.executor, [run.job(survey_input, i, sopts, i.artifact.rel) for i in parts],
                       lambda r: run.progress.advance(task))
    if len(parts) > len(inputs):   # a lone source's two halves: one survey
        results = [_joined_survey(*results)]
    run.progress.update(task, completed=max(1, len(parts)))
    index = {a.rel: k for k, a in enumerate(run.artifacts)}
    out = []
    for item, res in zip(inputs, results):
        if res.error is not None:   # the task itself was lost (a node died): nothing is known
            survey = Survey(item.artifact, steps_error=res.error)
        else:
            survey = res.value
        art = survey.artifact
        if survey.identify_error:
            run.outcomes.append(StageOutcome("identify", art.rel, "failed", _plain(survey.identify_error, art)))
        run.artifacts[index[art.rel]] = art
        out.append((replace(item, artifact=art), survey))
    return out


def _pass1_parts(run: Run, inputs: list[RawInput]) -> list[RawInput]:
    """The jobs of pass 1: one per raw input, except a lone nsys export on several cores: its steps
    (identify, NVTX read, nesting) and its identities scan run as two jobs side by side, each
    opening the export once (in one job the second core idles; 720k ranges: the scan is 0.3 s of
    the pass's 1.7 s). Pass 2 splits a lone source the same way (`_pass2_jobs`)."""
    if _splits_lone_source(run, len(inputs)) and inputs[0].kind == NSYS:
        return [replace(inputs[0], part="steps"), replace(inputs[0], part="identities")]
    return inputs


def _splits_lone_source(run: Run, n_sources: int) -> bool:
    """True when a pass runs a lone source as two jobs side by side: one source, several cores
    (Ray: a node has cores to spare). In one job the second core idles (DESIGN.md, the exception
    to one open per pass)."""
    return n_sources == 1 and getattr(run.executor, "jobs", 2) > 1


def _joined_survey(steps: TaskResult, identities: TaskResult) -> TaskResult:
    """The survey of a lone source's two pass-1 jobs: the steps half, with the identities the other
    found (None when that job was lost: as when the scan fails, its summarize row says why)."""
    if steps.error is None and identities.error is None:
        steps.value.identities = identities.value.identities
    return steps


def pseudonym_map(run: Run, surveys: list[tuple[RawInput, Survey]]) -> Any:
    """The run's one pseudonym map (same host or user -> same pseudonym in every file, every node)."""
    from ..stages import scrub as scrub_stage

    policy = scrub_stage.load_policy()
    return scrub_stage.build_options([s.identities for _i, s in surveys if s.identities is not None],
                                     policy, salt=run.salt)


# ------------------------------------------------------------------------------------------------
# window: one step for the whole run
# ------------------------------------------------------------------------------------------------


def choose_window(run: Run, surveys: list[tuple[RawInput, Survey]], scrub_options: Any) -> Window:
    """Number the steps of every source, choose ONE step for the run, and plan pass 2."""
    from ..stages.summarize import summarize_job
    from ..stages.window import run_window, window_spans

    errors: dict[str, str] = {}
    found: list[tuple[RawInput, Any]] = []
    for item, s in surveys:
        if item.kind not in (NSYS, TORCH):
            continue
        if s.steps is None:
            errors[item.artifact.rel] = s.steps_error or "no steps could be read"
        else:
            found.append((item, s.steps))
    if not found:
        return Window(None, [], [], errors)
    resolved, choice = run_window([s for _i, s in found], run.opts.step)
    work = []
    for (item, _s), src in zip(found, resolved):
        spans = window_spans(src, choice.step)
        summary = summarize_job(item.path, src.ident if item.kind == TORCH else _ident(item), src, choice.step)
        trace = _trace_job(run, item, spans, scrub_options) if run.opts.traces and spans else None
        work.append(SourceWork(item.artifact.rel, item.kind, item.path,
                               summary if getattr(summary, "spans", None) else None, trace, len(work)))
    return Window(choice, resolved, work, errors)


def _ident(item: RawInput) -> Any:
    from ..stages.window import identity_from_artifact

    return identity_from_artifact(item.artifact)


def _trace_job(run: Run, item: RawInput, spans: list[Any], scrub_options: Any) -> Any:
    """The chosen step of one source as small scrubbed SQLite + Chrome JSON under traces/: the
    window is cut from the raw input into the WORK dir; only the scrubbed window enters the bundle,
    under the source's published name (a host or user in the file name becomes its pseudonym)."""
    from ..stages.scrub import publish_name
    from ..stages.traces import TraceJob

    return TraceJob("torch" if item.kind == TORCH else "nsys", Path(item.path),
                    publish_name(item.artifact.rel, scrub_options), run.staging,
                    min(s.start_ns for s in spans), max(s.end_ns for s in spans), work_dir=run.opts.work_dir)


# ------------------------------------------------------------------------------------------------
# summarize and cut (pass 2), then scrub what is published at run level
# ------------------------------------------------------------------------------------------------


def summarize_and_cut(run: Run, window: Window, surveys: list[tuple[RawInput, Survey]],
                      scrub_options: Any) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """Pass 2 where each input lies: rows of the chosen step, scrubbed; window traces cut, scrubbed
    and written into staging. Every source leaves one `summarize` outcome (done, skipped: why,
    failed: why). Returns (scrubbed rows, trace facts)."""
    from ..stages.summarize import SummarizeOptions, merge_rows

    from .merged_trace import Spool

    run.staging.mkdir(parents=True)
    run.spool = Spool(run.opts.work_dir)
    step = window.choice.step if window.choice is not None else None
    sopts = SummarizeOptions(step=step if step is not None else run.opts.step, top=run.opts.top,
                             step_range=run.opts.step_range, ranges_cache=ranges_cache(run))
    popts = PublishOptions(sopts, scrub_options, ship=run.opts.ray is not None, work_dir=str(run.opts.work_dir))
    task = run.progress.add_task("summarize", total=max(1, len(window.work)), last="")

    def on_done(res: TaskResult) -> None:
        run.progress.advance(task)
        if res.value is not None and res.value.files:       # shipped from another node
            _write_files(run.staging, res.value.files)
            res.value.files = {}
        if res.value is not None and res.value.piece is not None and res.value.trace_error is None:
            run.spool.keep(res.value.piece)

    by_rel = {w.rel: Published(w.rel) for w in window.work}
    for w, r in zip(*_pass2_jobs(run, window, popts, on_done)):
        absorb(by_rel[w.rel], r.value if r.error is None else Published(
            w.rel, rows_error=r.error if w.summary else None, trace_error=r.error if w.trace else None))
    published = list(by_rel.values())
    for p in published:
        run.counts.update(p.counts)
        run.findings += p.findings
        if p.trace_error is None:      # a window that failed on the way is checked at run level
            run.checked.update(p.checked)
            run.pieces += [p.piece] if p.piece is not None else []
    rows = merge_rows([p.rows for p in published if p.rows is not None])
    memory = [(i, s) for i, s in surveys if i.kind == MEMORY]
    rows = _add_memory(run, rows, memory, step, popts)
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
            if rep is not None:
                run.scrub_results.append(_scrub_result(rep))
            traces.append(_trace_facts(p.trace))
    run.progress.update(task, completed=max(1, len(window.work)))
    return rows, traces


def _pass2_jobs(run: Run, window: Window, popts: PublishOptions, on_done: Any) -> tuple[list[SourceWork], list[TaskResult]]:
    """Run pass 2: one job per source (it opens a raw export once), the largest first so that the
    last job to start is a small one. Two exceptions, both measured: a run with one window makes
    no merged trace, so no piece of it is made (720k ranges: 1.1 s); and a lone source on several
    cores runs its summary and its window as two jobs side by side, each opening the export once
    (one 1 GB export: collect 2.00x -> 1.4x `nsys stats`; in one job the second core idles)."""
    size = {a.rel: a.size for a in run.artifacts}
    todo = sorted((w for w in window.work if w.summary or w.trace), key=lambda w: -size.get(w.rel, 0))
    merge = sum(1 for w in todo if w.trace is not None) > 1
    todo = [replace(w, piece=merge) for w in todo]
    if _splits_lone_source(run, len(todo)) and todo[0].summary is not None and todo[0].trace is not None:
        todo = [replace(todo[0], trace=None), replace(todo[0], summary=None)]
    jobs = [run.job(summarize_and_publish, w, popts, w.rel) for w in todo]
    return todo, run_jobs(run.executor, jobs, on_done)


def _write_files(root: Path, files: dict[str, bytes]) -> None:
    """Window files scrubbed on another node, written into staging (names are ours: traces/<stem>)."""
    for rel, data in files.items():
        parts = Path(rel).parts
        if Path(rel).is_absolute() or ".." in parts or not parts or parts[0] != "traces":
            raise VerlprofError(rel, "unexpected window file name from a node")
        dst = root / rel
        dst.parent.mkdir(parents=True, exist_ok=True)
        atomic.write_bytes(dst, data)


def _add_memory(run: Run, rows: dict[str, Any], memory: list[tuple[RawInput, Survey]], step: int | None,
                popts: PublishOptions) -> dict[str, Any]:
    """Fill `mem_peak_bytes` of the chosen step's phases from torch memory snapshots of that step
    (where each snapshot lies); each snapshot leaves a `summarize` outcome (done, skipped: another
    step, failed: why)."""
    if not memory:
        return rows
    phases = list(rows.get("phases", []))
    todo: list[tuple[Artifact, list[int]]] = []
    jobs: list[Job] = []
    mopts = replace(popts, summarize=replace(popts.summarize, step=step))
    for item, _s in memory:
        art = item.artifact
        if step is None or (art.step is not None and art.step != step):
            run.outcomes.append(StageOutcome("summarize", art.rel, "skipped",
                                             _not_in_window([art.step] if art.step else None, step)))
            continue
        idx = [k for k, r in enumerate(phases) if art.pid is not None and r.get("pid") == art.pid]
        todo.append((art, idx))
        jobs.append(run.job(summarize_memory, MemoryWork(art, item.path, tuple(phases[k] for k in idx)), mopts,
                            art.rel))
    for (art, idx), res in zip(todo, run_jobs(run.executor, jobs)):
        if res.error is not None:
            run.outcomes.append(StageOutcome("summarize", art.rel, "failed", _plain(res.error, art)))
            continue
        new_rows, counts = res.value
        run.counts.update(counts)
        if idx:
            for k, r in zip(idx, new_rows):
                phases[k] = r
        else:
            phases += new_rows
        run.outcomes.append(StageOutcome("summarize", art.rel, "done"))
    return {**rows, "phases": phases}


def _source_outcomes(run: Run, window: Window, published: list[Published], rows: dict[str, Any]) -> list[StageOutcome]:
    """One `summarize` outcome per nsys/torch source: failed, done (rows), or skipped and why."""
    from .collect_tasks import is_summarized_kind

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
               if src.ident.source_kind == "torch" and src.span is None and not src.steps}
    step = window.choice.step if window.choice is not None else None
    readable = {rel for rel in steps_of} | set(errors)
    out = []
    for art in run.artifacts:
        if not is_summarized_kind(art) or art.rel not in readable:
            continue
        if art.rel in errors:
            out.append(StageOutcome("summarize", art.rel, "failed", _plain(errors[art.rel], art)))
        elif art.rel in untimed:
            out.append(StageOutcome("summarize", art.rel, "failed", "no usable event in it: no annotation, "
                                    'CUDA call or kernel with a numeric "ts" (a damaged or foreign trace?)'))
        elif art.rel in with_rows:
            out.append(StageOutcome("summarize", art.rel, "done"))
        else:
            out.append(StageOutcome("summarize", art.rel, "skipped", _not_in_window(steps_of.get(art.rel), step)))
    return out


def _not_in_window(steps: list[int] | None, step: int | None) -> str:
    """Why a readable source gave no rows, in the user's words (steps, not spans)."""
    if step is None:
        return "no step found in this run (no step ranges, no step in the file names)"
    if not steps:
        return f"no step found in it; the summary is of step {step}"
    held = f"step {steps[0]}" if len(steps) == 1 else "steps " + ", ".join(map(str, steps))
    if step in steps:
        return f"no ranges inside step {step}"
    return f"holds {held} only; the summary is of step {step}"


def scrub_published(run: Run, window: Window, surveys: list[tuple[RawInput, Survey]], rows: dict[str, Any],
                    traces: list[dict[str, Any]], scrub_options: Any) -> dict[str, Any]:
    """Scrub the run-level values made here from raw inputs (steps rows, summary metadata, window,
    trace facts) with the run's pseudonym map; one `summaries` entry counts every value replaced."""
    from ..stages import summarize as summarize_stage
    from ..stages.scrub import Scrubber, scrub_summary_rows, scrub_values, values_report

    task = run.progress.add_task("scrub", total=1, last="summaries")
    sc = Scrubber(scrub_options.policy, scrub_options.pseudonyms)
    extra: dict[str, Any] = {"executor": run.executor.name}
    if run.nodes:
        extra["cluster"] = {"nodes": [n.to_manifest() for n in run.nodes]}
    if window.choice is not None:
        steps, _ = scrub_summary_rows({"steps": summarize_stage.steps_rows(window.resolved, window.choice)},
                                      scrub_options, scrubber=sc)
        rows["steps"] = steps["steps"]
        versions: dict[str, list[str]] = {"cuda_runtime": [], "cupti": []}
        for _i, s in surveys:
            for k, v in s.versions.items():
                versions[k].append(v)
        meta = summarize_stage.summary_metadata(
            inputs=[(i.artifact.rel, i.artifact.sha256) for i, _s in surveys if i.kind != CONFIG],
            tools={"nsys": [o.info.get("nsys_version", "") for o in run.outcomes if o.stage == "export"],
                   **versions},
            choice=window.choice)
        run.summary_metadata = scrub_values(meta, sc, "summaries.metadata")
        extra["window"] = scrub_values(window.choice.to_manifest(), sc, "manifest.window")
        if run.opts.traces and window.work:
            extra["traces"] = scrub_values(traces, sc, "manifest.traces")
    sc.counts.update(run.counts)
    run.scrub_results.insert(0, values_report(sc))
    run.progress.update(task, completed=1)
    return extra


def _scrub_result(report: dict[str, Any]) -> Any:
    """A window's scrub report (JSON-safe) back as a ScrubResult for scrub_report.json."""
    from ..stages.scrub import ScrubResult

    return ScrubResult(**{**report, "dst": ""})


def _trace_facts(info: dict[str, Any]) -> dict[str, Any]:
    """Trace outputs and event counts for the manifest; header key names stay out (they are the
    source's, unvetted, and not needed to read the bundle)."""
    counts = {k: ({kk: vv for kk, vv in v.items() if kk not in ("header_keys", "dropped_keys")}
                  if isinstance(v, dict) else v) for k, v in info.get("counts", {}).items()}
    return {**info, "counts": counts}


# ------------------------------------------------------------------------------------------------
# write the staging bundle
# ------------------------------------------------------------------------------------------------


def write_bundle(run: Run, rows: dict[str, Any], extra: dict[str, Any], scrub_options: Any) -> CollectResult:
    """summaries/, scrub_report.json, manifest.json and (--html) report.html into staging; refuse
    (nothing written to OUT) when nothing was summarized, or with --strict when anything failed."""
    from ..stages import scrub as scrub_stage
    from ..stages import summarize as summarize_stage

    staging = run.staging
    if "window" in extra:
        from .ranks import write_ranks   # issue 23: the run across ranks, from the scrubbed rows

        summarize_stage.write_summaries(rows, staging / "summaries", run.summary_metadata)
        write_ranks(rows.get("phases") or [], staging / "summaries", run.summary_metadata)
    scrub_stage.write_report(staging / "scrub_report.json", run.scrub_results, scrub_options)
    statuses = artifact_statuses(run.artifacts, run.outcomes)
    manifest = build_manifest(run.gathered, run.outcomes, run.salt, extra, statuses)
    manifest = scrub_stage.publish_manifest(manifest, scrub_options)   # file names and SOURCEs as published
    result = CollectResult(run.opts.out, run.artifacts, run.outcomes, run.gathered.skipped, manifest,
                           rows=rows if "window" in extra else None, statuses=statuses, published=False,
                           nodes=run.nodes)
    _refuse_incomplete(result, run.opts.strict, after_run_findings(run.gathered), run.t0)
    if result.rows and manifest.get("traces"):   # issue 23: every rank's window on one clock
        from .collect_tasks import check_written
        from .merged_trace import write_merged_trace

        merged = write_merged_trace(staging, run.pieces, lambda files: check_written(files, scrub_options),
                                    run.opts.work_dir, run.spool)
        if merged:
            manifest["merged_trace"], run.checked[merged[0]], found = merged
            run.findings += found
    atomic.write_json(staging / "manifest.json", manifest)
    if run.opts.html and result.rows:
        from .report_html import render_run_report

        atomic.write_text(staging / "report.html",
                          render_run_report(rows.get("phases", []), rows.get("kernels", []), manifest, bundle=staging))
    return result


def _refuse_incomplete(result: CollectResult, strict: bool, doctor: list[Any], t0: float) -> None:
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


# ------------------------------------------------------------------------------------------------
# check and publish (and what the manifest records)
# ------------------------------------------------------------------------------------------------


def check(run: Run, scrub_options: Any) -> None:
    """Re-scan every staged file before publishing (the bundle is here, also on Ray). The window
    traces and the merged trace were checked in pass 2, in parallel where each source lies: their
    findings count here, and each is read again only if its bytes are no longer the ones checked."""
    _verify(run.staging, run.progress, scrub_options.pseudonyms, checked=run.checked, findings=run.findings)


def _verify(staging: Path, progress: Any, known: Any = None, checked: dict[str, str] | None = None,
            findings: list[Any] | None = None) -> None:
    """Refuse to publish a bundle in which the checker still finds a secret (the staging folder is
    then removed, so nothing unsafe is ever left at OUT). `checked`: staged names already checked
    (by sha256), `findings` what that check found; the rest (summaries, manifest, report: small)
    is checked here."""
    from ..stages.core.hashing import sha256_file
    from ..stages.scrub import check_paths

    task = progress.add_task("check", total=1, last="")
    files = []
    for p in sorted(p for p in staging.rglob("*") if p.is_file() or p.is_symlink()):
        rel = p.relative_to(staging).as_posix()
        if rel not in (checked or {}) or p.is_symlink() or sha256_file(p) != checked[rel]:
            files.append(p)
    found = [replace(f, path=str(staging / f.path)) for f in findings or []]
    try:
        found += check_paths(files, known=known) if files else []
    except Exception as exc:  # noqa: BLE001 - an unreadable bundle is never published
        raise RefusedError(None, f"refusing to publish: the check could not read the bundle ({exc})") from None
    progress.update(task, completed=1)
    if found:
        where = "; ".join(f"{Path(f.path).relative_to(staging) if Path(f.path).is_relative_to(staging) else f.path}"
                          f" {f.location} ({f.kind})" for f in found[:5])
        raise RefusedError(None, f"refusing to publish: the checker found {len(found)} possible secret(s) "
                             f"in the bundle: {where}")


def _prepare_out(out: Path) -> None:
    """Refuse to replace a folder that is not a verlprof bundle (never clobber user data)."""
    if out.exists():
        if not out.is_dir():
            raise VerlprofError(out, "exists and is not a folder; choose another -o")
        if any(out.iterdir()) and not (out / "manifest.json").exists():
            raise VerlprofError(out, "exists, is not empty and is not a verlprof bundle; choose another -o")


def publish(run: Run) -> None:
    """The checked staging folder becomes OUT."""
    _publish(run.staging, run.opts.out)


def _publish(staging: Path, out: Path) -> None:
    """Swap the verified staging folder onto OUT (old bundle moved aside first, then removed)."""
    old = None
    if out.exists():
        old = atomic.temp_sibling(out)
        os.replace(out, old)
    os.replace(staging, out)
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)
