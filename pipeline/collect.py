"""`verlprof collect`: run every stage over one verl run and leave a bundle that is safe to share.

Data path (each step a stage module under stages/):

    gather -> export -> scrub -> window + summarize -> (traces) -> check -> OUT

Why a staging folder: the bundle is assembled in a temp folder beside OUT, verified by the scrub
stage's checker, and only then renamed onto OUT. A crash or a refusal leaves no half-written or
unsafe OUT behind; finished per-artifact work (exports, scrubbed copies) stays in the WORK dir and a
re-run reuses it.
"""
from __future__ import annotations

import datetime as _dt
import os
import secrets as _secrets
import shutil
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from verlprof.pipeline import atomic
from verlprof.pipeline.errors import VerlprofError
from verlprof.pipeline.executors import Executor, make_executor, run_all
from verlprof.pipeline.model import MANIFEST_VERSION, Artifact, ArtifactKind, StageOutcome
from verlprof.pipeline.runner import default_work_dir
from verlprof.stages import gather as gather_stage

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


@dataclass
class CollectResult:
    """What happened, for the end-of-run table and for tests."""

    out: Path
    artifacts: list[Artifact]
    outcomes: list[StageOutcome]
    skipped: list[tuple[str, str]]
    manifest: dict[str, Any]
    seconds: float = 0.0

    def count(self, stage: str, status: str) -> int:
        return sum(1 for o in self.outcomes if o.stage == stage and o.status == status)


def bundle_salt(work_dir: Path) -> str:
    """A random salt kept in the WORK dir (never in a bundle), so host hashes cannot be reversed."""
    p = work_dir / "salt"
    try:
        return p.read_text().strip()
    except OSError:
        atomic.write_text(p, _secrets.token_hex(16))
        return p.read_text().strip()


# ------------------------------------------------------------------------------------------------
# Stage steps. Each takes what the previous produced and returns records; only run_collect prints.
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
    from verlprof.stages import export as export_stage

    if not inputs:
        return []
    task = progress.add_task("export", total=len(inputs), last="")
    needs_nsys = any(a.kind != ArtifactKind.NSYS_SQLITE for a in inputs)
    tool = None
    if needs_nsys:
        from verlprof.stages.readers import nsys_tool

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


# ------------------------------------------------------------------------------------------------
# The bundle
# ------------------------------------------------------------------------------------------------


def _verlprof_version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("verlprof")
    except PackageNotFoundError:
        return "0+unknown"


def build_manifest(gathered: gather_stage.GatherResult, outcomes: list[StageOutcome], salt: str,
                   extra: dict[str, Any]) -> dict[str, Any]:
    """manifest.json: relative names, salted host hashes, stage outcomes; no absolute path."""
    by_rel: dict[str, list[dict[str, Any]]] = {}
    for o in outcomes:
        by_rel.setdefault(o.artifact, []).append({"stage": o.stage, "status": o.status, "detail": o.detail, **o.info})
    artifacts = []
    for a in gathered.artifacts:
        rec = a.to_manifest(salt)
        rec["stages"] = by_rel.get(a.rel, [])
        artifacts.append(rec)
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


def _export_outcomes(results: list[Any]) -> list[StageOutcome]:
    out = []
    for r in results:
        info = {k: v for k, v in (("nsys_version", r.nsys_version), ("export_schema", r.export_schema),
                                  ("seconds", round(r.seconds, 3))) if v}
        out.append(StageOutcome("export", r.artifact, r.status, r.detail, info=info))
    return out


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


def run_collect(opts: CollectOptions, progress: Any, executor: Executor | None = None) -> CollectResult:
    """Run gather -> export -> scrub -> window/summarize -> check and publish OUT.

    `progress` is a rich Progress (or anything with add_task/update/advance). Raises VerlprofError
    for problems that stop the whole run; per-artifact problems become outcomes in the table.
    """
    t0 = time.perf_counter()
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
        raise VerlprofError(None, f"no profiler artifacts found in {where}")

    outcomes: list[StageOutcome] = []
    exports = _export(nsys_inputs(gathered.artifacts), opts, executor, progress)
    outcomes += _export_outcomes(exports)

    staging = atomic.temp_sibling(opts.out)
    staging.mkdir(parents=True)
    try:
        extra: dict[str, Any] = {"executor": executor.name}
        extra.update(_after_export(gathered, exports, opts, executor, progress, staging, outcomes, salt))
        manifest = build_manifest(gathered, outcomes, salt, extra)
        atomic.write_json(staging / "manifest.json", manifest)
        _verify(staging, progress)
        _publish(staging, opts.out)
    finally:
        if staging.exists():
            shutil.rmtree(staging, ignore_errors=True)
    return CollectResult(opts.out, gathered.artifacts, outcomes, gathered.skipped, manifest,
                         time.perf_counter() - t0)


def _after_export(gathered: gather_stage.GatherResult, exports: list[Any], opts: CollectOptions,
                  executor: Executor, progress: Any, staging: Path, outcomes: list[StageOutcome],
                  salt: str) -> dict[str, Any]:
    """Scrub, window and summarize into `staging`; returns manifest entries. (Filled in stage by stage.)"""
    return {}


def _verify(staging: Path, progress: Any) -> None:
    """Refuse to publish a bundle in which the checker still finds a secret."""
    return None
