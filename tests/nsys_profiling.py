"""Every `nsys profile` the tests run goes through `profile_with_nsys`: one session at a time.

Why one place: nsys profile sessions started at the same moment on one machine fight over nsys's
per-machine agent and its per-pid semaphores. Seen in CI: two sessions started side by side by one
fixture both ended with "Connection to the Agent lost." and exit 0 but no report; nsys 2022.4
also loses `sem_open` races (ENOENT). With pytest-xdist, fixtures of different workers start
sessions at the same time too. So every test session of nsys here holds one machine-wide lock
(shared by the xdist workers) and, when nsys still leaves no report, is retried: what a user
would do. A session that fails every attempt fails the test with nsys's own words.
"""
from __future__ import annotations

import fcntl
import subprocess
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path

import pytest

ATTEMPTS = 3
_LOCK = Path(tempfile.gettempdir()) / "verlprof-tests-nsys-profile.lock"


def profile_with_nsys(cmd: Sequence[str], report: Path, *, cwd: Path, env: Mapping[str, str] | None = None,
                      timeout: int = 300, expect_report: bool = True) -> subprocess.CompletedProcess[str]:
    """Run `cmd` (an `nsys profile ...` command line) until `report` exists, one session at a time.

    `expect_report=False` runs it once (for a profile meant to stop short, e.g. at a `.qdstrm`).
    """
    last: subprocess.CompletedProcess[str] | None = None
    with open(_LOCK, "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        for _ in range(ATTEMPTS if expect_report else 1):
            last = subprocess.run(list(cmd), cwd=cwd, env=None if env is None else dict(env), timeout=timeout,
                                  stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
            if not expect_report or (last.returncode == 0 and report.is_file()):
                return last
            report.unlink(missing_ok=True)
    assert last is not None
    pytest.fail(f"nsys profile failed {ATTEMPTS} times (exit {last.returncode}, {report.name} "
                f"{'written' if report.is_file() else 'missing'}): {last.stdout[-1500:]}")


def export_with_nsys(nsys: Path | str, report: Path, db: Path, *, cwd: Path | None = None,
                     timeout: int = 300) -> Path:
    """`nsys export --type sqlite` of `report` into `db`; fails the test with nsys's words."""
    exp = subprocess.run([str(nsys), "export", "--type", "sqlite", "--force-overwrite=true", "-o", str(db),
                          str(report)], cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                         text=True, timeout=timeout)
    if exp.returncode != 0 or not db.is_file():
        pytest.fail(f"nsys export failed (exit {exp.returncode}): {exp.stdout[-1500:]}")
    return db


__all__ = ["profile_with_nsys", "export_with_nsys", "ATTEMPTS"]
