"""Convert an nsys SQLite export (or a window of one) to Chrome trace JSON that Perfetto opens.

Why: a colleague without Nsight Systems should still see the step: NVTX ranges and CUDA API calls
per thread, kernels, copies and memsets per device and stream, with their names, and arrows from
each launch to what it launched. Rows are read with SQL cursors and written as they come, so memory
does not grow with the export.

Clock: `ts` is absolute UTC microseconds (`(utcEpochNs + t) / 1000`), so the traces of several ranks
(each with its own session start) line up when opened side by side. Values are written as exact
decimals with three digits (ns), e.g. `1796202047481227.955`; note that a JSON reader parsing them as
IEEE doubles rounds to ~0.25 us at this magnitude, while `dur` (small numbers) stays exact.

Tracks:
- CPU: `pid` = OS pid, `tid` = OS tid (from globalPid/globalTid); names from `PROCESSES` and
  `ThreadNames`. Categories `nvtx`, `cuda_runtime`, `cuda_driver`.
- GPU: one process per (device, profiled process), `pid` = (deviceId + 1) * 2**24 + OS pid (never
  an OS pid), named `GPU <d>`; `tid` = CUDA stream id, named `stream <id>`. Categories `kernel`,
  `gpu_memcpy`, `gpu_memset`; `args.correlation` links each to its API call, as in torch traces.
- Flows (`ph` s/f, category `ac2g`, like torch): API call -> kernel/copy/memset, when both are in
  the file.
"""
from __future__ import annotations

import sqlite3
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterator

import numpy as np

from ..core.atomic import atomic_path, temp_sibling
from ..core.errors import BadInputError, VerlprofError
from ..readers.json_codec import dumps
from ..readers.nsys_sqlite import PID_DIV, PID_SHIFT, NsysExport, TableInfo, in_list, tid_of_gtid
from ..readers.sqlite_export import quote_ident as qi
from .jsonout import ChromeTraceWriter
from .nsys_window import window_nsys_sqlite

API_TABLES = ("CUPTI_ACTIVITY_KIND_RUNTIME", "CUPTI_ACTIVITY_KIND_DRIVER")
GPU_TABLES = {
    "CUPTI_ACTIVITY_KIND_KERNEL": "kernel",
    "CUPTI_ACTIVITY_KIND_MEMCPY": "gpu_memcpy",
    "CUPTI_ACTIVITY_KIND_MEMSET": "gpu_memset",
}


@dataclass(frozen=True)
class ChromeCounts:
    """Events written per category (`nvtx`, `cuda_runtime`, ..., `flow`, `metadata`) and file size."""

    events: dict[str, int] = field(default_factory=dict)
    clamped: int = 0          # events whose end lay before their start (written with dur 0)
    size: int = 0

    @property
    def total(self) -> int:
        return sum(self.events.values())


def nsys_sqlite_to_chrome(src: Path, dst_json_gz: Path, start_ns_abs: int | None = None,
                          end_ns_abs: int | None = None, *, flows: bool = True) -> ChromeCounts:
    """Write export `src` (or its window [start_ns_abs, end_ns_abs], UTC ns) as Chrome JSON (gzip).

    With a window, the rows are chosen exactly as `window_nsys_sqlite` chooses them (it is run into
    a temp file beside `dst_json_gz` first), so the SQLite and the JSON of a window always agree.
    """
    src, dst = Path(src), Path(dst_json_gz)
    if (start_ns_abs is None) != (end_ns_abs is None):
        raise VerlprofError(src, "give both window bounds or neither")
    if start_ns_abs is not None and end_ns_abs is not None:
        dst.parent.mkdir(parents=True, exist_ok=True)
        part = temp_sibling(dst.with_name(dst.name + ".window.sqlite"))
        try:
            window_nsys_sqlite(src, part, start_ns_abs, end_ns_abs)
            return nsys_sqlite_to_chrome(part, dst, flows=flows)
        finally:
            part.unlink(missing_ok=True)
    with NsysExport.open(src, need_events=False) as db, atomic_path(dst) as tmp:
        try:
            counts = _convert(db, tmp, flows)
        except sqlite3.DatabaseError as exc:
            raise BadInputError(src, f"corrupt export, reading its rows failed ({exc})") from None
    return ChromeCounts(counts.events, counts.clamped, dst.stat().st_size)


def us(ns: int) -> str:
    """Exact decimal microseconds of integer ns (no float rounding): 1234567 -> '1234.567'."""
    sign = "-" if ns < 0 else ""
    q, r = divmod(abs(int(ns)), 1000)
    return f"{sign}{q}.{r:03d}"


def _js(value: object) -> str:
    return dumps(value).decode()


# Rows are formatted into event JSON by SQLite itself and fetched in batches, not by a Python call
# per row (issue 25: 10^6 ranges). The SQL below writes
# exactly what `us`, `_js` (SQLite's json_quote escapes as orjson does) and the f-strings wrote
# before, so the files are byte-for-byte the same.
_BATCH = 4096
CHROME_GZIP_LEVEL = 1    # ISA-L: 1/12 of zlib level 6's CPU for 11% more bytes on range-heavy windows (jsonout.py)
_MASK = PID_DIV - 1


def _us_sql(v: str) -> str:
    """SQL of `us(v)` for an integer-ns SQL expression `v`."""
    return (f"(CASE WHEN ({v}) < 0 THEN '-' || printf('%d.%03d', -({v}) / 1000, -({v}) % 1000) "
            f"ELSE printf('%d.%03d', ({v}) / 1000, ({v}) % 1000) END)")


def _pid_sql(g: str) -> str:
    return f"((({g}) >> {PID_SHIFT}) & {_MASK})"


def _tid_sql(g: str) -> str:
    return f"(({g}) & {_MASK})"


def _args_sql(always: list[tuple[str, str]], maybe: list[tuple[str, str]]) -> str:
    """SQL of the `,"args":{...}` suffix: `always` pairs (key, value SQL) are written as they are,
    `maybe` pairs only where their value is not NULL (the Python writer left out None values); with
    no `always` pair and a NULL `maybe` value the suffix is ''."""
    if always:
        body = " || ',' || ".join(f"""'"{k}":' || ({v})""" for k, v in always)
        body += "".join(f""" || coalesce(',"{k}":' || ({v}), '')""" for k, v in maybe)
        return f"""(',"args":{{' || {body} || '}}')"""
    (k, v), = maybe
    return f"""coalesce(',"args":{{"{k}":' || ({v}) || '}}', '')"""


def _event_sql(cat: str, name: str, pid: str, tid: str, start: str, end: str, args: str) -> str:
    """SQL of the columns (event JSON text, clamped 0/1, category) of one row: a complete event
    ("X"), or an instant ("i") where `end` is NULL; `dur` is clamped to 0 where end < start."""
    common = (f"""'","name":' || json_quote({name}) || ',"pid":' || ({pid}) || ',"tid":' || ({tid}) """
              f"""|| ',"ts":' || {_us_sql(f':epoch + ({start})')}""")
    dur = _us_sql(f"CASE WHEN ({end}) < ({start}) THEN 0 ELSE ({end}) - ({start}) END")
    return (f"""CASE WHEN {end} IS NULL THEN '{{"ph":"i","s":"t","cat":"' || {cat} || {common} || {args} || '}}' """
            f"""ELSE '{{"ph":"X","cat":"' || {cat} || {common} || ',"dur":' || {dur} || {args} || '}}' END, """
            f"CASE WHEN ({end}) < ({start}) THEN 1 ELSE 0 END, {cat}")


def _case_sql(expr: str, mapping: dict[int, str], params: dict[str, object], prefix: str) -> str:
    """SQL `CASE expr WHEN k THEN v ... END` (NULL when no key matches), values bound as params."""
    if not mapping:
        return "NULL"
    whens = []
    for i, (k, v) in enumerate(sorted(mapping.items())):
        params[f"{prefix}k{i}"], params[f"{prefix}v{i}"] = k, v
        whens.append(f"WHEN :{prefix}k{i} THEN :{prefix}v{i}")
    return f"(CASE {expr} {' '.join(whens)} END)"


class _Emitter:
    """Writes events, counts them per category, and remembers which tracks need names."""

    def __init__(self, writer: ChromeTraceWriter, epoch: int) -> None:
        self.w = writer
        self.epoch = epoch
        self.counts: Counter[str] = Counter()
        self.clamped = 0
        self.threads: set[tuple[int, int]] = set()          # (globalPid key, tid)
        self.gpus: set[tuple[int, int, int]] = set()        # (device, pid, stream)

    def rows(self, con: sqlite3.Connection, q: str, params: dict[str, object]) -> None:
        """Stream the rows of `q` ((event JSON, clamped, category) each, see `_event_sql`)."""
        cur = con.execute(q, {"epoch": self.epoch, **params})
        while batch := cur.fetchmany(_BATCH):
            self.w.write_joined([r[0].encode() for r in batch])
            self.clamped += sum(r[1] for r in batch)
            self.counts.update(r[2] for r in batch)

    def add_threads(self, con: sqlite3.Connection, q: str) -> None:
        """Note the (process, thread) tracks of the globalTids `q` selects."""
        for (gtid,) in con.execute(q):
            self.threads.add((gtid // PID_DIV, tid_of_gtid(gtid)))

    def meta(self, what: str, pid: int, tid: int, args: dict[str, object]) -> None:
        self.w.write((f'{{"ph":"M","name":"{what}","pid":{pid},"tid":{tid},"ts":{us(self.epoch)},'
                      f'"args":{_js(args)}}}').encode())
        self.counts["metadata"] += 1


def gpu_pid(device: int, pid: int) -> int:
    """The Chrome pid of one device as seen by one process: never equal to an OS pid."""
    return ((int(device) + 1) << PID_SHIFT) + int(pid)


def _convert(db: NsysExport, tmp: Path, flows: bool) -> ChromeCounts:
    con, tables = db.con, db.tables
    epoch = db.session_start_ns(required=True)
    header = {"displayTimeUnit": "ns",
              "otherData": {"producer": "verlprof", "clock": "UTC epoch microseconds"}}
    with ChromeTraceWriter(tmp, header, compresslevel=CHROME_GZIP_LEVEL) as writer:
        em = _Emitter(writer, epoch)
        _nvtx(db, em)
        _api(con, tables, em)
        _gpu(con, tables, em)
        if flows:
            _flows(con, tables, em)
        _names(con, tables, em)
    return ChromeCounts(dict(em.counts), em.clamped)


def _string_join(t: TableInfo, col: str, alias: str) -> tuple[str, str]:
    """(select expr, join clause) giving the StringIds value of `col`, or NULL without one."""
    if not t.has(col):
        return "NULL", ""
    return f"{alias}.value", f" LEFT JOIN StringIds {alias} ON {alias}.id = x.{qi(col)}"


def _nvtx(db: NsysExport, em: _Emitter) -> None:
    """NVTX ranges (complete events) and marks or open ranges (instants), in rowid order.

    Why not formatted in SQL like the other tables: a range-heavy window holds 10^5-10^6 ranges
    of a few hundred names, and per-row `json_quote`, `printf` and the StringIds join are most of
    SQLite's time (issue 25). Here the numbers are read as columns (`iter_columns`), each
    distinct name and domain is quoted once (by SQLite's own `json_quote`, so the bytes are those
    the SQL wrote), and the events are assembled by numpy (`_NvtxBatch`): the same events, byte
    for byte, with no Python object per event."""
    con, t = db.con, db.tables.get("NVTX_EVENTS")
    if t is None or not t.has("start", "globalTid"):
        return
    types = db.nvtx_types
    where = f'eventType IN {in_list(types.ranges + types.marks)}' if t.has("eventType") else "1"
    where += ' AND globalTid IS NOT NULL'
    open_sql = '"end" IS NULL' if t.has("end") else "1"
    own_sql = "text IS NOT NULL" if t.has("text") else "0"
    exprs = ["rowid", "start", f"({open_sql}) + 2 * ({own_sql})", 'ifnull("end", 0)' if t.has("end") else "0",
             "globalTid", "textId" if t.has("textId") else "NULL", "ifnull(domainId, 0)" if t.has("domainId") else "0"]
    dom_names: dict[int, str] | None = None   # read at the first range of a domain (a scan of the table)
    quoted: dict[int, str] = {}          # textId -> its quoted name
    dom_args: dict[int, str] = {0: ""}   # domainId -> the event's args suffix
    seen: set[int] = set()
    for rid, start, flags, end, g, tid_, dom in db.iter_columns("NVTX_EVENTS", exprs, where):
        ids, name_at = np.unique(tid_, return_inverse=True)
        new = sorted(set(ids.tolist()) - quoted.keys())
        quoted.update({i: '"(unnamed)"' for i in new})
        for k in range(0, len(new), 900):
            part = new[k:k + 900]
            quoted.update({int(i): q for i, q in con.execute(
                f"SELECT id, json_quote(value) FROM StringIds WHERE id IN ({','.join('?' * len(part))}) "
                f"AND value IS NOT NULL", part)})
        names = [quoted[i] for i in ids.tolist()]
        own = (flags & 2) != 0
        if own.any():   # unregistered strings: the text in its own column wins
            at = np.flatnonzero(own)
            mine = dict(con.execute(f'SELECT rowid, json_quote(text) FROM NVTX_EVENTS WHERE rowid IN '
                                    f'({",".join(map(str, rid[at].tolist()))})'))
            index = {q: i for i, q in enumerate(dict.fromkeys(mine[r] for r in rid[at].tolist()), len(names))}
            name_at[at] = [index[mine[r]] for r in rid[at].tolist()]
            names += list(index)
        for d in set(np.unique(dom).tolist()) - dom_args.keys():
            if dom_names is None:
                dom_names = _nvtx_domains(con, t, db.nvtx_types.definitions)
            q = con.execute("SELECT json_quote(?)", (dom_names.get(d, str(d)),)).fetchone()[0]
            dom_args[d] = f',"args":{{"domain":{q}}}'
        batch = _NvtxBatch(em.epoch + start, start, end, (flags & 1) != 0, g, names, name_at, dom, dom_args)
        em.w.write_joined([batch.json()], rid.size)
        em.clamped += batch.clamped
        em.counts["nvtx"] += rid.size
        seen.update(np.unique(g).tolist())
    for gtid in seen:
        em.threads.add((gtid // PID_DIV, tid_of_gtid(gtid)))


class _NvtxBatch:
    """The Chrome events of one batch of NVTX rows, built as a byte matrix: one row per event,
    its parts in fixed columns and padded with NUL bytes, which are dropped at the end.

    Why: formatting 10^5-10^6 events one by one in Python costs a call each (issue 25). An event is
    `head` (`{"ph":..,"name":..,"pid":..,"tid":..,"ts":` and the sign), which depends only on
    (name, thread, instant, sign): one per distinct combination, quoted and formatted once; the
    digits of `ts` and `dur` (microseconds with three decimals, `us`), made column by column
    with integer arithmetic; and `tail` (`,"args":{"domain":..}}`), one per domain. A NUL byte
    never occurs in the parts (names and domains come from `json_quote`, which escapes every
    control character), so dropping the NULs leaves exactly each event's JSON: `us` for the
    numbers, as the other tables' SQL writes them (tests/test_traces_chrome_rows.py)."""

    _ROWS_BYTES = 1 << 23     # at most ~8 MiB of matrix at a time

    def __init__(self, ts: np.ndarray, start: np.ndarray, end: np.ndarray, instant: np.ndarray,
                 g: np.ndarray, names: list[str], name_at: np.ndarray, dom: np.ndarray,
                 dom_args: dict[int, str]) -> None:
        clamp = (end < start) & ~instant
        self.clamped = int(clamp.sum())
        neg = ts < 0
        doms, dom_at = np.unique(dom, return_inverse=True)
        gs, g_at = np.unique(g, return_inverse=True)
        key = ((name_at.astype(np.int64) * gs.size + g_at) * 2 + instant) * 2 + neg
        keys, self.head_at = np.unique(key, return_inverse=True)
        heads = []
        for k in keys.tolist():
            rest, sign = divmod(k, 2)
            rest, inst = divmod(rest, 2)
            n, gi = divmod(rest, gs.size)
            gv = int(gs[gi])
            ph = '"ph":"i","s":"t"' if inst else '"ph":"X"'
            heads.append(f'{{{ph},"cat":"nvtx","name":{names[n]},"pid":{(gv >> PID_SHIFT) & _MASK},'
                         f'"tid":{gv & _MASK},"ts":{"-" if sign else ""}'.encode())
        self.heads = heads
        self.tails = _padded([(dom_args[d] + "}").encode() for d in doms.tolist()])
        self.tail_at = dom_at
        self.ts = _us_digits(np.abs(ts))
        dur = _us_digits(np.where(clamp | instant, 0, end - start))
        dur_part = np.zeros((dur.shape[0], 7 + dur.shape[1]), np.uint8)
        dur_part[:, :7] = np.frombuffer(b',"dur":', np.uint8)
        dur_part[:, 7:] = dur
        dur_part[instant] = 0                     # an instant has no dur
        self.dur = dur_part

    def json(self) -> bytes:
        """The events, each followed by a comma and a newline but the last.

        Rows are assembled a few MiB at a time, each slice with only its own heads padded to the
        longest of them, so one very long name costs time, never memory."""
        parts = []
        n = self.head_at.size
        rest = self.ts.shape[1] + self.dur.shape[1] + self.tails.shape[1] + 2
        step = max(1, self._ROWS_BYTES // (max(map(len, self.heads)) + rest))
        for a in range(0, n, step):
            b = min(n, a + step)
            used, at = np.unique(self.head_at[a:b], return_inverse=True)
            heads = _padded([self.heads[i] for i in used.tolist()])
            m = np.empty((b - a, heads.shape[1] + rest), np.uint8)
            c = 0
            for block in (heads[at], self.ts[a:b], self.dur[a:b], self.tails[self.tail_at[a:b]]):
                m[:, c:c + block.shape[1]] = block
                c += block.shape[1]
            m[:, c:] = np.frombuffer(b",\n", np.uint8)
            parts.append(m[m != 0].tobytes())
        return b"".join(parts)[:-2]


def _padded(items: list[bytes]) -> np.ndarray:
    """A (len(items), longest) uint8 matrix of `items`, each padded with NUL bytes."""
    width = max(map(len, items))
    return np.array(items, dtype=f"S{width}").view(np.uint8).reshape(len(items), width)


def _us_digits(ns: np.ndarray) -> np.ndarray:
    """`us(v)` of each v >= 0 as a uint8 matrix row: the digits right-aligned behind NUL padding,
    with the decimal point before the last three (at least `0.000`)."""
    top = int(ns.max()) if ns.size else 0
    width = max(4, len(str(top)))
    out = np.zeros((ns.size, width + 1), np.uint8)
    p = 1
    for j in range(width - 1, -1, -1):
        col = j + 1 if j >= width - 3 else j
        digit = (ns // p) % 10 + 48
        if width - j > 4:
            digit[ns < p] = 0                     # no leading zeros, but 0.000 keeps its four
        out[:, col] = digit
        p *= 10
    out[:, width - 3] = ord(".")
    return out


def _nvtx_domains(con: sqlite3.Connection, t: TableInfo, definitions: tuple[int, ...]) -> dict[int, str]:
    """domainId -> name, from the NvtxDomainCreate rows (few per report)."""
    if not t.has("domainId", "eventType", "textId"):
        return {}
    text = 'x."text"' if t.has("text") else "NULL"
    rows = con.execute(
        f'SELECT x."domainId", coalesce({text}, s.value) FROM NVTX_EVENTS x LEFT JOIN StringIds s '
        f'ON s.id = x."textId" WHERE x."eventType" IN {in_list(definitions)} AND x."domainId" != 0')
    return {int(d): str(n) for d, n in rows if d is not None and n is not None}


def _driver_classes(con: sqlite3.Connection, tables: dict[str, TableInfo]) -> set[int]:
    t = tables.get("ENUM_NSYS_EVENT_CLASS")
    if t is None or not t.has("id", "name"):
        return {1}
    return {int(i) for i, n in con.execute("SELECT id, name FROM ENUM_NSYS_EVENT_CLASS")
            if "DRIVER" in str(n).upper()}


def _api(con: sqlite3.Connection, tables: dict[str, TableInfo], em: _Emitter) -> None:
    drivers = _driver_classes(con, tables)
    for name in API_TABLES:
        t = tables.get(name)
        if t is None or not t.has("start", "end", "globalTid"):
            continue
        name_sel, join = _string_join(t, "nameId", "s")
        cls = 'x."eventClass"' if t.has("eventClass") else "NULL"
        corr = 'x."correlationId"' if t.has("correlationId") else "NULL"
        is_driver = "1" if name.endswith("DRIVER") else f"{cls} IN {in_list(tuple(sorted(drivers)))}"
        cat = f"(CASE WHEN {is_driver} THEN 'cuda_driver' ELSE 'cuda_runtime' END)"
        event = _event_sql(cat, f"coalesce({name_sel}, '(unknown API)')", _pid_sql('x."globalTid"'),
                           _tid_sql('x."globalTid"'), 'x."start"', 'x."end"', _args_sql([], [("correlation", corr)]))
        em.rows(con, f'SELECT {event} FROM {qi(name)} x{join} WHERE x."globalTid" IS NOT NULL', {})
        em.add_threads(con, f'SELECT DISTINCT "globalTid" FROM {qi(name)} WHERE "globalTid" IS NOT NULL')


def _memcpy_kinds(con: sqlite3.Connection, tables: dict[str, TableInfo]) -> dict[int, str]:
    t = tables.get("ENUM_CUDA_MEMCPY_OPER")
    if t is None or not t.has("id"):
        return {}
    label = "label" if t.has("label") else "name"
    return {int(i): str(v) for i, v in con.execute(f'SELECT id, {qi(label)} FROM ENUM_CUDA_MEMCPY_OPER')}


def _gpu(con: sqlite3.Connection, tables: dict[str, TableInfo], em: _Emitter) -> None:
    kinds = _memcpy_kinds(con, tables)
    for name, cat in GPU_TABLES.items():
        t = tables.get(name)
        if t is None or not t.has("start", "end", "deviceId", "streamId"):
            continue
        gp = 'x."globalPid"' if t.has("globalPid") else "0"
        corr = 'x."correlationId"' if t.has("correlationId") else "NULL"
        params: dict[str, object] = {}
        join = ""
        if cat == "kernel":
            col = next((c for c in ("demangledName", "shortName", "mangledName") if t.has(c)), "")
            label, join = _string_join(t, col, "s") if col else ("NULL", "")
            title = f"coalesce({label}, '(unnamed kernel)')"
        elif cat == "gpu_memcpy":
            kind = _case_sql('x."copyKind"', kinds, params, "k") if t.has("copyKind") else "NULL"
            title = f"'Memcpy ' || coalesce({kind}, 'Unknown')"
        else:
            title = "'Memset'"
        nbytes = 'x."bytes"' if t.has("bytes") else "NULL"
        pid = f"coalesce({_pid_sql(gp)}, 0)"
        args = _args_sql([("device", 'x."deviceId"'), ("stream", 'x."streamId"')],
                         [("correlation", corr), ("bytes", nbytes)])
        event = _event_sql(f"'{cat}'", title, f"((x.\"deviceId\" + 1) << {PID_SHIFT}) + {pid}", 'x."streamId"',
                           'x."start"', 'x."end"', args)
        em.rows(con, f'SELECT {event} FROM {qi(name)} x{join}', params)
        for dev, p, stream in con.execute(f'SELECT DISTINCT x."deviceId", {pid}, x."streamId" FROM {qi(name)} x'):
            em.gpus.add((dev, p, stream))


def _flows(con: sqlite3.Connection, tables: dict[str, TableInfo], em: _Emitter) -> None:
    """One arrow per (API call, GPU activity) pair sharing a correlationId within a process."""
    fid = 0
    for api_name in API_TABLES:
        a = tables.get(api_name)
        if a is None or not a.has("start", "globalTid", "correlationId"):
            continue
        for gpu_name in GPU_TABLES:
            g = tables.get(gpu_name)
            if g is None or not g.has("start", "deviceId", "streamId", "correlationId", "globalPid"):
                continue
            gpid = f'(((g."deviceId" + 1) << {PID_SHIFT}) + ' + _pid_sql('g."globalPid"') + ')'
            s_rest = (f"""',"cat":"ac2g","name":"ac2g","pid":' || {_pid_sql('a."globalTid"')} || ',"tid":' """
                      f"""|| {_tid_sql('a."globalTid"')} || ',"ts":' || {_us_sql(':epoch + a."start"')} || '}}'""")
            f_rest = (f"""',"cat":"ac2g","name":"ac2g","pid":' || {gpid} || ',"tid":' || g."streamId" """
                      f"""|| ',"ts":' || {_us_sql(':epoch + g."start"')} || '}}'""")
            q = (f'SELECT {s_rest}, {f_rest} '
                 f'FROM {qi(gpu_name)} g JOIN {qi(api_name)} a ON a."correlationId" = g."correlationId" '
                 f'AND a."globalTid" / {PID_DIV} = g."globalPid" / {PID_DIV} '
                 f'WHERE g."correlationId" IS NOT NULL AND a."globalTid" IS NOT NULL')
            cur = con.execute(q, {"epoch": em.epoch})
            while batch := cur.fetchmany(_BATCH):
                out = []
                for s_part, f_part in batch:
                    fid += 1
                    out.append(f'{{"ph":"s","id":{fid}{s_part},\n{{"ph":"f","bp":"e","id":{fid}{f_part}'.encode())
                em.w.write_joined(out, 2 * len(out))
                em.counts["flow"] += len(out)


def _names(con: sqlite3.Connection, tables: dict[str, TableInfo], em: _Emitter) -> None:
    """process_name / thread_name metadata for every track that got an event."""
    procs = _process_names(con, tables)
    threads = _thread_names(con, tables)
    for key in sorted({k for k, _ in em.threads}):
        pid = key & (PID_DIV - 1)
        em.meta("process_name", pid, 0, {"name": procs.get(key, f"process {pid}")})
        em.meta("process_sort_index", pid, 0, {"sort_index": pid})
    for key, tid in sorted(em.threads):
        pid = key & (PID_DIV - 1)
        if (key, tid) in threads:
            em.meta("thread_name", pid, tid, {"name": threads[(key, tid)]})
    for dev, pid, stream in sorted(em.gpus):
        gp = gpu_pid(dev, pid)
        em.meta("process_name", gp, 0, {"name": f"GPU {dev}"})
        em.meta("process_labels", gp, 0, {"labels": f"pid {pid}"})
        em.meta("process_sort_index", gp, 0, {"sort_index": gp})
        em.meta("thread_name", gp, stream, {"name": f"stream {stream}"})


def _process_names(con: sqlite3.Connection, tables: dict[str, TableInfo]) -> dict[int, str]:
    t = tables.get("PROCESSES")
    if t is None or not t.has("globalPid", "name"):
        return {}
    return {int(g) // PID_DIV: str(n) for g, n in _rows(con, 'SELECT "globalPid", "name" FROM PROCESSES')
            if g is not None and n}


def _thread_names(con: sqlite3.Connection, tables: dict[str, TableInfo]) -> dict[tuple[int, int], str]:
    t = tables.get("ThreadNames")
    if t is None or not t.has("globalTid", "nameId"):
        return {}
    q = 'SELECT x."globalTid", s.value FROM ThreadNames x JOIN StringIds s ON s.id = x."nameId"'
    return {(int(g) // PID_DIV, int(g) & (PID_DIV - 1)): str(n) for g, n in _rows(con, q)
            if g is not None and n}


def _rows(con: sqlite3.Connection, q: str) -> Iterator[tuple]:  # type: ignore[type-arg]
    yield from con.execute(q)
