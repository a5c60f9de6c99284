"""Where `verlprof check` finds user-written text (issue 39): the same declared fields as scrub.

Why apart from check.py: the checker reads any file; only some of what it reads has a field in
`provenance.FIELDS` (the cells of the tables scrub keeps, the events and metadata of a chrome
trace, the records of a memory snapshot, the columns of verlprof's summaries). For those, a string
of user-written origin that is neither public, approved nor structure is reported as `user_text`,
what scrub would have published as a pseudonym. Any other file (manifest.json, scrub_report.json:
verlprof's own, built from scrubbed values) is judged by the rules alone.
"""
from __future__ import annotations

import sqlite3
from typing import Any

from ..readers.sqlite_export import list_tables, table_columns
from ..readers.sqlite_export import quote_ident as _q
from .provenance import Origin, event_name_field, is_toolchain_frame, origin_of
from .sqlite import USER_STRINGS, keep_spec
from .sqlite_cells import STRING_TABLE


def user_string_values(conn: sqlite3.Connection) -> set[Any]:
    """The StringIds values that only columns of user-written origin reference (NVTX text, thread
    names), as scrub classifies them (`sqlite._user_string_ids`). One DISTINCT scan per table over
    all its string-id columns (a UNION of a scan per column cost more than the whole check)."""
    tables = set(list_tables(conn))
    if STRING_TABLE not in tables:
        return set()
    user: set[int] = set()
    tool: set[int] = set()
    for t in sorted(tables):
        spec = keep_spec(t)
        if spec is None:
            continue
        names = {c[0] for c in table_columns(conn, t)}
        cols = [c for c in spec.string_ids if c in names]
        if not cols:
            continue
        dests = [tool if origin_of(f"{t}.{c}") is Origin.TOOLCHAIN else user for c in cols]
        for row in conn.execute(f"SELECT DISTINCT {', '.join(map(_q, cols))} FROM main.{_q(t)}"):
            for v, dest in zip(row, dests):
                if type(v) is int:
                    dest.add(v)
    ids = sorted(user - tool)
    out: set[Any] = set()
    for k in range(0, len(ids), 500):
        part = ids[k:k + 500]
        out.update(v for (v,) in conn.execute(f"SELECT value FROM main.{_q(STRING_TABLE)} WHERE id IN "
                                              f"({', '.join('?' * len(part))})", part))
    return out


def sqlite_field(table: str, column: str, value: Any, user_values: set[Any]) -> str | None:
    """The field of one cell, or None where scrub never publishes the table (dropped tables are
    judged by the rules: scrub counts them as `(dropped)`)."""
    if keep_spec(table) is None:
        return None
    if table == STRING_TABLE:
        return f"{table}.{column}{USER_STRINGS}" if value in user_values else f"{table}.{column}"
    return f"{table}.{column}"


def json_field(loc: str, key: str | None, parent: dict[str, Any] | None) -> str:
    """A chrome trace value's field: check's `$.traceEvents[]...` locations read as scrub's, and an
    event's `name` by its category."""
    field = loc[2:] if loc.startswith("$.traceEvents[]") else "traceEvents[]" + loc[3:] if loc.startswith("$[]") else loc
    while field.endswith("[]") and field.count("[]") > 1:    # list items: the scrub walk names their list
        field = field[:-2]
    if key == "name" and parent is not None and field == "traceEvents[].name":
        return event_name_field(parent.get("cat"), parent.get("ph"))
    return field


def pickle_field(loc: str, frame: dict[str, Any] | None, key: str | None) -> str:
    """A snapshot value's field (check's `pickle...` locations read as scrub's `snapshot...`)."""
    if frame is not None and key in ("filename", "name"):
        side = "snapshot.frame[toolchain]" if is_toolchain_frame(str(frame.get("filename"))) else "snapshot.frame[user]"
        return side + (".filename" if key == "filename" else "")
    return "snapshot" + loc[len("pickle"):] if loc.startswith("pickle") else loc


def parquet_field(stem: str, column: str) -> str:
    """A summary column's field (`summaries.<table>.<column>`)."""
    return f"summaries.{stem}.{column}"


__all__ = ["user_string_values", "sqlite_field", "json_field", "pickle_field", "parquet_field"]
