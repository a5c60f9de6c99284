"""The `verlprof` command line (typer).

Why one module per command under pipeline/commands/: each command is small, owned by the stage it
drives, and registered here, so `verlprof --help` lists them in the order of the pipeline.
"""
from __future__ import annotations

import importlib
import sys

import typer

app = typer.Typer(
    name="verlprof",
    help="Turn the profiler output of a verl RL run into small, secret-free, comparable summaries.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)

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


@app.command()
def version() -> None:
    """Print verlprof's version."""
    from importlib.metadata import version as _v

    typer.echo(_v("verlprof"))


def main() -> None:
    """Console entry point: one-line errors, non-zero exit, never a traceback for bad input."""
    from ..stages.core.errors import VerlprofError

    try:
        app()
    except VerlprofError as err:
        typer.echo(f"verlprof: error: {err}", err=True)
        sys.exit(err.exit_code)


if __name__ == "__main__":
    main()
