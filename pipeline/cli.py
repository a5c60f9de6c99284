"""The `verlprof` command line (typer).

Why one module per command under pipeline/commands/: each command is small, owned by the stage it
drives, and registered here, so `verlprof --help` lists them in the order of the pipeline.
"""
from __future__ import annotations

import importlib
import sys
from importlib import metadata
from typing import Optional

import typer
import typer.core

from ..stages.core.errors import VerlprofError
from .signals import Interrupted

app = typer.Typer(
    name="verlprof",
    help="Turn the profiler output of a verl RL run into small, secret-free, comparable summaries.",
    epilog="Example: verlprof collect samples/tiny_run -o /tmp/verlprof-sample --html",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)


def _flags_shown_as_flags() -> None:
    """Help shows `--html`, not `--html <bool>`: a flag takes no value, so it gets no type column.

    Why a patch: typer's rich help prints the Python type of every option, flags included (typer
    0.29: `--help <bool>` too), which reads as if `--html true` were the way to write it.
    """
    cls = typer.core.TyperOption
    shown = getattr(cls, "display_type_rich", None)
    if shown is None or getattr(shown, "_verlprof_flags", False):
        return

    def display_type_rich(self, ctx):  # type: ignore[no-untyped-def]
        if getattr(self, "is_flag", False) and self.metavar is None:
            return None
        return shown(self, ctx)

    display_type_rich._verlprof_flags = True  # type: ignore[attr-defined]
    cls.display_type_rich = display_type_rich  # type: ignore[method-assign]


_flags_shown_as_flags()

# Pipeline order: collect runs all stages; the others run one stage or help around it.
_COMMAND_MODULES = (
    "collect_cmd",
    "scrub_cmd",
    "window_cmd",
    "summarize_cmd",
    "pack_cmd",
    "doctor_cmd",
)

for _name in _COMMAND_MODULES:
    importlib.import_module(f"verlprof.pipeline.commands.{_name}").register(app)


def installed_version() -> str:
    """verlprof's version as installed (the wheel's or the editable install's metadata)."""
    try:
        return metadata.version("verlprof")
    except metadata.PackageNotFoundError:   # run from a source tree that was never installed
        return "unknown (not installed)"


def _print_version(value: bool) -> None:
    if value:
        typer.echo(f"verlprof {installed_version()}")
        raise typer.Exit()


@app.callback()
def _main(
    version: Optional[bool] = typer.Option(
        None, "--version", callback=_print_version, is_eager=True, help="Print verlprof's version and exit."),
) -> None:
    """Turn the profiler output of a verl RL run into small, secret-free, comparable summaries."""


@app.command(epilog="Example: verlprof version")
def version() -> None:
    """Print verlprof's version (the same as `verlprof --version`)."""
    typer.echo(f"verlprof {installed_version()}")


def main(argv: list[str] | None = None) -> None:
    """Console entry point: one-line errors, non-zero exit, never a traceback for bad input; a run
    stopped by SIGINT/SIGTERM says so in one line and exits 130/143 (pipeline/signals.py).
    `argv` (default: the command line) lets the tests run a command in-process exactly as the
    console script does (tests/conftest.py `run_cli`)."""
    try:
        app(args=argv, prog_name="verlprof") if argv is not None else app()
    except Interrupted as stop:
        typer.echo(str(stop), err=True)
        sys.exit(stop.exit_code)
    except VerlprofError as err:
        typer.echo(f"verlprof: error: {err}", err=True)
        sys.exit(err.exit_code)


if __name__ == "__main__":
    main()
