"""Whole messages (issue 34): nsys's install advice is never cut in its middle, and advice shared by
N reports is said once, with the count, on stdout only (stderr's closing error points at it); with
no SOURCE, collect says where it looked (which Ray session, which `./outputs/profile`) in absolute
paths.
"""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

from verlprof.stages.core.errors import plain_reason
from verlprof.stages.export.nsys_tool import INSTALL_HINT

ROOT = Path(__file__).resolve().parents[1]
SAMPLE = ROOT / "samples" / "tiny_run"


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("VERLPROF_NSYS", "RAY_TMPDIR", "TMPDIR")}
    env.update(COLUMNS="80", **extra)
    return env


def verlprof(*args: str | Path, cwd: Path | None = None, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "verlprof.pipeline.cli", *map(str, args)], cwd=cwd,
                          capture_output=True, text=True, timeout=300, env=_env(**env))


def flat(text: str) -> str:
    return " ".join(text.split())


def test_plain_reason_keeps_the_install_advice_whole() -> None:
    msg = f"nsys: not found on PATH; {INSTALL_HINT}"
    assert plain_reason(msg, path="worker_process_1.nsys-rep") == msg
    assert len(msg) > 300                              # it used to be cut at 200 characters


def test_a_foreign_dump_is_still_cut_at_a_clause_or_marked() -> None:
    dump = "; ".join(f"clause number {i} of a long library message" for i in range(40))
    short = plain_reason(dump)
    assert len(short) <= 480 and short.endswith("; …") and short.count(";") < 40
    blob = "word " * 300
    assert plain_reason(blob).endswith("…") and len(plain_reason(blob)) <= 480


def test_missing_nsys_advice_said_once_with_the_count(tmp_path: Path) -> None:
    run = tmp_path / "run"
    run.mkdir()
    for rep in sorted((SAMPLE / "ray_logs" / "nsight").glob("*.nsys-rep")):
        shutil.copy(rep, run)                          # reports only: they need an nsys
    bare = tmp_path / "bin"                            # a PATH without nsys
    bare.mkdir()
    res = verlprof("collect", run, "-o", tmp_path / "out", "--work", tmp_path / "work", PATH=str(bare))
    assert res.returncode == 4, res.stdout + res.stderr
    out = flat(res.stdout)
    assert out.count(flat(INSTALL_HINT)) == 1, res.stdout           # whole, and once
    assert "for all 3 above: nsys: not found on PATH; " + flat(INSTALL_HINT) in out
    assert out.count("nsys: not found on PATH (what to do: below, once for all 3)") == 3
    assert "…" not in res.stdout and "pu..." not in res.stdout
    assert res.stderr.strip() == ("verlprof: error: nothing could be summarized: 3 of 3 artifacts failed "
                                  "(worker_process_300.nsys-rep, worker_process_452.nsys-rep, "
                                  "worker_process_473.nsys-rep: why is said above); no bundle written")


def _ray_session(base: Path, name: str) -> Path:
    nsight = base / "ray" / name / "logs" / "nsight"
    nsight.mkdir(parents=True)
    shutil.copy(SAMPLE / "ray_logs" / "nsight" / "worker_process_473.sqlite", nsight)
    (base / "ray" / "session_latest").symlink_to(base / "ray" / name)
    return nsight


def test_default_source_names_the_ray_session_and_outputs_profile_absolute(tmp_path: Path) -> None:
    here = tmp_path / "launch"
    (here / "outputs" / "profile").mkdir(parents=True)
    for t in (SAMPLE / "outputs" / "profile").glob("*step2*.json.gz"):
        shutil.copy(t, here / "outputs" / "profile")
    nsight = _ray_session(tmp_path / "raytmp", "session_2026-12-01_10-00-00_000000_1")
    res = verlprof("collect", "-o", tmp_path / "out", "--work", tmp_path / "work", cwd=here,
                   RAY_TMPDIR=str(tmp_path / "raytmp"))
    assert res.returncode == 0, res.stdout + res.stderr
    first = flat(res.stdout.split("verlprof collect ->")[0])
    assert first == (f"no SOURCE given: reading the newest Ray session's {nsight.resolve()} and "
                     f"./outputs/profile ({here / 'outputs' / 'profile'})")


def test_default_source_with_nothing_names_both_places(tmp_path: Path) -> None:
    here = tmp_path / "launch"
    here.mkdir()
    res = verlprof("collect", "-o", tmp_path / "out", "--work", tmp_path / "work", cwd=here,
                   RAY_TMPDIR=str(tmp_path / "none"), TMPDIR=str(tmp_path / "none"))
    assert res.returncode == 2
    err = res.stderr.strip()
    assert err.startswith("verlprof: error: no SOURCE given, and nothing where verl writes: "
                          f"no Ray session with logs/nsight in {tmp_path / 'none' / 'ray'}")
    assert f"no ./outputs/profile ({here / 'outputs' / 'profile'})" in err
    assert not (tmp_path / "work").exists()


def test_the_importer_advice_keeps_its_command_whole() -> None:
    """`ln -s /usr/lib/... /usr/lib/...` is what to type: its paths are the advice, not a leak."""
    from verlprof.stages.export.nsys_tool import IMPORTER_HINT

    msg = f"x.qdstrm: unfinished report (.qdstrm) not imported: no QdstrmImporter beside nsys 2022.4; {IMPORTER_HINT}"
    got = plain_reason(msg, path="x.qdstrm")
    assert got.endswith(IMPORTER_HINT) and "`ln -s /usr/lib/nsight-systems/host-linux-x64 " in got
    assert plain_reason("/tmp/w/abc/x.sqlite: damaged like /tmp/w/abc/y.sqlite") == "damaged like y.sqlite"
