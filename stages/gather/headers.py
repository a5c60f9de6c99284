"""Cheap content checks: do a file's first bytes fit the kind its name promises? Nothing is parsed.

Why apart from discover.py: the walk and the classification read as one story there; these checks
are the byte-level details (magic numbers, a sniff of a JSON's start), shared by every folder walk.
"""
from __future__ import annotations

import gzip
import zlib
from pathlib import Path

from ..core.model import ArtifactKind
from ..readers.naming import NameInfo
from ..readers.sqlite_header import parse_header

GZIP_MAGIC = b"\x1f\x8b"
_SNIFF_BYTES = 256 << 10
#: Reason prefix of a skipped file that looked like an artifact but could not be read.
UNREADABLE = "unreadable: "




def read_head(path: Path, n: int) -> bytes:
    with open(path, "rb") as f:
        return f.read(n)


def sniff_json(path: Path) -> str | None:
    """None if the start of a (gzipped) JSON file looks like a chrome trace, else why not."""
    try:
        if path.name.endswith(".gz"):
            if read_head(path, 2) != GZIP_MAGIC:
                return UNREADABLE + "not gzip data (bad header)"
            with gzip.open(path, "rb") as f:
                head = f.read(_SNIFF_BYTES)
        else:
            head = read_head(path, _SNIFF_BYTES)
    except (OSError, EOFError, zlib.error) as exc:
        return UNREADABLE + f"corrupt gzip ({type(exc).__name__})"
    if b'"traceEvents"' in head or b'"schemaVersion"' in head:
        return None
    if head.lstrip(b"\xef\xbb\xbf \t\r\n")[:1] not in (b"{", b"["):
        return UNREADABLE + ("gzip of something that is not JSON" if path.name.endswith(".gz")
                             else "not JSON (bad header)")
    return "JSON without traceEvents (not a chrome trace)"


def named_bad(reason: str) -> bool:
    """A header check that says the content is not what the name promises (else: not a trace)."""
    return not reason.startswith("JSON without traceEvents")


def check_header(path: Path, info: NameInfo) -> str | None:
    """None if the first bytes fit the kind, else a one-phrase reason (nothing is parsed)."""
    try:
        if info.kind == ArtifactKind.NSYS_SQLITE:
            try:
                parse_header(read_head(path, 100))
            except ValueError as exc:
                return str(exc)
            return None
        if info.kind == ArtifactKind.TORCH_TRACE:
            if info.needs_sniff:
                return sniff_json(path)
            if path.name.endswith(".gz"):
                return None if read_head(path, 2) == GZIP_MAGIC else "not gzip data (bad header)"
            first = read_head(path, 4096).lstrip()[:1]
            return None if first in (b"{", b"[") else "not JSON (bad header)"
        if info.kind == ArtifactKind.MEMORY_SNAPSHOT:
            return None if read_head(path, 1) == b"\x80" else "not a pickle (bad header)"
    except OSError as exc:
        return f"cannot read: {exc.strerror or exc}"
    return None
