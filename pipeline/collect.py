"""`verlprof collect`: run every stage over one verl run and leave a bundle that is safe to share.

Data path (each step a stage module under stages/):

    gather -> export -> scrub -> window + summarize -> (traces) -> check -> OUT

Why a staging folder: the bundle is assembled in a temp folder beside OUT, verified by the scrub
stage's checker, and only then renamed onto OUT. A crash or a refusal leaves no half-written or
unsafe OUT behind; finished per-artifact work (exports, scrubbed copies) stays in the WORK dir and a
re-run reuses it.
"""
from __future__ import annotations

import dataclasses

import datetime as _dt
import os
import secrets as _secrets
import shutil
import time
from dataclasses import dataclass, field
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
    MANIFEST_VERSION,
    REUSED,
    SKIPPED,
    Artifact,
    ArtifactKind,
    ArtifactStatus,
    StageOutcome,
    final_status,
)
from . import stage_runs
from .executors import Executor, make_executor, run_all

NSYS_KINDS = (ArtifactKind.NSYS_REPORT, ArtifactKind.NSYS_QDSTRM, ArtifactKind.NSYS_SQLITE)


@dataclass
class CollectOptions:
    """Everything `verlprof collect` was asked to do."""

    sources: list[Path]
    out: Path
    work_dir: Path = field(default_factory=default_work_dir)
    jobs: int | None = None
    nsys: str | None = None
    ray: str | None = None
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

    def count(self, stage: str, status: str) -> int:
        return sum(1 for o in self.outcomes if o.stage == stage and o.status == status)

    def with_status(self, *statuses: str) -> list[ArtifactStatus]:
        return [s for s in self.statuses if s.status in statuses]

    @property
    def exit_code(self) -> int:
        """0 every artifact summarized (or skipped on purpose); 3 some failed; 4 none summarized."""
        if not self.with_status(DONE, REUSED):
            return int(ExitCode.NOTHING)
        return int(ExitCode.PARTIAL) if self.with_status(FAILED) else int(ExitCode.OK)


def run_collect(opts: CollectOptions, progress: Any = None, executor: Executor | None = None) -> CollectResult:
    """Run gather -> export -> scrub -> window/summarize -> check and publish OUT.

    `progress` is a rich Progress (or anything with add_task/update/advance; None shows nothing). Raises VerlprofError
    for problems that stop the whole run; per-artifact problems become outcomes in the table.
    """
    t0 = time.perf_counter()
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
    salt = bundle_salt(opts.work_dir)
    executor = executor or make_executor(opts.jobs, opts.ray)

    gathered = _gather(opts, salt, progress)
    if not gathered.artifacts:
        where = ", ".join(gathered.roots) or "the default locations"
        raise NothingSummarizedError(None, f"no profiler artifacts found in {where}; no bundle written")

    outcomes: list[StageOutcome] = []
    exports = _export(nsys_inputs(gathered.artifacts), opts, executor, progress)
    outcomes += _export_outcomes(exports, gathered.artifacts)
    _identify_reports(gathered, exports, outcomes)

    staging = atomic.temp_sibling(opts.out)
    staging.mkdir(parents=True)
    try:
        extra: dict[str, Any] = {"executor": executor.name}
        extra.update(_after_export(gathered, exports, opts, executor, progress, staging, outcomes, salt))
        rows = extra.pop("_rows", None)
        known = extra.pop("_known", None)
        statuses = artifact_statuses(gathered.artifacts, outcomes)
        manifest = build_manifest(gathered, outcomes, salt, extra, statuses)
        from ..stages.scrub import publish_manifest

        manifest = publish_manifest(manifest, known)     # file names and SOURCEs as published
        result = CollectResult(opts.out, gathered.artifacts, outcomes, gathered.skipped, manifest,
                               rows=rows, statuses=statuses, published=False)
        _refuse_incomplete(result, opts.strict, after_run_findings(gathered), t0)
        if rows and manifest.get("traces"):   # issue 23: every rank's window on one clock
            from .merged_trace import write_merged_trace

            merged = write_merged_trace(staging, manifest["traces"], rows.get("phases") or [])
            if merged:
                manifest["merged_trace"] = merged
        atomic.write_json(staging / "manifest.json", manifest)
        if opts.html and rows:
            from .report_html import render_run_report

            atomic.write_text(staging / "report.html",
                              render_run_report(rows.get("phases", []), rows.get("kernels", []), manifest,
                                                bundle=staging))
        _verify(staging, progress, known)
        _publish(staging, opts.out)
    finally:
        if staging.exists():
            shutil.rmtree(staging, ignore_errors=True)
    if opts.pack:
        from .pack import pack_bundle

        pack_bundle(opts.out)
    result.published = True
    result.seconds = time.perf_counter() - t0
    result.doctor = after_run_findings(gathered)
    return result


def _refuse_incomplete(result: CollectResult, strict: bool, doctor: list[Any], t0: float) -> None:
    """Publish nothing when nothing was summarized (exit 4), or, with --strict, when anything
    failed (exit 3). The error carries the result, so the CLI still prints every row and reason."""
    failed = result.with_status(FAILED)
    if result.with_status(DONE, REUSED) and not (strict and failed):
        return
    result.seconds = time.perf_counter() - t0
    result.doctor = doctor
    if not result.with_status(DONE, REUSED):
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
# gather and export
# ------------------------------------------------------------------------------------------------


def _gather(opts: CollectOptions, salt: str, progress: Any) -> gather_stage.GatherResult:
    task = progress.add_task("gather", total=None, last="")

    def on_hash(done: int, total: int, rel: str) -> None:
        progress.update(task, completed=done, total=total, last=rel[-40:])

    result = gather_stage.gather(
        opts.sources, with_hashes=True, progress=on_hash,
        exclude=[opts.out, opts.work_dir], host_salt=salt,
    )
    progress.update(task, total=max(1, len(result.artifacts)), completed=max(1, len(result.artifacts)), last="")
    return result


def nsys_inputs(artifacts: list[Artifact]) -> list[Artifact]:
    """nsys artifacts to export: reports, leftover .qdstrm, and SQLite given alone.

    A SQLite lying beside its report (`export_of=`) is not a separate input: the export stage picks
    it up for the report.
    """
    return [a for a in artifacts if a.kind in NSYS_KINDS
            and not any(n.startswith("export_of=") for n in a.notes)]


def _export(inputs: list[Artifact], opts: CollectOptions, executor: Executor, progress: Any) -> list[Any]:
    from ..stages import export as export_stage

    if not inputs:
        return []
    task = progress.add_task("export", total=len(inputs), last="")
    needs_nsys = any(a.kind != ArtifactKind.NSYS_SQLITE for a in inputs)
    tool = None
    if needs_nsys:
        from ..stages.readers import nsys_tool

        try:
            tool = nsys_tool.find_nsys(opts.nsys)
        except VerlprofError:
            tool = None  # each report then says, in its own row, that nsys is missing
    eopts = export_stage.ExportOptions(work_dir=opts.work_dir, nsys=opts.nsys, jobs=opts.jobs, tool=tool,
                                        out_dir=opts.out)

    def on_done(res: Any) -> None:
        progress.advance(task)
        progress.update(task, last=inputs[res.index].rel[-40:])

    results = run_all(executor, export_stage.export_one, inputs, eopts, on_done)
    out = []
    for art, res in zip(inputs, results):
        if res.error is not None:
            out.append(export_stage.ExportResult(artifact=art.rel, status="failed", detail=res.error))
        else:
            out.append(res.value)
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


def _identify_reports(gathered: gather_stage.GatherResult, exports: list[Any],
                      outcomes: list[StageOutcome]) -> None:
    """Fill role/rank of `worker_process_<pid>` reports from inside their raw export (process and
    thread names, RANK/WORLD_SIZE of the profiled process, the ranges it opened)."""
    from ..stages.readers.report_identity import identify_report

    index = {a.rel: i for i, a in enumerate(gathered.artifacts)}
    for r in exports:
        if r.sqlite is None or r.status in ("failed", "skipped") or r.artifact not in index:
            continue
        i = index[r.artifact]
        a = gathered.artifacts[i]
        if a.role is not None and a.rank is not None:
            continue
        try:
            ident = identify_report(r.sqlite, a.pid)
        except VerlprofError as exc:
            outcomes.append(StageOutcome("identify", a.rel, "failed", _plain(str(exc), a)))
            continue
        gathered.artifacts[i] = a.replace(
            role=a.role or ident.role,
            rank=a.rank if a.rank is not None else ident.rank,
            world_size=a.world_size if a.world_size is not None else ident.world_size)


# ------------------------------------------------------------------------------------------------
# scrub (identities pass, then scrubbed copies in the WORK dir)
# ------------------------------------------------------------------------------------------------


def _after_export(gathered: gather_stage.GatherResult, exports: list[Any], opts: CollectOptions,
                  executor: Executor, progress: Any, staging: Path, outcomes: list[StageOutcome],
                  salt: str) -> dict[str, Any]:
    """Identify, window, summarize and cut window traces into `staging`; return manifest entries.

    Only what is published is scrubbed (issue 11): the raw exports, traces and snapshots stay in
    the WORK dir and are read there; the strings of the summary rows and of the window facts, and
    each window trace file, are scrubbed with the bundle's one pseudonym map before they are
    written into `staging`; the final `check` over `staging` still guards publishing.
    """
    from ..stages import scrub as scrub_stage

    inputs = _scrub_inputs(gathered.artifacts, exports)
    configs = [_ScrubInput(a, scrub_stage.config_task(a.path, a.rel)) for a in gathered.artifacts
               if a.kind == ArtifactKind.HYDRA_CONFIG]        # its secret values become known values
    identify = _Identify(inputs + configs, scrub_stage.load_policy(), salt)
    sources = [(item.artifact, _RawInput(Path(item.task.src))) for item in inputs]
    extra: dict[str, Any] = {}
    scrubbed: list[Any] = []
    if sources:
        extra.update(_summarize(sources, opts, executor, progress, staging, outcomes, identify, scrubbed))
    options = identify.options(executor, progress)
    extra["_known"] = options.pseudonyms
    scrub_stage.write_report(staging / "scrub_report.json", scrubbed, options)
    return extra


@dataclass(frozen=True)
class _RawInput:
    """An input read where it lies (a raw export in the WORK dir, or the user's trace/snapshot)."""

    dst: Path
    status: str = "done"


@dataclass(frozen=True)
class _ScrubInput:
    """A raw input collect reads in place, with the task its identity pass takes."""

    artifact: Artifact
    task: Any                    # stages.scrub.ScrubTask (src and kind; nothing is written to dst)


def _scrub_inputs(artifacts: list[Artifact], exports: list[Any]) -> list[_ScrubInput]:
    """What collect reads: each usable raw export (in the WORK dir), torch trace and memory snapshot
    (where they lie). Nothing is copied: summaries and windows are made from them and only those are
    scrubbed (see `_after_export`)."""
    from ..stages.scrub import ScrubTask

    by_rel = {a.rel: a for a in artifacts}
    out: list[_ScrubInput] = []
    for r in exports:
        if r.sqlite is None or r.status in ("failed", "skipped"):
            continue
        art = by_rel[r.artifact]
        out.append(_ScrubInput(art, ScrubTask(src=str(r.sqlite), dst="", kind="nsys_sqlite", rel=art.rel)))
    for art in artifacts:
        if art.kind in (ArtifactKind.TORCH_TRACE, ArtifactKind.MEMORY_SNAPSHOT) and art.size > 0:
            out.append(_ScrubInput(art, ScrubTask(src=str(art.path), dst="", kind=art.kind.value, rel=art.rel)))
    return out


class _Identify:
    """Pass 1: what each input reveals about hosts, users and secrets -> one pseudonym map.

    Its tasks join the summaries' executor queue (they need no window); when no source was
    summarized they run on their own when the map is first asked for."""

    def __init__(self, inputs: list[_ScrubInput], policy: Any, salt: str) -> None:
        self.inputs, self.policy, self.salt = inputs, policy, salt
        self.results: list[Any] | None = None
        self._options: Any = None

    def jobs(self) -> list[tuple[Any, Any, Any]]:
        from ..stages.scrub import identities_task

        return [(identities_task, i.task, self.policy) for i in self.inputs]

    def options(self, executor: Executor, progress: Any) -> Any:
        from ..stages.scrub import build_options, identities_task

        if self._options is None:
            task = progress.add_task("identify", total=max(1, len(self.inputs)), last="")
            if self.results is None:
                self.results = run_all(executor, identities_task, [i.task for i in self.inputs], self.policy,
                                       lambda r: progress.advance(task)) if self.inputs else []
            progress.update(task, completed=max(1, len(self.inputs)))
            self._options = build_options([r.value for r in self.results if r.error is None], self.policy,
                                          salt=self.salt)
        return self._options


# ------------------------------------------------------------------------------------------------
# window + summarize, window traces
# ------------------------------------------------------------------------------------------------


def _summarize(scrubbed: list[tuple[Artifact, Any]], opts: CollectOptions, executor: Executor, progress: Any,
               staging: Path, outcomes: list[StageOutcome], identify: _Identify,
               scrub_results: list[Any]) -> dict[str, Any]:
    """Window + summarize the scrubbed copies; write summaries, window traces and the HTML page.

    Every scrubbed artifact leaves one `summarize` outcome: done (it has rows), skipped (it holds
    no part of the chosen step) or failed (its reader's reason in plain words)."""
    from ..stages import summarize as summarize_stage
    from ..stages.summarize import SummarizeOptions
    from ..stages.window import identity_from_artifact

    sopts = SummarizeOptions(step=opts.step, top=opts.top, step_range=opts.step_range)
    sources = [(art, res) for art, res in scrubbed if art.kind in (
        ArtifactKind.NSYS_SQLITE, ArtifactKind.NSYS_REPORT, ArtifactKind.NSYS_QDSTRM, ArtifactKind.TORCH_TRACE)]
    items = [(Path(res.dst), identity_from_artifact(art)) for art, res in sources]
    task = progress.add_task("summarize", total=None, last="")
    jobs: list[Any] = []

    n_identify = len(identify.inputs)

    def side_jobs(resolved: list[Any], choice: Any) -> list[tuple[Any, Any, Any]]:
        # the identity pass and the raw window cuts run while the summaries are made (one executor
        # queue): none of them needs another's result
        from ..stages.traces import cut_window

        if opts.traces:
            jobs.extend(_trace_jobs(resolved, choice, scrubbed, staging, opts.work_dir))
        return identify.jobs() + [(cut_window, job, None) for job in jobs]

    result, side_results = stage_runs.summarize_with(items, sopts, executor, unreadable_raises=False,
                                                     side_jobs=side_jobs)
    if side_results:
        identify.results = side_results[:n_identify]
    cuts = side_results[n_identify:]
    scrub_options = identify.options(executor, progress)
    step = result.choice.step if result.choice is not None else None
    rows = result.rows
    memory = [(art, res) for art, res in scrubbed if art.kind == ArtifactKind.MEMORY_SNAPSHOT]
    rows = _add_memory(rows, memory, step, sopts, outcomes)
    outcomes += _source_outcomes([art for art, _ in sources], result, rows)
    progress.update(task, total=1, completed=1)
    if result.choice is None:
        return {}
    meta = summarize_stage.summary_metadata(
        inputs=[(art.rel, art.sha256) for art, _ in scrubbed],
        tools={"nsys": [o.info.get("nsys_version", "") for o in outcomes if o.stage == "export"],
               **_trace_versions(scrubbed)},
        choice=result.choice)
    from ..stages.scrub import publish_scrubber, scrub_summary_rows, scrub_values, values_report

    task = progress.add_task("scrub", total=1, last="summaries")
    nsys_raw = [res.dst for art, res in sources if art.kind != ArtifactKind.TORCH_TRACE]
    sc = publish_scrubber(scrub_options, nsys_raw)   # one rule set and one report for all published values
    rows, _ = scrub_summary_rows(rows, scrub_options, scrubber=sc)
    meta = scrub_values(meta, sc, "summaries.metadata")
    window = scrub_values(result.choice.to_manifest(), sc, "manifest.window")
    progress.update(task, completed=1)
    summarize_stage.write_summaries(rows, staging / "summaries", meta)
    from .ranks import write_ranks   # issue 23: the run across ranks, from the scrubbed rows

    write_ranks(rows.get("phases") or [], staging / "summaries", meta)
    extra: dict[str, Any] = {"window": window}
    if jobs:
        traces = _trace_facts_of(jobs, _publish_windows(jobs, cuts, scrub_options, executor, progress), outcomes)
        for t in traces:
            rep = t.pop("scrub", None)
            if rep is not None:
                scrub_results.append(_scrub_result(rep))
        extra["traces"] = scrub_values(traces, sc, "manifest.traces")
    scrub_results.insert(0, values_report(sc))
    extra["_rows"] = rows
    return extra


def _source_outcomes(arts: list[Artifact], result: Any, rows: Any) -> list[StageOutcome]:
    """One `summarize` outcome per nsys/torch source: failed, done (rows), or skipped and why."""
    errors = dict(result.errors)
    with_rows = {r.get("source") for name in ("phases", "kernels") for r in (rows or {}).get(name, [])}
    steps_of = {src.ident.source: sorted({sp.step for sp in src.steps if sp.step is not None})
                for src in result.sources}
    # A torch trace read without error but with no event verlprof reads (every one lacked a numeric
    # "ts", or the trace holds none): a broken file, not one outside the window.
    untimed = {src.ident.source for src in result.sources
               if src.ident.source_kind == "torch" and src.span is None and not src.steps}
    step = result.choice.step if result.choice is not None else None
    out = []
    for art in arts:
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


def _trace_versions(scrubbed: list[tuple[Artifact, Any]]) -> dict[str, list[str]]:
    """CUDA runtime / CUPTI versions torch traces state in their header (torch's own version is not
    recorded in a chrome trace), for the Parquet metadata."""
    import gzip as _gzip
    import re as _re

    found: dict[str, list[str]] = {"cuda_runtime": [], "cupti": []}
    for art, res in scrubbed:
        if art.kind != ArtifactKind.TORCH_TRACE:
            continue
        try:
            opener = _gzip.open if str(res.dst).endswith(".gz") else open
            with opener(res.dst, "rb") as f:
                head = f.read(16 << 10).decode("utf-8", "replace")
        except (OSError, EOFError):
            continue
        for key, name in (("cuda_runtime_version", "cuda_runtime"), ("cupti_version", "cupti")):
            m = _re.search(rf'"{key}"\s*:\s*(\d+)', head)
            if m:
                found[name].append(m.group(1))
    return found


def _add_memory(rows: Any, memory: list[tuple[Artifact, Any]], step: int | None, sopts: Any,
                outcomes: list[StageOutcome]) -> Any:
    """Fill `mem_peak_bytes` of the chosen step's phases from torch memory snapshots of that step;
    each snapshot leaves a `summarize` outcome (done, skipped: another step, failed: why)."""
    if not memory:
        return rows
    from dataclasses import replace as _replace

    from ..stages.summarize import summarize_memory_snapshot
    from ..stages.window import identity_from_artifact

    phases = list((rows or {}).get("phases", []))
    for art, res in memory:
        if step is None or (art.step is not None and art.step != step):
            outcomes.append(StageOutcome("summarize", art.rel, "skipped",
                                         _not_in_window([art.step] if art.step else None, step)))
            continue
        ident = identity_from_artifact(art)
        same_pid = [r for r in phases if r.get("pid") == art.pid] if art.pid is not None else []
        try:
            if same_pid:
                updated = summarize_memory_snapshot(Path(res.dst), ident, _replace(sopts, step=step), same_pid)
                by_id = {id(r): u for r, u in zip(same_pid, updated.get("phases", []))}
                phases = [by_id.get(id(r), r) for r in phases]
            else:
                extra = summarize_memory_snapshot(Path(res.dst), ident, _replace(sopts, step=step))
                phases += list(extra.get("phases", []))
        except VerlprofError as exc:
            outcomes.append(StageOutcome("summarize", art.rel, "failed", _plain(str(exc), art)))
            continue
        outcomes.append(StageOutcome("summarize", art.rel, "done"))
    rows = dict(rows or {})
    rows["phases"] = phases
    return rows


def _trace_jobs(sources: list[Any], choice: Any, scrubbed: list[tuple[Artifact, Any]], staging: Path,
                work_dir: Path) -> list[Any]:
    """The chosen step of every source as small scrubbed SQLite + Chrome JSON under traces/: the
    window is cut from the raw input into the work dir and only the scrubbed window enters staging."""
    from ..stages.traces import TraceJob
    from ..stages.window import window_spans

    dst_of = {art.rel: Path(res.dst) for art, res in scrubbed}
    jobs = []
    for src in sources:
        spans = window_spans(src, choice.step)
        rel = src.ident.source
        if not spans or rel not in dst_of:
            continue
        kind = "torch" if src.ident.source_kind == "torch" else "nsys"
        jobs.append(TraceJob(kind, dst_of[rel], rel, staging,
                             min(s.start_ns for s in spans), max(s.end_ns for s in spans),
                             work_dir=work_dir))
    return jobs


def _publish_windows(jobs: list[Any], cuts: list[Any], scrub_options: Any, executor: Executor,
                     progress: Any) -> list[Any]:
    """Scrub each cut raw window into staging (and convert nsys windows to Chrome JSON): small files,
    one short task each. A failed cut stays that cut's error."""
    from ..stages.traces import publish_window

    task = progress.add_task("traces", total=len(jobs), last="")
    ok = [i for i, c in enumerate(cuts) if c.error is None]
    from ..stages.scrub import publish_name

    named = [dataclasses.replace(j, source_rel=publish_name(j.source_rel, scrub_options)) for j in jobs]
    done = run_all(executor, publish_window, [(named[i], cuts[i].value) for i in ok], scrub_options,
                   lambda r: progress.advance(task))
    out = list(cuts)
    for i, r in zip(ok, done):
        out[i] = r
    return out


def _trace_facts_of(jobs: list[Any], results: list[Any], outcomes: list[StageOutcome]) -> list[dict[str, Any]]:
    """Manifest facts of the written window traces; a failed cut becomes a `traces` outcome."""
    out = []
    for job, r in zip(jobs, results):
        if r.error is not None:
            outcomes.append(StageOutcome("traces", job.source_rel, "failed",
                                         plain_reason(r.error, path=job.source_rel)))
        else:
            out.append(_trace_facts(r.value))
    return out


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
# check and publish
# ------------------------------------------------------------------------------------------------


def _verify(staging: Path, progress: Any, known: Any = None) -> None:
    """Refuse to publish a bundle in which the checker still finds a secret (the staging folder is
    then removed, so nothing unsafe is ever left at OUT)."""
    from ..stages.scrub import check_paths

    task = progress.add_task("check", total=1, last="")
    findings = check_paths([staging], known=known)
    progress.update(task, completed=1)
    if findings:
        where = "; ".join(f"{Path(f.path).relative_to(staging) if Path(f.path).is_relative_to(staging) else f.path}"
                          f" {f.location} ({f.kind})" for f in findings[:5])
        raise RefusedError(None, f"refusing to publish: the checker found {len(findings)} possible secret(s) "
                             f"in the bundle: {where}")


def after_run_findings(gathered: gather_stage.GatherResult) -> list[Any]:
    """verlprof doctor's after-run checks over what gather found (.qdstrm left, empty reports,
    profiled roles that produced nothing, stale reports). Printed by the CLI, not put in OUT."""
    from ..stages.doctor import after_run_checks

    arts = [{"kind": a.kind.value, "rel": a.rel, "size": a.size, "mtime": a.mtime, "role": a.role}
            for a in gathered.artifacts]
    cfg = gathered.config.raw if gathered.config is not None else None
    try:
        return after_run_checks(arts, cfg)
    except Exception:  # noqa: BLE001 - advice must never fail a collect
        return []


def artifact_statuses(artifacts: list[Artifact], outcomes: list[StageOutcome]) -> list[ArtifactStatus]:
    """The final status of every artifact, in gather order (model.final_status over its outcomes).

    Artifacts no stage reads on their own get a `summarize: skipped` outcome saying why: the run's
    Hydra config, and an export lying beside its report (summarized as that report)."""
    by_rel: dict[str, list[StageOutcome]] = {}
    for o in outcomes:
        by_rel.setdefault(o.artifact, []).append(o)
    out = []
    for a in artifacts:
        mine = by_rel.get(a.rel, [])
        if not mine:
            why = _unread_reason(a)
            if why:
                outcomes.append(StageOutcome("summarize", a.rel, "skipped", why))
                mine = [outcomes[-1]]
        empty = plain_reason("empty file", size=0, kind=a.kind.value) if a.size == 0 and not mine else None
        out.append(final_status(a.rel, mine, empty))
    return out


def _unread_reason(a: Artifact) -> str:
    if a.kind == ArtifactKind.HYDRA_CONFIG:
        return "the run's config: read for roles and steps, not summarized"
    report = next((n.split("=", 1)[1] for n in a.notes if n.startswith("export_of=")), None)
    if report:
        return f"the export of {Path(report).name}: summarized as that report"
    return ""


def build_manifest(gathered: gather_stage.GatherResult, outcomes: list[StageOutcome], salt: str,
                   extra: dict[str, Any], statuses: list[ArtifactStatus] | None = None) -> dict[str, Any]:
    """manifest.json: relative names, salted host hashes, stage outcomes, each artifact's final
    status and reason, and a `status` block naming every failed artifact (so `verlprof summarize`
    can say which runs are incomplete); no absolute path."""
    by_rel: dict[str, list[dict[str, Any]]] = {}
    for o in outcomes:
        by_rel.setdefault(o.artifact, []).append({"stage": o.stage, "status": o.status, "detail": o.detail, **o.info})
    final = {s.rel: s for s in statuses or []}
    artifacts = []
    for a in gathered.artifacts:
        rec = a.to_manifest(salt)
        rec["stages"] = by_rel.get(a.rel, [])
        if a.rel in final:
            rec.update(final[a.rel].to_manifest())
        artifacts.append(rec)
    if statuses is not None:
        extra = {"status": status_block(statuses), **extra}
    return {
        "manifest_version": MANIFEST_VERSION,
        "verlprof_version": _verlprof_version(),
        "created": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "sources": gathered.roots,
        "config": gathered.config.to_manifest() if gathered.config else None,
        "artifacts": artifacts,
        "skipped": [{"rel": r, "reason": why} for r, why in gathered.skipped],
        **extra,
    }


def status_block(statuses: list[ArtifactStatus]) -> dict[str, Any]:
    """The manifest's `status`: counts per final status, complete or not, and each failure."""
    counts = {st: sum(1 for s in statuses if s.status == st) for st in (DONE, REUSED, SKIPPED, FAILED)}
    return {
        "complete": counts[FAILED] == 0,
        "summarized": counts[DONE] + counts[REUSED],
        **counts,
        "failed_artifacts": [{"rel": s.rel, "stage": s.stage, "reason": s.reason}
                             for s in statuses if s.status == FAILED],
    }


def _verlprof_version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("verlprof")
    except PackageNotFoundError:
        return "0+unknown"


def bundle_salt(work_dir: Path) -> str:
    """A random salt kept in the WORK dir (never in a bundle), so host hashes cannot be reversed."""
    p = work_dir / "salt"
    try:
        return p.read_text().strip()
    except OSError:
        atomic.write_text(p, _secrets.token_hex(16))
        return p.read_text().strip()


def _prepare_out(out: Path) -> None:
    """Refuse to replace a folder that is not a verlprof bundle (never clobber user data)."""
    if out.exists():
        if not out.is_dir():
            raise VerlprofError(out, "exists and is not a folder; choose another -o")
        if any(out.iterdir()) and not (out / "manifest.json").exists():
            raise VerlprofError(out, "exists, is not empty and is not a verlprof bundle; choose another -o")


def _publish(staging: Path, out: Path) -> None:
    """Swap the verified staging folder onto OUT (old bundle moved aside first, then removed)."""
    old = None
    if out.exists():
        old = atomic.temp_sibling(out)
        os.replace(out, old)
    os.replace(staging, out)
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)
