"""The window/summary options `collect` and `window` share, declared once so both commands spell,
default and explain them the same way."""
from __future__ import annotations

from typing import Any

import typer

STEP_RANGE_HELP = "Ranges whose name matches REGEX mark the steps (for captures without step markers)."


def top_kernels_option(help: str = "Top kernels per phase in kernels.parquet.") -> Any:
    return typer.Option(50, "--top-kernels", min=1, help=help)


def top_phases_option(help: str = "Phases per process shown here (all are in phases.parquet).") -> Any:
    return typer.Option(15, "--top-phases", help=help)


def step_range_option() -> Any:
    return typer.Option(None, "--step-range", metavar="REGEX", help=STEP_RANGE_HELP)
