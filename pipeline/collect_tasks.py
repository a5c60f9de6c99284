"""The per-input work of `verlprof collect`'s two passes over the raw inputs (plain, picklable).

Why two passes, each one task per input: the step window can only be chosen once the steps of
every input are known, and the pseudonym map only once the hosts, users and secret values of every
input are known. So pass 1 (`survey_input`) learns, in one visit of each raw input, everything the
run must decide together: who recorded it (role/rank), what it reveals for the pseudonym map, and
its steps. The caller chooses one window and builds one pseudonym map for the whole run. Pass 2
(`summarize_and_publish`) then opens each input once more to summarize the chosen step, scrub the
rows, cut, scrub and convert its window trace and check what it wrote (with the window's piece of
the merged trace), all in the worker, so only scrubbed and checked results come back (on Ray: only
scrubbed bytes leave the node that holds the input).

The same functions run inline, in a process pool or as Ray tasks pinned to the input's node.
"""
from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from collections import Counter
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any, Iterator

from ..stages.core import formats
from ..stages import scrub as scrub_stage
from ..stages import summarize as summarize_stage
from ..stages import traces as traces_stage
from ..stages import window as window_stage
from ..stages.core.errors import VerlprofError
from ..stages.core.hashing import sha256_file
from ..stages.core.model import Artifact
from . import merged_trace
from .rank_inputs import step_phase_rows
from .work import attempt

@dataclass(frozen=True)
class RawInput:
    """One input collect reads where it lies: an nsys export in the WORK dir, or the user's torch
    trace or memory snapshot. Raw: it still holds secrets and never leaves its node."""

    artifact: Artifact
    path: str
    kind: str                    # its format (stages/core/formats.py: the registry's keys)
    identify: bool = False       # fill role/rank from inside the report (worker_process_<pid>)
    # which part of pass 1 this job does: None all; "identities" that scan alone; "steps" all but it
    # (a lone source on several cores runs the two side by side: `collect_survey.identify`)
    part: str | None = None

    @property
    def rel(self) -> str:
        return self.artifact.rel

    @property
    def format(self) -> formats.Format:
        return formats.get(self.kind)

    @contextlib.contextmanager
    def opened(self, ranges_cache: str | None) -> Iterator[Any]:
        """The raw input, opened by its format once for one pass of one job and closed after it
        (None where its format opens nothing ahead, or it cannot be opened: each reader then
        opens the path alone and says why in its own field). The handle itself stays a path, so
        it travels to a worker or a Ray node."""
        with self.format.open(self.path, ranges_cache) as handle:
            yield handle


@dataclass(frozen=True)
class SurveyOptions:
    policy: scrub_stage.Policy
    summarize: summarize_stage.SummarizeOptions   # step, step_range, ranges cache


@dataclass
class Survey:
    """Pass 1 of one input: small facts, no raw rows."""

    artifact: Artifact                         # role/rank/world filled from the report when asked
    identify_error: str | None = None
    identities: Any = None                     # stages.scrub identities, for the run's pseudonym map
    steps: window_stage.SourceSteps | None = None   # sources whose format has steps
    steps_error: str | None = None
    identities_error: str | None = None   # the identities scan failed (this input adds none to the map)
    versions: dict[str, str] = field(default_factory=dict)   # CUDA runtime / CUPTI of a torch trace


def survey_input(item: RawInput, options: SurveyOptions) -> Survey:
    """Identify, find identities and find steps of one raw input (pass 1). Each part fails alone.
    An nsys export is opened and probed once for the identity, the identities and the steps."""
    with item.opened(options.summarize.ranges_cache) as handle:
        return _survey(item, options, handle or item.path)


def _survey(item: RawInput, options: SurveyOptions, handle: Any) -> Survey:
    """`handle`: the input its format opened for this pass, else its path."""
    fmt, art = item.format, item.artifact
    out = Survey(art)
    if item.part == "identities":
        out.identities, out.identities_error = attempt(_identities, item, art, options, handle)
        return out
    if item.identify:
        try:
            out.artifact = art = fmt.identify(handle, art)
        except VerlprofError as exc:
            out.identify_error = str(exc)
    if item.part != "steps":
        out.identities, out.identities_error = attempt(_identities, item, art, options, handle)
    if fmt.has_steps:   # a failure: this input's summarize row says why
        out.steps, out.steps_error = attempt(fmt.source_steps, handle, fmt.identity(art), options.summarize)
        # what its steps state of the artifact (a torch trace's distributedInfo), its tool versions
        out.artifact, out.versions = fmt.surveyed(art, out.steps, item.path)
    return out


def _identities(item: RawInput, art: Artifact, options: SurveyOptions, handle: Any) -> Any:
    """The identities scan of one raw input (the caller keeps a failure as `identities_error`: an
    unreadable input fails in its own summarize row, and adds nothing to the pseudonym map)."""
    return item.format.identities(handle, item.path, art.rel, options.policy)


# ------------------------------------------------------------------------------------------------
# pass 2: summarize, cut and scrub the chosen window of one input
# ------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class SourceWork:
    """Pass 2 of one source: its summary job (the chosen step and the other profiled steps, read in
    one scan) and its window trace job."""

    source: RawInput             # the raw input (nsys export or torch trace), opened once by the job
    # its summary job (NsysItem / TorchItem): the chosen step (`chosen`: it has a span here) and the
    # other profiled steps ranks.parquet reads (issue 32); None: no span in any of them
    summary: summarize_stage.SummaryItem | None = None
    trace: traces_stage.TraceJob | None = None   # None: no window trace wanted
    index: int = 0               # the source's place in the run (its block of pids in the merged trace)
    piece: bool = True           # make its piece of the merged trace (False: the run's only window, no merge)

    @property
    def rel(self) -> str:
        return self.source.artifact.rel

    @property
    def kind(self) -> str:
        return self.source.kind


@dataclass(frozen=True)
class PublishOptions:
    summarize: summarize_stage.SummarizeOptions
    scrub: scrub_stage.ScrubOptions   # the run's one pseudonym map
    ship: bool = False           # True: the bundle is on another machine; return window files as bytes
    work_dir: str | None = None  # where a shipped window is written before it is read back


@dataclass
class Published:
    """Pass 2 result: scrubbed rows and the scrubbed window trace (facts, and bytes when shipped)."""

    rel: str
    rows: dict[str, Any] | None = None
    rows_error: str | None = None
    counts: Counter = field(default_factory=Counter)   # (kind, location) -> n replaced in the rows
    review: dict[str, dict[str, int]] = field(default_factory=dict)   # free text kept in the rows -> where -> n
    named: dict[str, Any] = field(default_factory=dict)   # user-written original -> (pseudonym, where -> n)
    trace: dict[str, Any] | None = None                  # facts of the written window, incl. its scrub report
    trace_error: str | None = None
    files: dict[str, bytes] = field(default_factory=dict)   # bundle-relative name -> scrubbed bytes
    checked: dict[str, str] = field(default_factory=dict)   # bundle-relative name -> sha256, checked here
    findings: list[Any] = field(default_factory=list)       # the checker's findings in them (bundle names)
    piece: merged_trace.Piece | None = None                  # the window's piece of the merged trace, checked


def summarize_and_publish(item: SourceWork, options: PublishOptions) -> Published:
    """Pass 2 of one raw input, one job: summarize the chosen step, scrub the rows, cut, scrub
    and convert its window. An nsys export is opened once for the summary, the split-value scan
    and the cut (the cut attaches its output to the same read-only connection); it is closed
    before the cut window is scrubbed. Each part fails alone, in its own field."""
    out = Published(item.rel)
    cut = None
    with item.source.opened(options.summarize.ranges_cache) as db:
        if item.summary is not None:   # a failure: reported as this source's summarize row
            rows, out.rows_error = attempt(_scrubbed_rows, item, options, db)
            if rows is not None:
                out.rows, out.counts, out.review, out.named = rows
        if item.trace is not None:     # a failure: reported as this source's traces row
            cut, out.trace_error = attempt(traces_stage.cut_window, item.trace, db=db)
    if cut is not None:
        _, out.trace_error = attempt(_publish_window, item, cut, options, out)
    return out


def absorb(into: Published, part: Published) -> Published:
    """`into` with every field `part` set: the summary half and the window half of one source's
    pass 2, when they ran as two jobs, become one result."""
    for f in fields(Published):
        value = getattr(part, f.name)
        if f.name != "rel" and value:
            setattr(into, f.name, value)
    return into


def _as_dicts(rows: Any) -> list[dict[str, Any]]:
    return rows.to_pylist() if hasattr(rows, "to_pylist") else list(rows)


def _scrubbed_rows(item: SourceWork, options: PublishOptions,
                   db: Any) -> tuple[dict[str, Any], Counter, dict[str, dict[str, int]], dict[str, Any]]:
    """The chosen step's rows of one source (and, as `step_phases`, what ranks.parquet reads of its
    other profiled steps), scrubbed; values split across adjacent NVTX ranges of
    an nsys export are found on the same open export first. Also returns the free text the
    scrubber kept (scrub_report.json `kept_free_text`, issue 33)."""
    rows: dict[str, Any] = {}
    if item.summary is not None:   # the chosen step and the other profiled steps, in one scan
        got = summarize_stage.summarize_steps(item.summary, options.summarize, export=db)
        rows = dict(got.chosen) if got.chosen is not None else {}
        if getattr(item.summary, "other_steps", ()):   # issue 32: what ranks.parquet reads of them
            rows["step_phases"] = [row for step in got.others
                                   for row in step_phase_rows(_as_dicts(step.get("phases", [])))]
    sc = scrub_stage.publish_scrubber(options.scrub, item.source.format.split_value_sources(db, item.source.path))
    clean, _ = scrub_stage.scrub_summary_rows(dict(rows), options.scrub, scrubber=sc)
    return clean, Counter(sc.counts), sc.review_list(), sc.named_list()


def _publish_window(item: SourceWork, cut: dict[str, Any], options: PublishOptions, out: Published) -> None:
    """Scrub and convert a cut raw window (WORK dir) into the bundle, make the window's piece of
    the merged trace, and check both, so the run-level check and merge have no window left to
    read. When the bundle is elsewhere the files are written into a scratch folder and returned
    as bytes.

    The scrubbed window SQLite is checked on a thread while it is converted to Chrome JSON (the
    conversion only reads it): SQLite and zlib work without the GIL, and a lone source's summary
    job leaves the second core idle by then."""
    name = merged_trace.NAME
    # a temp name of this process (atomic.clean_stale_temps removes it once the process is gone)
    scratch = Path(tempfile.mkdtemp(prefix=f".verlprof-window.tmp-{os.getpid()}-", dir=options.work_dir))
    root = scratch if options.ship else Path(item.trace.out_dir)
    try:
        with ThreadPoolExecutor(1) as pool:
            early: dict[str, Future[list[Any]]] = {}

            def check_early(name: str) -> None:
                early[name] = pool.submit(check_written, {name: root / name}, options.scrub)

            facts = traces_stage.publish_window((replace(item.trace, out_dir=root), cut), options.scrub,
                                                 on_scrubbed=check_early)
            files = {n: root / n for n in sorted(set(facts["outputs"].values()))}
            chrome, piece = facts["outputs"].get("chrome"), None
            to_check = dict(files)
            if chrome and item.piece:
                piece = merged_trace.make_piece(root / chrome, item.index, facts["source"],
                                                (out.rows or {}).get("phases") or [])
                to_check[f"traces/{name}"] = merged_trace.write_alone(scratch / f"piece-{name}", piece.body)
            found = check_written({n: f for n, f in to_check.items() if n not in early}, options.scrub)
            found += [f for fut in early.values() for f in fut.result()]
        order = {n: i for i, n in enumerate(to_check)}   # as one checker over `to_check` reports them
        findings = sorted(found, key=lambda f: order.get(f.path.partition("!")[0], len(order)))
        # Only now, all of it checked: a window that failed on the way leaves its files to the
        # run-level check and no piece in the merged trace.
        out.trace, out.piece, out.findings = facts, piece, findings
        out.checked = {n: sha256_file(f) for n, f in files.items()}
        if options.ship:
            out.files = {n: f.read_bytes() for n, f in files.items()}
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def check_written(files: dict[str, Path], scrub: scrub_stage.ScrubOptions) -> list[Any]:
    """The checker's findings in `files` (bundle name -> where it is now), by one checker, each
    finding named by its file's bundle name."""
    found = scrub_stage.check_paths(list(files.values()), scrub.policy, known=scrub.pseudonyms) if files else []
    where = {str(f): n for n, f in files.items()}
    out = []
    for f in found:
        head, bang, inner = f.path.partition("!")
        out.append(replace(f, path=where.get(head, head) + bang + inner))
    return out


@dataclass(frozen=True)
class MemoryWork:
    """A memory snapshot of the chosen step, and the (scrubbed) phase rows of its process."""

    source: RawInput
    same_pid: tuple[dict[str, Any], ...] = ()


def oom_note(item: RawInput, options: Any = None) -> str:
    """What an out-of-memory snapshot (verl's `oom_<timestamp>/`) holds, in one line: the memory at
    the failure per device (`window.memory_source_steps` reads it through the restricted
    unpickler); it is no profiled step, so no phase row is made of it."""
    src = item.format.source_steps(item.path, item.format.identity(item.artifact), None)
    return next(iter(src.notes), "an out-of-memory snapshot: the memory at a failure, not a profiled step")


def summarize_memory(item: MemoryWork, options: PublishOptions) -> tuple[list[dict[str, Any]], Counter]:
    """`mem_peak_bytes` of the process's phases (the rows come back updated), or, without phase
    rows of its process, the snapshot's own phase rows, scrubbed. Returns (rows, counts)."""
    fmt = item.source.format
    ident = fmt.identity(item.source.artifact)
    path = Path(item.source.path)
    if item.same_pid:
        rows = fmt.memory_rows(path, ident, options.summarize, list(item.same_pid))
        phases, n = list(rows.get("phases", [])), len(item.same_pid)
        if len(phases) == n:
            return phases, Counter()   # numbers filled in rows already scrubbed
        new_rows, counts = _scrubbed_phases(phases[n:], options)   # an untimed snapshot's own rows
        return phases[:n] + new_rows, counts
    rows = fmt.memory_rows(path, ident, options.summarize, None)
    return _scrubbed_phases(list(rows.get("phases", [])), options)


def _scrubbed_phases(phases: list[dict[str, Any]], options: PublishOptions
                     ) -> tuple[list[dict[str, Any]], Counter]:
    sc = scrub_stage.Scrubber(options.scrub.policy, options.scrub.pseudonyms)
    scrubbed, _ = scrub_stage.scrub_summary_rows({"phases": phases}, options.scrub, scrubber=sc)
    return list(scrubbed.get("phases", [])), Counter(sc.counts)


def is_summarized_kind(a: Artifact) -> bool:
    """Its format gives it a summarize row (a config and a memory snapshot have none)."""
    return formats.for_file_kind(a.kind).summarized
