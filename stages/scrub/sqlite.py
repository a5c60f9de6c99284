"""Scrub an nsys SQLite export: build a fresh database holding only what verlprof needs.

Why an allowlist and a fresh file: nsys exports hold the whole environment of the profiled process
and of nsys itself, command lines, captured stdout, the names of every process and thread on the
host, host and user names and GPU UUIDs, spread over dozens of tables and `StringIds`. Deleting
rows from a copy would leave them in free pages; editing in place would touch the input. Instead a
new database receives only the tables and columns in `SQLITE_ALLOWLIST` (probed per export: nsys
2022 and 2025 schemas differ), `StringIds` reduced to the ids the kept rows reference, and every
remaining text cell passes through the `Scrubber`. Rows are copied by SQLite itself
(`INSERT ... SELECT` across an attached read-only input); Python only sees text cells, through a
registered SQL function. The summarize stage relies on `SQLITE_ALLOWLIST` for what survives.
"""
from __future__ import annotations

import sqlite3
import urllib.parse
from collections import Counter
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable

from ..core.errors import BadInputError
from ..readers.nsys_sqlite import string_values
from ..readers.nvtx_pairs import Pair
from ..readers.sqlite_export import decode_text, list_tables, open_readonly, sqlite_uri, table_columns
from ..readers.sqlite_export import quote_ident as _q
from .provenance import Origin, origin_of
from .rules import KIND_GPU, KIND_SPLIT, REDACTED
from .scrubber import Scrubber
from .sqlite_cells import (ARGV_TABLE, argv_pair_findings, NVTX_TABLE, SPLIT_LOCATION, STRING_TABLE, is_numeric, iter_adjacent_nvtx, iter_distinct_cells,
                           numbers_only_sql, reading, split_halves)
from .sqlite_pages import numeric_cells_are_numbers



@dataclass(frozen=True)
class KeepTable:
    """One table that survives scrub, and how its columns are treated.

    Columns not listed anywhere are copied unchanged when numeric; any text or blob cell in any
    column passes through the scrubber regardless (a hostile export could put text anywhere).
    """

    name: str
    string_ids: tuple[str, ...] = ()     # columns referencing StringIds.id (kept ids)
    gpu_uuids: tuple[str, ...] = ()      # replaced by salted hashes
    drop: tuple[str, ...] = ()           # not copied at all
    nulled: tuple[str, ...] = ()         # kept for schema compatibility, always NULL
    rows: str = "all"                    # all | threads | processes | named | referenced (StringIds)
    names: tuple[str, ...] = ()          # rows == "named": values of the `name` column kept


_KERNEL_NAMES = ("demangledName", "shortName", "mangledName")

# The declared allowlist. Order matters only for readability; every table is optional.
SQLITE_ALLOWLIST: tuple[KeepTable, ...] = (
    KeepTable("CUPTI_ACTIVITY_KIND_KERNEL", string_ids=_KERNEL_NAMES),
    KeepTable("CUPTI_ACTIVITY_KIND_RUNTIME", string_ids=("nameId",)),
    KeepTable("CUPTI_ACTIVITY_KIND_DRIVER", string_ids=("nameId",)),
    KeepTable("CUPTI_ACTIVITY_KIND_MEMCPY"),
    KeepTable("CUPTI_ACTIVITY_KIND_MEMSET"),
    KeepTable("CUPTI_ACTIVITY_KIND_SYNCHRONIZATION"),
    KeepTable("CUPTI_ACTIVITY_KIND_CUDA_EVENT"),
    KeepTable("CUPTI_ACTIVITY_KIND_GRAPH_TRACE"),
    KeepTable("CUDA_GPU_MEMORY_USAGE_EVENTS"),
    KeepTable("CUBLAS_EVENTS", string_ids=("nameId",)),
    KeepTable("CUDNN_EVENTS", string_ids=("nameId",)),
    # NVTX: text/textId are phase names (scrubbed, so a secret inside a message is redacted while
    # `step`, `gen`, `update_actor` stay); domain names are rows of eventType 75 in this table.
    KeepTable("NVTX_EVENTS", string_ids=("textId", "jsonTextId"), nulled=("binaryData",)),
    KeepTable("OSRT_API", string_ids=("nameId",)),
    KeepTable("TARGET_INFO_SESSION_START_TIME", drop=("localTime",)),
    KeepTable("TARGET_INFO_GPU", gpu_uuids=("uuid",), drop=("ctxswDevPath", "ctrlDevPath")),
    KeepTable("TARGET_INFO_CUDA_DEVICE"),
    KeepTable("TARGET_INFO_CUDA_STREAM"),
    KeepTable("TARGET_INFO_CUDA_CONTEXT_INFO"),
    KeepTable("TARGET_INFO_SYSTEM_ENV", rows="named", names=(
        "CpuCores", "CpuArchitecture", "CpuDescription", "NvDriverVersion", "CudaDriverVersion",
        "OsDescription", "SoftwareReleaseVersion", "HardwarePlatform", "SoftwarePlatform")),
    KeepTable("ThreadNames", string_ids=("nameId",), rows="threads"),
    KeepTable("PROCESSES", rows="processes"),
    KeepTable("META_DATA_EXPORT", rows="named", names=(
        "EXPORT_PRODUCT_NAME", "EXPORT_PRODUCT_VERSION", "EXPORT_PRODUCT_DATE", "EXPORT_SCHEMA_VERSION",
        "EXPORT_SCHEMA_VERSION_MAJOR", "EXPORT_SCHEMA_VERSION_MINOR", "EXPORT_SCHEMA_VERSION_MICRO",
        "EXPORT_PLATFORM", "EXPORT_ARCH")),
    KeepTable("EXPORT_META_DATA", rows="named", names=(
        "EXPORT_PRODUCT_NAME", "EXPORT_PRODUCT_VERSION", "EXPORT_PRODUCT_DATE", "EXPORT_SCHEMA_VERSION",
        "EXPORT_SCHEMA_VERSION_MAJOR", "EXPORT_SCHEMA_VERSION_MINOR", "EXPORT_SCHEMA_VERSION_MICRO",
        "EXPORT_PLATFORM", "EXPORT_ARCH")),
)
# Enumerations (ids -> names of CUDA/NSYS constants): harmless, kept whole.
KEEP_PREFIXES: tuple[str, ...] = ("ENUM_",)

# Where thread and process ids come from: rows of ThreadNames/PROCESSES survive only for threads
# and processes that the kept activity references (not every kworker on the host).
_TID_SOURCES: tuple[tuple[str, str], ...] = (
    ("CUPTI_ACTIVITY_KIND_RUNTIME", "globalTid"), ("CUPTI_ACTIVITY_KIND_DRIVER", "globalTid"),
    ("NVTX_EVENTS", "globalTid"), ("NVTX_EVENTS", "endGlobalTid"), ("OSRT_API", "globalTid"),
    ("CUBLAS_EVENTS", "globalTid"), ("CUDNN_EVENTS", "globalTid"),
)
_PID_SOURCES: tuple[tuple[str, str], ...] = (
    ("CUPTI_ACTIVITY_KIND_KERNEL", "globalPid"), ("CUPTI_ACTIVITY_KIND_MEMCPY", "globalPid"),
    ("CUPTI_ACTIVITY_KIND_MEMSET", "globalPid"), ("CUPTI_ACTIVITY_KIND_SYNCHRONIZATION", "globalPid"),
    ("CUDA_GPU_MEMORY_USAGE_EVENTS", "globalPid"), ("CUPTI_ACTIVITY_KIND_CUDA_EVENT", "globalPid"),
)



def keep_spec(table: str) -> KeepTable | None:
    """The allowlist entry of `table`, or None when the table is dropped."""
    for spec in SQLITE_ALLOWLIST:
        if spec.name == table:
            return spec
    if table == STRING_TABLE:
        return KeepTable(table, rows="referenced")
    if table.startswith(KEEP_PREFIXES):
        return KeepTable(table)
    return None


# --------------------------------------------------------------------------------------------
# The scrub itself
# --------------------------------------------------------------------------------------------

@dataclass
class SqliteScrubStats:
    tables_kept: dict[str, int]
    tables_dropped: list[str]
    rows_filtered: dict[str, tuple[int, int]]   # table -> (kept, total)
    strings_kept: int
    strings_total: int
    columns_dropped: dict[str, list[str]]
    # "table.column" of every column whose text cells were judged -> {value: what the copy wrote}
    # for the values it changed, or None where each cell went through the scrubber in SQL
    changed: dict[str, dict[Any, Any] | None] = field(default_factory=dict)


def scrub_sqlite(src: Path, dst_tmp: Path, scrubber: Scrubber) -> SqliteScrubStats:
    """Write the scrubbed copy of export `src` to `dst_tmp` (a fresh file; the caller renames it)."""
    probe = open_readonly(src, decode_text)
    try:
        src_tables = list_tables(probe)
    except sqlite3.DatabaseError as exc:
        raise BadInputError(src, f"corrupt SQLite database ({exc})") from None
    finally:
        probe.close()
    known = {spec.name for spec in SQLITE_ALLOWLIST} | {STRING_TABLE}
    if not any(t in known for t in src_tables):
        raise BadInputError(src, "not an Nsight Systems SQLite export (none of its tables: "
                                 "StringIds, CUPTI_ACTIVITY_KIND_*, NVTX_EVENTS ...)")
    if dst_tmp.exists():
        dst_tmp.unlink()
    out = sqlite3.connect(f"file:{urllib.parse.quote(str(dst_tmp.resolve()), safe='/')}", uri=True)
    out.text_factory = decode_text
    try:
        for pragma in ("journal_mode=OFF", "synchronous=OFF", "secure_delete=ON", "temp_store=MEMORY",
                       "cache_size=-65536"):
            out.execute(f"PRAGMA {pragma}")
        out.execute("ATTACH DATABASE ? AS src", (sqlite_uri(src),))
        _register(out, scrubber)
        pairs = None
        if scrubber.policy.join_adjacent_nvtx:
            # judged on the RAW ranges: once each half is scrubbed alone (the second's own tail
            # redacted by the entropy rule) the first half's prefix no longer shows as a secret
            with reading(src) as (conn, _path):
                pairs = list(iter_adjacent_nvtx(conn))
            halves = split_halves(pairs, scrubber)
            if halves:
                scrubber.force_redact(halves)
        stats = _copy(out, src, src_tables, scrubber)
        if pairs is not None:   # and on the copy's pairs: the source's, with the texts the copy wrote
            redact_split_nvtx(out, scrubber, copied_pairs(out, pairs, stats.changed))
        count_dropped(src, stats.tables_dropped, scrubber)
        return stats
    except sqlite3.DatabaseError as exc:
        raise BadInputError(src, f"corrupt SQLite database ({exc})") from None
    finally:
        out.close()


def _register(conn: sqlite3.Connection, scrubber: Scrubber) -> None:
    def vp_scrub(value: Any, column: str, location: str) -> Any:
        if isinstance(value, str):
            return scrubber.scrub_keyed(column, value, location)
        if isinstance(value, bytes):
            text = value.decode("latin-1")
            clean = scrubber.scrub_keyed(column, text, location)
            return value if clean is text else clean.encode("latin-1", "replace")
        return value

    def vp_gpu(value: Any, location: str) -> Any:
        if isinstance(value, str) and value:
            return scrubber.gpu(value, location)
        if isinstance(value, bytes) and value:
            scrubber.counts[(KIND_GPU, location)] += 1
            return None
        return value

    conn.create_function("vp_scrub", 3, vp_scrub, deterministic=True)
    conn.create_function("vp_gpu", 2, vp_gpu, deterministic=True)


def _create_sql(table: str, cols: list[tuple[str, str, int, int]]) -> str:
    pks = sorted((c for c in cols if c[3] > 0), key=lambda c: c[3])
    parts = []
    for name, decl, notnull, pk in cols:
        piece = f"{_q(name)} {decl}".rstrip()
        if notnull:
            piece += " NOT NULL"
        if len(pks) == 1 and pk:
            piece += " PRIMARY KEY"
        parts.append(piece)
    if len(pks) > 1:
        parts.append("PRIMARY KEY(" + ", ".join(_q(c[0]) for c in pks) + ")")
    return f"CREATE TABLE {_q(table)} (" + ", ".join(parts) + ")"


def _select_expr(table: str, col: str, decl: str, spec: KeepTable, suffix: str = "") -> str:
    loc = "'" + f"{table}.{col}{suffix}".replace("'", "''") + "'"
    qc = _q(col)
    if col in spec.nulled:
        return "NULL"
    if col in spec.gpu_uuids:
        return f"vp_gpu({qc}, {loc})"
    # Text can hide in any column of a hostile file; only text/blob cells reach Python.
    qn = "'" + col.replace("'", "''") + "'"
    return f"CASE WHEN typeof({qc}) IN ('text','blob') THEN vp_scrub({qc}, {qn}, {loc}) ELSE {qc} END"


_TEXTLIKE = "IN ('text','blob')"


def _judge(scrubber: Scrubber, column: str, value: Any, location: str, n: int,
           mine: Counter[tuple[str, str]] | None = None) -> Any:
    """The scrubbed form of one distinct cell value that occurs in `n` cells, counted `n` times
    (the report counts replacements per cell, as when every cell went through the rules); what
    one judgment counted is also added to `mine` when given."""
    saved = scrubber.counts
    scrubber.counts = Counter()
    try:
        if isinstance(value, bytes):
            text = value.decode("latin-1")
            clean = scrubber.scrub_keyed(column, text, location)
            out: Any = value if clean is text or clean == text else clean.encode("latin-1", "replace")
        else:
            out = scrubber.scrub_keyed(column, value, location)
    finally:
        one, scrubber.counts = scrubber.counts, saved
    for k, c in one.items():
        saved[k] += c * n
        if mine is not None:
            mine[k] += c
    return out


def _text_columns(out: sqlite3.Connection, table: str, cols: list[tuple[str, str, int, int]],
                  probed: Future[bool | None] | None) -> set[str]:
    """Columns of src.`table` holding at least one text or blob cell: TEXT-declared ones are
    assumed to; numeric-declared ones are probed (a hostile file can put text anywhere): `probed`
    is the page reader's answer, computed on the pool (`_page_probe`), SQL's when it has none."""
    have = {c[0] for c in cols if not is_numeric(c[1])}
    probe = [c[0] for c in cols if is_numeric(c[1])]
    if probe:
        verdict = probed.result() if probed is not None else None
        if verdict is None:
            verdict = numbers_only_sql(out, "src", table, probe)
        if not verdict:
            have |= set(probe)   # every probed column goes the text way (none of its values, mostly)
    return have


def _page_probe(out: sqlite3.Connection, pool: ThreadPoolExecutor, src: Path, roots: dict[str, Any], table: str,
                cols: list[tuple[str, str, int, int]]) -> Future[bool | None] | None:
    """Start reading, on `pool`, whether the numeric-declared columns of `cols` hold numbers only."""
    names = [c[0] for c in table_columns(out, table, "src")]
    idx = [names.index(c[0]) for c in cols if is_numeric(c[1]) and c[0] in names]
    root = roots.get(table)
    if not idx or not isinstance(root, int):
        return None
    return pool.submit(numeric_cells_are_numbers, src, root, len(names), idx)


def _insert(out: sqlite3.Connection, table: str, cols: list[tuple[str, str, int, int]], spec: KeepTable,
            where: str, scrubber: Scrubber, xfer: bool, probed: Future[bool | None] | None,
            changed: dict[str, dict[Any, Any] | None], suffix: str = "") -> int:
    """Copy the rows of src.`table` (filtered by `where`) into main.`table`; return rows copied.

    Why this shape (speed, same rules): each DISTINCT text/blob value of a column is judged once
    in Python (counted once per cell), and only the values the rules change are written to a
    temp mapping that SQLite joins in C; columns without any text cell are copied as they are.
    A table with no text at all and no column to drop or rewrite is copied with a bare
    `INSERT INTO t SELECT * FROM src.t`, which SQLite turns into a page-level transfer. What each
    judged column's values became is noted in `changed` (`SqliteScrubStats.changed`). `suffix`
    names the field of the rows `where` selects (`StringIds.value[user]`: provenance.FIELDS).
    """
    names = [c[0] for c in cols]
    text_cols = _text_columns(out, table, cols, probed)
    exprs = []
    for i, (col, decl, _nn, _pk) in enumerate(cols):
        if col in spec.nulled or col in spec.gpu_uuids:
            exprs.append(_select_expr(table, col, decl, spec))
            continue
        if col not in text_cols:
            exprs.append(_q(col))
            continue
        exprs.append(_mapped_expr(out, table, col, decl, spec, where, scrubber, i, changed, suffix))
    if xfer and not where and exprs == [_q(c) for c in names]:
        # nothing to drop or rewrite: SQLite's transfer optimisation copies the records undecoded
        return out.execute(f"INSERT INTO main.{_q(table)} SELECT * FROM src.{_q(table)}").rowcount
    cur = out.execute(f"INSERT INTO main.{_q(table)} ({', '.join(map(_q, names))}) "
                      f"SELECT {', '.join(exprs)} FROM src.{_q(table)}{where}")
    return cur.rowcount


def _mapped_expr(out: sqlite3.Connection, table: str, col: str, decl: str, spec: KeepTable, where: str,
                 scrubber: Scrubber, i: int, noted: dict[str, dict[Any, Any] | None], suffix: str = "") -> str:
    """SQL expression for text column `col`: its distinct text/blob values judged once each; the
    changed ones looked up in a temp map. Falls back to the per-cell SQL function when a value
    cannot travel back to SQLite as a parameter (undecodable bytes in a TEXT cell). `noted[loc]`:
    the changed values and what they became, or None with the per-cell function."""
    qc = _q(col)
    loc = f"{table}.{col}{suffix}"
    tcond = f"typeof({qc}) {_TEXTLIKE}"
    cond = f"{where} AND {tcond}" if where else f" WHERE {tcond}"
    changed: list[tuple[Any, Any]] = []
    saved = scrubber.counts.copy()
    try:
        # DISTINCT (a hash of the values seen) costs half of GROUP BY's sort; the cells of a value
        # are counted only for the few values the rules change (the report counts per cell)
        counted: list[tuple[Any, Counter[tuple[str, str]]]] = []
        for (v,) in out.execute(f"SELECT DISTINCT {qc} FROM src.{_q(table)}{cond}"):
            mine: Counter[tuple[str, str]] = Counter()
            o = _judge(scrubber, col, v, loc, 1, mine)
            if o is not v and o != v:
                changed.append((v, o))
            if mine:
                counted.append((v, mine))
        for k in range(0, len(counted), 500):
            part = counted[k:k + 500]
            cells = dict(out.execute(f"SELECT {qc}, count(*) FROM src.{_q(table)}{cond} AND {qc} IN "
                                     f"({', '.join('?' * len(part))}) GROUP BY {qc}", [v for v, _m in part]))
            for v, mine in part:
                for key, c in mine.items():
                    scrubber.counts[key] += c * (cells.get(v, 1) - 1)
        noted[loc] = dict(changed)
        if not changed:
            return qc
        m = f"vp_map_{i}"
        out.execute(f"DROP TABLE IF EXISTS temp.{m}")
        out.execute(f"CREATE TEMP TABLE {m}(v PRIMARY KEY, o)")
        out.executemany(f"INSERT INTO temp.{m}(v, o) VALUES (?, ?)", changed)
    except (UnicodeEncodeError, sqlite3.ProgrammingError):
        scrubber.counts = saved
        noted[loc] = None
        return _select_expr(table, col, decl, spec, suffix)
    return (f"CASE WHEN {tcond} THEN coalesce((SELECT o FROM temp.{m} WHERE v = {qc}), {qc}) "
            f"ELSE {qc} END")


def _copy(out: sqlite3.Connection, src: Path, src_tables: list[str], scrubber: Scrubber) -> SqliteScrubStats:
    kept: dict[str, int] = {}
    dropped: list[str] = []
    filtered: dict[str, tuple[int, int]] = {}
    cols_dropped: dict[str, list[str]] = {}
    changed: dict[str, dict[Any, Any] | None] = {}
    wheres: dict[str, str] = {}
    plan: list[tuple[str, KeepTable, list[tuple[str, str, int, int]]]] = []
    for t in src_tables:
        spec = keep_spec(t)
        if t == STRING_TABLE:
            continue
        if spec is None:
            dropped.append(t)
            continue
        cols = table_columns(out, t, "src")
        keep_cols = [c for c in cols if c[0] not in spec.drop]
        if len(keep_cols) != len(cols):
            cols_dropped[t] = [c[0] for c in cols if c[0] in spec.drop]
        plan.append((t, spec, keep_cols))
    # The threads, processes and strings the kept rows reference are read from src on a thread of
    # its own (own connection; SQLite runs without the GIL) while this one copies the tables; the
    # tables filtered by them (ThreadNames, PROCESSES) are copied last.
    out.execute("CREATE TEMP TABLE vp_tids(id INTEGER PRIMARY KEY)")
    out.execute("CREATE TEMP TABLE vp_pids(id INTEGER PRIMARY KEY)")
    roots = dict(out.execute("SELECT name, rootpage FROM src.sqlite_master WHERE type='table'").fetchall())
    with ThreadPoolExecutor(2) as pool:
        refs = pool.submit(_referenced_ids, src, plan)
        probes = {t: _page_probe(out, pool, src, roots, t, cols) for t, _s, cols in plan}
        if STRING_TABLE in src_tables:
            scols = table_columns(out, STRING_TABLE, "src")
            probes[STRING_TABLE] = _page_probe(out, pool, src, roots, STRING_TABLE, scols)
        sids: set[int] = set()
        waiting = True
        for t, spec, cols in sorted(plan, key=lambda p: p[1].rows in ("threads", "processes")):
            if waiting and spec.rows in ("threads", "processes"):
                sids = _load_refs(out, refs.result())
                waiting = False
            out.execute(_create_sql(t, cols))
            names = [c[0] for c in cols]
            where = ""
            if spec.rows == "threads" and "globalTid" in names:
                where = " WHERE globalTid IN (SELECT id FROM temp.vp_tids)"
            elif spec.rows == "processes" and "globalPid" in names:
                where = " WHERE globalPid IN (SELECT id FROM temp.vp_pids)"
            elif spec.rows == "named" and "name" in names:
                where = " WHERE name IN (" + ",".join("'" + n.replace("'", "''") + "'" for n in spec.names) + ")"
            elif spec.rows != "all":
                where = " WHERE 0"  # the filter column is missing: keep nothing rather than everything
            kept[t] = _insert(out, t, cols, spec, where, scrubber, not cols_dropped.get(t), probes[t], changed)
            if where:
                total = out.execute(f"SELECT count(*) FROM src.{_q(t)}").fetchone()[0]
                filtered[t] = (kept[t], total)
                wheres[t] = where
        if waiting:
            sids = _load_refs(out, refs.result())
        strings_probe = probes.get(STRING_TABLE)
        if strings_probe is not None:
            strings_probe.result()      # finished inside the pool's lifetime

    # StringIds: only the ids the kept rows reference.
    strings_kept = strings_total = 0
    if STRING_TABLE in src_tables:
        out.execute("CREATE TEMP TABLE vp_sids(id INTEGER PRIMARY KEY)")
        out.executemany("INSERT INTO temp.vp_sids(id) VALUES (?)", [(i,) for i in sorted(sids)])
        for t, spec, cols in plan:
            if spec.rows == "all":
                continue        # read from src with the others
            names = {c[0] for c in cols}
            for c in spec.string_ids:
                if c in names:
                    out.execute(f"INSERT OR IGNORE INTO temp.vp_sids SELECT {_q(c)} FROM main.{_q(t)} "
                                f"WHERE typeof({_q(c)})='integer'")
        scols = [c for c in table_columns(out, STRING_TABLE, "src")]
        spec = KeepTable(STRING_TABLE)
        out.execute(_create_sql(STRING_TABLE, scols))
        names = [c[0] for c in scols]
        if "id" in names:
            wheres[STRING_TABLE] = " WHERE id IN (SELECT id FROM temp.vp_sids)"
            # who wrote each string: ids only user-written columns reference (NVTX text, thread
            # names) are user text; the rest (kernel, API names) toolchain symbols (provenance.py)
            _user_string_ids(out, plan, *refs.result()[3:])
            strings_kept = _insert(out, STRING_TABLE, scols, spec, wheres[STRING_TABLE] +
                                   " AND id NOT IN (SELECT id FROM temp.vp_user_sids)", scrubber, False, strings_probe, changed)
            strings_kept += _insert(out, STRING_TABLE, scols, spec, " WHERE id IN (SELECT id FROM temp.vp_user_sids)",
                                    scrubber, False, strings_probe, changed, USER_STRINGS)
        strings_total = out.execute(f"SELECT count(*) FROM src.{_q(STRING_TABLE)}").fetchone()[0]
        kept[STRING_TABLE] = strings_kept
    out.commit()
    _count_filtered(out, wheres, scrubber)
    out.execute("DETACH DATABASE src")
    return SqliteScrubStats(kept, dropped, filtered, strings_kept, strings_total, cols_dropped, changed)


USER_STRINGS = "[user]"     # StringIds.value[user]: the field of strings only user-written columns reference


def _user_string_ids(out: sqlite3.Connection, plan: list[tuple[str, KeepTable, list[tuple[str, str, int, int]]]],
                     user_refs: set[int], tool_refs: set[int]) -> None:
    """temp.vp_user_sids: the kept StringIds ids that columns of user-written origin reference
    (`origin_of("<table>.<column>")`: NVTX_EVENTS.textId, ThreadNames.nameId ...) and no toolchain
    column does (a kernel name an NVTX range repeats is still CUPTI's). `user_refs` / `tool_refs`:
    those the tables kept whole reference, read by `_referenced_ids` in its one scan of each table
    (a scan per column here cost as much as the copy); the filtered tables are read here."""
    out.execute("CREATE TEMP TABLE vp_user_sids(id INTEGER PRIMARY KEY)")
    user, tool = set(user_refs), set(tool_refs)
    for t, spec, cols in plan:
        names = {c[0] for c in cols}
        for c in spec.string_ids:
            if c not in names or _origin_read_with_refs(spec, c):
                continue
            dest = tool if origin_of(f"{t}.{c}") is Origin.TOOLCHAIN else user
            dest.update(v for (v,) in out.execute(f"SELECT DISTINCT {_q(c)} FROM main.{_q(t)} "
                                                  f"WHERE typeof({_q(c)})='integer'"))
    out.executemany("INSERT INTO temp.vp_user_sids(id) VALUES (?)", [(i,) for i in sorted(user - tool)])
    out.execute("DELETE FROM temp.vp_user_sids WHERE id NOT IN (SELECT id FROM temp.vp_sids)")


def _origin_read_with_refs(spec: KeepTable, col: str) -> bool:
    """The string ids of `col` are copied as src holds them (a table kept whole, the column not
    rewritten), so `_referenced_ids` classifies them by origin from src."""
    return spec.rows == "all" and col not in spec.nulled and col not in spec.gpu_uuids


def _referenced_ids(src: Path, plan: list[tuple[str, KeepTable, list[tuple[str, str, int, int]]]]
                    ) -> tuple[set[int], set[int], set[int], set[int], set[int]]:
    """(thread ids, process ids, StringIds ids, those of the ids user-written columns reference,
    those toolchain columns reference) referenced by the kept tables of `src` that keep all their
    rows: one DISTINCT scan per table over all its id columns at once."""
    tids: set[int] = set()
    pids: set[int] = set()
    sids: set[int] = set()
    user_sids: set[int] = set()
    tool_sids: set[int] = set()
    conn = open_readonly(src, decode_text)
    try:
        for t, spec, cols in plan:
            names = {c[0] for c in cols}
            roles: dict[str, list[set[int]]] = {}
            for tt, c in _TID_SOURCES:
                if tt == t and c in names:
                    roles.setdefault(c, []).append(tids)
            for tt, c in _PID_SOURCES:
                if tt == t and c in names:
                    roles.setdefault(c, []).append(pids)
            if spec.rows == "all":
                for c in spec.string_ids:
                    if c in names:
                        roles.setdefault(c, []).append(sids)
                        if _origin_read_with_refs(spec, c):
                            roles[c].append(tool_sids if origin_of(f"{t}.{c}") is Origin.TOOLCHAIN else user_sids)
            if not roles:
                continue
            order = list(roles)
            for row in conn.execute(f"SELECT DISTINCT {', '.join(map(_q, order))} FROM {_q(t)}"):
                for c, v in zip(order, row):
                    if type(v) is int:
                        for dest in roles[c]:
                            dest.add(v)
    finally:
        conn.close()
    pids |= {(t >> 24) << 24 for t in tids}
    return tids, pids, sids, user_sids, tool_sids


def _load_refs(out: sqlite3.Connection, refs: tuple[set[int], set[int], set[int], set[int], set[int]]) -> set[int]:
    """Fill the temp tables of referenced threads and processes; return the referenced strings."""
    tids, pids, sids, _user, _tool = refs
    out.executemany("INSERT OR IGNORE INTO temp.vp_tids(id) VALUES (?)", [(i,) for i in sorted(tids)])
    out.executemany("INSERT OR IGNORE INTO temp.vp_pids(id) VALUES (?)", [(i,) for i in sorted(pids)])
    return sids


def redact_split_nvtx(conn: sqlite3.Connection, scrubber: Scrubber,
                      pairs: Iterable[Pair] | None = None) -> int:
    """Redact both halves of every secret split across adjacent NVTX ranges; return halves redacted.

    A half held in `text` is replaced in every row holding that text; a half held in StringIds is
    replaced there (every range naming that same string loses it too, which is what a secret half
    deserves). `pairs`: the adjacent pairs of `conn` when known without reading it (`copied_pairs`).
    """
    texts: set[str] = set()
    sids: set[int] = set()
    for first, second in iter_adjacent_nvtx(conn) if pairs is None else pairs:
        hit = scrubber.joined_halves(first[2], second[2])
        for half, involved in zip((first, second), hit):
            if involved:
                if half[1] is not None and isinstance(half[1], int):
                    sids.add(half[1])
                else:
                    texts.add(half[2])
    if not texts and not sids:
        return 0
    n = 0
    for t in sorted(texts):
        n += conn.execute(f"UPDATE {_q(NVTX_TABLE)} SET text = ? WHERE text = ?", (REDACTED, t)).rowcount
    conn.executemany(f"UPDATE {_q(STRING_TABLE)} SET value = ? WHERE id = ?", [(REDACTED, i) for i in sorted(sids)])
    conn.commit()
    n += len(sids)
    scrubber.counts[(KIND_SPLIT, SPLIT_LOCATION)] += n
    return n


def copied_pairs(out: sqlite3.Connection, pairs: list[Pair],
                  changed: dict[str, dict[Any, Any] | None]
                  ) -> list[Pair] | None:
    """The adjacent NVTX pairs of the scrubbed copy `out` (main), from `pairs`, those of its source:
    or None when they must be read from `out` (`iter_adjacent_nvtx`).

    Why: reading a range-heavy table's columns again costs as much as the first read
    (issue 25). The copy keeps every NVTX row (`KeepTable` rows "all") with its
    thread and start, and StringIds with their ids, so the neighbours are the source's; only the
    texts changed: a `text` into what the copy wrote for it (`changed`), a StringIds half into the
    copy's own StringIds value. That holds when the thread and start columns came through
    unchanged, `textId` held no text at all (its text would be a half named by value) and every
    `text` value the copy changed is a str (a blob half reads decoded, it could not be looked up).
    """
    spec = keep_spec(NVTX_TABLE)
    if spec is None or spec.rows != "all":
        return None
    loc = f"{NVTX_TABLE}.{{}}".format
    if loc("textId") in changed or any(changed.get(loc(c), {}) != {} for c in ("globalTid", "start")):
        return None     # text in the id column, or rewritten times or threads: read the copy
    texts = changed.get(loc("text"), {})
    if texts is None or any(not isinstance(v, str) for v in texts):
        return None
    ids = {h[1] for p in pairs for h in p if isinstance(h[1], int)}
    strings = string_values(out, ids) if ids and STRING_TABLE in list_tables(out) else {}

    def side(half: tuple[int, Any, str]) -> tuple[int, Any, str] | None:
        rid, sid, text = half
        val = strings.get(sid) if isinstance(sid, int) else texts.get(text, text)
        if isinstance(val, bytes):
            val = val.decode("latin-1")
        return (rid, sid, val) if isinstance(val, str) and val else None

    out_pairs = []
    for a, b in pairs:
        a2, b2 = side(a), side(b)
        if a2 is not None and b2 is not None:
            out_pairs.append((a2, b2))
    return out_pairs


DROPPED = " (dropped)"


def _count_filtered(out: sqlite3.Connection, wheres: dict[str, str], scrubber: Scrubber) -> None:
    """Count what check would find in the rows the copy filtered out (threads and processes no kept
    row references, StringIds no kept row uses: the environment blocks and command lines of other
    processes), as `<table>.<column> (dropped)`: check reads every cell of the raw export, so scrub
    judges these rows too, each distinct value once, counted per cell (issue 33)."""
    for t, where in wheres.items():
        cond = where.removeprefix(" WHERE ")
        for c in table_columns(out, t, "src"):
            qc = _q(c[0])
            rows = out.execute(f"SELECT {qc}, count(*) FROM src.{_q(t)} WHERE ({cond}) IS NOT 1 AND {qc} >= '' "
                               f"GROUP BY {qc}").fetchall()
            for value, n in rows:
                text = value.decode("latin-1") if isinstance(value, bytes) else value
                for kind in scrubber.keyed_findings(c[0], text):
                    scrubber.counts[(kind, f"{t}.{c[0]}{DROPPED}")] += n


def count_dropped(src: Path, tables: list[str], scrubber: Scrubber) -> None:
    """Count what check would find in the tables the copy dropped, as `<table>.<column> (dropped)`:
    so `verlprof scrub` of an export reports the findings `verlprof check` of the same export
    reports (issue 33), not only the replacements in what it kept. Dropped tables are the small
    ones (environment, streams, diagnostics), read once by distinct value."""
    if not tables:
        return
    with reading(src) as (conn, path):
        def flagged(col: str, value: Any) -> bool:
            text = value.decode("latin-1") if isinstance(value, bytes) else value
            return bool(scrubber.keyed_findings(col, text))

        for table, col, _rid, value, n in iter_distinct_cells(conn, path=path, keep=flagged, only=tables):
            text = value.decode("latin-1") if isinstance(value, bytes) else value
            for kind in scrubber.keyed_findings(col, text):
                scrubber.counts[(kind, f"{table}.{col}{DROPPED}")] += n
        if ARGV_TABLE in tables:
            for _rid, kind in argv_pair_findings(conn, scrubber):
                scrubber.counts[(kind, f"{ARGV_TABLE}.value{DROPPED}")] += 1
