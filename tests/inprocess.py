"""`verlprof` commands run in the test process, for tests about a command's behaviour rather than
about the process (signals, the wheel and a fresh environment keep their subprocess).

Why: each `python -m verlprof...` subprocess starts an interpreter and imports pandas, pyarrow and
the stages again (~1 s on the 2-core CI machine, 44 of them in the suite); `run_cli` calls the
console script's own `main`, so the exit code, stdout and stderr are the command line's.
"""
from __future__ import annotations

import os
import subprocess
from dataclasses import dataclass
from pathlib import Path

from click.testing import CliRunner
from verlprof.pipeline.cli import main


def run_cli(*args: str | Path, columns: int = 80, cwd: Path | None = None,
            env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """`verlprof ARGS` run in this process by `verlprof.pipeline.cli.main`, the console script's
    entry point: the exit code, stdout and stderr the command line gives (a `VerlprofError` is its
    one-line `verlprof: error:` and exit code, as there), without starting an interpreter and
    importing pandas/pyarrow again (~1 s a call on the 2-core CI machine). `env` is set for the
    call only; `cwd` is entered for the call only."""
    argv = [str(a) for a in args]
    here = os.getcwd()
    with CliRunner().isolation(env={"COLUMNS": str(columns), **(env or {})}) as (out, err, _):
        code = 0
        try:
            if cwd is not None:
                os.chdir(cwd)
            main(argv)
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
        finally:
            os.chdir(here)
    return subprocess.CompletedProcess(["verlprof", *argv], code, out.getvalue().decode(), err.getvalue().decode())


@dataclass(frozen=True)
class Collected:
    """One `verlprof collect`: its exit code, its terminal output, and the bundle it wrote
    (read-only by convention: a test that changes a bundle copies it first)."""

    code: int
    stdout: str
    stderr: str
    out: Path
