"""What `verlprof scrub` reads in a folder: the gather stage's judgement, the same as collect's.

Why not a walk of its own: scrub used to sniff every file under a folder, so `scrub RUN -o S` of a
clean run exited 3 (issue 41): the `.nsys-rep` reports whose SQLite export lay beside them (and was
scrubbed) failed, and `sample_manifest.json`, which collect ignores as no profiler artifact, failed
too. Here gather (stages/gather) decides which files are artifacts, pairs exports with reports,
and skips verlprof's own outputs (stages/core/own_outputs.py); scrub only picks, for each artifact,
how it scrubs it (`sniff_kind`).
"""
from __future__ import annotations

from pathlib import Path

from ..core.errors import BadInputError
from ..core import formats
from ..gather import gather, unreadable

#: Planned items: (source file, name relative to the output folder, scrub kind).
Item = tuple[Path, str, str]
NOT_SCRUBBED = "not a profiler artifact verlprof scrubs (not copied)"
REPORT_WITH_EXPORT = "an nsys report whose SQLite export beside it is scrubbed instead (not copied)"


def plan_folder(src: Path, prefix: str, exclude: list[Path], sniff_kind: "object"
                ) -> tuple[list[Item], list[tuple[str, str]], list[tuple[str, str]]]:
    """([(src, rel, kind)], [(rel, why skipped)], [(path, why)] of own outputs) for one folder."""
    found = gather([src], with_hashes=False, find_config=False, exclude=exclude)
    items: list[Item] = []
    skipped: list[tuple[str, str]] = []
    bad = {rel for rel, _why in unreadable(found.skipped)}
    for a in [*found.artifacts, *found.rejected]:
        rel = prefix + a.path.relative_to(src).as_posix()
        if any(n.startswith("sqlite_export=") for n in a.notes):   # a report with its export beside it
            skipped.append((rel, REPORT_WITH_EXPORT))
            continue
        kind = sniff_kind(a.path)   # type: ignore[operator]
        if kind == "unknown" or formats.for_file_kind(a.kind).run_config:
            skipped.append((rel, NOT_SCRUBBED))
        else:
            items.append((a.path, rel, kind))
    own = {Path(p) for p, _why in found.own_outputs}
    for rel, why in found.skipped:
        if rel in bad or (src / rel) in own or (rel == "." and src in own):
            continue            # unreadable ones are items (they fail with their reason); own: below
        skipped.append((prefix + rel, why))
    return items, skipped, found.own_outputs


def plan_inputs(inputs: list[Path], out: Path, sniff_kind: "object"
                ) -> tuple[list[Item], list[tuple[str, str]], bool, list[tuple[str, str]]]:
    """[(src, rel, kind)], [(rel, why skipped)], single-file mode, [(path, why)] own outputs skipped."""
    if not inputs:
        raise BadInputError(None, "no input given")
    single = (len(inputs) == 1 and inputs[0].is_file() and not out.is_dir() and out.suffix != "")
    items: list[Item] = []
    skipped: list[tuple[str, str]] = []
    own: list[tuple[str, str]] = []
    for src in inputs:
        if not src.exists():
            raise BadInputError(src, "no such file or directory")
        if src.is_dir():
            prefix = src.resolve().name + "/" if len(inputs) > 1 else ""
            got, why, mine = plan_folder(src, prefix, [out], sniff_kind)
            items += got
            skipped += why
            own += mine
        else:
            items.append((src, src.name, sniff_kind(src)))   # type: ignore[operator]
    return items, skipped, single, own
