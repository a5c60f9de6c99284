"""The first check every reader makes: the input is an existing, non-empty, regular file.

Why one function: each reader used to repeat the same stat/is_file/size dance with slightly
different wording; users should get the same one-line message whichever reader meets the file.
"""
from __future__ import annotations

from pathlib import Path

from ..core.errors import BadInputError


def require_nonempty_file(path: Path, empty_reason: str) -> int:
    """Return the file's size, or raise BadInputError naming the file and what is wrong with it."""
    try:
        size = path.stat().st_size
    except FileNotFoundError:
        raise BadInputError(path, "file not found") from None
    except OSError as exc:
        raise BadInputError(path, f"cannot read it ({exc.strerror or exc})") from None
    if not path.is_file():
        raise BadInputError(path, "not a regular file")
    if size == 0:
        raise BadInputError(path, f"empty file (0 bytes), {empty_reason}")
    return size
