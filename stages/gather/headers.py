"""Cheap content checks: do a file's first bytes fit the kind its name promises? Nothing is parsed.

Why apart from discover.py: the walk and the classification read as one story there; the byte-level
details (magic numbers, a sniff of a JSON's start) belong to each format (`Format.check_header`,
stages/formats/<kind>/); this module asks the format and words a file it cannot read.
"""
from __future__ import annotations

from pathlib import Path

from ..core import formats
from ..readers.naming import NameInfo

#: Reason prefix of a skipped file that looked like an artifact but could not be read.
UNREADABLE = "unreadable: "


def named_bad(reason: str) -> bool:
    """A header check that says the content is not what the name promises (else: a file of
    another kind that shares the name's ending, such as JSON that is not a chrome trace)."""
    return not reason.startswith("JSON without traceEvents")


def check_header(path: Path, info: NameInfo) -> str | None:
    """None if the first bytes fit the kind, else a one-phrase reason (nothing is parsed)."""
    try:
        return formats.for_file_kind(info.kind).check_header(path, info)
    except OSError as exc:
        return f"cannot read: {exc.strerror or exc}"
