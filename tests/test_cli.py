"""The command line behaves as Python tools do (issue 20): `--version`, flags shown as flags, `-o/--out`
on every command that writes, one name per meaning (`--top-kernels` vs `--top-changes`), an example at
the end of every command's help, and `window` skipping what `collect` skips.
"""
from __future__ import annotations

import re
import subprocess
import sys
from importlib.metadata import version
from pathlib import Path

import pytest
from inprocess import run_cli
from typer.testing import CliRunner
from verlprof.pipeline.cli import app

REPO = Path(__file__).resolve().parents[1]
SAMPLE = REPO / "samples" / "tiny_run"
COMMANDS = ("collect", "scrub", "check", "window", "summarize", "pack", "doctor", "version")
runner = CliRunner()


def _help(*args: str) -> str:
    """The help text as a terminal of 100 columns shows it (no colour codes)."""
    res = runner.invoke(app, [*args, "--help"], env={"COLUMNS": "100", "NO_COLOR": "1", "TERM": "dumb"})
    assert res.exit_code == 0, res.output
    return res.output


def test_version_flag_prints_the_installed_version() -> None:
    out = subprocess.run([sys.executable, "-m", "verlprof.pipeline.cli", "--version"],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout == f"verlprof {version('verlprof')}\n"
    assert runner.invoke(app, ["version"]).output == out.stdout


@pytest.mark.parametrize("command", COMMANDS)
def test_flags_take_no_value_in_help(command: str) -> None:
    """No option row shows `<bool>`: a flag is `--html`, a pair `--verify/--no-verify`."""
    text = _help(command)
    assert "<bool>" not in text
    if command == "collect":
        assert re.search(r"--html\s+Also write report\.html", text)


@pytest.mark.parametrize("command", COMMANDS)
def test_every_help_ends_with_an_example(command: str) -> None:
    lines = [ln.strip() for ln in _help(command).splitlines() if ln.strip()]
    assert lines[-1].startswith("Example: verlprof "), lines[-3:]
    # the example names a command the help is about (or, for the top level, a real command)
    assert lines[-1].split()[2] in COMMANDS


def test_top_level_help_ends_with_an_example() -> None:
    lines = [ln.strip() for ln in _help().splitlines() if ln.strip()]
    assert lines[-1] == "Example: verlprof collect samples/tiny_run -o /tmp/verlprof-sample --html"


@pytest.mark.parametrize("command", ("collect", "scrub", "window", "summarize", "pack"))
def test_output_is_minus_o_or_out_everywhere(command: str) -> None:
    assert re.search(r"--out\s+-o\s", _help(command)), command


def test_pack_writes_where_out_says_and_keeps_output_as_a_hidden_alias(tmp_path: Path) -> None:
    bundle = tmp_path / "OUT"
    (bundle / "summaries").mkdir(parents=True)
    (bundle / "manifest.json").write_text('{"version": 1}\n')
    for flag, name in (("--out", "a.tar.gz"), ("-o", "b.tar.gz"), ("--output", "c.tar.gz")):
        res = runner.invoke(app, ["pack", str(bundle), flag, str(tmp_path / name)])
        assert res.exit_code == 0, res.output
        assert (tmp_path / name).is_file()
    assert "--output" not in _help("pack")


def test_kernels_per_phase_and_kernel_changes_have_their_own_names() -> None:
    for command in ("collect", "window"):
        text = _help(command)
        assert "--top-kernels" in text and not re.search(r"--top\s", text)
    text = _help("summarize")
    assert "--top-changes" in text and "--top-kernels" not in text and not re.search(r"--top\s", text)


def test_window_on_the_shipped_sample_skips_what_collect_skips() -> None:
    """The sample holds `sample_manifest.json` (no chrome trace): collect skips it, so does window."""
    assert (SAMPLE / "sample_manifest.json").is_file()
    out = run_cli("window", SAMPLE, columns=200)
    assert out.returncode == 0, out.stderr
    assert "sample_manifest" not in out.stdout + out.stderr
    assert re.search(r"^window: step 2 ", out.stdout, re.M)
    for pid in (300, 452, 473):   # every nsys export of the sample, and both ranks' torch traces
        assert f"worker_process_{pid}.sqlite" in out.stdout
    assert out.stdout.count("actor-rollout-ref_train_step") == 6
