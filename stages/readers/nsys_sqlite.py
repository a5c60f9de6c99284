"""Read nsys SQLite exports (Nsight Systems 2022-2026) fast, read-only, without assuming a schema.

Why: export schemas move between nsys releases (metadata table renamed, `text` vs `textId` in
NVTX_EVENTS, a separate DRIVER table or driver calls inside RUNTIME, ENUM tables present or not), so
every table and column is probed before use and a missing CUDA table means "no GPU data", not an
error (the CPU-only sample has NVTX alone).

Speed: a 1 GB export holds ~10 M CUDA API rows. Instead of fetching them as Python tuples, each
rowid window is aggregated by SQLite itself into one comma-joined string per column
(`group_concat`) and parsed by numpy's C parser, with memory bounded by the window. The export is opened with `mode=ro&immutable=1`: nothing (journal, index, temp table) is
ever written into an input.
"""
from __future__ import annotations

import re
import sqlite3
import warnings
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator, Sequence

import numpy as np

from ..core.errors import BadInputError
from . import ranges_cache
from .events import NVTX_PUSHPOP, PID_SHIFT, TID_MASK, NvtxRanges, pid_of_gtid, tid_of_gtid
from .nvtx_pairs import Pair, adjacent_pairs
from .nvtx_tree import same_thread_parents
from .ranges_cache import RangeColumns
from .sqlite_export import decode_text, open_export, rowid_windows, table_columns, table_statements
from .sqlite_export import quote_ident as qi   # table and column names come from the file, never trusted

# the event model's names this reader fills, re-exported for its callers
__all__ = ["NvtxRanges", "NVTX_PUSHPOP", "PID_SHIFT", "TID_MASK", "pid_of_gtid", "tid_of_gtid", "NsysExport"]

KERNEL = "CUPTI_ACTIVITY_KIND_KERNEL"
RUNTIME = "CUPTI_ACTIVITY_KIND_RUNTIME"
DRIVER = "CUPTI_ACTIVITY_KIND_DRIVER"
MEMCPY = "CUPTI_ACTIVITY_KIND_MEMCPY"
MEMSET = "CUPTI_ACTIVITY_KIND_MEMSET"
NVTX = "NVTX_EVENTS"
MEMORY = "CUDA_GPU_MEMORY_USAGE_EVENTS"
SESSION_START = "TARGET_INFO_SESSION_START_TIME"

# globalTid / globalPid (`events.PID_SHIFT`): `gid // PID_DIV` keys a process.
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
    for name, sql in table_statements(con, schema).items():
        cols = tuple(c[0] for c in table_columns(con, name, schema))
        refs = set() if name == "StringIds" else (
            {m.group(1) for m in _REF_RE.finditer(sql)} | (_STRING_REF_NAMES & set(cols)))
        out[name] = TableInfo(name, sql, cols, tuple(c for c in cols if c in refs))
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


def _as_ranges(cols: RangeColumns) -> NvtxRanges:
    """The `NvtxRanges` of columns read or loaded: texts and domains expanded from their codes."""
    text = np.array(cols.texts, dtype=object)[cols.text_code].tolist()
    domain = (np.array(cols.domains, dtype=object)[cols.domain_code].tolist() if len(cols.domains) > 1
              else [cols.domains[0]] * int(cols.start.size))
    return NvtxRanges(cols.start, cols.end, cols.gtid, cols.event_type, cols.same_thread, cols.rowid,
                      text, domain, (cols.text_code, cols.texts), (cols.domain_code, cols.domains), cols.parent)


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
    _pairs: "tuple[list[Pair] | None] | None" = None    # (adjacent_nvtx_pairs,) once the ranges are read
    ranges_cache: Path | None = None       # folder keeping `nvtx_ranges` between passes (work dir)

    # -- opening and probing -----------------------------------------------------------------

    @classmethod
    def open(cls, path: str | Path, need_events: bool = True, ranges_cache: str | Path | None = None,
             scrub_text: bool = False) -> "NsysExport":
        """Validate and open `path` read-only; BadInputError (one line, names the file) if it is not
        an export, or, with `need_events`, if it holds neither NVTX nor CUDA tables. `scrub_text`:
        text cells decoded as the scrub decodes them (`decode_text`, set at open), for a handle the
        scrub of the same pass reads too, so it needs no connection of its own."""
        p = Path(path)
        con, info = open_export(p, decode_text if scrub_text else None)
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
        """StringIds values for `ids` as text (unknown ids are left out)."""
        try:
            found = string_values(self.con, {int(i) for i in ids if i is not None and int(i) >= 0})
        except sqlite3.DatabaseError as exc:
            raise BadInputError(self.path, f"corrupt or unreadable export ({exc})") from None
        return {int(i): "" if v is None else str(v) for i, v in found.items()}

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
        cache = ranges_cache.cache_file(self.ranges_cache, self.path) if self.ranges_cache else None
        cols = ranges_cache.load(cache) if cache is not None else None
        if cols is None:
            cols = self._read_nvtx()
            if cols is None:
                self._pairs = (None if self.has(NVTX) else [],)
                return NvtxRanges.empty()
            if cache is not None:   # the nesting too: the next pass needs it and need not find it again
                cols.parent = same_thread_parents(cols.start, cols.end, cols.gtid, cols.same_thread)
                ranges_cache.save(cache, cols)
        self._pairs = (cols.pairs,)
        return _as_ranges(cols)

    def adjacent_nvtx_pairs(self) -> list[Pair] | None:
        """The distinct text pairs of NVTX events that follow each other on one thread
        (`nvtx_pairs.adjacent_pairs`: what the split-value scan judges), found by the same read as
        the ranges and kept with them (pass 1 of collect finds them, pass 2 loads them: the NVTX
        table is read once per collect). None where that read cannot tell them (a `textId` that is
        not an integer, StringIds ids below 0, no `eventType`): the caller reads the table itself."""
        if self._pairs is None:
            self.nvtx_ranges()
        assert self._pairs is not None
        return self._pairs[0]

    def _read_nvtx(self) -> RangeColumns | None:
        """Read every NVTX event once: the ranges' columns (sorted by thread, start, -end, rowid)
        and, over all events (marks too), their adjacent text pairs. None without NVTX ranges' columns."""
        if not self.has(NVTX, "start", "eventType"):
            return None
        cols = self.columns(NVTX)
        end = "end" if "end" in cols else "NULL"
        gtid = "ifnull(globalTid, 0)" if "globalTid" in cols else "0"
        domain = "ifnull(domainId, 0)" if "domainId" in cols else "0"
        same = f"endGlobalTid IS NULL OR endGlobalTid = {gtid}" if "endGlobalTid" in cols else "1"
        # bit 0: ended on its own thread; 1: the text is in its own column; 2: no start; 3: a textId
        # that is not an integer (the pairs are then left to the split-value scan's own read); 4: no end
        flags = " + ".join([f"({same})", "2 * (text IS NOT NULL)" if "text" in cols else "0", "4 * (start IS NULL)",
                            "8 * (typeof(textId) NOT IN ('integer', 'null'))" if "textId" in cols else "0",
                            f"16 * ({end} IS NULL)"])
        exprs = ["rowid", "start", end, "eventType", gtid, flags, "textId" if "textId" in cols else "NULL", domain]
        parts = list(self.iter_columns(NVTX, exprs))   # every event: the pairs need marks too
        if not parts:
            return None
        rid, start, endv, et, g, flag, tid_, dom = (np.concatenate(c) for c in zip(*parts))
        # a range left open ends at the export's last timestamp (NVIDIA's rule), missing values as 0
        no_end = (flag & 16) != 0
        maxts = max(int(np.where((flag & 4) != 0, 0, start).max()), int(np.where(no_end, 0, endv).max()))
        endv = np.where(no_end, maxts, endv)
        if rid.size > 1 and not bool(np.all(rid[1:] > rid[:-1])):   # scan order is rowid order; never assumed
            by_rid = np.argsort(rid, kind="stable")
            rid, start, endv, et, g, flag, tid_, dom = (a[by_rid] for a in (rid, start, endv, et, g, flag, tid_, dom))
        own_group, own_texts = self._own_texts(rid, flag)
        pairs = self._pairs_of(rid, g, start, flag, tid_, own_group, own_texts)
        keep = np.isin(et, self.nvtx_types.ranges) & ((flag & 4) == 0)
        if not keep.all():
            rid, start, endv, et, g, flag, tid_, dom, own_group = (
                a[keep] for a in (rid, start, endv, et, g, flag, tid_, dom, own_group))
        uniq, inv = np.unique(tid_, return_inverse=True)
        sids = self.strings(uniq[uniq >= 0].tolist())
        names = [sids.get(int(i), "") for i in uniq.tolist()] or [""]
        text_code = inv.astype(np.int64).reshape(-1)
        own = own_group >= 0
        if own.any():   # unregistered strings: the text itself, coded in order of first range
            groups = own_group[own]
            _, first = np.unique(groups, return_index=True)
            code_of: dict[str, int] = {}
            code_of_group = np.zeros(len(own_texts), np.int64)
            for gi in groups[np.sort(first)].tolist():
                v = own_texts[gi]
                if isinstance(v, str) and _unencodable(v):
                    raise BadInputError(self.path, "corrupt or unreadable export (NVTX text not UTF-8)")
                code_of_group[gi] = code_of.setdefault(str(v), len(names) + len(code_of))
            text_code[own] = code_of_group[groups]
            names += list(code_of)
        if not _sorted_by(g, start, -endv, rid):   # an export usually lists them in that order already
            order = np.lexsort((rid, -endv, start, g))
            rid, start, endv, et, g, flag, text_code, dom = (
                a[order] for a in (rid, start, endv, et, g, flag, text_code, dom))
        dom_names = self._domain_names(gtid, domain, cols)
        domains: list[str | None] = [None]
        dom_code = np.zeros(start.size, np.int64)
        if dom_names:
            code_of_dom: dict[str | None, int] = {None: 0}
            dom_code[:] = [code_of_dom.setdefault(dom_names.get(k), len(code_of_dom))
                           for k in zip(dom.tolist(), (g >> PID_SHIFT).tolist())]
            domains = list(code_of_dom)
        return RangeColumns(start, endv, g, et, (flag & 1) == 1, rid, text_code, names, dom_code, domains,
                            pairs=pairs)

    def _own_texts(self, rid: np.ndarray, flag: np.ndarray) -> tuple[np.ndarray, list]:
        """(group per event, -1: none; distinct `text` values): events whose text is in their own
        column, one row per distinct text from SQLite with its rowids (no Python per event).
        Read as the scrub reads cells (invalid UTF-8 kept as surrogates): the pairs hold these."""
        group = np.full(rid.size, -1, np.int64)
        if not (flag & 2).any():
            return group, []
        with _scrub_decoding(self.con):
            rows = self.query(f"SELECT text, count(*), group_concat(rowid) FROM {NVTX} WHERE text IS NOT NULL "
                              "GROUP BY 1")
        if not rows:
            return group, []
        texts, counts, rowids = zip(*rows)
        at = np.searchsorted(rid, _parse_ints(",".join(rowids), int(sum(counts))))
        group[at] = np.repeat(np.arange(len(texts)), np.asarray(counts, np.int64))
        return group, list(texts)

    def _pairs_of(self, rid: np.ndarray, g: np.ndarray, start: np.ndarray, flag: np.ndarray, tid_: np.ndarray,
                  own_group: np.ndarray, own_texts: list) -> list[Pair] | None:
        """The adjacent text pairs of all events, keyed as `scrub/sqlite._adjacent_columns` keys
        them: own text first, else a StringIds id, else none; None where these columns cannot tell."""
        cols = self.columns(NVTX)
        if "text" not in cols and "textId" not in cols:
            return []
        if (flag & 8).any():
            return None
        has_ids = "textId" in cols and "StringIds" in self.tables
        if has_ids:
            low = self.scalar("SELECT min(id) FROM StringIds")
            if isinstance(low, int) and low < 0:   # -1 would be an id, not "no textId"
                return None
        ids = np.where((own_group < 0) & has_ids, tid_, -1)
        id_keys, code = np.unique(ids, return_inverse=True)
        keys: list = [None if k == -1 else k for k in id_keys.tolist()]
        code = code.astype(np.int64).reshape(-1)
        own = own_group >= 0
        code[own] = own_group[own] + len(keys)
        keys += own_texts

        def scrub_decoded(want: set[int]) -> dict[int, object]:
            try:
                with _scrub_decoding(self.con):
                    return string_values(self.con, want)
            except sqlite3.DatabaseError as exc:
                raise BadInputError(self.path, f"corrupt or unreadable export ({exc})") from None

        return adjacent_pairs(rid, g, np.where((flag & 4) != 0, 0, start), code, keys, scrub_decoded)

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
        cond = f" AND ({where})" if where else ""
        agg = ", ".join(f"group_concat(ifnull({e}, -1))" for e in exprs)
        sql = f'SELECT count(*), {agg} FROM {qi(table)} WHERE rowid BETWEEN ? AND ?{cond}'
        plain = f'SELECT {", ".join(exprs)} FROM {qi(table)} WHERE rowid BETWEEN ? AND ?{cond}'
        windows = rowid_windows(self.con, qi(table), chunk_rows)
        while True:
            try:
                window = next(windows, None)
                if window is None:
                    return
                args = (*window, *params)
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


def string_values(con: sqlite3.Connection, ids: "set[int]", schema: str = "main") -> dict[int, object]:
    """The StringIds values (as stored: text, blob or None) of `ids`, read in chunks of bound
    parameters (SQLite allows 999 a statement); unknown ids are left out. The one lookup of names
    by id: the summarizer's, the NVTX read's and the split-value scan's."""
    out: dict[int, object] = {}
    ordered = sorted(ids)
    for k in range(0, len(ordered), 900):
        part = ordered[k:k + 900]
        out.update(con.execute(f'SELECT id, value FROM {schema}."StringIds" WHERE id IN ({",".join("?" * len(part))})',
                               part).fetchall())
    return out


@contextmanager
def _scrub_decoding(con: sqlite3.Connection) -> Iterator[None]:
    """Cells decoded as the scrub decodes them (invalid UTF-8 kept as surrogates), for the texts the
    split-value scan judges: they must be the strings it would read itself (`scrub.sqlite.reading`)."""
    factory = con.text_factory
    if factory is decode_text:   # opened for the scrub: nothing to swap
        yield
        return
    con.text_factory = decode_text
    try:
        yield
    finally:
        con.text_factory = factory


def _unencodable(text: str) -> bool:
    """True for a text holding lone surrogates (its bytes were not UTF-8)."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return True
    return False


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
