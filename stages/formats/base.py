"""`BaseFormat`: the defaults a format folder starts from (every method of the `Format` protocol,
stages/core/formats.py), so a format states only what it does.

Why defaults that do nothing rather than abstract methods: most formats have no export step, no
identity inside their content, no window trace; a toy format (tests/test_toy_format.py) is a
class of about forty lines. A default that would silently lose data (a scrubber) refuses instead.
"""
from __future__ import annotations

import contextlib
import dataclasses
import functools
from pathlib import Path
from typing import Any, Iterator, Sequence

from ..core.errors import BadInputError
from ..readers.naming import NameInfo, classify_name
from ..scrub import ScrubTask, identities_task, scrub_task
from ..summarize import empty_rows
from ..window import SourceIdentity, SourceSteps, identity_from_artifact, window_spans


#: verl's naming table read once per name, however many formats ask (gather asks each in turn);
#: NameInfo is frozen, so one answer is shared safely.
_verl_name = functools.lru_cache(maxsize=1 << 14)(classify_name)


class BaseFormat:
    """One input format (subclass it in `stages/formats/<kind>/` and `register` an instance)."""

    kind: str = ""
    file_kinds: tuple[str, ...] = ()
    summarized: bool = False      # its files get a summarize row
    has_steps: bool = False       # pass 1 reads its steps; it takes part in the run's one window
    traced: bool = False          # a window trace is cut of it (traces/)
    opens_once: bool = False      # `open` holds it open for a pass (a lone one then runs as two jobs)
    attaches_memory: bool = False  # its figures join the phase rows of the same process (memory)
    no_event_is_broken: bool = False  # read without error but no event at all: a damaged file
    unread_reason: str = ""       # why it has no summarize row though it is no part of the window
    timing: bool = True           # its rows time ranges (a memory snapshot's rows time nothing)
    profile: bool = True          # profiler output (a summary's `inputs`); the run's config is not
    run_config: bool = False      # the run's config: gather reads roles and profiled steps from it
    labels: dict[str, str] = {}   # file kind -> the short word collect's table prints
    empty_hints: dict[str, str] = {}  # file kind -> why such a file is empty (a failed row's hint)
    suffixes: tuple[str, ...] = ()  # file-name endings: the format of a bare name (`window FILE`)
    capture_suffixes: tuple[str, ...] = ()  # endings after which `.<k>` is a capture range
    fallback: bool = False        # a bare name of no known ending is taken for this format's
    numbers_steps: bool = False   # its steps are numbered by the window (markers, capture series);
                                  # else they come numbered (a trace per step, a snapshot's folder)
    file_series: bool = False     # a file that names no step is one of its process's series of files

    # ---- gather ----------------------------------------------------------------------------
    def classify(self, rel: str) -> NameInfo | None:
        """What a file is by its name: verl's naming (stages/readers/naming.py), when it says one
        of this format's file kinds."""
        info = _verl_name(rel)
        return info if info is not None and str(info.kind) in self.file_kinds else None

    def claim(self, path: Path) -> NameInfo | None:
        """A file this format recognises by its content before any name is read (the run's
        config); None for formats known by their names."""
        return None

    def check_header(self, path: Path, info: NameInfo) -> str | None:
        return None

    def paired(self, artifacts: list[Any], skipped: list[tuple[str, str]]) -> list[Any]:
        """The gathered artifacts after this format links its files that belong together (a
        report and its export) or drops one another supersedes (said in `skipped`)."""
        return artifacts

    def from_config(self, artifact: Any, config: Any) -> Any:
        """The artifact with what the run's config (readers/hydra_config.RunConfig) says of it."""
        return artifact

    def reads_in_place(self, artifact: Any) -> bool:
        """collect reads the file where it lies (an empty file is failed by gather instead)."""
        return artifact.size > 0

    def needs_export(self, artifact: Any) -> bool:
        return False

    def reads_directly(self, artifact: Any) -> bool:
        """The stage commands (`window FOLDER`) read it as it lies and find its steps: an export or
        a trace, never a report that needs exporting, nor a file without steps."""
        return False

    # ---- pass 1 ------------------------------------------------------------------------------
    @contextlib.contextmanager
    def open(self, path: str, ranges_cache: str | None) -> Iterator[Any]:
        """The input opened once for one pass of one job; None: each reader opens the path."""
        yield None

    def wants_identify(self, artifact: Any) -> bool:
        """Role/rank are read from inside the file (an nsys report of `worker_process_<pid>`)."""
        return False

    def identify(self, handle: Any, artifact: Any) -> Any:
        return artifact

    def identities(self, handle: Any, path: str, rel: str, policy: Any) -> Any:
        """Hosts, users and secret values the file reveals (its `find_identities`) and the account
        that owns it, for the run's one pseudonym map."""
        return identities_task(ScrubTask(path, "", self.file_kinds[0], rel), policy)

    def identity(self, artifact: Any) -> SourceIdentity:
        return identity_from_artifact(artifact)

    def refine_identity(self, ident: SourceIdentity, artifact: Any) -> SourceIdentity:
        """What this format adds to a gathered file's identity (window.identity_from_artifact)."""
        return ident

    def source_steps(self, handle: Any, ident: SourceIdentity, options: Any) -> SourceSteps:
        raise BadInputError(ident.source, f"a {self.kind} input has no steps")

    def surveyed(self, artifact: Any, steps: SourceSteps | None, path: str) -> tuple[Any, dict[str, str]]:
        """The artifact after pass 1 (facts its steps state) and the tool versions it records."""
        return artifact, {}

    # ---- pass 2 ------------------------------------------------------------------------------
    def summary_identity(self, artifact: Any, steps: SourceSteps) -> SourceIdentity:
        """The identity its summary rows are keyed by."""
        return self.identity(artifact)

    def summarize_job(self, path: str, ident: SourceIdentity, steps: SourceSteps, step: int | None,
                      others: Sequence[int]) -> Any:
        raise BadInputError(path, f"a {self.kind} input is not summarized")

    def summarize_steps(self, item: Any, options: Any, handle: Any) -> Any:
        raise BadInputError(getattr(item, "path", None), f"a {self.kind} input is not summarized")

    def summarize_chosen(self, item: Any, options: Any, handle: Any) -> Any:
        """The chosen step's rows alone (`summarize_any_item`): none where the step has no span."""
        if not item.chosen:
            return empty_rows()
        return self.summarize_steps(dataclasses.replace(item, other_steps=()), options, handle).chosen or empty_rows()

    def memory_rows(self, path: Path, ident: SourceIdentity, options: Any,
                    phases_rows: list[dict[str, Any]] | None) -> Any:
        """An `attaches_memory` format's figures joined to the phase rows of its process."""
        raise BadInputError(path, f"a {self.kind} input has no memory figures")

    def split_value_sources(self, handle: Any, path: str) -> list[Any]:
        """Inputs whose adjacent texts may split a secret (publish_scrubber's `raw_exports`)."""
        return []

    def make_window(self, job: Any, out: dict[str, Any], flows: bool) -> None:
        """Write the window traces of an already scrubbed source (traces.make_window_traces)."""
        raise BadInputError(None, f"no window trace is made of a {self.kind} input")

    def cut_window(self, job: Any, stem: Path, handle: Any) -> tuple[Path, dict[str, Any]]:
        """Cut the raw window into the WORK dir (`stem` + the format's ending); its counts."""
        raise BadInputError(None, f"no window trace is cut of a {self.kind} input")

    def publish_window(self, job: Any, cut: dict[str, Any], scrub: Any, out: dict[str, Any],
                       on_scrubbed: Any, flows: bool = True) -> None:
        """Scrub the cut window into the bundle (and convert it); its facts into `out`."""
        raise BadInputError(None, f"no window trace is published of a {self.kind} input")

    def find_identities(self, path: Path, policy: Any) -> Any:
        """What the content names (scrub.Identities); None: nothing (its owner still counts)."""
        return None

    def scrub_file(self, src: Path, tmp: Path, dst: Path, scrubber: Any, options: Any) -> dict[str, Any]:
        """Write the scrubbed copy of `src` to `tmp` (renamed to `dst` by the caller); the facts."""
        raise BadInputError(src, f"cannot scrub a file of kind {self.kind!r}")


def spans_of(steps: SourceSteps, step: int | None, others: Sequence[int]) -> tuple[tuple[Any, ...], tuple[Any, ...]]:
    """The chosen step's spans in a source and those of each other step that has one."""
    spans = tuple(window_spans(steps, step))
    other = tuple(g for g in (tuple(window_spans(steps, s)) for s in others) if g)
    return spans, other


def scrub_window(task: ScrubTask, scrub: Any, out: dict[str, Any]) -> None:
    """Scrub a cut raw window (`task.src`) into the bundle (`task.dst`), its report into `out`;
    one line naming the source when it cannot be scrubbed (nothing unscrubbed is published)."""
    res = scrub_task(task, scrub)
    if res.status != "done":
        raise BadInputError(None, f"{task.rel}: its window could not be scrubbed ({res.detail})")
    out["scrub"] = res.to_report()
