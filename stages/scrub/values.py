"""Scrub values built in memory from raw inputs: summary rows, window facts, manifest entries.

Why: `collect` summarizes and cuts windows from the raw exports in the WORK dir (a whole-file scrub
of a 1 GB export costs more than the summary itself and its output never leaves the machine). Every
string such a summary or window takes from a raw input passes through here, with the same
Scrubber, policy and pseudonym map as a file scrub, before it is written into the bundle; the
bundle's final `check` still guards publishing.
"""
from __future__ import annotations

import re
import sqlite3
from pathlib import Path
from typing import Any, Iterable

import pyarrow as pa

from ..readers.nsys_sqlite import NsysExport
from .identities import Pseudonyms
from .policy import load_policy
from .scrubber import Scrubber
from .sqlite_cells import split_nvtx_texts
from .tasks import ScrubOptions, ScrubResult


def scrub_values(obj: Any, scrubber: Scrubber, location: str) -> Any:
    """A copy of `obj` (dicts, lists, tuples, Arrow tables, scalars) with every string scrubbed.

    Dict keys are left as they are: in every structure passed here they are verlprof's own names
    (schema columns, metadata and fact keys). Values under the keys whose values are content hashes
    by design (policy `[entropy] allow_keys`: `verlprof.inputs`, `sha256`) skip only the entropy
    rule, as `check` does for them. Strings are cached per call, since names repeat.
    """
    cache: dict[tuple[str, str], str] = {}

    def one(text: str, where: str) -> str:
        # per field too: the same text is a toolchain value in one column and user text in another
        hit = cache.get((text, where))
        if hit is None:
            hit = scrubber.scrub(text, where)
            cache[(text, where)] = hit
        return hit

    def walk(v: Any, where: str) -> Any:
        if isinstance(v, str):
            return one(v, where)
        if isinstance(v, dict):
            return {k: (scrubber.scrub_keyed(k, x, where) if isinstance(x, str) and scrubber.is_hash_key(k)
                        else walk(x, f"{where}.{k}" if isinstance(k, str) and k.isidentifier() else where))
                    for k, x in v.items()}
        if isinstance(v, (list, tuple)):
            out = [walk(x, where) for x in v]
            return out if isinstance(v, list) else tuple(out)
        if isinstance(v, pa.Table):
            return pa.Table.from_pylist([walk(r, where) for r in v.to_pylist()], schema=v.schema)
        return v

    return walk(obj, location)


def publish_scrubber(options: ScrubOptions,
                     raw_exports: Iterable[str | Path | sqlite3.Connection | NsysExport] = ()) -> Scrubber:
    """The one Scrubber for everything collect publishes from raw inputs (rows, metadata, facts).

    `raw_exports`: the nsys exports the rows were read from (paths, or connections or exports open
    in the pass: an `NsysExport` gives the adjacent pairs its NVTX read found, without a second
    read). Rows have lost which NVTX range followed which, so the halves of a secret split across
    adjacent ranges are found on the exports first (`split_nvtx_texts`) and redacted wherever they
    appear later (issue 16)."""
    sc = Scrubber(options.policy, options.pseudonyms)
    if options.policy.join_adjacent_nvtx:
        for raw in raw_exports:
            src = raw if isinstance(raw, (sqlite3.Connection, NsysExport)) else Path(raw)
            sc.force_redact(split_nvtx_texts(src, sc))
    return sc


def values_report(sc: Scrubber, rel: str = "summaries") -> ScrubResult:
    """What `sc` replaced so far, as a ScrubResult for scrub_report.json (counts, never values)."""
    counts = sc.report_counts()
    total = sum(n for k in counts.values() for n in k.values())
    return ScrubResult(rel=rel, kind="summary_rows", dst="", status="done",
                       detail=f"{total} replacements", counts=counts, review=sc.review_list())


def scrub_summary_rows(rows: dict[str, Any], options: ScrubOptions,
                       raw_exports: Iterable[str | Path] = (),
                       scrubber: Scrubber | None = None) -> tuple[dict[str, Any], ScrubResult]:
    """Summary rows (schema name -> rows) with every string scrubbed, and what was replaced.

    Pass `scrubber` (from `publish_scrubber`) to scrub more values with the same rules and one
    report; otherwise one is made from `options` and `raw_exports`."""
    sc = scrubber or publish_scrubber(options, raw_exports)
    clean = {name: scrub_values(part, sc, f"summaries.{name}") for name, part in rows.items()}
    return clean, values_report(sc)


# ------------------------------------------------------------------------------------------------
# Names collect publishes: manifest entries, trace file names, the SOURCE arguments
# ------------------------------------------------------------------------------------------------

_NAMERS: dict[int, tuple[Any, Scrubber]] = {}


def _namer(options: Any) -> Scrubber:
    """One Scrubber per options object (names are few; building one compiles every rule)."""
    hit = _NAMERS.get(id(options))
    if hit is None or hit[0] is not options:
        policy = options.policy if isinstance(options, ScrubOptions) else load_policy()
        known = options.pseudonyms if isinstance(options, ScrubOptions) else options
        hit = (options, Scrubber(policy, known if isinstance(known, Pseudonyms) else None))
        _NAMERS.clear()
        _NAMERS[id(options)] = hit
    return hit[1]


def publish_namer(options: Any) -> Scrubber:
    """The Scrubber `publish_name` and `publish_manifest` use for `options` (its `named_list()`:
    the file and folder names published as pseudonyms, for the owner's review list)."""
    return _namer(options)


def publish_name(rel: str, options: Any) -> str:
    """A relative file name as the bundle may show it: each path component through every rule,
    so a host (`<fqdn>_rank0.<ms>.pt.trace.json.gz`, nsys's `%h`) or a user name in it becomes the
    bundle's pseudonym, the same one the Parquet `source` cells and the manifest show.
    `options`: the bundle's ScrubOptions (or its Pseudonyms)."""
    sc = _namer(options)
    parts = rel.replace("\\", "/").split("/")
    return "/".join(sc.scrub(p, "manifest.names") if p else p for p in parts)


def publish_root(root: str, options: Any) -> str:
    """A SOURCE argument as the manifest shows it: its last component only (published), never
    where the run lies (`home/<user>/runs/...`, `/fsx/<user>/...`)."""
    name = Path(str(root).rstrip("/\\")).name or "."
    return publish_name(name, options)


def _with_published_rels(manifest: dict[str, Any], options: Any) -> dict[str, Any]:
    """`manifest` with every input's relative name (`rel` of its artifacts, and wherever a message
    repeats it) as `publish_name` publishes it: a folder or file name is user-written (issue 39)."""
    rels: set[str] = set()

    def find(v: Any) -> None:
        if isinstance(v, dict):
            for k, x in v.items():
                if k in ("rel", "source") and isinstance(x, str) and x:
                    rels.add(x)
                else:
                    find(x)
        elif isinstance(v, list):
            for x in v:
                find(x)

    find(manifest)
    names = {r: publish_name(r, options) for r in sorted(rels, key=len, reverse=True)}
    names = {r: p for r, p in names.items() if p != r}
    if not names:
        return manifest
    rx = re.compile("|".join(re.escape(r) for r in names))

    def sub(v: Any) -> Any:
        if isinstance(v, str):
            return rx.sub(lambda m: names[m.group(0)], v)
        if isinstance(v, dict):
            return {k: sub(x) for k, x in v.items()}
        if isinstance(v, list):
            return [sub(x) for x in v]
        return v

    return sub(manifest)


def publish_manifest(manifest: dict[str, Any], options: Any) -> dict[str, Any]:
    """manifest.json as published: `sources` reduced to their last component, every other string
    through every rule (file names of artifacts and traces included); content hashes (`sha256`)
    skip only the entropy rule."""
    sc = _namer(options)
    out = _with_published_rels(dict(manifest), options)
    if isinstance(out.get("sources"), list):
        out["sources"] = [publish_root(s, options) if isinstance(s, str) else s for s in out["sources"]]
    rest = {k: v for k, v in out.items() if k != "sources"}
    clean = scrub_values(rest, sc, "manifest")
    return {k: (out[k] if k == "sources" else clean[k]) for k in out}
