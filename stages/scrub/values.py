"""Scrub values built in memory from raw inputs: summary rows, window facts, manifest entries.

Why: `collect` summarizes and cuts windows from the raw exports in the WORK dir (a whole-file scrub
of a 1 GB export costs more than the summary itself and its output never leaves the machine). Every
string such a summary or window takes from a raw input passes through here, with the same
Scrubber, policy and pseudonym map as a file scrub, before it is written into the bundle; the
bundle's final `check` still guards publishing.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any, Iterable

import pyarrow as pa

from .secrets import Scrubber
from .sqlite import split_nvtx_texts
from .tasks import ScrubOptions, ScrubResult


def scrub_values(obj: Any, scrubber: Scrubber, location: str) -> Any:
    """A copy of `obj` (dicts, lists, tuples, Arrow tables, scalars) with every string scrubbed.

    Dict keys are left as they are: in every structure passed here they are verlprof's own names
    (schema columns, metadata and fact keys). Strings are cached per call, since names repeat.
    """
    cache: dict[str, str] = {}

    def one(text: str, where: str) -> str:
        hit = cache.get(text)
        if hit is None:
            hit = scrubber.scrub(text, where)
            cache[text] = hit
        return hit

    def walk(v: Any, where: str) -> Any:
        if isinstance(v, str):
            return one(v, where)
        if isinstance(v, dict):
            return {k: walk(x, f"{where}.{k}" if isinstance(k, str) and k.isidentifier() else where)
                    for k, x in v.items()}
        if isinstance(v, (list, tuple)):
            out = [walk(x, where) for x in v]
            return out if isinstance(v, list) else tuple(out)
        if isinstance(v, pa.Table):
            return pa.Table.from_pylist([walk(r, where) for r in v.to_pylist()], schema=v.schema)
        return v

    return walk(obj, location)


def publish_scrubber(options: ScrubOptions, raw_exports: Iterable[str | Path] = ()) -> Scrubber:
    """The one Scrubber for everything collect publishes from raw inputs (rows, metadata, facts).

    `raw_exports`: the nsys exports the rows were read from. Rows have lost which NVTX range
    followed which, so the halves of a secret split across adjacent ranges are found on the
    exports first (`split_nvtx_texts`) and redacted wherever they appear later (issue 16)."""
    sc = Scrubber(options.policy, options.pseudonyms)
    if options.policy.join_adjacent_nvtx:
        for raw in raw_exports:
            sc.force_redact(split_nvtx_texts(Path(raw), sc))
    return sc


def values_report(sc: Scrubber, rel: str = "summaries") -> ScrubResult:
    """What `sc` replaced so far, as a ScrubResult for scrub_report.json (counts, never values)."""
    counts = sc.report_counts()
    total = sum(n for k in counts.values() for n in k.values())
    return ScrubResult(rel=rel, kind="summary_rows", dst="", status="done",
                       detail=f"{total} replacements", counts=counts)


def scrub_summary_rows(rows: dict[str, Any], options: ScrubOptions,
                       raw_exports: Iterable[str | Path] = (),
                       scrubber: Scrubber | None = None) -> tuple[dict[str, Any], ScrubResult]:
    """Summary rows (schema name -> rows) with every string scrubbed, and what was replaced.

    Pass `scrubber` (from `publish_scrubber`) to scrub more values with the same rules and one
    report; otherwise one is made from `options` and `raw_exports`."""
    sc = scrubber or publish_scrubber(options, raw_exports)
    clean = {name: scrub_values(part, sc, f"summaries.{name}") for name, part in rows.items()}
    return clean, values_report(sc)
