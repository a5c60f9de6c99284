"""Read nsys SQLite exports (Nsight Systems 2022-2026) fast, read-only, without assuming a schema.

Why: export schemas move between nsys releases (metadata table renamed, `text` vs `textId` in
NVTX_EVENTS, a separate DRIVER table or driver calls inside RUNTIME, ENUM tables present or not), so
every table and column is probed before use and a missing CUDA table means "no GPU data", not an
error (the CPU-only sample has NVTX alone).

Speed: a 1 GB export holds ~10 M CUDA API rows. Fetching them as Python tuples costs ~1.7 us a
row; instead each rowid window is aggregated by SQLite itself into one comma-joined string per
column (`group_concat`) and parsed by numpy's C parser, ~4x faster, with memory bounded by the
window. The export is opened with `mode=ro&immutable=1`: nothing (journal, index, temp table) is
ever written into an input.
"""
from __future__ import annotations

import hashlib
import json
import os
import re
import sqlite3
import warnings
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterator, Sequence

import numpy as np

from ..core.atomic import atomic_path
from ..core.errors import BadInputError
from .sqlite_export import open_export

KERNEL = "CUPTI_ACTIVITY_KIND_KERNEL"
RUNTIME = "CUPTI_ACTIVITY_KIND_RUNTIME"
DRIVER = "CUPTI_ACTIVITY_KIND_DRIVER"
MEMCPY = "CUPTI_ACTIVITY_KIND_MEMCPY"
MEMSET = "CUPTI_ACTIVITY_KIND_MEMSET"
NVTX = "NVTX_EVENTS"
MEMORY = "CUDA_GPU_MEMORY_USAGE_EVENTS"
SESSION_START = "TARGET_INFO_SESSION_START_TIME"

# globalTid / globalPid are serialised GlobalIds (stable since nsys 2020): the pid sits in bits
# 24..47, the tid in bits 0..23 (`globalPid` has tid 0), so `gid // PID_DIV` keys a process.
TID_MASK = 0xFFFFFF
PID_SHIFT = 24
PID_DIV = 1 << PID_SHIFT

# NVTX event types by name (ENUM_NSYS_EVENT_TYPE); the fallback ids are those of nsys 2020-2025.
_NVTX_IDS = {
    "NvtxMark": 34, "NvtxtMark": 65, "NvtxPushPopRange": 59, "NvtxStartEndRange": 60,
    "NvtxtPushPopRange": 70, "NvtxtStartEndRange": 71, "NvtxCategory": 33, "NvtxtCategory": 64,
    "NvtxThread": 39, "NvtxDomainCreate": 75, "NvtxDomainDestroy": 76, "NvtxNameCudaDevice": 97,
    "NvtxNameCudaContext": 98, "NvtxNameCudaStream": 99, "NvtxtMetaThread": 72,
    "NvtxtMetaProcess": 73, "NvtxtMetaFileDisplay": 74,
}
_NVTX_RANGES = ("NvtxPushPopRange", "NvtxStartEndRange", "NvtxtPushPopRange", "NvtxtStartEndRange")
_NVTX_MARKS = ("NvtxMark", "NvtxtMark")
NVTX_PUSHPOP = _NVTX_IDS["NvtxPushPopRange"]

# Columns that hold StringIds(id) in exports whose CREATE statements lack the `-- REFERENCES` notes.
_STRING_REF_NAMES = frozenset({
    "nameId", "textId", "demangledName", "shortName", "mangledName", "contentId", "filenameId",
    "jsonTextId", "symbol", "module",
})
_REF_RE = re.compile(r"^\s*\"?(\w+)\"?\s+[^\n]*?--[^\n]*REFERENCES\s+StringIds\s*\(", re.M)

# cudaMemcpyKind ids when the export has no ENUM_CUDA_MEMCPY_OPER table (CUPTI's values).
_DEFAULT_COPY_KINDS = {1: "h2d", 2: "d2h", 8: "d2d", 10: "d2d", 13: "d2d", 11: "h2d", 12: "d2h"}
_COPY_KIND_BY_ENUM = {"HTOD": "h2d", "DTOH": "d2h", "DTOD": "d2d", "PTOP": "d2d",
                      "UVM_HTOD": "h2d", "UVM_DTOH": "d2h", "UVM_DTOD": "d2d"}

CHUNK_ROWS = 1 << 18


def pid_of_gtid(gtid: "np.ndarray | int") -> "np.ndarray | int":
    """The OS process id inside a globalTid / globalPid."""
    return (gtid >> PID_SHIFT) & TID_MASK


def tid_of_gtid(gtid: "np.ndarray | int") -> "np.ndarray | int":
    """The OS thread id inside a globalTid."""
    return gtid & TID_MASK


def qi(name: str) -> str:
    """Quote an SQL identifier (table and column names come from the file, never trusted)."""
    return '"' + name.replace('"', '""') + '"'


def in_list(ids: Sequence[int]) -> str:
    """`(1,2,3)` for an SQL IN clause of integer ids (never empty)."""
    return "(" + ",".join(str(int(i)) for i in ids) + ")" if ids else "(NULL)"


@dataclass(frozen=True)
class TableInfo:
    """One table of an export: its name, CREATE statement, columns and StringIds columns."""

    name: str
    sql: str
    columns: tuple[str, ...]
    string_refs: tuple[str, ...]

    def has(self, *cols: str) -> bool:
        return all(c in self.columns for c in cols)


def probe_tables(con: sqlite3.Connection, schema: str = "main") -> dict[str, TableInfo]:
    """Every table of the database `schema` with its columns (in order) and string columns: the
    one schema probe of nsys exports (2022-2026 differ: probe, never assume)."""
    out: dict[str, TableInfo] = {}
    rows = con.execute(
        f"SELECT name, sql FROM {qi(schema)}.sqlite_master WHERE type = 'table' "
        "AND name NOT LIKE 'sqlite_%' ORDER BY name").fetchall()
    for name, sql in rows:
        cols = tuple(r[1] for r in con.execute(f"PRAGMA {qi(schema)}.table_info({qi(name)})"))
        refs = set() if name == "StringIds" else (
            {m.group(1) for m in _REF_RE.finditer(sql or "")} | (_STRING_REF_NAMES & set(cols)))
        out[name] = TableInfo(name, sql or "", cols, tuple(c for c in cols if c in refs))
    return out


@dataclass(frozen=True)
class NvtxTypes:
    """NVTX event type ids of this export: ranges, marks, domain creation, and definitions
    (domains, categories, thread/device names: rows that name others, whatever their time)."""

    ranges: tuple[int, ...]
    marks: tuple[int, ...]
    domain_create: tuple[int, ...]
    definitions: tuple[int, ...]


def nvtx_types(con: sqlite3.Connection, tables: dict[str, TableInfo], schema: str = "main") -> NvtxTypes:
    """The ids from ENUM_NSYS_EVENT_TYPE where the export has it, else nsys 2020-2025's."""
    ids = dict(_NVTX_IDS)
    info = tables.get("ENUM_NSYS_EVENT_TYPE")
    if info and info.has("id", "name"):
        got = {str(n): int(i) for i, n in con.execute(
            f"SELECT id, name FROM {qi(schema)}.ENUM_NSYS_EVENT_TYPE WHERE name IN {_names_sql(_NVTX_IDS)}")}
        if got:
            ids = got

    def of(names: Sequence[str]) -> tuple[int, ...]:
        return tuple(sorted(ids[n] for n in names if n in ids))

    rest = [n for n in _NVTX_IDS if n not in _NVTX_RANGES + _NVTX_MARKS]
    return NvtxTypes(of(_NVTX_RANGES), of(_NVTX_MARKS), of(("NvtxDomainCreate",)), of(rest))


def _names_sql(names: Sequence[str]) -> str:
    return "(" + ",".join(f"'{n}'" for n in names) + ")"


@dataclass
class NvtxRanges:
    """NVTX start/end and push/pop ranges of one export, sorted by (thread, start, -end, rowid).

    That order makes a range's enclosing ranges come before it, so `parent[i] < i` and nesting
    can be rolled up in one reverse pass. `end` of a range left open is the export's last
    timestamp (NVIDIA's rule). `same_thread` is False for start/end ranges ended on another
    thread: NVIDIA's projection ignores those.
    """

    start: np.ndarray
    end: np.ndarray
    gtid: np.ndarray
    event_type: np.ndarray
    same_thread: np.ndarray
    rowid: np.ndarray
    text: list[str]
    domain: list[str | None]
    # (code per range, texts) with text[i] == texts[code[i]], when the reader built the texts so
    _codes: "tuple[np.ndarray, list[str]] | None" = field(default=None, repr=False, compare=False)
    # the same for the domains
    _domain_codes: "tuple[np.ndarray, list[str | None]] | None" = field(default=None, repr=False, compare=False)
    # per range, the tightest enclosing range on its thread (-1: none), when the reader knows it
    # (`nvtx_tree.same_thread_parents`, kept in the ranges cache): `RangeIndex.build` then skips nesting
    parent: "np.ndarray | None" = field(default=None, repr=False, compare=False)

    def __len__(self) -> int:
        return int(self.start.size)

    def text_codes(self) -> tuple[np.ndarray, list[str]]:
        """(code per range, texts): `text[i] == texts[code[i]]`. Why: callers judge names once per
        distinct text (10^6 ranges, a few hundred names; issue 25); the reader has the codes already,
        other builders get them computed here. A text may appear under two codes (two string ids)."""
        if self._codes is None:
            self._codes = _codes_of(self.text)
        return self._codes

    def domain_codes(self) -> tuple[np.ndarray, list[str | None]]:
        """(code per range, domains): `domain[i] == domains[code[i]]`, as `text_codes` (a capture
        has a handful of domains, judged once each instead of once per range)."""
        if self._domain_codes is None:
            self._domain_codes = _codes_of(self.domain)
        return self._domain_codes

    @property
    def pid(self) -> np.ndarray:
        return pid_of_gtid(self.gtid)

    def full_name(self, i: int) -> str:
        """`domain:text` like NVIDIA's reports (`text` alone in the default domain)."""
        d = self.domain[i]
        return f"{d}:{self.text[i]}" if d else self.text[i]

    def style(self, i: int) -> str:
        return "PushPop" if int(self.event_type[i]) in (NVTX_PUSHPOP, _NVTX_IDS["NvtxtPushPopRange"]) else "StartEnd"


def _codes_of(values: list) -> tuple[np.ndarray, list]:
    """(code per value, distinct values in first-seen order): `values[i] == distinct[code[i]]`."""
    code: dict = {}
    codes = np.fromiter((code.setdefault(v, len(code)) for v in values), np.int64, len(values))
    return codes, list(code)


@dataclass
class _RangeColumns:
    """`NvtxRanges` as numbers alone: texts and domains as codes into their distinct values. The
    form `nvtx_ranges` builds them in and keeps between passes (`ranges_cache`)."""

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

    def ranges(self) -> NvtxRanges:
        text = np.array(self.texts, dtype=object)[self.text_code].tolist()
        domain = (np.array(self.domains, dtype=object)[self.domain_code].tolist() if len(self.domains) > 1
                  else [self.domains[0]] * int(self.start.size))
        return NvtxRanges(self.start, self.end, self.gtid, self.event_type, self.same_thread, self.rowid,
                          text, domain, (self.text_code, self.texts), (self.domain_code, self.domains), self.parent)


_ARRAYS = ("start", "end", "gtid", "event_type", "same_thread", "rowid", "text_code", "domain_code")
_CACHE_FORMAT = "nvtx-ranges-3"


def _ranges_cache_file(folder: Path, export: Path) -> Path | None:
    """The cache file of `export`'s ranges: keyed by the file's identity (path, inode, size, mtime),
    which an export changes whenever it is rewritten (exports are replaced by rename, never edited
    in place); None when the export cannot be stat'ed."""
    try:
        st = export.stat()
        key = f"{_CACHE_FORMAT}|{export.resolve()}|{st.st_dev}|{st.st_ino}|{st.st_size}|{st.st_mtime_ns}"
    except OSError:
        return None
    return folder / f"{hashlib.sha256(key.encode('utf-8', 'surrogateescape')).hexdigest()[:32]}.npz"


def _save_ranges(path: Path, cols: _RangeColumns) -> None:
    """Write the columns atomically (uncompressed npz, texts as JSON); best effort: a work dir that
    cannot be written only costs the next pass a fresh read."""
    names = json.dumps({"texts": cols.texts, "domains": cols.domains}).encode()   # ASCII: lone surrogates escaped
    try:
        with atomic_path(path) as tmp, open(tmp, "wb") as fh:
            arrays = {k: _narrow(getattr(cols, k)) for k in _ARRAYS}
            if cols.parent is not None:
                arrays["parent"] = _narrow(cols.parent)
            np.savez(fh, names=np.frombuffer(names, np.uint8), **arrays)
    except OSError:
        return
    prune_ranges_cache(path.parent, keep=path)


#: what the ranges cache may hold on disk before the least recently used files go
RANGES_CACHE_BYTES = 1 << 30


def prune_ranges_cache(folder: Path, keep: Path | None = None, budget: int | None = None) -> int:
    """Delete the least recently used cache files (by mtime: a load touches its file) until the
    folder holds at most `budget` bytes; `keep` (the file just written) stays. Returns how many went.

    Why: each export, and each rewrite of one, leaves its own file (keyed by the file's identity),
    and files of an older cache format are never read again; unbounded, the work dir would grow
    with every run profiled. Best effort: a file another worker deletes first, or is loading, only
    costs that pass a fresh read (`_load_ranges` then returns None)."""
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


def _load_ranges(path: Path) -> _RangeColumns | None:
    """The columns `_save_ranges` wrote, or None (absent, unreadable or not of this format)."""
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
    return _RangeColumns(texts=names["texts"], domains=names["domains"], parent=parent, **arrays)


@dataclass
class NsysExport:
    """An open, read-only nsys SQLite export whose tables and columns have been probed (once).

    One object serves every reader of one pass over the export (identity, steps, summary, window
    cut): the file is opened and probed once, not once per reader."""

    path: Path
    con: sqlite3.Connection
    tables: dict[str, TableInfo]
    nsys_version: str | None = None
    schema_version: str | None = None
    _nvtx: NvtxTypes | None = None
    ranges_cache: Path | None = None       # folder keeping `nvtx_ranges` between passes (work dir)

    # -- opening and probing -----------------------------------------------------------------

    @classmethod
    def open(cls, path: str | Path, need_events: bool = True, ranges_cache: str | Path | None = None) -> "NsysExport":
        """Validate and open `path` read-only; BadInputError (one line, names the file) if it is not
        an export, or, with `need_events`, if it holds neither NVTX nor CUDA tables."""
        p = Path(path)
        con, info = open_export(p)
        try:
            exp = cls(p, con, probe_tables(con), info.nsys_version, info.schema_version,
                      ranges_cache=Path(ranges_cache) if ranges_cache else None)
        except sqlite3.DatabaseError as exc:
            con.close()
            raise BadInputError(p, f"corrupt export, its schema is unreadable ({exc})") from None
        if need_events and not ({NVTX, KERNEL, RUNTIME} & set(exp.tables)):
            con.close()
            raise BadInputError(p, "an nsys export without NVTX_EVENTS or CUDA tables: nothing to summarize")
        return exp

    @classmethod
    @contextmanager
    def use(cls, export: "str | Path | NsysExport", need_events: bool = True,
            ranges_cache: str | Path | None = None) -> Iterator["NsysExport"]:
        """The export already open in this pass (left open), or `export` opened for this use alone:
        every reader takes either, so a pass opens and probes each export once."""
        if isinstance(export, NsysExport):
            yield export
            return
        with cls.open(export, need_events, ranges_cache) as db:
            yield db

    def close(self) -> None:
        self.con.close()

    def __enter__(self) -> "NsysExport":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def has(self, table: str, *columns: str) -> bool:
        """True when `table` exists and has every column in `columns`."""
        t = self.tables.get(table)
        return t is not None and t.has(*columns)

    def columns(self, table: str) -> tuple[str, ...]:
        t = self.tables.get(table)
        return t.columns if t is not None else ()

    @property
    def nvtx_types(self) -> NvtxTypes:
        if self._nvtx is None:
            try:
                self._nvtx = nvtx_types(self.con, self.tables)
            except sqlite3.DatabaseError as exc:
                raise BadInputError(self.path, f"corrupt or unreadable export ({exc})") from None
        return self._nvtx

    def query(self, sql: str, params: Sequence[object] = ()) -> list[tuple]:
        """Run one read-only query; a corrupt file becomes a one-line BadInputError."""
        try:
            return self.con.execute(sql, tuple(params)).fetchall()
        except sqlite3.DatabaseError as exc:
            raise BadInputError(self.path, f"corrupt or unreadable export ({exc})") from None

    def scalar(self, sql: str, params: Sequence[object] = ()) -> object:
        rows = self.query(sql, params)
        return rows[0][0] if rows else None

    # -- small tables ------------------------------------------------------------------------

    def session_start_ns(self, required: bool = False) -> int | None:
        """UTC ns since the epoch of the session's time 0 (each capture-range file has its own).
        `required`: BadInputError without it (a window cannot be placed on the shared clock)."""
        v = self.scalar(f"SELECT utcEpochNs FROM {SESSION_START} WHERE utcEpochNs IS NOT NULL LIMIT 1"
                        ) if self.has(SESSION_START, "utcEpochNs") else None
        if v is None and required:
            raise BadInputError(self.path, "no TARGET_INFO_SESSION_START_TIME.utcEpochNs: cannot place "
                                           "the export on the UTC clock")
        return int(v) if v is not None else None

    def strings(self, ids: "Sequence[int] | np.ndarray") -> dict[int, str]:
        """StringIds values for `ids` (looked up in batches; unknown ids are left out)."""
        out: dict[int, str] = {}
        uniq = sorted({int(i) for i in ids if i is not None and int(i) >= 0})
        for k in range(0, len(uniq), 900):
            part = uniq[k:k + 900]
            marks = ",".join("?" * len(part))
            for i, v in self.query(f"SELECT id, value FROM StringIds WHERE id IN ({marks})", part):
                out[int(i)] = "" if v is None else str(v)
        return out

    def copy_kind_names(self) -> dict[int, str]:
        """copyKind id -> h2d | d2h | d2d (others: `other`), from ENUM_CUDA_MEMCPY_OPER when present."""
        if self.has("ENUM_CUDA_MEMCPY_OPER", "id", "name"):
            out = {}
            for i, name in self.query("SELECT id, name FROM ENUM_CUDA_MEMCPY_OPER"):
                key = str(name).upper().replace("CUDA_MEMCPY_KIND_", "")
                out[int(i)] = _COPY_KIND_BY_ENUM.get(key, "other")
            return out
        return dict(_DEFAULT_COPY_KINDS)

    def dealloc_op_ids(self) -> tuple[int, ...]:
        """memoryOperationType ids that free memory (ENUM_CUDA_DEV_MEM_EVENT_OPER, default 1)."""
        if self.has("ENUM_CUDA_DEV_MEM_EVENT_OPER", "id", "name"):
            ids = tuple(int(i) for i, n in self.query("SELECT id, name FROM ENUM_CUDA_DEV_MEM_EVENT_OPER")
                        if "DEALLOC" in str(n).upper() or "FREE" in str(n).upper())
            if ids:
                return ids
        return (1,)

    # -- NVTX ----------------------------------------------------------------------------------

    def nvtx_ranges(self) -> NvtxRanges:
        """Every NVTX range with its text resolved (`text` column or StringIds via `textId`).

        Numbers are read as columns (`iter_columns`) and names once per distinct textId: a range
        costs no Python call (issue 25: 10^6 ranges). With `ranges_cache` (a folder in the work
        dir) the columns read are kept there, so the next pass over the same export (collect's
        steps, then its summary) loads them instead of reading the export again."""
        empty = NvtxRanges(*(np.zeros(0, np.int64) for _ in range(4)), np.zeros(0, bool),
                           np.zeros(0, np.int64), [], [])
        if not self.has(NVTX, "start", "eventType"):
            return empty
        cache = _ranges_cache_file(self.ranges_cache, self.path) if self.ranges_cache else None
        got = _load_ranges(cache) if cache is not None else None
        if got is not None:
            return got.ranges()
        cols = self.columns(NVTX)
        end = "end" if "end" in cols else "NULL"
        gtid = "ifnull(globalTid, 0)" if "globalTid" in cols else "0"
        domain = "ifnull(domainId, 0)" if "domainId" in cols else "0"
        maxts = int(self.scalar(f"SELECT max(max(ifnull(start, 0)), max(ifnull({end}, 0))) FROM {NVTX}") or 0)
        where = f"eventType IN {in_list(self.nvtx_types.ranges)} AND start IS NOT NULL"
        same = f"endGlobalTid IS NULL OR endGlobalTid = {gtid}" if "endGlobalTid" in cols else "1"
        own_text = "2 * (text IS NOT NULL)" if "text" in cols else "0"   # bit 1: the text is in its own column
        exprs = ["rowid", "start", f"ifnull({end}, {maxts})", "eventType", gtid, f"({same}) + {own_text}",
                 "textId" if "textId" in cols else "NULL", domain]
        parts = list(self.iter_columns(NVTX, exprs, where))
        if not parts:
            return empty
        rid, start, endv, et, g, same, tid_, dom = (np.concatenate(c) for c in zip(*parts))
        if not _sorted_by(g, start, -endv, rid):   # an export usually lists them in that order already
            order = np.lexsort((rid, -endv, start, g))
            rid, start, endv, et, g, same, tid_, dom = (a[order] for a in (rid, start, endv, et, g, same, tid_, dom))
        uniq, inv = np.unique(tid_, return_inverse=True)
        sids = self.strings(uniq[uniq >= 0].tolist())
        names = [sids.get(int(i), "") for i in uniq.tolist()] or [""]
        text_code = inv.astype(np.int64).reshape(-1)
        if (same & 2).any():   # unregistered strings: the text itself, in its own column
            own = dict(self.query(f"SELECT rowid, text FROM {NVTX} WHERE text IS NOT NULL AND {where}"))
            if own:
                pos = np.searchsorted(np.sort(rid), list(own))
                by_rid = np.argsort(rid)[pos]
                code_of: dict[str, int] = {}
                text_code[by_rid] = [code_of.setdefault(str(v), len(names) + len(code_of)) for v in own.values()]
                names += list(code_of)
        dom_names = self._domain_names(gtid, domain, cols)
        domains: list[str | None] = [None]
        dom_code = np.zeros(start.size, np.int64)
        if dom_names:
            code_of_dom: dict[str | None, int] = {None: 0}
            dom_code[:] = [code_of_dom.setdefault(dom_names.get(k), len(code_of_dom))
                           for k in zip(dom.tolist(), (g >> PID_SHIFT).tolist())]
            domains = list(code_of_dom)
        cols_read = _RangeColumns(start, endv, g, et, (same & 1) == 1, rid, text_code, names, dom_code, domains)
        if cache is not None:   # the nesting too: the next pass needs it and need not find it again
            from .nvtx_tree import same_thread_parents

            cols_read.parent = same_thread_parents(start, endv, g, cols_read.same_thread)
            _save_ranges(cache, cols_read)
        return cols_read.ranges()

    def _domain_names(self, gtid: str, domain: str, cols: tuple[str, ...]) -> dict[tuple[int, int], str]:
        """(domainId, process key) -> domain name, from the NvtxDomainCreate rows."""
        text = "text" if "text" in cols else "NULL"
        text_id = "textId" if "textId" in cols else "NULL"
        out: dict[tuple[int, int], str] = {}
        for dom, g, t, tid_ in self.query(f"SELECT {domain}, {gtid}, {text}, {text_id} FROM {NVTX} "
                                          f"WHERE eventType IN {in_list(self.nvtx_types.domain_create)}"):
            name = t if t is not None else self.strings([int(tid_)]).get(int(tid_)) if tid_ is not None else None
            if dom and name:
                out[(int(dom), int(g) >> PID_SHIFT)] = str(name)
        return out

    # -- streaming big tables --------------------------------------------------------------------

    def iter_columns(self, table: str, exprs: Sequence[str], where: str = "", params: Sequence[object] = (),
                     chunk_rows: int = CHUNK_ROWS) -> Iterator[list[np.ndarray]]:
        """Yield int64 arrays, one per SQL expression, for successive rowid windows of `table`.

        NULLs become -1 (wrap an expression in `ifnull` to choose otherwise). Each window is
        aggregated by SQLite into one string per column and parsed by numpy; a window holding
        values numpy cannot parse as integers (REAL, text) is fetched row by row instead.
        Prefer raw columns to arithmetic on them: SQLite reads a corrupt text value as 0 inside
        `end - start`, while numpy's parser refuses it (and the slow path reports it).
        """
        if table not in self.tables:
            return
        bounds = self.query(f'SELECT min(rowid), max(rowid) FROM "{table}"')
        lo, hi = bounds[0] if bounds else (None, None)
        if lo is None:
            return
        cond = f" AND ({where})" if where else ""
        agg = ", ".join(f"group_concat(ifnull({e}, -1))" for e in exprs)
        sql = f'SELECT count(*), {agg} FROM "{table}" WHERE rowid >= ? AND rowid < ?{cond}'
        plain = f'SELECT {", ".join(exprs)} FROM "{table}" WHERE rowid >= ? AND rowid < ?{cond}'
        for a in range(int(lo), int(hi) + 1, chunk_rows):
            args = (a, a + chunk_rows, *params)
            try:
                row = self.con.execute(sql, args).fetchone()
            except sqlite3.DatabaseError as exc:
                raise BadInputError(self.path, f"corrupt or unreadable export ({exc})") from None
            n = int(row[0])
            if n == 0:
                continue
            try:
                yield [_parse_ints(v, n) for v in row[1:]]
            except ValueError:
                yield self._slow_chunk(table, plain, args, len(exprs))

    def _slow_chunk(self, table: str, sql: str, args: Sequence[object], ncols: int) -> list[np.ndarray]:
        try:
            rows = self.con.execute(sql, tuple(args)).fetchall()
        except sqlite3.DatabaseError as exc:
            raise BadInputError(self.path, f"corrupt or unreadable export ({exc})") from None
        try:
            arr = np.array([[(-1 if v is None else v) for v in r] for r in rows], dtype=np.float64)
        except (TypeError, ValueError):
            raise BadInputError(self.path, f"table {table} holds non-numeric values where numbers belong") from None
        arr = arr.reshape(len(rows), ncols)
        return [arr[:, j].astype(np.int64) for j in range(ncols)]


def _sorted_by(*keys: np.ndarray) -> bool:
    """True when the rows are already in ascending lexicographic order of `keys` (first key first)
    with no two rows equal in every key: then `lexsort` would return them as they are."""
    before = np.zeros(keys[0].size - 1 if keys[0].size else 0, bool)   # decided by an earlier key
    for k in keys:
        d = np.diff(k)
        if (~before & (d < 0)).any():
            return False
        before |= d > 0
    return bool(before.all())


def _parse_ints(s: str | None, n: int) -> np.ndarray:
    """Parse SQLite's comma-joined integers; ValueError unless exactly n integers."""
    if s is None:
        raise ValueError("null aggregate")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        arr = np.fromstring(s, dtype=np.int64, sep=",")  # noqa: NPY201 - text mode is the fast C parser
    if arr.size != n:
        raise ValueError("count mismatch")
    return arr
