"""The input-format registry: one `Format` per kind of raw input, each defined in one folder.

Why a registry: adding an input format used to touch about thirteen modules (naming, gather,
a reader, summarize's dispatch, window, traces, scrub, the engine), each branching on
torch-versus-nsys. Now a format is one folder (`stages/formats/<kind>/`) that implements the
`Format` protocol below and calls `register`; gather, the engine's two passes, summarize, traces
and scrub ask the registry and never branch on a kind.

The one kind vocabulary is the registry's keys (`Format.kind`: what `RawInput.kind`,
`TraceJob.kind` and `SourceIdentity.source_kind` hold). A format also owns the file kinds its
files are gathered as (`Format.file_kinds`: `Artifact.kind`, written into manifest.json, and
`ScrubTask.kind`); `for_file_kind` maps one back to its format.

Why in core: every stage asks the registry and the formats import those stages to call their
functions, so the registry sits below both and knows no format by name. It loads the built-in
package `stages/formats` and any plugin registered under the `verlprof.formats` entry point
group at its first lookup (one `importlib` call each, listed in tests/test_layering.py), so a
worker process that unpickles a stage function finds the same formats as the driver.
"""
from __future__ import annotations

import importlib
import threading
from importlib.metadata import entry_points
from typing import Any, ContextManager, Protocol, runtime_checkable

#: the entry-point group a plugin format registers under (its object: a `Format`, or a module
#: that calls `register` when imported)
ENTRY_POINT_GROUP = "verlprof.formats"


@runtime_checkable
class Format(Protocol):
    """What one input format tells the stages (stages/formats/base.py: defaults to start from).

    Attributes: `kind` (the registry key), `file_kinds` (the Artifact.kind values its files are
    gathered as), `summarized` (its files get a summarize row), `has_steps` (pass 1 reads its
    steps and it takes part in the run's one window), `traced` (a window trace is cut of it); the
    others are described on `BaseFormat` (docs/DESIGN.md "Adding an input format").
    """

    kind: str
    file_kinds: tuple[str, ...]
    suffixes: tuple[str, ...]
    capture_suffixes: tuple[str, ...]
    fallback: bool
    numbers_steps: bool
    file_series: bool
    timing: bool
    summarized: bool
    has_steps: bool
    traced: bool
    opens_once: bool
    attaches_memory: bool
    no_event_is_broken: bool
    unread_reason: str
    profile: bool
    run_config: bool
    labels: dict[str, str]
    empty_hints: dict[str, str]

    # gather: naming, sniffing, what is read where it lies
    def classify(self, rel: str) -> Any: ...                       # NameInfo | None, by name alone
    def claim(self, path: Any) -> Any: ...                         # NameInfo | None, by content
    def check_header(self, path: Any, info: Any) -> str | None: ...  # None, or why the bytes don't fit
    def paired(self, artifacts: list[Any], skipped: list[tuple[str, str]]) -> list[Any]: ...
    def from_config(self, artifact: Any, config: Any) -> Any: ...  # what the run's config says of it
    def reads_in_place(self, artifact: Any) -> bool: ...           # collect reads it where it lies
    def needs_export(self, artifact: Any) -> bool: ...             # the export stage converts it first
    def reads_directly(self, artifact: Any) -> bool: ...           # `window FOLDER` reads it as it lies

    # pass 1 (survey): identity, identities, steps
    def open(self, path: str, ranges_cache: str | None) -> ContextManager[Any]: ...
    def wants_identify(self, artifact: Any) -> bool: ...
    def identify(self, handle: Any, artifact: Any) -> Any: ...     # Artifact with role/rank from content
    def identities(self, handle: Any, path: str, rel: str, policy: Any) -> Any: ...
    def identity(self, artifact: Any) -> Any: ...                  # window.SourceIdentity
    def refine_identity(self, ident: Any, artifact: Any) -> Any: ...
    def source_steps(self, handle: Any, ident: Any, options: Any) -> Any: ...   # window.SourceSteps
    def surveyed(self, artifact: Any, steps: Any, path: str) -> tuple[Any, dict[str, str]]: ...

    # pass 2: summary (event model -> phase rows), window cut, scrub and check
    def summary_identity(self, artifact: Any, steps: Any) -> Any: ...
    def summarize_job(self, path: str, ident: Any, steps: Any, step: int | None, others: Any) -> Any: ...
    def summarize_steps(self, item: Any, options: Any, handle: Any) -> Any: ...   # StepSummaries
    def summarize_chosen(self, item: Any, options: Any, handle: Any) -> Any: ...  # SummaryRows
    def memory_rows(self, path: Any, ident: Any, options: Any, phases_rows: Any) -> Any: ...
    def split_value_sources(self, handle: Any, path: str) -> list[Any]: ...
    def make_window(self, job: Any, out: dict[str, Any], flows: bool) -> None: ...
    def cut_window(self, job: Any, stem: Any, handle: Any) -> tuple[Any, dict[str, Any]]: ...
    def publish_window(self, job: Any, cut: dict[str, Any], scrub: Any, out: dict[str, Any],
                       on_scrubbed: Any, flows: bool = True) -> None: ...
    def find_identities(self, path: Any, policy: Any) -> Any: ...   # scrub: what a file of this format names
    def scrub_file(self, src: Any, tmp: Any, dst: Any, scrubber: Any, options: Any) -> dict[str, Any]: ...


_REGISTRY: dict[str, Format] = {}
_BY_FILE_KIND: dict[str, Format] = {}
_LOADED = False
_LOCK = threading.RLock()


def register(fmt: Format) -> Format:
    """Add a format (a plugin's one call). Its kind and file kinds must be new: two formats that
    claim the same file kind would make gather's answer depend on the order they loaded in."""
    with _LOCK:
        if not isinstance(fmt, Format):
            raise TypeError(f"{fmt!r} does not implement the Format protocol (stages/core/formats.py)")
        if fmt.kind in _REGISTRY and _REGISTRY[fmt.kind] is not fmt:
            raise ValueError(f"a format of kind {fmt.kind!r} is registered already")
        taken = [k for k in fmt.file_kinds if k in _BY_FILE_KIND and _BY_FILE_KIND[k] is not fmt]
        if taken:
            raise ValueError(f"file kinds {taken} belong to format {_BY_FILE_KIND[taken[0]].kind!r} already")
        _REGISTRY[fmt.kind] = fmt
        for k in fmt.file_kinds:
            _BY_FILE_KIND[k] = fmt
        return fmt


def unregister(kind: str) -> None:
    """Remove a format (tests that add a toy format take it away again)."""
    with _LOCK:
        fmt = _REGISTRY.pop(kind, None)
        for k in getattr(fmt, "file_kinds", ()):
            _BY_FILE_KIND.pop(k, None)


def _load() -> None:
    """The built-in formats, then the entry-point plugins, once per process."""
    global _LOADED
    if _LOADED:
        return
    with _LOCK:
        if _LOADED:
            return
        _LOADED = True
        importlib.import_module("..formats", __package__)
        for ep in entry_points(group=ENTRY_POINT_GROUP):
            obj = ep.load()
            if isinstance(obj, Format):
                register(obj)


def all_formats() -> list[Format]:
    """Every registered format, built-in ones first (the order gather asks them in)."""
    _load()
    return list(_REGISTRY.values())


def kinds() -> tuple[str, ...]:
    """The one kind vocabulary: the registry's keys."""
    return tuple(f.kind for f in all_formats())


def get(kind: str) -> Format:
    """The format of kind `kind` (RawInput.kind, TraceJob.kind, SourceIdentity.source_kind)."""
    _load()
    try:
        return _REGISTRY[str(kind)]
    except KeyError:
        raise KeyError(f"no input format of kind {kind!r} (known: {', '.join(_REGISTRY)})") from None


def for_file_kind(file_kind: Any) -> Format:
    """The format that owns a file kind (Artifact.kind, ScrubTask.kind)."""
    _load()
    try:
        return _BY_FILE_KIND[str(file_kind)]
    except KeyError:
        raise KeyError(f"no input format owns file kind {file_kind!r}") from None


def for_name(name: str) -> Format:
    """The format a bare file name most likely is, by the endings formats declare (`suffixes`);
    a name of no known ending is taken for the `fallback` format's (an nsys export, as the
    `window` command always read one)."""
    formats = all_formats()
    for fmt in formats:
        if fmt.suffixes and name.endswith(tuple(fmt.suffixes)):
            return fmt
    return next(f for f in formats if f.fallback)


def capture_suffixes() -> tuple[str, ...]:
    """Endings of files whose name may carry a capture range (`<base>.<k>.nsys-rep`)."""
    return tuple(s for f in all_formats() for s in f.capture_suffixes)


def preference() -> dict[str, int]:
    """Kind -> rank when two formats saw one process (lower first): the registration order, so
    the built-in formats go nsys, torch, memory (their rows are read in that order of trust)."""
    return {fmt.kind: i for i, fmt in enumerate(all_formats())}


def untimed_kinds() -> tuple[str, ...]:
    """Kinds whose rows time nothing (a memory snapshot's allocator phases): left out of the
    timing figures that read a bundle (ranks, headline, compare)."""
    return tuple(fmt.kind for fmt in all_formats() if not fmt.timing)


def classify(rel: str) -> Any:
    """What a file is by its name (a NameInfo), asking each format in turn; None: no format's."""
    for fmt in all_formats():
        info = fmt.classify(rel)
        if info is not None:
            return info
    return None
