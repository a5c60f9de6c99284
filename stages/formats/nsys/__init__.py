"""The nsys format: Nsight Systems reports (`.nsys-rep`, an unfinished `.qdstrm`) and their SQLite
exports, the input verl's `nsys` profiler writes for every Ray worker.

Why a report is not read where it lies: the export stage converts it into SQLite in the WORK dir
first (stages/export/), and collect's raw input is that export; an export lying beside its report
is the same input. Everything else about the format is here, calling the stages' functions: the
naming (readers/naming.py's verl patterns), the SQLite header check, the identity inside a report
(`worker_process_<pid>` has no role in its name), the steps of its NVTX ranges, the event-model
adapter (summarize/nsys.py), the window cut (traces/nsys_window.py) and the scrubber
(scrub/sqlite.py).
"""
from __future__ import annotations

import contextlib
import dataclasses
from pathlib import Path
from typing import Any, Iterator, Sequence

from ...core.errors import VerlprofError
from ...core.formats import register
from ...core.model import ArtifactKind
from ...readers.naming import NameInfo
from ...readers.nsys_sqlite import NsysExport
from ...readers.report_identity import identify_report
from ...readers.sqlite_header import parse_header
from ...scrub import ScrubTask, find_sqlite_identities, identities_task, scrub_sqlite
from ...summarize import NsysItem, summarize_nsys_steps
from ...traces import (
    nsys_sqlite_to_chrome,
    trace_file_name,
    trace_sqlite_name,
    window_nsys_sqlite,
)
from ...window import SourceIdentity, SourceSteps, nsys_source_steps
from ..base import BaseFormat, scrub_window, spans_of

REPORT, QDSTRM, SQLITE = ArtifactKind.NSYS_REPORT, ArtifactKind.NSYS_QDSTRM, ArtifactKind.NSYS_SQLITE
_RAW_REPORT_SUFFIXES = (".nsys-rep", ".qdrep", ".qdstrm")


def _base(a: Any, suffix: str) -> str | None:
    """The artifact's path without `suffix` (files pair up only in the same folder)."""
    s = str(a.path)
    return s[: -len(suffix)] if s.endswith(suffix) else None


class NsysFormat(BaseFormat):
    kind = "nsys"
    file_kinds = (REPORT, QDSTRM, SQLITE)
    labels = {REPORT: "report", QDSTRM: "qdstrm", SQLITE: "sqlite"}
    suffixes = capture_suffixes = (".sqlite", ".nsys-rep", ".qdstrm")
    fallback = True
    numbers_steps = True
    empty_hints = {REPORT: "nsys never finished writing it (the process died, or no capture range opened)",
                   QDSTRM: "nsys never finished writing it (the process died before the import)"}
    summarized = has_steps = traced = opens_once = True

    def check_header(self, path: Path, info: NameInfo) -> str | None:
        if str(info.kind) != SQLITE:
            return None
        with open(path, "rb") as f:
            head = f.read(100)
        try:
            parse_header(head)
        except ValueError as exc:
            return str(exc)
        return None

    def paired(self, artifacts: list[Any], skipped: list[tuple[str, str]]) -> list[Any]:
        """Link `X.sqlite` to `X.nsys-rep` beside it; drop `X.qdstrm` that `X.nsys-rep` supersedes."""
        reports = {_base(a, ".nsys-rep"): a for a in artifacts if a.kind == REPORT}
        sqlites = {_base(a, ".sqlite"): a for a in artifacts if a.kind == SQLITE}
        reports.pop(None, None)
        sqlites.pop(None, None)
        out: list[Any] = []
        for a in artifacts:
            if a.kind == QDSTRM:
                rep = reports.get(_base(a, ".qdstrm"))
                if rep is not None and "empty" not in rep.notes:
                    skipped.append((a.rel, f"superseded by the finished report {rep.rel}"))
                    continue
            elif a.kind == REPORT:
                sq = sqlites.get(_base(a, ".nsys-rep"))
                if sq is not None and "empty" not in sq.notes:
                    a = a.replace(notes=a.notes + (f"sqlite_export={sq.rel}",))
            elif a.kind == SQLITE:
                rep = reports.get(_base(a, ".sqlite"))
                if rep is not None and "empty" not in a.notes:
                    a = a.replace(notes=a.notes + (f"export_of={rep.rel}",))
            out.append(a)
        return out

    def from_config(self, artifact: Any, config: Any) -> Any:
        """Capture range k of a continuous-mode worker report holds the k-th profiled window."""
        a = artifact
        if a.capture_range is not None and a.step is None and a.steps is None:
            win = config.capture_range_steps(a.capture_range)
            if win is not None:
                first, last = win
                a = a.replace(step=first if first == last else None, steps=None if first == last else win,
                              notes=a.notes + ("step_from_config",))
        return a

    def reads_in_place(self, artifact: Any) -> bool:
        return False   # its export (WORK dir) is the raw input: `needs_export`

    def needs_export(self, artifact: Any) -> bool:
        """Reports, leftover .qdstrm and SQLite given alone; an export lying beside its report is
        picked up by the export stage for the report (`export_of=`)."""
        return not any(n.startswith("export_of=") for n in artifact.notes)

    @contextlib.contextmanager
    def open(self, path: str, ranges_cache: str | None) -> Iterator[NsysExport | None]:
        """The raw export, opened once for one pass of one job (None when it cannot be opened:
        each reader then opens the path alone and says why in its own field)."""
        try:
            db = NsysExport.open(path, ranges_cache=ranges_cache, scrub_text=True)
        except VerlprofError:
            yield None
            return
        try:
            yield db
        finally:
            db.close()

    def wants_identify(self, artifact: Any) -> bool:
        return artifact.role is None or artifact.rank is None

    def identify(self, handle: Any, artifact: Any) -> Any:
        """Role, rank and world size from inside the report (an Artifact or a SourceIdentity)."""
        ident = identify_report(handle, artifact.pid)
        return dataclasses.replace(artifact, role=artifact.role or ident.role,
                                   rank=artifact.rank if artifact.rank is not None else ident.rank,
                                   world_size=artifact.world_size if artifact.world_size is not None
                                   else ident.world_size)

    def reads_directly(self, artifact: Any) -> bool:
        return artifact.kind == SQLITE   # a report is exported first

    def identities(self, handle: Any, path: str, rel: str, policy: Any) -> Any:
        return identities_task(ScrubTask(path, "", SQLITE, rel), policy, getattr(handle, "con", None))

    def source_steps(self, handle: Any, ident: SourceIdentity, options: Any) -> SourceSteps:
        return nsys_source_steps(handle, ident, getattr(options, "step_range", None))

    def summarize_job(self, path: str, ident: SourceIdentity, steps: SourceSteps, step: int | None,
                      others: Sequence[int]) -> NsysItem:
        spans, other = spans_of(steps, step, others)
        return NsysItem(path, ident, spans, steps.offset_ns, other, bool(spans))

    def summarize_steps(self, item: NsysItem, options: Any, handle: Any) -> Any:
        return summarize_nsys_steps(item, options, handle)

    def split_value_sources(self, handle: Any, path: str) -> list[Any]:
        return [handle if handle is not None else path]

    def make_window(self, job: Any, out: dict[str, Any], flows: bool) -> None:
        chrome_rel, sqlite_rel = trace_file_name(job.source_rel), trace_sqlite_name(job.source_rel)
        w = window_nsys_sqlite(job.src, job.out_dir / sqlite_rel, job.start_ns_abs, job.end_ns_abs)
        c = nsys_sqlite_to_chrome(job.out_dir / sqlite_rel, job.out_dir / chrome_rel, flows=flows)
        out["outputs"] = {"sqlite": sqlite_rel, "chrome": chrome_rel}
        out["counts"] = {"sqlite": dataclasses.asdict(w), "chrome": dataclasses.asdict(c)}
        out["events"] = dict(c.events)

    def cut_window(self, job: Any, stem: Path, handle: Any) -> tuple[Path, dict[str, Any]]:
        raw = stem.with_name(stem.name + ".sqlite")
        return raw, dataclasses.asdict(window_nsys_sqlite(job.src, raw, job.start_ns_abs, job.end_ns_abs, db=handle))

    def publish_window(self, job: Any, cut: dict[str, Any], scrub: Any, out: dict[str, Any],
                       on_scrubbed: Any, flows: bool = True) -> None:
        """The scrubbed window SQLite, then its Chrome JSON made from it (never from the raw cut)."""
        chrome_rel, sqlite_rel = trace_file_name(job.source_rel), trace_sqlite_name(job.source_rel)
        scrub_window(ScrubTask(cut["raw"], str(job.out_dir / sqlite_rel), SQLITE, job.source_rel), scrub, out)
        if on_scrubbed is not None:
            on_scrubbed(sqlite_rel)
        c = nsys_sqlite_to_chrome(job.out_dir / sqlite_rel, job.out_dir / chrome_rel, flows=flows)
        out["outputs"] = {"sqlite": sqlite_rel, "chrome": chrome_rel}
        out["counts"] = {"sqlite": cut["counts"], "chrome": dataclasses.asdict(c)}
        out["events"] = dict(c.events)

    def find_identities(self, path: Path, policy: Any) -> Any:
        if path.name.lower().endswith(_RAW_REPORT_SUFFIXES):
            return None   # a raw report is refused by the scrubber; nothing is read from it
        return find_sqlite_identities(path, policy)

    def scrub_file(self, src: Path, tmp: Path, dst: Path, scrubber: Any, options: Any) -> dict[str, Any]:
        st = scrub_sqlite(src, tmp, scrubber)
        return {"tables_kept": st.tables_kept, "tables_dropped": st.tables_dropped,
                "rows_filtered": {k: list(v) for k, v in st.rows_filtered.items()},
                "strings_kept": st.strings_kept, "strings_total": st.strings_total,
                "columns_dropped": sorted(f"{t}.{c}" for t, cs in st.columns_dropped.items() for c in cs)}


FORMAT = register(NsysFormat())
