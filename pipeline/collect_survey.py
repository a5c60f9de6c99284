"""The survey pass of `verlprof collect`: gather, export, identify every raw input, choose the window.

Why these belong together: nothing here writes to the bundle. They find the raw inputs and learn,
in one visit of each (pass 1, `collect_tasks.survey_input`), what the run must decide together:
role/rank from inside each report, the hosts/users/secret values for the run's ONE pseudonym map,
and the steps from which ONE window is chosen for the whole run (pipeline/collect.py's card).
"""
from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from ..stages import export as export_stage
from ..stages.core import formats
from ..stages import gather as gather_stage
from ..stages import scrub as scrub_stage
from ..stages import summarize as summarize_stage
from ..stages import traces as traces_stage
from ..stages import window as window_stage
from ..stages.core.errors import NothingSummarizedError, VerlprofError
from ..stages.core.model import Artifact, StageOutcome
from .cluster import gather_on_nodes
from .collect_run import Run, Window, plain
from .collect_tasks import (
    RawInput,
    SourceWork,
    Survey,
    SurveyOptions,
    survey_input,
)
from .executors import TaskResult, run_jobs
from .progress import say_own_outputs

def gather(run: Run) -> None:
    """Find the artifacts: in the SOURCE folders here, or (`--ray`) on every node of the cluster."""
    opts = run.opts
    task = run.progress.add_task("gather", total=None, last="")
    if opts.ray is not None:
        found = gather_on_nodes(run.executor, opts.sources, run.salt, exclude=[opts.out, opts.work_dir])
        run.gathered, run.node_of, run.nodes = found.gathered, found.node_of, found.nodes
    else:
        def on_hash(done: int, total: int, rel: str) -> None:
            run.progress.update(task, completed=done, total=total, last=rel[-40:])

        run.gathered = gather_stage.gather(opts.sources, with_hashes=True, progress=on_hash,
                                           exclude=[opts.out, opts.work_dir], host_salt=run.salt)
    say_own_outputs(run.gathered.own_outputs)
    n = max(1, len(run.artifacts))
    run.progress.update(task, total=n, completed=n, last="")
    expect = getattr(run.executor, "expect", None)
    if expect is not None:   # no more workers than jobs at once (pipeline/workers.py), known only now:
        # collect runs two table jobs (summaries/, ranks.parquet) and the pass-2 warm-up beside the
        # per-input ones, so a one-report collect still uses two workers (the 1 GB export: 8.1 s with
        # one, 5.5 s with two, on 2 cores; bench_collect.py --mb 1100)
        expect(n + 2)
    why = dict(run.gathered.unreadable)
    for bad in run.gathered.rejected:   # a corrupt file beside good ones: a failed artifact, as given alone
        run.outcomes.append(StageOutcome("gather", bad.rel, "failed", f"{bad.kind}: {why.get(bad.rel, 'unreadable')}"))
    if not run.artifacts:
        where = ", ".join(run.gathered.roots) or ("the Ray nodes" if opts.ray is not None else "the default locations")
        bad = gather_stage.unreadable(run.gathered.skipped)   # files named like artifacts, unreadable
        if bad:
            raise NothingSummarizedError(None, f"no readable profiler artifacts in {where}: "
                                         + "; ".join(f"{rel}: {why}" for rel, why in bad) + "; no bundle written")
        raise NothingSummarizedError(None, f"no profiler artifacts found in {where}; no bundle written")


def nsys_inputs(artifacts: list[Artifact]) -> list[Artifact]:
    """Artifacts the export stage converts first (their format says so: nsys reports, leftover
    .qdstrm, and SQLite given alone; an export lying beside its report is picked up for the
    report)."""
    return [a for a in artifacts if formats.for_file_kind(a.kind).needs_export(a)]


def export(run: Run) -> list[export_stage.ExportResult]:
    """Raw SQLite of every nsys input, in the WORK dir of the node that holds it (cached by hash)."""
    inputs = nsys_inputs(run.artifacts)
    if not inputs:
        return []
    opts = run.opts
    task = run.progress.add_task("export", total=len(inputs), last="")
    tool = None
    if opts.ray is None and any(export_stage.needs_tool(a) for a in inputs):
        try:
            tool = export_stage.find_nsys(opts.nsys)   # on Ray each node finds its own nsys
        except VerlprofError:
            tool = None  # each report then says, in its own row, that nsys is missing
    eopts = export_stage.ExportOptions(work_dir=opts.work_dir, nsys=opts.nsys, jobs=opts.jobs, tool=tool,
                                        out_dir=opts.out)

    def on_done(res: TaskResult) -> None:
        run.progress.advance(task)
        run.progress.update(task, last=inputs[res.index].rel[-40:])

    results = run_jobs(run.executor, [run.job(export_stage.export_one, a, eopts, a.rel) for a in inputs], on_done)
    out = []
    for art, res in zip(inputs, results):
        if res.error is not None:
            out.append(export_stage.ExportResult(artifact=art.rel, status="failed", detail=res.error))
        else:
            out.append(res.value)
    by_rel = {a.rel: a for a in run.artifacts}
    for r in out:
        info = {k: v for k, v in (("nsys_version", r.nsys_version), ("export_schema", r.export_schema),
                                  ("seconds", round(r.seconds, 3))) if v}
        detail = plain(r.detail, by_rel.get(r.artifact)) if r.status in ("failed", "skipped") else r.detail
        run.outcomes.append(StageOutcome("export", r.artifact, r.status, detail, info=info))
    return out


def raw_inputs(artifacts: list[Artifact], exports: list[export_stage.ExportResult]) -> list[RawInput]:
    """What collect reads, where it lies: each usable raw export (WORK dir), torch trace and memory
    snapshot. Nothing is copied; only what is made from them is scrubbed and published."""
    by_rel = {a.rel: a for a in artifacts}
    out: list[RawInput] = []
    for r in exports:
        if r.sqlite is None or r.status in ("failed", "skipped"):
            continue
        art = by_rel[r.artifact]
        fmt = formats.for_file_kind(art.kind)
        out.append(RawInput(art, str(r.sqlite), fmt.kind, identify=fmt.wants_identify(art)))
    for art in artifacts:
        fmt = formats.for_file_kind(art.kind)
        if fmt.reads_in_place(art):   # a config too: its secret values become known values
            out.append(RawInput(art, str(art.path), fmt.kind, identify=fmt.wants_identify(art)))
    return out


def identify(run: Run, inputs: list[RawInput]) -> list[tuple[RawInput, Survey]]:
    """Pass 1 over every raw input, in parallel where it lies: role/rank from inside each report,
    identities for the pseudonym map, steps. Fills the artifacts' role/rank."""
    parts = _pass1_parts(run, inputs)
    task = run.progress.add_task("identify", total=max(1, len(parts)), last="")
    sopts = SurveyOptions(scrub_stage.load_policy(),
                          summarize_stage.SummarizeOptions(step=run.opts.step, top=run.opts.top,
                                                           step_range=run.opts.step_range,
                                                           ranges_cache=run.ranges_cache()))
    results = run_jobs(run.executor, [run.job(survey_input, i, sopts, i.rel) for i in parts],
                       lambda r: run.progress.advance(task))
    if len(parts) > len(inputs):   # a lone source's two halves: one survey
        results = [_joined_survey(*results)]
    run.progress.update(task, completed=max(1, len(parts)))
    index = {a.rel: k for k, a in enumerate(run.artifacts)}
    out = []
    for item, res in zip(inputs, results):
        # an error here: the task itself was lost (a node died), nothing is known
        survey = res.value if res.error is None else Survey(item.artifact, steps_error=res.error)
        art = survey.artifact
        if survey.identify_error:
            run.outcomes.append(StageOutcome("identify", art.rel, "failed", plain(survey.identify_error, art)))
        run.artifacts[index[art.rel]] = art
        out.append((replace(item, artifact=art), survey))
    return out


def splits_lone_source(run: Run, n_sources: int) -> bool:
    """True when a pass runs a lone source as two jobs side by side: one source, several cores
    (Ray: a node has cores to spare). In one job the second core idles (DESIGN.md, the exception
    to one open per pass)."""
    return n_sources == 1 and getattr(run.executor, "jobs", 2) > 1


def _pass1_parts(run: Run, inputs: list[RawInput]) -> list[RawInput]:
    """The jobs of pass 1: one per raw input, except a lone nsys export on several cores: its steps
    (identify, NVTX read, nesting) and its identities scan run as two jobs side by side, each
    opening the export once. Pass 2 splits a lone source the same way."""
    if splits_lone_source(run, len(inputs)) and inputs[0].format.opens_once:
        return [replace(inputs[0], part="steps"), replace(inputs[0], part="identities")]
    return inputs


def _joined_survey(steps: TaskResult, identities: TaskResult) -> TaskResult:
    """The survey of a lone source's two pass-1 jobs: the steps half, with the identities the other
    found (None when that job was lost: as when the scan fails, its summarize row says why)."""
    if steps.error is None and identities.error is None:
        steps.value.identities = identities.value.identities
    return steps


def pseudonym_map(run: Run, surveys: list[tuple[RawInput, Survey]]) -> scrub_stage.ScrubOptions:
    """The run's one pseudonym map (same host or user -> same pseudonym in every file, every node)."""
    policy = replace(scrub_stage.load_policy(), approved_names=tuple(run.opts.keep_names))   # --keep-names
    return scrub_stage.build_options([s.identities for _i, s in surveys if s.identities is not None],
                                     policy, salt=run.salt)


def choose_window(run: Run, surveys: list[tuple[RawInput, Survey]], scrub_options: scrub_stage.ScrubOptions) -> Window:
    """Number the steps of every source, choose ONE step for the run, and plan pass 2."""
    errors: dict[str, str] = {}
    found: list[tuple[RawInput, window_stage.SourceSteps]] = []
    for item, s in surveys:
        if not item.format.has_steps:
            continue
        if s.steps is None:
            errors[item.rel] = s.steps_error or "no steps could be read"
        else:
            found.append((item, s.steps))
    if not found:
        return Window(None, [], [], errors)
    win = window_stage.pick_window([s for _i, s in found], run.opts.step)
    resolved, choice = list(win.sources), win.choice
    compares = _processes(resolved) >= 2
    work = []
    for k, ((item, _s), src) in enumerate(zip(found, resolved)):
        spans = win.spans_of(k)
        ident = item.format.summary_identity(item.artifact, src)
        # issue 32: the other profiled steps too, for ranks.parquet's culprit per step (phases.parquet
        # keeps the chosen step only), read in the same scan as the chosen step; only where there
        # are ranks to compare, and the OTHER_STEPS nearest the chosen one
        others = _other_steps(src, choice.step) if compares else []
        summary = item.format.summarize_job(item.path, ident, src, choice.step, others)
        trace = _trace_job(run, item, spans, scrub_options) if run.opts.traces and spans and item.format.traced \
            else None
        wanted = summary.spans or getattr(summary, "other_steps", ())
        work.append(SourceWork(item, summary if wanted else None, trace, len(work)))
    return Window(choice, resolved, work, errors)


#: Other profiled steps summarized per source for the culprit across steps (issue 32): verl profiles
#: a handful of steps (`global_profiler.steps`); a continuous capture of many steps is sampled around
#: the chosen one instead of read once per step (docs/summaries.md).
OTHER_STEPS = 4


def _processes(sources: list[window_stage.SourceSteps]) -> int:
    """How many processes the run's sources hold (a source without pids in its spans counts once):
    with one, there is no rank to compare and no culprit to look for in other steps."""
    seen: set[tuple[int, object]] = set()
    for k, src in enumerate(sources):
        seen |= {(k, sp.pid) for sp in src.steps} or {(k, None)}
    return len(seen)


def _other_steps(src: window_stage.SourceSteps, chosen: int | None) -> list[int]:
    """The source's profiled steps other than the chosen one, at most OTHER_STEPS, nearest first
    (then in step order)."""
    steps = sorted({sp.step for sp in src.steps if sp.step is not None} - {chosen})
    if chosen is not None:
        steps = sorted(steps, key=lambda s: (abs(s - chosen), s))
    return sorted(steps[:OTHER_STEPS])


def _trace_job(run: Run, item: RawInput, spans: list[window_stage.StepSpan],
               scrub_options: scrub_stage.ScrubOptions) -> traces_stage.TraceJob:
    """The chosen step of one source as small scrubbed SQLite + Chrome JSON under traces/: the
    window is cut from the raw input into the WORK dir; only the scrubbed window enters the bundle,
    under the source's published name (a host or user in the file name becomes its pseudonym)."""
    return traces_stage.TraceJob(item.kind, Path(item.path),
                                 scrub_stage.publish_name(item.rel, scrub_options), run.staging,
                                 min(s.start_ns for s in spans), max(s.end_ns for s in spans),
                                 work_dir=run.opts.work_dir)
