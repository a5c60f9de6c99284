"""Installed, the code imports as verlprof.pipeline / verlprof.stages, never as bare top-level modules."""
import subprocess
import sys
from pathlib import Path


def test_only_the_verlprof_namespace_is_installed(tmp_path: Path) -> None:
    probe = ("import importlib.util as u, verlprof.pipeline.cli, verlprof.stages.gather.discover;"
             "print(u.find_spec('pipeline') is None, u.find_spec('stages') is None)")
    out = subprocess.run([sys.executable, "-c", probe], cwd=tmp_path, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["True", "True"]


def test_console_script_lists_every_stage_command(tmp_path: Path) -> None:
    out = subprocess.run(["verlprof", "--help"], cwd=tmp_path, capture_output=True, text=True, timeout=60,
                         env={"COLUMNS": "200", "PATH": __import__("os").environ["PATH"]})
    assert out.returncode == 0, out.stderr
    for cmd in ("collect", "scrub", "check", "window", "summarize", "pack", "doctor"):
        assert f" {cmd} " in out.stdout, cmd
