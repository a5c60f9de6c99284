"""Keep an export's NVTX columns between collect's two passes (the work dir's `ranges` folder).

Why: collect reads every NVTX event of a raw export in pass 1 (steps) and needs the same ranges in
pass 2 (summary) and the adjacent text pairs there (split-value scan); reading and nesting 10^6
ranges twice costs seconds (issue 25). Pass 1 keeps the columns it read, their same-thread nesting
and the distinct adjacent pairs in one file keyed by the export's identity; pass 2 loads it.
The folder stays within a byte budget, least recently used files first.
"""
from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ..core.atomic import atomic_path
from .nvtx_pairs import Pair


@dataclass
class RangeColumns:
    """The NVTX ranges of one export as numbers alone (texts and domains as codes into their
    distinct values: `NvtxRanges` is built from them), with what pass 1 found over them:
    `parent` (same-thread nesting, `nvtx_tree.same_thread_parents`) and `pairs` (the distinct
    adjacent text pairs of every NVTX event, `nvtx_pairs.adjacent_pairs`; None: not found, the
    split-value scan reads the export itself)."""

    start: np.ndarray
    end: np.ndarray
    gtid: np.ndarray
    event_type: np.ndarray
    same_thread: np.ndarray
    rowid: np.ndarray
    text_code: np.ndarray
    texts: list[str]
    domain_code: np.ndarray
    domains: list[str | None]
    parent: np.ndarray | None = None
    pairs: list[Pair] | None = None


_ARRAYS = ("start", "end", "gtid", "event_type", "same_thread", "rowid", "text_code", "domain_code")
_CACHE_FORMAT = "nvtx-ranges-4"

#: what the ranges cache may hold on disk before the least recently used files go
RANGES_CACHE_BYTES = 1 << 30


def cache_file(folder: Path, export: Path) -> Path | None:
    """The cache file of `export`'s ranges: keyed by the file's identity (path, inode, size, mtime),
    which an export changes whenever it is rewritten (exports are replaced by rename, never edited
    in place); None when the export cannot be stat'ed."""
    try:
        st = export.stat()
        key = f"{_CACHE_FORMAT}|{export.resolve()}|{st.st_dev}|{st.st_ino}|{st.st_size}|{st.st_mtime_ns}"
    except OSError:
        return None
    return folder / f"{hashlib.sha256(key.encode('utf-8', 'surrogateescape')).hexdigest()[:32]}.npz"


def save(path: Path, cols: RangeColumns) -> None:
    """Write the columns atomically (uncompressed npz, texts and pairs as JSON); best effort: a work
    dir that cannot be written only costs the next pass a fresh read."""
    names = json.dumps({"texts": cols.texts, "domains": cols.domains,   # ASCII: lone surrogates escaped
                        "pairs": cols.pairs}).encode()
    try:
        with atomic_path(path) as tmp, open(tmp, "wb") as fh:
            arrays = {k: _narrow(getattr(cols, k)) for k in _ARRAYS}
            if cols.parent is not None:
                arrays["parent"] = _narrow(cols.parent)
            np.savez(fh, names=np.frombuffer(names, np.uint8), **arrays)
    except OSError:
        return
    prune(path.parent, keep=path)


def load(path: Path) -> RangeColumns | None:
    """The columns `save` wrote, or None (absent, unreadable or not of this format)."""
    try:
        with np.load(path, allow_pickle=False) as z:
            arrays = {k: a if a.dtype == bool else a.astype(np.int64) for k, a in ((k, z[k]) for k in _ARRAYS)}
            parent = z["parent"].astype(np.int64) if "parent" in z.files else None
            names = json.loads(z["names"].tobytes())
    except (OSError, ValueError, KeyError, TypeError):
        return None
    try:
        os.utime(path)      # recently used: the last to be pruned
    except OSError:
        pass
    pairs = names.get("pairs")
    if pairs is not None:   # JSON made the (rowid, id, text) halves lists
        pairs = [(tuple(a), tuple(b)) for a, b in pairs]
    return RangeColumns(texts=names["texts"], domains=names["domains"], parent=parent, pairs=pairs, **arrays)


def prune(folder: Path, keep: Path | None = None, budget: int | None = None) -> int:
    """Delete the least recently used cache files (by mtime: a load touches its file) until the
    folder holds at most `budget` bytes; `keep` (the file just written) stays. Returns how many went.

    Why: each export, and each rewrite of one, leaves its own file (keyed by the file's identity),
    and files of an older cache format are never read again; unbounded, the work dir would grow
    with every run profiled. Best effort: a file another worker deletes first, or is loading, only
    costs that pass a fresh read (`load` then returns None)."""
    budget = RANGES_CACHE_BYTES if budget is None else budget
    entries = []
    for f in folder.glob("*.npz"):
        try:
            st = f.stat()
        except OSError:
            continue
        entries.append((st.st_mtime_ns, st.st_size, f))
    total = sum(size for _t, size, _f in entries)
    gone = 0
    for _t, size, f in sorted(entries, key=lambda e: e[0]):
        if total <= budget:
            break
        if keep is not None and f == keep:
            continue
        try:
            f.unlink()
        except OSError:
            continue
        total -= size
        gone += 1
    return gone


def _narrow(a: np.ndarray) -> np.ndarray:
    """`a` in the narrowest integer type that holds its values (int64 again on load): codes, types
    and row ids fit in 1-4 bytes, so the file of 720k ranges is 25 MB instead of 41 MB to write."""
    if a.dtype == bool or a.size == 0:
        return a
    lo, hi = int(a.min()), int(a.max())
    for t in (np.int8, np.int16, np.int32):
        if np.iinfo(t).min <= lo and hi <= np.iinfo(t).max:
            return a.astype(t)
    return a
