"""Progress bars and end-of-run tables (rich), kept out of the stages.

Why: stages are pure functions; only the pipeline talks to the terminal. Progress goes to stderr so
`--json` output on stdout stays machine-readable, and it switches itself off when not on a TTY.
"""
from __future__ import annotations

import contextlib
from typing import Iterator

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

err_console = Console(stderr=True)


@contextlib.contextmanager
def stage_progress(console: Console | None = None) -> Iterator[Progress]:
    """One progress display for the whole collect; each stage adds its own task."""
    console = console or err_console
    with Progress(
        TextColumn("[bold]{task.description:<10}"), BarColumn(), MofNCompleteColumn(),
        TextColumn("{task.fields[last]}", style="dim"), TimeElapsedColumn(),
        console=console, transient=False, disable=not console.is_terminal,
    ) as progress:
        yield progress


class NoProgress:
    """The Progress interface doing nothing: for collect inside a worker or task, where the caller
    shows per-run status instead."""

    def add_task(self, *args: object, **kwargs: object) -> int:
        return 0

    def update(self, *args: object, **kwargs: object) -> None:
        return None

    def advance(self, *args: object, **kwargs: object) -> None:
        return None


def say_own_outputs(own: list[tuple[str, str]]) -> None:
    """One line on stderr per folder skipped as verlprof's own output (a bundle, a WORK folder):
    every command that walks folders says it the same way (collect, scrub, window, summarize)."""
    for path, why in own:
        err_console.print(f"skipped {path}: {why}", markup=False, highlight=False, soft_wrap=True)
