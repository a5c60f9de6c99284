"""SIGINT and SIGTERM stop `scrub --jobs 2`, `window --phases --jobs 2` and `summarize --jobs 2`
as they stop collect (issue 41; tests/test_collect_signals.py for collect): real subprocesses of
the `verlprof` console script on real nsys exports, signalled once their worker pool runs. Each must
exit within 10 s with 130 / 143, print exactly the one line, leave no temp file under OUT or the
WORK dir and no worker process (every child seen while it ran is gone)."""
from __future__ import annotations

import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from test_collect_signals import LINE, _alive, _children, _sources

VERLPROF = Path(sys.executable).with_name("verlprof")


def _signalled(cmd: list[str], sig: int, tmp: Path) -> tuple[subprocess.CompletedProcess, set[int]]:
    """Run `cmd`, send `sig` once it has two worker processes, return what came back and every
    child seen while it ran."""
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env={**__import__("os").environ, "VERLPROF_CACHE": str(tmp / "work")})
    seen: set[int] = set()
    deadline = time.monotonic() + 120
    while len(seen) < 2:
        assert proc.poll() is None, proc.communicate()
        assert time.monotonic() < deadline, "no worker pool started"
        seen |= _children(proc.pid)
        time.sleep(0.005)
    time.sleep(0.3)                        # the workers are busy with an input by now
    seen |= _children(proc.pid)
    t0 = time.monotonic()
    proc.send_signal(sig)
    out, err = proc.communicate(timeout=10)
    assert time.monotonic() - t0 < 10
    time.sleep(0.2)
    return subprocess.CompletedProcess(cmd, proc.returncode, out, err), seen


def _no_temps(*folders: Path) -> None:
    for f in folders:
        if f.exists():
            assert [p for p in f.rglob("*") if ".tmp-" in p.name] == [], f


@pytest.mark.parametrize("sig, code", [(signal.SIGINT, 130), (signal.SIGTERM, 143)], ids=["SIGINT", "SIGTERM"])
@pytest.mark.parametrize("command", ["scrub", "window", "summarize"])
def test_a_signal_stops_every_command_with_workers(tmp_path: Path, command: str, sig: int, code: int) -> None:
    src = _sources(tmp_path)
    out = tmp_path / "out"
    if command == "scrub":
        cmd = [str(VERLPROF), "scrub", str(src), "-o", str(out), "--jobs", "2"]
    elif command == "window":
        cmd = [str(VERLPROF), "window", str(src), "--phases", "--jobs", "2"]
    else:
        second = tmp_path / "run2"
        shutil.copytree(src, second)
        cmd = [str(VERLPROF), "summarize", str(src), str(second), "-o", str(out), "--jobs", "2"]
    res, seen = _signalled(cmd, sig, tmp_path)
    assert res.returncode == code, res.stderr[-2000:]
    assert res.stderr.strip() == LINE, res.stderr[-2000:]
    _no_temps(out, tmp_path / "work")
    assert [p for p in seen if _alive(p)] == [], "workers still running"
    if command == "summarize":
        assert not out.exists() or not any(out.iterdir()), sorted(out.rglob("*"))
