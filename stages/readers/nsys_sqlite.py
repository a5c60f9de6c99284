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

import os
import sqlite3
import threading
import warnings
from collections import deque
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from itertools import islice
from pathlib import Path
from typing import Iterator, Sequence

import numpy as np

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

# NVTX_EVENTS.eventType values (stable across nsys 2020-2025).
NVTX_PUSHPOP = 59
NVTX_STARTEND = 60
NVTXT_PUSHPOP = 70
NVTXT_STARTEND = 71
NVTX_DOMAIN_CREATE = 75
RANGE_EVENT_TYPES = (NVTX_PUSHPOP, NVTX_STARTEND, NVTXT_PUSHPOP, NVTXT_STARTEND)

TID_MASK = 0xFFFFFF          # globalTid bits 0-23: thread id
PID_SHIFT = 24               # globalTid/globalPid bits 24-47: process id (48-63: VM id)

# cudaMemcpyKind ids when the export has no ENUM_CUDA_MEMCPY_OPER table (CUPTI's values).
_DEFAULT_COPY_KINDS = {1: "h2d", 2: "d2h", 8: "d2d", 10: "d2d", 13: "d2d", 11: "h2d", 12: "d2h"}
_COPY_KIND_BY_ENUM = {"HTOD": "h2d", "DTOH": "d2h", "DTOD": "d2d", "PTOP": "d2d",
                      "UVM_HTOD": "h2d", "UVM_DTOH": "d2h", "UVM_DTOD": "d2d"}

CHUNK_ROWS = 1 << 18
# Threads fetching rowid windows ahead (SQLite scans without the GIL). Off by default: on the
# shared 2-core machine it was measured slower (10.1-11.2 s vs 12.8-14.0 s at 1 GB) because the
# pipeline already runs one export per core; VERLPROF_SQLITE_THREADS=2 turns it on.
FETCH_WORKERS = max(1, int(os.environ.get("VERLPROF_SQLITE_THREADS", "1") or 1))


def pid_of_gtid(gtid: "np.ndarray | int") -> "np.ndarray | int":
    """The OS process id inside a globalTid / globalPid."""
    return (gtid >> PID_SHIFT) & TID_MASK


def tid_of_gtid(gtid: "np.ndarray | int") -> "np.ndarray | int":
    """The OS thread id inside a globalTid."""
    return gtid & TID_MASK


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

    def __len__(self) -> int:
        return int(self.start.size)

    @property
    def pid(self) -> np.ndarray:
        return pid_of_gtid(self.gtid)

    def full_name(self, i: int) -> str:
        """`domain:text` like NVIDIA's reports (`text` alone in the default domain)."""
        d = self.domain[i]
        return f"{d}:{self.text[i]}" if d else self.text[i]

    def style(self, i: int) -> str:
        return "PushPop" if int(self.event_type[i]) in (NVTX_PUSHPOP, NVTXT_PUSHPOP) else "StartEnd"


@dataclass
class NsysExport:
    """An open, read-only nsys SQLite export whose tables and columns have been probed."""

    path: Path
    con: sqlite3.Connection
    tables: frozenset[str]
    nsys_version: str | None = None
    schema_version: str | None = None
    _columns: dict[str, tuple[str, ...]] = field(default_factory=dict)

    # -- opening and probing -----------------------------------------------------------------

    @classmethod
    def open(cls, path: str | Path) -> "NsysExport":
        """Validate and open `path` read-only; BadInputError (one line, names the file) if it is not an export."""
        p = Path(path)
        con, info = open_export(p)
        exp = cls(p, con, frozenset(info.tables), info.nsys_version, info.schema_version)
        if NVTX not in exp.tables and KERNEL not in exp.tables and RUNTIME not in exp.tables:
            con.close()
            raise BadInputError(p, "an nsys export without NVTX_EVENTS or CUDA tables: nothing to summarize")
        return exp

    def close(self) -> None:
        self.con.close()

    def __enter__(self) -> "NsysExport":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def has(self, table: str, *columns: str) -> bool:
        """True when `table` exists and has every column in `columns`."""
        if table not in self.tables:
            return False
        cols = self.columns(table)
        return all(c in cols for c in columns)

    def columns(self, table: str) -> tuple[str, ...]:
        if table not in self._columns:
            rows = self.query(f'PRAGMA table_info("{table}")')
            self._columns[table] = tuple(r[1] for r in rows)
        return self._columns[table]

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

    def session_start_ns(self) -> int | None:
        """UTC ns since the epoch of the session's time 0 (each capture-range file has its own)."""
        if not self.has(SESSION_START, "utcEpochNs"):
            return None
        v = self.scalar(f"SELECT utcEpochNs FROM {SESSION_START} LIMIT 1")
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

    def process_names(self) -> dict[int, str]:
        """OS pid -> process name (PROCESSES), for display only."""
        if not self.has("PROCESSES", "pid", "name"):
            return {}
        return {int(p): str(n) for p, n in self.query("SELECT pid, name FROM PROCESSES") if p is not None}

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
        """Every NVTX range with its text resolved (`text` column or StringIds via `textId`)."""
        empty = NvtxRanges(*(np.zeros(0, np.int64) for _ in range(4)), np.zeros(0, bool),
                           np.zeros(0, np.int64), [], [])
        if not self.has(NVTX, "start", "eventType"):
            return empty
        cols = self.columns(NVTX)
        end = "end" if "end" in cols else "NULL"
        gtid = "globalTid" if "globalTid" in cols else "0"
        end_gtid = "endGlobalTid" if "endGlobalTid" in cols else "NULL"
        text = "text" if "text" in cols else "NULL"
        text_id = "textId" if "textId" in cols else "NULL"
        domain = "domainId" if "domainId" in cols else "0"
        types = ",".join(str(t) for t in RANGE_EVENT_TYPES)
        rows = self.query(
            f"SELECT rowid, start, {end}, eventType, {gtid}, {end_gtid}, {text}, {text_id}, {domain} "
            f"FROM {NVTX} WHERE eventType IN ({types}) AND start IS NOT NULL")
        if not rows:
            return empty
        maxts = self.scalar(f"SELECT max(max(ifnull(start, 0)), max(ifnull({end}, 0))) FROM {NVTX}") or 0
        domains: dict[tuple[int, int], str] = {}
        for dom, g, t, tid_ in self.query(
                f"SELECT {domain}, {gtid}, {text}, {text_id} FROM {NVTX} WHERE eventType = {NVTX_DOMAIN_CREATE}"):
            name = t if t is not None else None
            if name is None and tid_ is not None:
                name = self.strings([int(tid_)]).get(int(tid_))
            if dom is not None and name:
                domains[(int(dom), int(g or 0) >> PID_SHIFT)] = str(name)
        sids = self.strings([r[7] for r in rows if r[6] is None and r[7] is not None])
        n = len(rows)
        start = np.empty(n, np.int64)
        endv = np.empty(n, np.int64)
        g_arr = np.empty(n, np.int64)
        et = np.empty(n, np.int64)
        same = np.empty(n, bool)
        rid = np.empty(n, np.int64)
        texts: list[str] = []
        doms: list[str | None] = []
        for i, (rowid, s, e, typ, g, eg, t, tid_, dom) in enumerate(rows):
            rid[i] = rowid
            start[i] = int(s)
            endv[i] = int(e) if e is not None else int(maxts)
            g = int(g or 0)
            g_arr[i] = g
            et[i] = int(typ)
            same[i] = eg is None or int(eg) == g
            texts.append(str(t) if t is not None else sids.get(int(tid_), "") if tid_ is not None else "")
            doms.append(domains.get((int(dom), g >> PID_SHIFT)) if dom else None)
        order = np.lexsort((rid, -endv, start, g_arr))
        return NvtxRanges(start[order], endv[order], g_arr[order], et[order], same[order], rid[order],
                          [texts[i] for i in order], [doms[i] for i in order])

    # -- streaming big tables --------------------------------------------------------------------

    def iter_columns(self, table: str, exprs: Sequence[str], where: str = "", params: Sequence[object] = (),
                     chunk_rows: int = CHUNK_ROWS, workers: int | None = None) -> Iterator[list[np.ndarray]]:
        """Yield int64 arrays, one per SQL expression, for successive rowid windows of `table`.

        NULLs become -1 (wrap an expression in `ifnull` to choose otherwise). Each window is
        aggregated by SQLite into one string per column and parsed by numpy; a window holding
        values numpy cannot parse as integers (REAL, text) is fetched row by row instead.
        With `workers` > 1 (default `FETCH_WORKERS`, i.e. 1), windows are fetched ahead by threads with
        their own read-only connections (SQLite releases the GIL while it scans) and yielded in
        order; at most workers + 1 windows are in flight, so memory stays bounded.
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
        starts = range(int(lo), int(hi) + 1, chunk_rows)
        n_workers = FETCH_WORKERS if workers is None else workers

        def fetch(con: sqlite3.Connection, a: int) -> list[np.ndarray] | None:
            args = (a, a + chunk_rows, *params)
            try:
                row = con.execute(sql, args).fetchone()
            except sqlite3.DatabaseError as exc:
                raise BadInputError(self.path, f"corrupt or unreadable export ({exc})") from None
            n = int(row[0])
            if n == 0:
                return None
            try:
                return [_parse_ints(v, n) for v in row[1:]]
            except ValueError:
                return self._slow_chunk(con, table, plain, args, len(exprs))

        if n_workers <= 1 or len(starts) < 3:
            for a in starts:
                got = fetch(self.con, a)
                if got is not None:
                    yield got
            return
        yield from self._fetch_ahead(fetch, starts, n_workers)

    def _fetch_ahead(self, fetch, starts: range, n_workers: int) -> Iterator[list[np.ndarray]]:
        """Run `fetch(con, start)` on worker threads (one connection each), yield results in order."""
        local = threading.local()
        cons: list[sqlite3.Connection] = []
        lock = threading.Lock()

        def job(a: int) -> list[np.ndarray] | None:
            con = getattr(local, "con", None)
            if con is None:
                con = local.con = _connect_shared(self.path)
                with lock:
                    cons.append(con)
            return fetch(con, a)

        pool = ThreadPoolExecutor(max_workers=n_workers, thread_name_prefix="verlprof-sqlite")
        try:
            it = iter(starts)
            pending: deque = deque(pool.submit(job, a) for a in islice(it, n_workers + 1))
            while pending:
                got = pending.popleft().result()
                nxt = next(it, None)
                if nxt is not None:
                    pending.append(pool.submit(job, nxt))
                if got is not None:
                    yield got
        finally:
            pool.shutdown(wait=True, cancel_futures=True)
            for con in cons:
                con.close()

    def _slow_chunk(self, con: sqlite3.Connection, table: str, sql: str, args: Sequence[object],
                    ncols: int) -> list[np.ndarray]:
        try:
            rows = con.execute(sql, tuple(args)).fetchall()
        except sqlite3.DatabaseError as exc:
            raise BadInputError(self.path, f"corrupt or unreadable export ({exc})") from None
        try:
            arr = np.array([[(-1 if v is None else v) for v in r] for r in rows], dtype=np.float64)
        except (TypeError, ValueError):
            raise BadInputError(self.path, f"table {table} holds non-numeric values where numbers belong") from None
        arr = arr.reshape(len(rows), ncols)
        return [arr[:, j].astype(np.int64) for j in range(ncols)]


def _connect_shared(path: Path) -> sqlite3.Connection:
    """A read-only, immutable connection a worker thread opens and the caller's thread closes."""
    from urllib.parse import quote

    uri = f"file:{quote(str(Path(path).absolute()), safe='/')}?mode=ro&immutable=1"
    return sqlite3.connect(uri, uri=True, check_same_thread=False)


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
