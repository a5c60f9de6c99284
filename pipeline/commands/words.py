"""Counts in words, one spelling for every command: `1 rank`, `2 ranks`, `1 run: 1 summarized`."""
from __future__ import annotations


def plural(n: int, noun: str, many: str | None = None) -> str:
    """`1 run`, `2 runs` (`many` for a noun whose plural is not noun + "s")."""
    return f"{n} {noun}" if n == 1 else f"{n} {many or noun + 's'}"
