"""`verlprof summarize`'s terminal fits the terminal (issue 34), as collect's lines do: at 80 and
60 columns every line fits (a single word longer than the line, a path, stays whole), names are
never cut with an ellipsis, a number is never broken, cut or wrapped away from its unit, and a
change (`124.43 -> 164.02 (+31.8%)`) stays on one line.

The bundles are real collects of tests/data/straggler_runs (three 4-rank gloo runs whose step
times differ) and one of the `even` run beside two corrupt files (an incomplete run, whose long
reason is wrapped under its line).
"""
from __future__ import annotations

import gzip
import random
import re
import shutil
import subprocess
from pathlib import Path

import pandas as pd
import pytest
from inprocess import run_cli

DATA = Path(__file__).resolve().parent / "data" / "straggler_runs"
RUNS = ("even", "gen_slow", "update_slow")
INCOMPLETE = "even_beside_two_corrupt_files"


def verlprof(*args: str | Path, columns: int = 80) -> subprocess.CompletedProcess[str]:
    """The command, in-process through the console script's `main` (exit code, stdout, stderr)."""
    return run_cli(*args, columns=columns)


@pytest.fixture(scope="module")
def bundles(tmp_path_factory: pytest.TempPathFactory, collect_once) -> dict[str, Path]:
    base = tmp_path_factory.mktemp("sumcols")
    out = {}
    for name in RUNS:   # the same collects as tests/test_straggler_runs.py's (with --html), shared
        res = collect_once(DATA / name, "--html")
        assert res.code == 0, res.stdout + res.stderr
        out[name] = res.out
    run = shutil.copytree(DATA / "even", base / "in" / "even")
    (run / "worker_process_4242.sqlite").write_bytes(random.Random(1).randbytes(5000))
    (run / "words.json.gz").write_bytes(gzip.compress(b"plain text, not JSON\n" * 20))
    res = verlprof("collect", run, "-o", base / INCOMPLETE, "--work", base / "work")
    assert res.returncode == 3, res.stdout + res.stderr
    out[INCOMPLETE] = base / INCOMPLETE
    return out


@pytest.fixture(scope="module")
def shown(bundles: dict[str, Path], tmp_path_factory: pytest.TempPathFactory) -> dict[int, tuple[str, Path]]:
    """columns -> (summarize's stdout, its OUT)."""
    base = tmp_path_factory.mktemp("sum")
    out = {}
    for cols in (80, 60):
        res = verlprof("summarize", *bundles.values(), "-o", base / f"s{cols}", "--work", base / "work",
                       "-j", "1", columns=cols)
        assert res.returncode == 3, res.stdout + res.stderr        # one run is incomplete
        out[cols] = (res.stdout, base / f"s{cols}")
    return out


@pytest.mark.parametrize("cols", [80, 60])
def test_every_line_fits(shown: dict[int, tuple[str, Path]], cols: int) -> None:
    text, _ = shown[cols]
    wide = [ln for ln in text.splitlines() if len(ln.rstrip()) > cols and " " in ln.strip()]
    assert not wide, wide
    assert "…" not in text                                     # no name cut with an ellipsis


@pytest.mark.parametrize("cols", [80, 60])
def test_numbers_whole_and_beside_their_units(shown: dict[int, tuple[str, Path]], cols: int) -> None:
    text, out = shown[cols]
    lines = text.splitlines()
    for ln, nxt in zip(lines, lines[1:]):
        assert not (re.search(r"(^|\s)[\d.,:]+$", ln.rstrip()) and re.match(r"\s*(ms|MB|%|->)\b|\s*->", nxt)), (ln, nxt)
        assert not ln.rstrip().endswith("->"), (ln, nxt)
    # every baseline value of the table is shown whole, in the row of its stage
    compare = pd.read_parquet(out / "compare.parquet")
    wall = compare[compare["metric"] == "wall_ns"].drop_duplicates("stage")
    rows = {cells[0].strip(): cells for ln in lines if ln.startswith("│")
            for cells in [ln.strip("│").split("│")] if cells[0].strip()}
    for stage, base_ns in zip(wall["stage"], wall["baseline_ns"]):
        ms = base_ns / 1e6
        value = f"{ms:,.2f}" if 1 <= abs(ms) < 1000 else f"{ms:,.3f}" if abs(ms) < 1 else f"{ms:,.0f}"
        assert rows[stage][2].strip() == value, (stage, rows[stage])
        assert rows[stage][1].strip() == "actor_rollout_ref"    # the role whole, never folded


@pytest.mark.parametrize("cols", [80, 60])
def test_each_change_is_whole_and_kept_together(shown: dict[int, tuple[str, Path]], cols: int) -> None:
    text, _ = shown[cols]
    lines = text.splitlines()
    start = next(i for i, ln in enumerate(lines) if ln.startswith("changes above the noise"))
    start = next(i for i in range(start, len(lines)) if lines[i].endswith("ms):"))   # the heading's end
    changes: list[str] = []
    for ln in lines[start + 1:]:
        if ln.startswith("    "):
            changes[-1] += " " + ln.strip()                     # a continuation of the change above
        elif ln.startswith("  ") and not ln.startswith("   "):
            changes.append(ln.strip())
        else:
            break
    assert len(changes) >= 3
    for ch in changes:
        assert re.fullmatch(r"\S+: \S+ \(\S+\) \w+ [\d.,]+ -> [\d.,]+ \((?:[+-][\d.]+%|from 0)\)", ch), ch
    for ln in lines[start + 1:start + 1 + 2 * len(changes)]:
        if "->" in ln:
            assert re.search(r"[\d.,]+ -> [\d.,]+ \(", ln), ln   # the change on one physical line
    assert any(c.startswith("gen_slow: actor_update (actor_rollout_ref) wall_ms ") for c in changes)


@pytest.mark.parametrize("cols", [80, 60])
def test_runs_named_whole_with_their_reasons(shown: dict[int, tuple[str, Path]], cols: int) -> None:
    text, _ = shown[cols]
    lines = text.splitlines()
    runs = lines.index("runs:")
    assert any(re.fullmatch(rf"  {INCOMPLETE}\s+incomplete", ln) for ln in lines[runs:])
    i = next(i for i, ln in enumerate(lines) if ln.startswith(f"  {INCOMPLETE}"))
    why = " ".join(ln.strip() for ln in lines[i + 1:i + 5] if ln.startswith("    "))
    assert why.startswith("└ 2 artifacts failed in its collect: ")
    assert "not an SQLite database (bad header)" in why and "gzip of something that is not JSON" in why
    flat = " ".join(text.split())
    assert f"4 runs: 3 summarized, 1 incomplete, 0 skipped: {INCOMPLETE}" in flat
    if cols == 60:   # not every run fits beside the names: the title says which are shown
        assert re.search(r"first \d of 3 other runs shown \(all: compare\.parquet\)", flat)
