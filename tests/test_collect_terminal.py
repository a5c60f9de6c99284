"""collect's terminal lines (issue 34): the artifact lines fit 80 columns and, at 60, names get a
line of their own instead of being broken apart; a number is never wrapped away from its unit or
noun; `--pack` says where it wrote; two unrelated runs given to one collect get a warning.
"""
from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest
from inprocess import run_cli
from verlprof.pipeline.commands.wrap import fit_lines

ROOT = Path(__file__).resolve().parents[1]
SAMPLE = ROOT / "samples" / "tiny_run"
H200_STEP2 = next((ROOT / "tests" / "data" / "h200-torch-2.11").glob("*step2*.json.gz"))
SAMPLE_STEP2 = next((SAMPLE / "outputs" / "profile").glob("*step2_rank0*.json.gz"))


def verlprof(*args: str | Path, columns: int = 80) -> subprocess.CompletedProcess[str]:
    """The command, in-process through the console script's `main` (exit code, stdout, stderr)."""
    return run_cli(*args, columns=columns)


@pytest.fixture(scope="module")
def sample_out(collect_once) -> dict[int, str]:
    out = {}
    for cols in (80, 60):
        res = collect_once(SAMPLE, columns=cols)
        assert res.code == 0, res.stdout + res.stderr
        out[cols] = res.stdout
    return out


def _artifact_part(stdout: str) -> list[str]:
    lines = stdout.splitlines()
    end = next(i for i, ln in enumerate(lines) if ln.startswith("trainer:"))   # the role tables follow
    return lines[:end]


def test_artifact_lines_fit_80_columns(sample_out: dict[int, str]) -> None:
    part = _artifact_part(sample_out[80])
    assert max(len(ln.rstrip()) for ln in part) <= 80, [ln for ln in part if len(ln.rstrip()) > 80]
    names = {p.name for p in SAMPLE.rglob("worker_process_*")}
    for name in names:                                  # short names are shown whole, on their row
        assert any(ln.rstrip().endswith(name) for ln in part), name


def test_at_60_columns_names_are_not_broken_apart(sample_out: dict[int, str]) -> None:
    part = _artifact_part(sample_out[60])
    assert max(len(ln.rstrip()) for ln in part) <= 60, [ln for ln in part if len(ln.rstrip()) > 60]
    for rep in sorted((SAMPLE / "ray_logs" / "nsight").iterdir()):
        assert f"    {rep.name}" in part, rep.name        # on a line of its own, whole
    for ln in part:                                    # a torch trace name: shortened at its head only
        if ln.strip().endswith(".json.gz"):
            assert re.fullmatch(r" {4}…?[\w.-]+_step\d_rank\d-of-2_pid\d+\.json\.gz", ln), ln


def test_numbers_stay_with_their_units(sample_out: dict[int, str]) -> None:
    for cols in (80, 60):
        part = _artifact_part(sample_out[cols])
        for ln, nxt in zip(part, part[1:]):            # a number and its unit/noun on one line
            split = re.search(r"(^|\s)[\d.,:]+$", ln.rstrip()) and \
                re.match(r"\s*(ms|s|MB|KB|GB|%|summarized|skipped|failed|artifacts?|files?|reports?)\b(?! +[\d.]+ (B|KB|MB|GB) )", nxt)
            assert not split, (cols, ln, nxt)
        window = next(i for i, ln in enumerate(part) if ln.startswith("window: "))
        assert "99.8 ms" in part[window] and "1: 374 ms" in " ".join(part[window:window + 2])


def test_fit_lines_never_breaks_after_a_number() -> None:
    line = "window: step 2 (default, 99.8 ms; step 1 warms up; profiled: 1: 374 ms, 2: 99.8 ms, 3: 144 ms)"
    for width in range(30, 100):
        pieces = [t.plain for t in fit_lines(line, width, 2)]
        assert " ".join(p.strip() for p in pieces) == line
        for p in pieces:
            assert len(p) <= width
            assert not re.search(r"(^|\s)[\d.:,]+$", p.rstrip()), (width, pieces)
    long_path = "bundle: /a/" + "x" * 100 + " (safe to share)"
    assert [t.plain for t in fit_lines(long_path, 40)][1] == "/a/" + "x" * 100   # overflows, whole


def test_pack_says_where_it_wrote(tmp_path: Path) -> None:
    (tmp_path / "run").mkdir()
    shutil.copy(SAMPLE_STEP2, tmp_path / "run")
    res = verlprof("collect", tmp_path / "run", "-o", tmp_path / "out", "--work", tmp_path / "w", "--pack")
    assert res.returncode == 0, res.stdout + res.stderr
    archive = tmp_path / "out.tar.gz"
    assert archive.is_file()
    assert f"packed: {archive} ({archive.stat().st_size / 1e6:.2f} MB, SHA256SUMS inside)" in res.stdout


def test_two_unrelated_runs_warn_one_run_does_not(tmp_path: Path, sample_out: dict[int, str]) -> None:
    for name, src in (("a", SAMPLE_STEP2), ("b", H200_STEP2)):
        (tmp_path / name).mkdir()
        shutil.copy(src, tmp_path / name)
    res = verlprof("collect", tmp_path / "a", tmp_path / "b", "-o", tmp_path / "out", "--work", tmp_path / "w",
                   columns=200)
    assert res.returncode == 0, res.stdout + res.stderr
    warn = [ln for ln in res.stdout.splitlines() if "apart across sources" in ln]
    assert len(warn) == 1, res.stdout
    assert re.search(r"warning: the chosen step starts 2\.\d h apart across sources", warn[0]), warn[0]
    assert "two different runs given to one collect?" in warn[0]
    assert "apart across sources" not in sample_out[80]        # one run's ranks: no warning
