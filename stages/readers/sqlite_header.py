"""The 100-byte header of an SQLite file, read without SQLite: the one header check.

Why a module of its own: gather sniffs every candidate's first bytes on `verlprof --help`'s import
path, where importing sqlite3 (and the export validation around it) would only cost time; the
export validation (sqlite_export.check_header) and the page reader (scrub/sqlite_pages.py) parse
the same header through `parse_header`.
"""
from __future__ import annotations

import struct
from dataclasses import dataclass

SQLITE_MAGIC = b"SQLite format 3\x00"
HEADER_LEN = 100


@dataclass(frozen=True)
class SqliteHeader:
    """What the 100-byte header of an SQLite file says (https://www.sqlite.org/fileformat2.html)."""

    page_size: int
    reserved: int        # bytes unused at the end of each page (usable = page_size - reserved)
    wal: bool            # read version 2: a `-wal` file beside it may hold newer pages
    pages: int           # the page count, when the header's two change counters agree; else 0


def parse_header(head: bytes, size: int | None = None) -> SqliteHeader:
    """The header of an SQLite file from its first bytes: the one SQLite header check (export
    validation, gather's sniff, the page reader). ValueError with a one-phrase reason when it is not
    one; `size` (the file's length, when known) also catches a file shorter than its header says.
    Given fewer than 100 bytes without `size` (a sniff), only the magic is checked."""
    if not head.startswith(SQLITE_MAGIC):
        raise ValueError("not an SQLite database (bad header)")
    if len(head) < HEADER_LEN:
        if size is None:
            return SqliteHeader(0, 0, False, 0)
        raise ValueError(f"truncated SQLite file ({size} bytes, shorter than its header)")
    page_size = struct.unpack(">H", head[16:18])[0]
    page_size = 65536 if page_size == 1 else page_size
    if page_size < 512 or page_size & (page_size - 1):
        raise ValueError(f"corrupt SQLite header (page size {page_size})")
    change_counter, pages = struct.unpack(">II", head[24:32])
    valid_for = struct.unpack(">I", head[92:96])[0]
    pages = pages if change_counter == valid_for else 0
    if size is not None and pages and size < pages * page_size:
        raise ValueError(f"truncated SQLite file ({size} bytes, its header says {pages * page_size})")
    return SqliteHeader(page_size, head[20], head[18] == 2, pages)
