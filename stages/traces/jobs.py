"""Share-ready traces of the chosen step: the `traces/` folder of a bundle (issue 7).

Why: summaries answer "where did the time go"; the next question is "show me". This stage writes,
for every (already scrubbed) source, only the chosen step's window, small enough to send and in
formats that open without the profiler that made them:

    nsys export   -> traces/<stem>.sqlite          same tables and columns, window rows only
                  -> traces/<stem>.trace.json.gz   Chrome JSON for Perfetto / chrome://tracing
    torch trace   -> traces/<stem>.trace.json.gz   the window's events + all metadata events

The work is split by job, one module each (see docs/traces.md for the rules and clocks):
`traces_nsys_window` (SQLite window), `traces_nsys_chrome` (SQLite -> Chrome JSON),
`traces_torch_window` (Chrome trace window), `traces_jsonout` (deterministic gzip JSON writer);
the nsys schema is probed by the one prober, readers/nsys_sqlite.py. This module is the facade the
pipeline and the HTML report use: file names, and one picklable per-artifact function.
"""
from __future__ import annotations

import dataclasses
import hashlib
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from ..core import formats
from .nsys_chrome import ChromeCounts, nsys_sqlite_to_chrome
from .nsys_window import WindowCounts, window_nsys_sqlite
from .torch_window import TraceWindowCounts, trace_header, window_chrome_trace, window_chrome_trace_utc

__all__ = [
    "TRACES_DIR", "TraceJob", "ChromeCounts", "TraceWindowCounts", "WindowCounts",
    "make_window_traces", "nsys_sqlite_to_chrome", "trace_file_name", "trace_sqlite_name",
    "trace_header", "trace_stem", "window_chrome_trace", "window_chrome_trace_utc", "window_nsys_sqlite",
]

TRACES_DIR = "traces"
_SOURCE_SUFFIXES = (".pt.trace.json.gz", ".pt.trace.json", ".json.gz", ".json", ".sqlite",
                    ".nsys-rep", ".qdstrm")
_UNSAFE = re.compile(r"[^A-Za-z0-9._-]+")


def trace_stem(source_rel: str) -> str:
    """The bundle-wide name of a source's traces: its relative name, folders joined by `__`.

    `whole/whole_1873.sqlite` -> `whole__whole_1873`; characters outside [A-Za-z0-9._-] become `_`
    and leading dots are dropped, so the name is safe on every file system and never hidden.
    """
    rel = source_rel.replace("\\", "/").strip("/")
    for suffix in _SOURCE_SUFFIXES:
        if rel.lower().endswith(suffix):
            rel = rel[: -len(suffix)]
            break
    parts = [_UNSAFE.sub("_", p).lstrip(".") for p in rel.split("/") if p not in ("", ".", "..")]
    stem = "__".join(p for p in parts if p)
    return stem or "trace"


def trace_file_name(source_rel: str) -> str:
    """Bundle-relative path of the viewable (Chrome JSON) window trace of a source.

    The HTML report links each phase to this file; it exists for nsys and torch sources alike.
    """
    return f"{TRACES_DIR}/{trace_stem(source_rel)}.trace.json.gz"


def trace_sqlite_name(source_rel: str) -> str:
    """Bundle-relative path of the window SQLite of an nsys source."""
    return f"{TRACES_DIR}/{trace_stem(source_rel)}.sqlite"


@dataclass(frozen=True)
class TraceJob:
    """One source's window traces to write: picklable, so it runs inline, in a pool or on Ray.

    `src` is the scrubbed input (nsys SQLite or torch trace), `source_rel` its name in the bundle,
    `out_dir` the bundle root; the window is on the absolute UTC clock (ns since the epoch), as in
    `summary_types.StepSpan`.
    """

    kind: str                    # the format of the source (stages/core/formats.py)
    src: Path
    source_rel: str
    out_dir: Path
    start_ns_abs: int
    end_ns_abs: int
    # For a RAW input (collect): `cut_window` cuts into `work_dir`, `publish_window` scrubs into `out_dir`.
    work_dir: Path | None = None


def make_window_traces(job: TraceJob, options: dict[str, Any] | None = None) -> dict[str, Any]:
    """Write a source's window traces; return JSON-safe facts (bundle-relative outputs, counts).

    options: `flows` (bool, default True): launch -> kernel arrows in converted nsys traces.
    """
    opts = options or {}
    out: dict[str, Any] = {"source": job.source_rel, "kind": job.kind, "outputs": {}, "counts": {}}
    formats.get(job.kind).make_window(job, out, bool(opts.get("flows", True)))
    return out


def cut_window(job: TraceJob, options: Any = None, db: Any = None) -> dict[str, Any]:
    """Cut the step window of a RAW input into `job.work_dir/windows/` (unscrubbed; it never leaves
    the work dir). Returns JSON-safe facts: the raw window's path and the cut's counts. `db`: the
    nsys export already open in this pass (`readers.nsys_sqlite.NsysExport`), cut on its connection.

    Why apart from `publish_window`: the cut is one pass of SQLite over the whole input and needs no
    scrub options, so collect runs it on the same executor queue as the summaries and the identity
    pass; publishing (scrub + convert) is a small second step once the pseudonym map is known.
    """
    if job.work_dir is None:
        raise ValueError("a raw-input trace job needs a work_dir")
    key = hashlib.sha256(f"{job.src}|{job.start_ns_abs}|{job.end_ns_abs}".encode()).hexdigest()[:12]
    scratch = Path(job.work_dir) / "windows"
    scratch.mkdir(parents=True, exist_ok=True)
    # a temp name of this process: two runs sharing a WORK dir never cut into (and then delete)
    # each other's window, and atomic.clean_stale_temps removes it once this process is gone
    stem = f".{trace_stem(job.source_rel)}.tmp-{os.getpid()}-{key}"
    raw, counts = formats.get(job.kind).cut_window(job, scratch / stem, db)
    return {"raw": str(raw), "counts": counts}


def publish_window(item: tuple[TraceJob, dict[str, Any]], scrub: Any, flows: bool = True,
                   on_scrubbed: Callable[[str], None] | None = None) -> dict[str, Any]:
    """Scrub a cut raw window into the bundle (`job.out_dir`) and, for nsys, convert the scrubbed
    window to Chrome JSON; the raw window is removed. `out["scrub"]` is the scrub result's report.
    `on_scrubbed(name)`: told the bundle name of the scrubbed window SQLite as soon as it is
    written, before the conversion (which only reads it), so a caller can check it meanwhile.

    Nothing unscrubbed reaches `out_dir`: the only file written there from the raw window is the
    scrubber's output, and the Chrome JSON is made from that.
    """
    job, cut = item
    raw = Path(cut["raw"])
    out: dict[str, Any] = {"source": job.source_rel, "kind": job.kind, "outputs": {}, "counts": {}}
    try:
        formats.get(job.kind).publish_window(job, cut, scrub, out, on_scrubbed, flows)
    finally:
        raw.unlink(missing_ok=True)
    _true_sizes(out, job.out_dir)
    return out


#: gzip level of a published torch window: one step, shared and downloaded, so zlib's level 6
#: (kineto writes its traces at 9). The policy's level 1 (ISA-L) is for whole-trace scrubs:
#: on the sample's window it wrote 246.9 KB where level 6 writes 153.3 KB, for 40 ms more.
TORCH_WINDOW_GZIP_LEVEL = 6


def window_gzip(scrub: Any) -> Any:
    """`scrub` with the policy's gzip level raised to TORCH_WINDOW_GZIP_LEVEL (never lowered)."""
    policy = getattr(scrub, "policy", None)
    if policy is None or getattr(policy, "gzip_level", TORCH_WINDOW_GZIP_LEVEL) >= TORCH_WINDOW_GZIP_LEVEL:
        return scrub
    return dataclasses.replace(scrub, policy=dataclasses.replace(policy, gzip_level=TORCH_WINDOW_GZIP_LEVEL))


def _true_sizes(out: dict[str, Any], root: Path) -> None:
    """Every `size` in the trace facts is the size of the file as written into the bundle.

    Why: the window's counts are taken from the raw cut (WORK dir), before the scrub rewrote and
    recompressed it, so manifest.json and the report stated 131.5 KB for a 246.9 KB file (issue
    41); the raw window's size stays as `raw_size`."""
    for key, rel in out["outputs"].items():
        counts = out["counts"].get(key)
        if not isinstance(counts, dict):
            continue
        try:
            size = (root / rel).stat().st_size
        except OSError:
            continue
        if "size" in counts and counts["size"] != size:
            counts["raw_size"] = counts["size"]
        counts["size"] = size
