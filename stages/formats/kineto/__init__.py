"""The kineto format: torch.profiler chrome traces (`.json` / `.json.gz`), as verl's torch profiler
(`build_trace_basename`), verl 0.5-0.8 and TensorBoard's plugin name them.

Why it is read where it lies: a trace needs no conversion; pass 1 reads its steps (and the rank
and world size its `distributedInfo` states), pass 2 summarizes the chosen step through the one
event model (summarize/torch_profile.py), cuts its window (traces/torch_window.py) and scrubs it
as a stream (scrub/trace.py).
"""
from __future__ import annotations

import dataclasses
import gzip
import os
import re
import zlib
from pathlib import Path
from typing import Any, Sequence

from ...core.formats import register
from ...core.model import ArtifactKind
from ...readers.naming import NameInfo
from ...scrub import ScrubTask, find_trace_identities, scrub_trace
from ...summarize import TorchItem, empty_rows, summarize_torch_item, summarize_torch_steps
from ...traces import trace_file_name, window_chrome_trace_utc, window_gzip
from ...window import SourceIdentity, SourceSteps, process_key, torch_source_steps
from ..base import BaseFormat, scrub_window, spans_of

TRACE = ArtifactKind.TORCH_TRACE
GZIP_MAGIC = b"\x1f\x8b"
_SNIFF_BYTES = 256 << 10
#: Reason prefix of a file that looked like a trace but could not be read (gather/headers.py).
UNREADABLE = "unreadable: "


def _head(path: Path, n: int) -> bytes:
    with open(path, "rb") as f:
        return f.read(n)


def sniff_json(path: Path) -> str | None:
    """None if the start of a (gzipped) JSON file looks like a chrome trace, else why not."""
    try:
        if path.name.endswith(".gz"):
            if _head(path, 2) != GZIP_MAGIC:
                return UNREADABLE + "not gzip data (bad header)"
            with gzip.open(path, "rb") as f:
                head = f.read(_SNIFF_BYTES)
        else:
            head = _head(path, _SNIFF_BYTES)
    except (OSError, EOFError, zlib.error) as exc:
        return UNREADABLE + f"corrupt gzip ({type(exc).__name__})"
    if b'"traceEvents"' in head or b'"schemaVersion"' in head:
        return None
    if head.lstrip(b"\xef\xbb\xbf \t\r\n")[:1] not in (b"{", b"["):
        return UNREADABLE + ("gzip of something that is not JSON" if path.name.endswith(".gz")
                             else "not JSON (bad header)")
    return "JSON without traceEvents (not a chrome trace)"


def trace_versions(path: str) -> dict[str, str]:
    """CUDA runtime / CUPTI versions a torch trace states in its header (torch's own version is not
    recorded in a chrome trace), for the Parquet metadata."""
    try:
        opener = gzip.open if path.endswith(".gz") else open
        with opener(path, "rb") as f:
            head = f.read(16 << 10).decode("utf-8", "replace")
    except (OSError, EOFError):
        return {}
    found = {}
    for key, name in (("cuda_runtime_version", "cuda_runtime"), ("cupti_version", "cupti")):
        m = re.search(rf'"{key}"\s*:\s*(\d+)', head)
        if m:
            found[name] = m.group(1)
    return found


class KinetoFormat(BaseFormat):
    kind = "torch"
    file_kinds = (TRACE,)
    labels = {TRACE: "trace"}
    suffixes = (".json", ".json.gz")
    file_series = True
    empty_hints = {TRACE: "the profiler never wrote it (the process was killed before the trace was saved?)"}
    summarized = has_steps = traced = no_event_is_broken = True

    def check_header(self, path: Path, info: NameInfo) -> str | None:
        if info.needs_sniff:
            return sniff_json(path)
        if path.name.endswith(".gz"):
            return None if _head(path, 2) == GZIP_MAGIC else "not gzip data (bad header)"
        first = _head(path, 4096).lstrip()[:1]
        return None if first in (b"{", b"[") else "not JSON (bad header)"

    def reads_directly(self, artifact: Any) -> bool:
        return True

    def refine_identity(self, ident: SourceIdentity, artifact: Any) -> SourceIdentity:
        """The process whose series of traces it is one of (window/series.py)."""
        return dataclasses.replace(ident, process=process_key(artifact))

    def from_config(self, artifact: Any, config: Any) -> Any:
        """A trace that names no step is the k-th of its process's series: the k-th profiled step
        (stages/window/series.py numbers it; the config's list is all it needs)."""
        if artifact.step is None and config.steps:
            return artifact.replace(notes=artifact.notes + (f"profiled_steps={','.join(map(str, config.steps))}",))
        return artifact

    def source_steps(self, handle: Any, ident: SourceIdentity, options: Any) -> SourceSteps:
        return torch_source_steps(handle, ident, getattr(options, "step_range", None))

    def surveyed(self, artifact: Any, steps: SourceSteps | None, path: str) -> tuple[Any, dict[str, str]]:
        """Rank / world size the trace states (distributedInfo), and its CUDA/CUPTI versions."""
        if steps is not None:
            got = steps.ident
            artifact = artifact.replace(rank=artifact.rank if artifact.rank is not None else got.rank,
                                        world_size=artifact.world_size if artifact.world_size is not None
                                        else got.world_size)
        return artifact, trace_versions(path)

    def summary_identity(self, artifact: Any, steps: SourceSteps) -> SourceIdentity:
        return steps.ident

    def summarize_job(self, path: str, ident: SourceIdentity, steps: SourceSteps, step: int | None,
                      others: Sequence[int]) -> TorchItem:
        spans, other = spans_of(steps, step, others)
        return TorchItem(path, steps.ident, spans, other, bool(spans))

    def summarize_steps(self, item: TorchItem, options: Any, handle: Any) -> Any:
        return summarize_torch_steps(item, options)

    def summarize_chosen(self, item: TorchItem, options: Any, handle: Any) -> Any:
        return summarize_torch_item(item, options) if item.chosen else empty_rows()

    def make_window(self, job: Any, out: dict[str, Any], flows: bool) -> None:
        chrome_rel = trace_file_name(job.source_rel)
        t = window_chrome_trace_utc(job.src, job.out_dir / chrome_rel, job.start_ns_abs, job.end_ns_abs)
        out["outputs"] = {"chrome": chrome_rel}
        out["counts"] = {"chrome": dataclasses.asdict(t)}
        out["events"] = dict(t.kept, metadata=t.metadata)

    def cut_window(self, job: Any, stem: Path, handle: Any) -> tuple[Path, dict[str, Any]]:
        raw = stem.with_name(stem.name + ".trace.json.gz")
        return raw, dataclasses.asdict(window_chrome_trace_utc(job.src, raw, job.start_ns_abs, job.end_ns_abs))

    def publish_window(self, job: Any, cut: dict[str, Any], scrub: Any, out: dict[str, Any],
                       on_scrubbed: Any, flows: bool = True) -> None:
        chrome_rel = trace_file_name(job.source_rel)
        scrub_window(ScrubTask(cut["raw"], str(job.out_dir / chrome_rel), TRACE, job.source_rel),
                     window_gzip(scrub), out)
        t = cut["counts"]
        out["outputs"] = {"chrome": chrome_rel}
        out["counts"] = {"chrome": t}
        out["events"] = dict(t.get("kept", {}), metadata=t.get("metadata"))

    def find_identities(self, path: Path, policy: Any) -> Any:
        return find_trace_identities(path, policy)

    def scrub_file(self, src: Path, tmp: Path, dst: Path, scrubber: Any, options: Any) -> dict[str, Any]:
        """Streamed; gzip on the way when the output's name ends in .gz."""
        tmp_gz = tmp.with_name(tmp.name + (".gz" if dst.name.endswith(".gz") else ""))
        try:
            info = scrub_trace(src, tmp_gz, scrubber, options.policy)
            if tmp_gz != tmp:
                os.replace(tmp_gz, tmp)
        finally:
            if tmp_gz != tmp and tmp_gz.exists():
                tmp_gz.unlink()
        return info


FORMAT = register(KinetoFormat())
