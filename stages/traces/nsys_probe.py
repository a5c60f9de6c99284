"""Probe an nsys SQLite export for what the trace writers need: tables, columns, clock, id layout.

Why: nsys export schemas differ by version (2022.4 has `EXPORT_META_DATA`, `OSRT_CALLCHAINS`, no
`binaryData`; 2025.3 has `META_DATA_EXPORT`, `greenContextId`, ...). Nothing here assumes a table or
column exists: callers ask, and skip what is missing.

Facts used throughout (stable since nsys 2020):
- `globalTid`/`globalPid` are serialised GlobalIds: the pid sits in bits 24..47, the tid in bits
  0..23 (`globalPid` has tid 0). `gid // 2**24` therefore keys a process within one report.
- Timestamps are session-relative ns; `TARGET_INFO_SESSION_START_TIME.utcEpochNs` is the UTC
  epoch ns of t = 0, so `utcEpochNs + t` is the absolute clock every rank shares.
"""
from __future__ import annotations

import re
import sqlite3
from dataclasses import dataclass
from pathlib import Path

from ..core.errors import BadInputError

PID_SHIFT = 24
PID_DIV = 1 << PID_SHIFT
_ID_MASK = PID_DIV - 1

# Columns that hold StringIds(id) in exports whose CREATE statements lack the `-- REFERENCES` notes.
_STRING_REF_NAMES = frozenset({
    "nameId", "textId", "demangledName", "shortName", "mangledName", "contentId", "filenameId",
    "jsonTextId", "symbol", "module",
})
_REF_RE = re.compile(r"^\s*\"?(\w+)\"?\s+[^\n]*?--[^\n]*REFERENCES\s+StringIds\s*\(", re.M)

# NVTX event types by name (ENUM_NSYS_EVENT_TYPE); the fallback ids are those of nsys 2022-2025.
_NVTX_RANGE_NAMES = ("NvtxPushPopRange", "NvtxStartEndRange", "NvtxtPushPopRange", "NvtxtStartEndRange")
_NVTX_MARK_NAMES = ("NvtxMark", "NvtxtMark")
_NVTX_DEFINITION_NAMES = (
    "NvtxCategory", "NvtxtCategory", "NvtxDomainCreate", "NvtxDomainDestroy", "NvtxThread",
    "NvtxNameCudaDevice", "NvtxNameCudaContext", "NvtxNameCudaStream", "NvtxtMetaThread",
    "NvtxtMetaProcess", "NvtxtMetaFileDisplay",
)
_NVTX_FALLBACK = {
    "NvtxMark": 34, "NvtxtMark": 65, "NvtxPushPopRange": 59, "NvtxStartEndRange": 60,
    "NvtxtPushPopRange": 70, "NvtxtStartEndRange": 71, "NvtxCategory": 33, "NvtxtCategory": 64,
    "NvtxThread": 39, "NvtxDomainCreate": 75, "NvtxDomainDestroy": 76, "NvtxNameCudaDevice": 97,
    "NvtxNameCudaContext": 98, "NvtxNameCudaStream": 99, "NvtxtMetaThread": 72,
    "NvtxtMetaProcess": 73, "NvtxtMetaFileDisplay": 74,
}


def pid_of(gid: int | None) -> int | None:
    """The OS pid inside a serialised globalPid/globalTid."""
    return None if gid is None else (int(gid) >> PID_SHIFT) & _ID_MASK


def tid_of(gid: int | None) -> int | None:
    """The OS tid inside a serialised globalTid."""
    return None if gid is None else int(gid) & _ID_MASK


def qi(name: str) -> str:
    """Quote an SQL identifier (table and column names come from the file, never trusted)."""
    return '"' + name.replace('"', '""') + '"'


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
    """Every table of the database `schema` with its columns (in order) and string columns."""
    out: dict[str, TableInfo] = {}
    rows = con.execute(
        f"SELECT name, sql FROM {qi(schema)}.sqlite_master WHERE type = 'table' "
        "AND name NOT LIKE 'sqlite_%' ORDER BY name").fetchall()
    for name, sql in rows:
        cols = tuple(r[1] for r in con.execute(f"PRAGMA {qi(schema)}.table_info({qi(name)})"))
        refs = {m.group(1) for m in _REF_RE.finditer(sql or "")} | (_STRING_REF_NAMES & set(cols))
        if name == "StringIds":
            refs = set()
        out[name] = TableInfo(name, sql or "", cols, tuple(c for c in cols if c in refs))
    return out


def session_start_ns(con: sqlite3.Connection, path: Path, schema: str = "main") -> int:
    """UTC epoch ns of the report's t = 0, or BadInputError: without it ranks cannot line up."""
    try:
        row = con.execute(
            f"SELECT utcEpochNs FROM {qi(schema)}.TARGET_INFO_SESSION_START_TIME "
            "WHERE utcEpochNs IS NOT NULL LIMIT 1").fetchone()
    except sqlite3.DatabaseError:
        row = None
    if not row or row[0] is None:
        raise BadInputError(path, "no TARGET_INFO_SESSION_START_TIME.utcEpochNs: cannot place the "
                                  "export on the UTC clock")
    return int(row[0])


def _enum_ids(con: sqlite3.Connection, tables: dict[str, TableInfo], schema: str,
              names: tuple[str, ...]) -> tuple[int, ...]:
    info = tables.get("ENUM_NSYS_EVENT_TYPE")
    if info and info.has("id", "name"):
        marks = ",".join("?" * len(names))
        found = [r[0] for r in con.execute(
            f"SELECT id FROM {qi(schema)}.ENUM_NSYS_EVENT_TYPE WHERE name IN ({marks})", names)]
        if found:
            return tuple(sorted(int(i) for i in found))
    return tuple(sorted(_NVTX_FALLBACK[n] for n in names))


@dataclass(frozen=True)
class NvtxTypes:
    """NVTX event type ids of this export: ranges, marks, and definitions (domains, categories)."""

    ranges: tuple[int, ...]
    marks: tuple[int, ...]
    definitions: tuple[int, ...]


def nvtx_types(con: sqlite3.Connection, tables: dict[str, TableInfo], schema: str = "main") -> NvtxTypes:
    return NvtxTypes(
        ranges=_enum_ids(con, tables, schema, _NVTX_RANGE_NAMES),
        marks=_enum_ids(con, tables, schema, _NVTX_MARK_NAMES),
        definitions=_enum_ids(con, tables, schema, _NVTX_DEFINITION_NAMES),
    )


def in_list(ids: tuple[int, ...]) -> str:
    """`(1,2,3)` for an SQL IN clause of integer ids (never empty)."""
    return "(" + ",".join(str(int(i)) for i in ids) + ")" if ids else "(NULL)"
