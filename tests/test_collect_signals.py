"""SIGINT and SIGTERM stop a real `verlprof collect` cleanly (issue 30).

A real collect (the `verlprof` console script, `--jobs 2`, so a real process pool) of six real nsys
exports is signalled once it is in pass 2 (its staging folder beside OUT exists: pass 2 makes it
before its first job). It must exit within 10 s with 130 (SIGINT) or 143 (SIGTERM), print exactly
`interrupted: nothing published; a re-run resumes`, leave no OUT, no staging folder, no temp file
in the WORK dir and no worker process (every child seen while it ran is gone, and no process is
left in a worker's process group); a re-run of the same collect then completes with exit 0.
"""
from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from testdata import data_dir, data_path

LINE = "interrupted: nothing published; a re-run resumes"
VERLPROF = Path(sys.executable).with_name("verlprof")


def _sources(root: Path) -> Path:
    src = root / "run"
    shutil.copytree(data_dir("gloo_ranks/nsys"), src)
    shutil.copy(data_path("gpu_captures/whole-emit-nvtx/whole_956.sqlite"), src / "worker_process_956.sqlite")
    shutil.copy(data_path("h200-nsys-2025.3/whole/whole_1873.sqlite"), src / "worker_process_1873.sqlite")
    return src


def _children(pid: int) -> set[int]:
    """Every live descendant of `pid` (from /proc: each process's parent)."""
    parent: dict[int, int] = {}
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            try:
                stat = (d / "stat").read_text()
            except OSError:
                continue
            parent[int(d.name)] = int(stat.rsplit(")", 1)[1].split()[1])
    out: set[int] = set()
    todo = [pid]
    while todo:
        p = todo.pop()
        kids = [c for c, pp in parent.items() if pp == p and c not in out]
        out.update(kids)
        todo += kids
    return out


def _alive(pid: int) -> bool:
    """Running (a zombie counts as gone: it runs nothing and holds nothing)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def _in_group(pgid: int) -> list[int]:
    out = []
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            try:
                fields = (d / "stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(fields[2]) == pgid and fields[0] != "Z":
                out.append(int(d.name))
    return out


@pytest.mark.parametrize("sig, code", [(signal.SIGINT, 130), (signal.SIGTERM, 143)], ids=["SIGINT", "SIGTERM"])
def test_a_signal_in_pass_2_stops_collect_and_publishes_nothing(tmp_path: Path, sig: int, code: int) -> None:
    src = _sources(tmp_path)
    out, work = tmp_path / "out", tmp_path / "work"
    cmd = [str(VERLPROF), "collect", str(src), "-o", str(out), "--work", str(work), "--jobs", "2"]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    seen: set[int] = set()
    deadline = time.monotonic() + 240
    while not any(p.name.startswith(".out.tmp-") for p in tmp_path.iterdir()):   # pass 2 has begun
        assert proc.poll() is None, proc.communicate()
        assert time.monotonic() < deadline, "collect never reached pass 2"
        seen |= _children(proc.pid)
        time.sleep(0.005)
    seen |= _children(proc.pid)
    assert seen, "no worker process was started"
    t0 = time.monotonic()
    proc.send_signal(sig)
    stdout, stderr = proc.communicate(timeout=10)
    assert time.monotonic() - t0 < 10
    assert proc.returncode == code, stderr[-2000:]
    assert stderr.strip() == LINE, stderr[-2000:]
    assert not out.exists()
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".out")] == []
    assert list(work.rglob(".*.tmp-*")) == [] and list(work.glob("verlprof-*")) == []
    time.sleep(0.2)
    left = [p for p in seen if _alive(p)]
    assert left == [], f"workers still running: {left}"
    assert [p for w in seen for p in _in_group(w)] == []
    again = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    assert again.returncode == 0, again.stderr[-2000:]
    assert (out / "manifest.json").is_file()
