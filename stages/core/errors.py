"""One exception type for every user-facing failure.

Why: the standards ask for "a clear, one-line error that names the file and what is wrong". Every
stage raises `VerlprofError(path, what)`; the CLI prints `str(err)` on one line and exits non-zero,
so no traceback ever reaches a user for bad input.
"""
from __future__ import annotations

from pathlib import Path


class VerlprofError(Exception):
    """A problem with an input or the environment, explained in one line."""

    exit_code = 2

    def __init__(self, path: str | Path | None, what: str) -> None:
        self.path = str(path) if path is not None else None
        self.what = " ".join(str(what).split())  # force one line
        super().__init__(f"{self.path}: {self.what}" if self.path else self.what)


class BadInputError(VerlprofError):
    """The file exists but is not what it claims to be (truncated, corrupt, wrong schema)."""


class ToolMissingError(VerlprofError):
    """An external tool (nsys) is missing or too old; the message says what to install."""
