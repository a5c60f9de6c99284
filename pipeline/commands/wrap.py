"""Terminal lines wrapped at words, never between a number and what it counts.

Why: rich wraps at any space, so at 80 columns collect's window line ended in `2: 99.8` with `ms`
on the next line, and a count drifted away from its noun (`5` / `summarized`). Here a space right
after a number (`99.8 ms`, `3 failed`, `1: 374 ms`) or after an arrow (`124.43 -> 164.02 (+31.8%)`:
summarize's change, a value with what it became) is not a place to break; every other space is,
as in rich. A word longer than the line (a long path) stays whole and overflows: a name broken
apart cannot be copied.
"""
from __future__ import annotations

import re

from rich.console import Console
from rich.text import Text

_NUMBER = re.compile(r"[-+~]?\(?[\d][\d.,]*[%:x]?\)?$")   # 99.8, 1:, 2,048, (3, 40%
_ARROW = "->"


def fit_lines(line: str | Text, width: int, indent: int = 0) -> list[Text]:
    """`line` (rich markup or Text) as lines of at most `width` columns (continuations indented
    by `indent`), broken only at spaces that do not follow a number."""
    text = Text.from_markup(line) if isinstance(line, str) else line
    plain = text.plain
    if len(plain) <= width or width <= indent + 10:
        return [text]
    breaks = [m.start() for m in re.finditer(" ", plain) if not _binds(plain[:m.start()].rsplit(" ", 1)[-1])]
    out: list[Text] = []
    start, limit = 0, width
    while len(plain) - start > limit:
        fitting = [b for b in breaks if start < b <= start + limit]
        cut = fitting[-1] if fitting else next((b for b in breaks if b > start), None)
        if cut is None:
            break
        out.append(text[start:cut])
        start = cut + 1
        limit = width - indent
    out.append(text[start:])
    return [out[0]] + [Text(" " * indent) + t for t in out[1:]]


def fit_plain(line: str, width: int | None = None, indent: int = 2) -> list[str]:
    """Plain `line` (no markup: a path may hold `[`) fitted as `fit_lines` does, for commands that
    echo rather than print through a console (scrub). Without `width`, the terminal's (rich reads
    COLUMNS; 80 when not a terminal), as collect's console uses."""
    if width is None:
        width = Console().width
    return [t.plain for t in fit_lines(Text(line), width, indent)]


def _binds(word: str) -> bool:
    """A space after `word` keeps the next word on its line: a number (its unit or noun follows)
    or an arrow (the value it points to follows)."""
    return word == _ARROW or bool(_NUMBER.search(word))
