"""Read the cells of an SQLite file for scrub and check: distinct text values per column, adjacent
NVTX ranges, and the identities an export reveals.

Why apart from the copy (sqlite.py): `verlprof check` reads any SQLite file through these same
functions that scrub's identity pass and split-value scan use, so both judge the same strings;
sqlite.py only writes the scrubbed copy. Every read goes through readers/sqlite_export.py (the one
opener, quoter and schema probe), with the scrub's text decoding (`decode_text`) set at open.
"""
from __future__ import annotations

import sqlite3
import warnings
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator

import numpy as np

from ..core.errors import BadInputError
from ..readers.nsys_sqlite import NsysExport, string_values
from ..readers.nvtx_pairs import Pair, adjacent_pairs
from ..readers.sqlite_export import decode_text, list_tables, open_readonly, rowid_windows, table_columns
from ..readers.sqlite_export import quote_ident as _q
from .deny import denied_flag_items
from .identities import Identities, IdentityCollector
from .policy import Policy
from .rules import KIND_DENIED, KIND_NAME
from .scrubber import Scrubber
from .shapes import flag_value_items
from .sqlite_pages import numeric_cells_are_numbers

STRING_TABLE = "StringIds"
NVTX_TABLE = "NVTX_EVENTS"
_NUMERIC_TYPES = ("INT", "REAL", "FLOA", "DOUB", "NUMERIC", "BOOL")


@contextmanager
def reading(source: Path | sqlite3.Connection) -> Iterator[tuple[sqlite3.Connection, Path]]:
    """(connection, file) of a RAW export to read with the scrub's text decoding: opened here and
    closed after; or a connection a pass already holds, used as it is when it was opened with
    `decode_text`. Another connection's decoding is never swapped while others hold it: its file is
    opened here, read-only, on a connection of the scrub's own."""
    if isinstance(source, sqlite3.Connection):
        path = Path(source.execute("PRAGMA main.database_list").fetchone()[2])
        if source.text_factory is decode_text:
            yield source, path
            return
        source = path
    conn = open_readonly(Path(source), decode_text)
    try:
        yield conn, Path(source)
    finally:
        conn.close()


def is_numeric(decl: str) -> bool:
    d = decl.upper()
    return any(t in d for t in _NUMERIC_TYPES)


def numbers_only_sql(conn: sqlite3.Connection, schema: str, table: str, columns: list[str]) -> bool:
    """True when no cell of `columns` of `table` is text or a blob, in one SQL scan that stops at
    the first one: `x >= ''` holds exactly for TEXT and BLOB cells (SQLite orders NULL < numbers <
    TEXT < BLOB, and numeric affinity leaves the literal '' text), and costs half of
    `typeof(x) IN (...)`. Used where the page reader (sqlite_pages.py, faster: bench/README.md) declines a
    table."""
    return not columns or conn.execute(f"SELECT 1 FROM {schema}.{_q(table)} WHERE "
                                       + " OR ".join(f"{_q(c)} >= ''" for c in columns) + " LIMIT 1").fetchone() is None


# --------------------------------------------------------------------------------------------
# Split values: a secret written across two adjacent NVTX ranges of one thread
# --------------------------------------------------------------------------------------------

SPLIT_LOCATION = "NVTX_EVENTS.text (joined with the next range of its thread)"
_ADJ_CHUNK = 1 << 18     # rows per rowid window of the NVTX column read


def iter_adjacent_nvtx(conn: sqlite3.Connection, schema: str = "main") -> Iterator[Pair]:
    """Each DISTINCT pair ((rowid, textId, text), (rowid, textId, text)) of texts of NVTX events that
    follow each other on one thread (ordered by start), once, with the rowids of its first
    occurrence; text from the `text` column (textId None) or else from StringIds via `textId`.

    Why pairs in start order: `nvtx.annotate(f"...{tok[:8]}")` then `(f"{tok[8:]}...")` writes a
    token across two ranges that no rule sees whole; verl pushes one range after another per thread.
    The pairs are found over columns by `readers/nvtx_pairs.adjacent_pairs`, which a raw export's
    ranges read uses too (`NsysExport.adjacent_nvtx_pairs`); this reads any SQLite file with an
    NVTX table (the window files verlprof writes, the check).
    """
    cols = _adjacent_columns(conn, schema)
    if cols is not None:
        yield from adjacent_pairs(*cols, lambda ids: string_values(conn, ids, schema))


def _adjacent_columns(conn: sqlite3.Connection, schema: str
                      ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, list[Any]] | None:
    """(rowid, globalTid, start, code, keys) of every NVTX event, in rowid order: `keys[code]` is the
    event's text (str/bytes, from the `text` column, which wins as in readers/nsys_sqlite.py), its
    StringIds id (int), or None. None when the export has no NVTX texts to pair.

    Why this shape: the integers come back as one comma-joined string per column and rowid window
    (`group_concat`, parsed by numpy: no Python object per row), and the rows holding their own
    text as one row per distinct text with its rowids: no per-row Python at all (issue 25).
    """
    if NVTX_TABLE not in set(list_tables(conn, schema)):
        return None
    names = {c[0] for c in table_columns(conn, NVTX_TABLE, schema)}
    if "start" not in names or not ({"text", "textId"} & names):
        return None
    table = f"{schema}.{_q(NVTX_TABLE)}"
    has_ids = "textId" in names and STRING_TABLE in set(list_tables(conn, schema))
    own_if = " OR ".join(c for c, ok in (("text IS NOT NULL", "text" in names),
                                          ("typeof(textId) IN ('text', 'blob')", has_ids)) if ok)
    own = "coalesce(text, textId)" if "text" in names and has_ids else "text" if "text" in names else "textId"
    # rows without an integer textId of their own get an id no StringIds row holds: they pair as "no text"
    none_id = -1
    if has_ids:
        low = conn.execute(f"SELECT min(id) FROM {schema}.{_q(STRING_TABLE)}").fetchone()[0]
        none_id = min(-1, int(low) - 1) if isinstance(low, int) else -1
    sid = (f"CASE WHEN {'text IS NULL AND ' if 'text' in names else ''}typeof(textId) = 'integer' "
           f"THEN textId ELSE {none_id} END" if has_ids else str(none_id))
    parts = []
    for window in rowid_windows(conn, table, _ADJ_CHUNK):
        part = _int_window(conn, table, ("globalTid" if "globalTid" in names else "0", "start", sid), window)
        if part is not None:
            parts.append(part)
    if not parts:
        return None
    rid, gtid, start, ids = (np.concatenate(c) for c in zip(*parts))
    if rid.size > 1 and not bool(np.all(rid[1:] > rid[:-1])):   # scan order is rowid order; never assumed
        by_rid = np.argsort(rid, kind="stable")
        rid, gtid, start, ids = rid[by_rid], gtid[by_rid], start[by_rid], ids[by_rid]
    id_keys, code = np.unique(ids, return_inverse=True)
    keys: list[Any] = id_keys.tolist()
    if none_id in keys:
        keys[keys.index(none_id)] = None
    code = code.astype(np.int64)
    if own_if:   # one row per distinct own text (SQLite groups them), with the rowids holding it
        groups = conn.execute(f"SELECT {own}, count(*), group_concat(rowid) FROM {table} WHERE {own_if} GROUP BY 1"
                              ).fetchall()
        if groups:
            texts, counts, rowids = zip(*groups)
            at = np.searchsorted(rid, np.fromstring(",".join(rowids), dtype=np.int64, sep=","))  # noqa: NPY201
            code[at] = np.repeat(np.arange(len(keys), len(keys) + len(texts)), np.asarray(counts, np.int64))
            keys += texts
    return rid, gtid, start, code, keys


def _int_window(conn: sqlite3.Connection, table: str, exprs: tuple[str, ...],
                window: tuple[int, int]) -> list[np.ndarray] | None:
    """rowid and `exprs` (NULL as 0) of the rows of one rowid window, as int64 arrays; None if empty.
    A window holding non-integers (a hand-made file) is read again through CAST."""
    for cast in (False, True):
        cols = ["rowid", *(f"ifnull(CAST({e} AS INTEGER), 0)" if cast else f"ifnull({e}, 0)" for e in exprs)]
        n, *joined = conn.execute(f"SELECT count(*), {', '.join(f'group_concat({c})' for c in cols)} FROM {table} "
                                  "WHERE rowid BETWEEN ? AND ?", window).fetchone()
        if not n:
            return None
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            out = [np.fromstring(s, dtype=np.int64, sep=",") for s in joined]  # noqa: NPY201 - the fast C parser
        if all(a.size == n for a in out):
            return out
    raise sqlite3.DatabaseError(f"{table}: integers that do not read as integers")


def split_nvtx_texts(source: "Path | sqlite3.Connection | NsysExport", scrubber: Scrubber) -> set[str]:
    """The raw texts of a RAW export's NVTX ranges that hold half of a split secret.

    For callers that read a raw export and scrub the strings they keep one by one (summary rows):
    `scrubber.force_redact(split_nvtx_texts(raw, scrubber))` first, so a split value is redacted
    there too. `joined_halves` judges each half against its own scrub (`update_actor api_key=...`
    alone keeps its own, finer redaction); the raw text is what the caller will meet.
    `source`: the export's path, its connection open in this pass (`reading`), or the export open
    in this pass (`NsysExport`): then the pairs its ranges' read found (kept by collect's pass 1 in
    the ranges cache) are judged, and the NVTX table is not read again.
    """
    pairs = source.adjacent_nvtx_pairs() if isinstance(source, NsysExport) else None
    with reading(source.con if isinstance(source, NsysExport) else source) as (conn, path):
        try:
            return split_halves(pairs if pairs is not None else iter_adjacent_nvtx(conn), scrubber)
        except sqlite3.DatabaseError as exc:
            raise BadInputError(path, f"corrupt SQLite database ({exc})") from None


def split_halves(pairs: Iterable[Pair], scrubber: Scrubber) -> set[str]:
    """The texts of `pairs` that are half of a secret the two make together (`joined_halves`)."""
    return {raw for a, b in pairs for raw, hit in zip((a[2], b[2]), scrubber.joined_halves(a[2], b[2])) if hit}


# --------------------------------------------------------------------------------------------
# Identities (the cheap first pass) and cell iteration (shared with check)
# --------------------------------------------------------------------------------------------

def iter_distinct_cells(conn: sqlite3.Connection, schema: str = "main", path: Path | None = None,
                        keep: Callable[[str, Any], bool] | None = None, only: Iterable[str] | None = None,
                        keep_in: Callable[[str, str, Any], bool] | None = None
                        ) -> Iterator[tuple[str, str, Any, Any, int]]:
    """(table, column, first rowid, value, cells) of every DISTINCT text/blob value of every column
    (numeric-declared ones too, when a probe finds any text in them), in first-rowid order; only
    the values `keep(column, value)` holds when it is given.

    Why: `check` must see every cell, but judging a value once and counting its cells is the same
    verdict; SQLite finds the distinct values in C (BINARY comparison is length-aware, so values
    with NUL bytes inside stay distinct, and keeps text and blob apart), and the cells and first
    row of a value are counted only for the values kept (the findings). `path` (the database file)
    lets the numeric columns be probed from the pages (sqlite_pages.py, on a thread ahead of the
    value scans). Tables without rowid are read cell by cell. `only`: these tables alone.
    `keep_in(table, column, value)`: as `keep`, for a caller that judges by table too.
    """
    names = list_tables(conn, schema) if only is None else [t for t in list_tables(conn, schema) if t in set(only)]
    tables = [(t, table_columns(conn, t, schema)) for t in names]
    roots = dict(conn.execute(f"SELECT name, rootpage FROM {schema}.sqlite_master WHERE type='table'").fetchall())
    with ThreadPoolExecutor(1) as pool:     # the page reads run ahead of the value scans
        pages = {t: pool.submit(numeric_cells_are_numbers, path, roots[t], len(cols),
                                [i for i, c in enumerate(cols) if is_numeric(c[1])])
                 for t, cols in tables if path is not None and isinstance(roots.get(t), int)}
        for t, cols in tables:
            k = keep if keep_in is None else (lambda c, v, t=t: keep_in(t, c, v))
            yield from _distinct_cells_of(conn, schema, t, cols, pages.get(t), k)


def _distinct_cells_of(conn: sqlite3.Connection, schema: str, t: str, cols: list[tuple[str, str, int, int]],
                       pages: Future[bool | None] | None, keep: Callable[[str, Any], bool] | None
                       ) -> Iterator[tuple[str, str, Any, Any, int]]:
    """`iter_distinct_cells` of one table; `pages`: the page reader's answer on its numeric columns."""
    try:
        conn.execute(f"SELECT rowid FROM {schema}.{_q(t)} LIMIT 0")
    except sqlite3.OperationalError:   # WITHOUT ROWID
        for t2, c, rid, v in _cells_of(conn, t, cols, schema):
            if keep is None or keep(c, v):
                yield t2, c, rid, v, 1
        return
    use = [c[0] for c in cols if not is_numeric(c[1])]
    probe = [c[0] for c in cols if is_numeric(c[1])]
    verdict = pages.result() if pages is not None else None
    if probe and not (verdict if verdict is not None else numbers_only_sql(conn, schema, t, probe)):
        use += probe
    for c in use:
        qc = _q(c)
        values = [v for (v,) in conn.execute(f"SELECT DISTINCT {qc} FROM {schema}.{_q(t)} WHERE {qc} >= ''")
                  if keep is None or keep(c, v)]
        rows = []
        for k in range(0, len(values), 500):
            part = values[k:k + 500]
            rows += conn.execute(f"SELECT min(rowid), {qc}, count(*) FROM {schema}.{_q(t)} WHERE {qc} IN "
                                 f"({', '.join('?' * len(part))}) GROUP BY {qc}", part).fetchall()
        rows.sort(key=lambda r: r[0])
        for rid, v, n in rows:
            yield t, c, rid, v, n


def _cells_of(conn: sqlite3.Connection, t: str, cols: list[tuple[str, str, int, int]],
              schema: str) -> Iterator[tuple[str, str, Any, Any]]:
    sel = ", ".join(f"CASE WHEN typeof({_q(c[0])}) IN ('text','blob') THEN {_q(c[0])} END" for c in cols)
    cond = " OR ".join(f"typeof({_q(c[0])}) IN ('text','blob')" for c in cols)
    for n, row in enumerate(conn.execute(f"SELECT {sel} FROM {schema}.{_q(t)} WHERE {cond}")):
        for c, v in zip(cols, row):
            if v is not None:
                yield t, c[0], n, v


def iter_distinct_text(conn: sqlite3.Connection, schema: str = "main") -> Iterator[tuple[str, str, Any]]:
    """(table, column, value) of every DISTINCT text/blob value of text-declared columns.

    Why: the identity pass needs each value once, not each row; large tables repeat a handful of
    names (a memory-event table of millions of rows holds a dozen distinct strings), and SQLite
    finds the distinct ones in C. BINARY comparison is length-aware, so values with NUL bytes
    inside stay distinct.
    """
    for t in list_tables(conn, schema):
        for c in table_columns(conn, t, schema):
            if is_numeric(c[1]):
                continue
            col = _q(c[0])
            try:
                cur = conn.execute(f"SELECT DISTINCT {col} FROM {schema}.{_q(t)} "
                                   f"WHERE typeof({col}) IN ('text','blob')")
            except sqlite3.OperationalError:
                continue
            for (v,) in cur:
                yield t, c[0], v


def find_sqlite_identities(source: Path | sqlite3.Connection, policy: Policy) -> Identities:
    """Host/user names, GPU UUIDs and secret values anywhere in an export (all tables, not only kept).
    `source`: the export's path, or its connection open in this pass (`reading`)."""
    col = IdentityCollector(policy)
    with reading(source) as (conn, path):
        _feed_identities(conn, path, col)
    return col.ids


def _feed_identities(conn: sqlite3.Connection, path: Path, col: IdentityCollector) -> None:
    argv: dict[str, dict[int, str]] = {}
    try:
        for _t, c, v in iter_distinct_text(conn):
            text = v.decode("latin-1") if isinstance(v, bytes) else v
            col.feed(text, c)
        # name/value tables: the name says what the value is.
        for t in ("TARGET_INFO_SYSTEM_ENV", "META_DATA_CAPTURE", "META_DATA_EXPORT", "EXPORT_META_DATA"):
            try:
                rows = conn.execute(f"SELECT name, value FROM {_q(t)}").fetchall()
            except sqlite3.OperationalError:
                continue
            for name, value in rows:
                if not isinstance(name, str) or not isinstance(value, str):
                    continue
                key = name.split(":")[-1] if ":" in name else name
                if key.upper() in ("HOSTNAME", "DEVICE_DISPLAY_NAME", "EXPORT_HOST"):
                    col.add_host(value)
                elif key.upper() in ("USER_NAME", "EXPORT_USER"):
                    col.add_user(value)
                elif key.startswith("ARGUMENT_") and key[9:].isdigit():
                    argv.setdefault(name.split(":")[0], {})[int(key[9:])] = value
                elif key == "ENVIRONMENT_VARIABLE":
                    for n, val in _env_var_row(value):
                        col.add_pair(n, val)
                else:
                    col.add_pair(key, value)
        for args in argv.values():
            col.feed_argv([args[i] for i in sorted(args)])
    except sqlite3.DatabaseError as exc:
        raise BadInputError(path, f"corrupt SQLite database ({exc})") from None


ARGV_TABLE = "META_DATA_CAPTURE"


def argv_pair_findings(conn: sqlite3.Connection, scrubber: Scrubber) -> Iterator[tuple[int, str]]:
    """(rowid, kind) of the lone argv values of nsys `META_DATA_CAPTURE` (`PROCESS_0:ARGUMENT_2`
    after `PROCESS_0:ARGUMENT_1` = `--run-name`), judged with their flag as one argv list, as the
    list items of a trace are (`deny.denied_flag_items`, `shapes.flag_value_items`): a value the
    cell's own judgement found nothing in is `denied_text` after an option outside the vocabulary,
    `secret_by_name` after a secret-named flag. Scrub counts these in the dropped table, check on
    the raw export: the same findings (issue 33)."""
    try:
        rows = conn.execute(f"SELECT rowid, name, value FROM {_q(ARGV_TABLE)} WHERE name LIKE '%ARGUMENT%'").fetchall()
    except sqlite3.OperationalError:
        return
    argv: dict[str, dict[int, tuple[int, str]]] = {}
    for rid, name, value in rows:
        if not isinstance(name, str) or not isinstance(value, str):
            continue
        key = name.split(":")[-1]
        if key.startswith("ARGUMENT_") and key[9:].isdigit():
            argv.setdefault(name.rpartition(":")[0], {})[int(key[9:])] = (rid, value)
    for args in argv.values():
        items = [args[i] for i in sorted(args)]
        values = [v for _r, v in items]
        kinds = {i: KIND_DENIED for i in denied_flag_items(values)}
        kinds.update({i: KIND_NAME for i in flag_value_items(values, scrubber.is_secret_name)})
        for i, kind in sorted(kinds.items()):
            if not scrubber.findings(values[i]):
                yield items[i][0], kind


def _env_var_row(value: str) -> list[tuple[str, str]]:
    name, sep, val = value.partition("=")
    if not sep:
        return []
    val = val[1:-1] if len(val) >= 2 and val[0] == val[-1] == '"' else val
    return [(name, val)]
