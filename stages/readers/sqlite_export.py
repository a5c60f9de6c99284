"""Validate an nsys SQLite export before anything trusts it.

Why: exports reach verlprof three ways (made here by `nsys export` into the cache, lying beside a
report, or given alone) and any of them can be empty, truncated by a crash or a full disk, or some
other SQLite file altogether. A cached export is trusted because it passes this check, never because
of its mtime. The check is cheap (header, page count, schema, one row of `StringIds`), so it runs on
every use; it does not scan the whole file, so a multi-GB export validates in milliseconds.

The export's schema version and the nsys version that wrote it are read from the export's own
metadata table, whose name changed across nsys releases (`EXPORT_META_DATA` in 2022-2023,
`META_DATA_EXPORT` in 2024+): both are probed, neither is assumed.
"""
from __future__ import annotations

import sqlite3
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterator
from urllib.parse import quote

from ..core.errors import BadInputError
from .files import require_nonempty_file
from .sqlite_header import HEADER_LEN, SQLITE_MAGIC, parse_header  # SQLITE_MAGIC: re-exported (scrub sniffs with it)

# Metadata tables of nsys exports, newest name first (renamed around 2024).
META_TABLES: tuple[str, ...] = ("META_DATA_EXPORT", "EXPORT_META_DATA")


@dataclass(frozen=True)
class ExportInfo:
    """What a valid export is: enough to pick readers and to record in the manifest."""

    path: Path
    size: int
    tables: tuple[str, ...]
    schema_version: str | None = None      # EXPORT_SCHEMA_VERSION, e.g. "3.20.3" (nsys 2025.3)
    nsys_version: str | None = None        # EXPORT_PRODUCT_VERSION, e.g. "2025.3.2.0"
    meta: dict[str, str] = field(default_factory=dict, compare=False)


def check_header(path: Path) -> int:
    """Check the SQLite header and that the file is not shorter than the header says; return size.

    Why: sqlite3 happily "opens" a zero-byte or random file and only fails at the first query, with
    messages like "file is not a database"; a file cut short by a crash may even answer some queries.
    The header's page size and page count (valid when the two change counters agree) give the exact
    size the file must have.
    """
    size = require_nonempty_file(path, "not an SQLite export")
    try:
        with open(path, "rb") as f:
            head = f.read(HEADER_LEN)
    except OSError as exc:
        raise BadInputError(path, f"cannot read it ({exc.strerror or exc})") from None
    try:
        parse_header(head, size)
    except ValueError as exc:
        raise BadInputError(path, str(exc)) from None
    return size


def quote_ident(name: str) -> str:
    """`name` as an SQL identifier (double-quoted, inner quotes doubled): the one quoter."""
    return '"' + name.replace('"', '""') + '"'


def sqlite_uri(path: Path, immutable: bool = True) -> str:
    """The read-only URI of a database file (immutable: no journal, no lock, read-only media)."""
    return f"file:{quote(str(Path(path).resolve()), safe='/')}?mode=ro" + ("&immutable=1" if immutable else "")


def decode_text(raw: bytes) -> str:
    """Text cells as the scrub reads them: NUL bytes and invalid UTF-8 survive (as surrogates),
    where a lossy decode would hide part of a secret from the rules and sqlite3's default refuses
    the whole query. Set at open (`open_readonly(..., text_factory=decode_text)`), never swapped on
    a connection others hold."""
    return raw.decode("utf-8", "surrogateescape")


def open_readonly(path: str | Path, text_factory: Callable[[bytes], Any] | None = None,
                  check: bool = True) -> sqlite3.Connection:
    """The one way verlprof opens an SQLite input: header checked (`check_header`, unless `check`
    is False for a file just checked), read-only and immutable, the schema read once so a corrupt
    file fails here with one line naming it, and its text decoding set at open."""
    p = Path(path)
    if check:
        check_header(p)
    try:
        con = sqlite3.connect(sqlite_uri(p), uri=True)
    except sqlite3.Error as exc:
        raise BadInputError(p, f"cannot open it as SQLite ({exc})") from None
    try:
        con.execute("SELECT count(*) FROM sqlite_master").fetchone()
    except sqlite3.DatabaseError as exc:
        con.close()
        raise BadInputError(p, f"corrupt SQLite database ({exc})") from None
    if text_factory is not None:
        con.text_factory = text_factory
    return con


def list_tables(con: sqlite3.Connection, schema: str = "main") -> list[str]:
    """Names of the tables of database `schema` (SQLite's own excluded), sorted."""
    return list(table_statements(con, schema))


def table_statements(con: sqlite3.Connection, schema: str = "main") -> dict[str, str]:
    """The CREATE statement of every table of database `schema` (SQLite's own excluded), by name,
    sorted: with `table_columns`, the one schema probe (nsys_sqlite.probe_tables builds on both)."""
    return {name: sql or "" for name, sql in con.execute(
        f"SELECT name, sql FROM {quote_ident(schema)}.sqlite_master WHERE type='table' "
        "AND name NOT LIKE 'sqlite_%' ORDER BY name")}


def table_columns(con: sqlite3.Connection, table: str, schema: str = "main") -> list[tuple[str, str, int, int]]:
    """(name, declared type, notnull, pk) of every column of `table`: the one column probe (column
    sets differ by nsys version: probe, never assume)."""
    return [(r[1], r[2] or "", r[3], r[5])
            for r in con.execute(f"PRAGMA {quote_ident(schema)}.table_info({quote_ident(table)})")]


def open_export(path: str | Path, text_factory: Callable[[bytes], Any] | None = None
                ) -> tuple[sqlite3.Connection, "ExportInfo"]:
    """Validate an export and open it read-only: the one way readers open an nsys SQLite (one
    connection serves the check and the caller). `text_factory`: the connection's text decoding,
    set here at open (`decode_text` for a handle the scrub reads too)."""
    p = Path(path)
    size = check_header(p)
    con = open_readonly(p, text_factory, check=False)
    try:
        return con, _check(con, p, size)
    except BaseException:
        con.close()
        raise


def validate_export(path: str | Path) -> ExportInfo:
    """Return facts about a valid nsys SQLite export, or raise BadInputError saying what is wrong."""
    con, info = open_export(path)
    con.close()
    return info


def _check(con: sqlite3.Connection, p: Path, size: int) -> ExportInfo:
    try:
        tables = tuple(sorted(r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type = 'table'")))
    except sqlite3.DatabaseError as exc:
        raise BadInputError(p, f"corrupt SQLite database ({exc})") from None
    if "StringIds" not in tables:
        raise BadInputError(p, "an SQLite database, but not an Nsight Systems export (no StringIds table)")
    try:
        con.execute("SELECT * FROM StringIds LIMIT 1").fetchall()
    except sqlite3.DatabaseError as exc:
        raise BadInputError(p, f"corrupt export, StringIds is unreadable ({exc})") from None
    meta = _read_meta(con, tables)
    return ExportInfo(path=p, size=size, tables=tables, schema_version=meta.get("EXPORT_SCHEMA_VERSION"),
                      nsys_version=meta.get("EXPORT_PRODUCT_VERSION"), meta=meta)


def _read_meta(con: sqlite3.Connection, tables: tuple[str, ...]) -> dict[str, str]:
    """Key/value rows of the export metadata table, whichever name this nsys used (or {})."""
    for name in META_TABLES:
        if name not in tables:
            continue
        try:
            cols = [c[0] for c in table_columns(con, name)]
            if len(cols) < 2:
                continue
            key_col, val_col = ("name", "value") if {"name", "value"} <= set(cols) else (cols[0], cols[1])
            # as bytes: nsys 2022 wrote the user name in the host's encoding (`Gei\xe1`), which
            # sqlite3's UTF-8 text decoding refuses for the whole query
            rows = con.execute(f"SELECT CAST({quote_ident(key_col)} AS BLOB), CAST({quote_ident(val_col)} AS BLOB) "
                               f"FROM {quote_ident(name)}").fetchall()
        except sqlite3.DatabaseError:
            continue  # metadata is a nicety; a damaged meta table must not hide a usable export
        return {text_of(k): text_of(v) for k, v in rows if k is not None}
    return {}


def text_of(value: object) -> str:
    """A metadata value as text (bytes decoded as UTF-8, undecodable bytes replaced)."""
    if value is None:
        return ""
    if isinstance(value, (bytes, bytearray, memoryview)):
        return bytes(value).decode("utf-8", "replace")
    return str(value)


MAX_ROWID = (1 << 63) - 1


def rowid_windows(con: sqlite3.Connection, table_sql: str, chunk: int) -> Iterator[tuple[int, int]]:
    """(first, last) rowids, inclusive, of successive windows of `table_sql` that hold rows.

    Why not `range(min(rowid), max(rowid) + 1, chunk)`: rowids may have gaps, and a corrupt or
    hand-made file can hold a rowid near 2**63, whose span would be 10^13 empty windows (a fuzzed
    export ran for minutes). After each window the next one starts at the next rowid that exists
    (one index seek), so there are never more windows than rows / chunk plus one per gap."""
    first = con.execute(f"SELECT min(rowid) FROM {table_sql}").fetchone()[0]
    while first is not None:
        last = min(int(first) + chunk - 1, MAX_ROWID)
        yield int(first), last
        if last >= MAX_ROWID:
            return
        first = con.execute(f"SELECT min(rowid) FROM {table_sql} WHERE rowid > ?", (last,)).fetchone()[0]
