"""Stage 2, export: every nsys report becomes a raw SQLite export in the WORK dir (a cache).

Why: all later stages read SQLite, and `nsys export` is the slow step (seconds to minutes per
report), so it runs in parallel (one report per worker) and at most once per report *content*:
exports are cached as `<work>/exports/<sha256>.sqlite`, keyed by the report's content hash, and a
cached file is re-validated (header, opens, `StringIds`) on every use, never trusted by mtime.
A done record (`<work>/done/export/`) remembers which `--tables` selection made it, so a changed
selection re-exports. Raw exports still hold secrets (environment, command lines), which is why
they live only in the work dir, never under OUT.

Per artifact (`export_one`, a plain picklable function):
- `.nsys-rep`: a valid, not older `X.sqlite` beside it is used as is (status `beside`); else the
  cache (`cached`); else `nsys export` (`exported`).
- `.qdstrm` (unfinished report): imported with the QdstrmImporter of the local nsys into
  `<work>/imports/`, then exported like a report; no importer gives `skipped`, a failed import
  `failed`, each with a one-line reason.
- `.sqlite` given alone: validated and used where it lies (`given`).
Failures are results (`failed` + a one-line detail naming the file), never exceptions, so one bad
report never stops the others. Details use the artifact's relative name, never absolute paths,
because they end up in the manifest.
"""
from __future__ import annotations

import os
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Iterable, Sequence

from ..core.atomic import clean_stale_temps
from ..core.done_records import DoneRecords, default_work_dir
from ..core.errors import ToolMissingError, VerlprofError
from ..core.hashing import sha256_file
from ..core.model import Artifact, ArtifactKind, StageOutcome
from . import nsys_tool
from .nsys_tool import NsysTool
from ..readers.sqlite_export import ExportInfo, validate_export

STAGE = "export"
NSYS_KINDS = frozenset({ArtifactKind.NSYS_REPORT, ArtifactKind.NSYS_QDSTRM, ArtifactKind.NSYS_SQLITE})
STATUSES = ("exported", "cached", "beside", "given", "skipped", "failed")

# Tables verlprof (scrub, window, summarize, and `nsys stats` on the bundle) can use, as nsys
# `--tables` patterns: case-insensitive POSIX regular expressions that nsys 2025.3 matches against
# the WHOLE table name (checked: "string" selects nothing, "^META_DATA_" selects nothing), hence
# `^PREFIX.*$`. Used only where nsys supports `--tables` (2024+). Left out: CPU sampling and call
# chains, OS-runtime call chains, scheduler and GPU-metrics samples, and the captured stdout/stderr
# (ProcessStreams, ANALYSIS_FILE), which are bulky and hold secrets verlprof would only scrub away.
# Checked on a real CUDA report with nsys 2025.3.1: every kept table has the same rows as a full export.
DEFAULT_TABLES: tuple[str, ...] = (
    "^StringIds$", "^ThreadNames$", "^PROCESSES$", "^ANALYSIS_DETAILS$", "^PROFILER_OVERHEAD$",
    "^META_DATA_.*$", "^EXPORT_META_DATA$", "^TARGET_INFO_.*$", "^ENUM_.*$",
    "^NVTX_.*$", "^CUPTI_ACTIVITY_KIND_.*$", "^CUDA_GPU_.*$", "^CUDA_GRAPH_.*$", "^CUBLAS_.*$",
    "^CUDNN_.*$", "^OSRT_API$", "^MPI_.*$", "^NCCL_.*$",
)


@dataclass(frozen=True)
class ExportOptions:
    """Options of the export stage; picklable (workers receive a copy).

    `tables`: nsys `--tables` patterns, None = export every table. `tool`: an already probed nsys
    (export_all fills it in once, so workers need not probe again).
    """

    work_dir: Path = field(default_factory=default_work_dir)
    nsys: str | None = None
    jobs: int | None = None
    timeout: float = nsys_tool.DEFAULT_TIMEOUT_S
    tables: tuple[str, ...] | None = DEFAULT_TABLES
    use_beside: bool = True
    tool: NsysTool | None = None
    out_dir: Path | None = None            # the share bundle: raw exports must never land under it

    @property
    def exports_dir(self) -> Path:
        return Path(self.work_dir) / "exports"

    @property
    def imports_dir(self) -> Path:
        return Path(self.work_dir) / "imports"


@dataclass(frozen=True)
class ExportResult:
    """What export did with one artifact. `sqlite` is a local path: never write it to a manifest."""

    artifact: str                          # Artifact.rel
    status: str                            # one of STATUSES
    sqlite: Path | None = None
    detail: str = ""                       # one line, names the artifact by its relative name
    nsys_version: str | None = None        # nsys that wrote the export (from the export's metadata)
    export_schema: str | None = None       # export schema version, e.g. "3.20.3"
    seconds: float = 0.0
    sha256: str = ""

    @property
    def ok(self) -> bool:
        return self.sqlite is not None and self.status not in ("skipped", "failed")

    def to_outcome(self) -> StageOutcome:
        """The generic stage record (status done|cached|skipped|failed) with export facts in info."""
        status = {"exported": "done", "cached": "cached", "beside": "cached", "given": "cached"}.get(
            self.status, self.status)
        return StageOutcome(
            stage=STAGE, artifact=self.artifact, status=status, detail=self.detail,
            outputs={"sqlite": str(self.sqlite)} if self.sqlite else {},
            info={"export": self.status, "nsys_version": self.nsys_version,
                  "export_schema": self.export_schema, "seconds": round(self.seconds, 3)},
        )


# ------------------------------------------------------------------------------------------------
# One artifact
# ------------------------------------------------------------------------------------------------

def needs_tool(artifact: Artifact) -> bool:
    """Whether exporting it runs `nsys` (an SQLite given alone is used as it is)."""
    return artifact.kind != ArtifactKind.NSYS_SQLITE


def export_one(artifact: Artifact, options: ExportOptions) -> ExportResult:
    """Make (or find) the SQLite export of one nsys artifact. Never raises for bad input."""
    t0 = time.monotonic()
    try:
        if artifact.kind == ArtifactKind.NSYS_SQLITE:
            res = _use_given(artifact)
        elif artifact.kind == ArtifactKind.NSYS_REPORT:
            res = _export_report(artifact, options)
        elif artifact.kind == ArtifactKind.NSYS_QDSTRM:
            res = _export_qdstrm(artifact, options)
        else:
            res = ExportResult(artifact.rel, "skipped", detail=f"{artifact.rel}: not an nsys artifact "
                                                               f"({artifact.kind})")
    except VerlprofError as exc:
        res = ExportResult(artifact.rel, "failed", detail=_redact(str(exc), artifact, options),
                           sha256=artifact.sha256)
    return replace(res, seconds=time.monotonic() - t0)


def _use_given(artifact: Artifact) -> ExportResult:
    info = validate_export(artifact.path)
    return _result(artifact, "given", info, f"{artifact.rel}: SQLite export used as given")


@dataclass(frozen=True)
class _Start:
    """Where exporting one report or qdstrm starts: its path, the export lying beside it (if any),
    why that one cannot be used (if so), the result to return when it can, and the content hash."""

    path: Path
    beside: ExportInfo | None
    beside_note: str | None
    used: ExportResult | None
    sha: str


def _start(artifact: Artifact, options: ExportOptions) -> _Start:
    path = Path(artifact.path)
    beside, note = _beside_export(path, options)
    if beside is not None and note is None:
        used = _result(artifact, "beside", beside,
                       f"{artifact.rel}: used the export lying beside it ({beside.path.name})")
        return _Start(path, beside, None, used, "")
    return _Start(path, beside, note, None, artifact.sha256 or _hash(path))


def _export_report(artifact: Artifact, options: ExportOptions) -> ExportResult:
    st = _start(artifact, options)
    if st.used is not None:
        return st.used
    report, beside, beside_note, sha = st.path, st.beside, st.beside_note, st.sha
    try:
        res = _cached_or_export(artifact, report, sha, options)
    except ToolMissingError as exc:
        if beside is not None:  # stale beside export, but the local nsys cannot do better
            return _result(artifact, "beside", beside,
                           f"{artifact.rel}: used {beside.path.name} beside it ({beside_note}; "
                           f"re-export impossible: {exc.what})")
        raise
    if beside_note and res.status in ("exported", "cached"):
        res = replace(res, detail=f"{res.detail} ({beside.path.name if beside else 'beside file'} "
                                  f"ignored: {beside_note})")
    return res


def _export_qdstrm(artifact: Artifact, options: ExportOptions) -> ExportResult:
    st = _start(artifact, options)
    if st.used is not None:
        return st.used
    qdstrm, sha = st.path, st.sha
    cached = _lookup_cache(sha, options)
    if cached is not None:
        return _result(artifact, "cached", cached, f"{artifact.rel}: imported and exported before (cache)",
                       sha=sha)
    tool = _tool(options)
    if tool.qdstrm_importer is None:
        return ExportResult(artifact.rel, "skipped", sha256=sha, detail=(
            f"{artifact.rel}: unfinished report (.qdstrm) not imported: no QdstrmImporter beside nsys "
            f"{tool.short_version}; {nsys_tool.IMPORTER_HINT}"))
    report = options.imports_dir / f"{sha}.nsys-rep"
    if not report.is_file():
        nsys_tool.import_qdstrm(tool, qdstrm, report, timeout=options.timeout)
    try:
        res = _cached_or_export(artifact, report, sha, options)
    except VerlprofError as exc:  # name the input, not the intermediate report in the work dir
        raise type(exc)(qdstrm, f"imported the unfinished report, but its export failed: {exc.what}") from None
    return replace(res, detail=res.detail.replace(
        f"{artifact.rel}: exported", f"{artifact.rel}: imported the unfinished report (.qdstrm), then exported", 1))


def _cached_or_export(artifact: Artifact, report: Path, sha: str, options: ExportOptions) -> ExportResult:
    """The cache hit for `sha`, else a fresh `nsys export` into the cache."""
    final = options.exports_dir / f"{sha}.sqlite"
    note = ""
    if final.exists():
        cached = _lookup_cache(sha, options)
        if cached is not None:
            return _result(artifact, "cached", cached, f"{artifact.rel}: exported before (cache)", sha=sha)
        note = _why_not_cached(final, sha, options)
    tool = _tool(options)
    tables = options.tables if tool.supports_tables else None
    info = nsys_tool.export_sqlite(tool, report, final, tables=tables, timeout=options.timeout)
    DoneRecords(Path(options.work_dir), STAGE).record(
        sha, _record_options(tables), {"sqlite": str(final)},
        {"nsys_version": tool.version, "tables": list(tables) if tables else None})
    detail = f"{artifact.rel}: exported with nsys {tool.short_version}"
    if tables:
        detail += f" ({len(tables)} table patterns)"
    if note:
        detail += f"; re-exported: {note}"
    return _result(artifact, "exported", info, detail, sha=sha)


def _lookup_cache(sha: str, options: ExportOptions) -> ExportInfo | None:
    """A cached export that validates and was made with these tables (or with all tables)."""
    final = options.exports_dir / f"{sha}.sqlite"
    if not final.exists():
        return None
    records = DoneRecords(Path(options.work_dir), STAGE)
    keys = [_record_options(options.tables)] + ([_record_options(None)] if options.tables else [])
    if not any(records.lookup(sha, k) is not None for k in keys):
        return None
    try:
        return validate_export(final)
    except VerlprofError:
        return None


def _why_not_cached(final: Path, sha: str, options: ExportOptions) -> str:
    try:
        validate_export(final)
    except VerlprofError as exc:
        final.unlink(missing_ok=True)  # our own cache file, invalid: it goes
        return f"cached export was invalid ({exc.what})"
    return "the cached export has no done record for these table options"


def _record_options(tables: Sequence[str] | None) -> dict[str, Any]:
    return {"tables": sorted(tables) if tables else None}


def _beside_export(path: Path, options: ExportOptions) -> tuple[ExportInfo | None, str | None]:
    """A valid `X.sqlite` next to `X.nsys-rep` / `X.qdstrm`: (info, None) to use it; a note if not.

    Like `nsys stats`, an export older than its report is stale (the run was profiled again into
    the same name); it is returned with a note, used only when the local nsys cannot re-export.
    """
    if not options.use_beside:
        return None, None
    cand = _beside_path(path)
    if not cand.is_file():
        return None, None
    try:
        info = validate_export(cand)
    except VerlprofError as exc:
        return None, f"not a valid export ({exc.what})"
    try:
        if cand.stat().st_mtime + 1.0 < path.stat().st_mtime:
            return info, "it is older than the report"
    except OSError:
        pass
    return info, None


def _beside_path(path: Path) -> Path:
    name = path.name
    for ext in (".nsys-rep", ".qdrep", ".qdstrm"):
        if name.endswith(ext):
            return path.with_name(name[: -len(ext)] + ".sqlite")
    return path.with_suffix(".sqlite")


def _tool(options: ExportOptions) -> NsysTool:
    return options.tool if options.tool is not None else nsys_tool.find_nsys(options.nsys)


def _hash(path: Path) -> str:
    try:
        return sha256_file(path)
    except FileNotFoundError:
        raise VerlprofError(path, "file not found") from None
    except OSError as exc:
        raise VerlprofError(path, f"cannot read it ({exc.strerror or exc})") from None


def _result(artifact: Artifact, status: str, info: ExportInfo, detail: str, sha: str = "") -> ExportResult:
    return ExportResult(artifact=artifact.rel, status=status, sqlite=info.path, detail=detail,
                        nsys_version=info.nsys_version, export_schema=info.schema_version,
                        sha256=sha or artifact.sha256)


def _redact(text: str, artifact: Artifact, options: ExportOptions) -> str:
    """Replace local absolute paths in a message by the artifact's relative name / `<work>`."""
    path = str(artifact.path)
    out = text.replace(path, artifact.rel)
    out = out.replace(str(Path(options.work_dir)), "<work>")
    home = str(Path.home())
    if len(home) > 1:
        out = out.replace(home + os.sep, "~" + os.sep)  # user names in other paths (tools, --nsys)
    parent = str(Path(path).parent)
    if len(parent) > 1:
        out = out.replace(parent + os.sep, "")
    return " ".join(out.split())


# ------------------------------------------------------------------------------------------------
# Many artifacts
# ------------------------------------------------------------------------------------------------

def check_work_outside_out(options: ExportOptions) -> None:
    """Refuse a work dir inside OUT: raw exports hold secrets and OUT is what people share."""
    if options.out_dir is None:
        return
    work = Path(os.path.realpath(options.work_dir))
    out = Path(os.path.realpath(options.out_dir))
    if work == out or out in work.parents:
        raise VerlprofError(options.work_dir, "the work dir is inside the output folder; raw exports hold "
                                              "secrets and must stay outside it (pass --work elsewhere)")


def clean_dead_temps(folder: Path) -> int:
    """Remove temp files of crashed runs whose writer is gone; a live verlprof exporting into the
    same cache keeps its temps (see `atomic.clean_stale_temps`)."""
    return clean_stale_temps(folder)


def prepare_export(artifacts: Iterable[Artifact], options: ExportOptions) -> tuple[list[Artifact], ExportOptions]:
    """The nsys artifacts to export (other kinds are dropped) and the options to hand the workers.

    nsys is probed once here (if any artifact may need it) and handed to the workers; a missing
    nsys is not an error here, only for the reports that actually need exporting. Temp files of
    crashed runs are cleaned first.
    """
    items = [a for a in artifacts if a.kind in NSYS_KINDS]
    if not items:
        return [], options
    check_work_outside_out(options)
    if options.tool is None and any(a.kind != ArtifactKind.NSYS_SQLITE for a in items):
        try:
            options = replace(options, tool=nsys_tool.find_nsys(options.nsys))
        except ToolMissingError:
            pass  # reports that need it fail one by one; cached and SQLite inputs still work
    for folder in (options.exports_dir, options.imports_dir):
        clean_dead_temps(folder)
    return items, options


def failed_export(artifact: Artifact, error: str, options: ExportOptions) -> ExportResult:
    """The result of an artifact whose worker raised (the message scrubbed of paths and names)."""
    return ExportResult(artifact.rel, "failed", detail=_redact(f"{artifact.rel}: {error}", artifact, options),
                        sha256=artifact.sha256)
