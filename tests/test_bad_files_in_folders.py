"""A corrupt file inside a SOURCE folder is named with its reason, as when it is given alone
(issue 34): random bytes named `worker_process_4242.sqlite`, a `.json.gz` that is not gzip, a gzip
of something that is not JSON. Alone in a folder: exit 4 (nothing summarized) and the one error
line names each file and why; beside a good trace: the bundle is written (exit 0) and the closing
line names the unreadable file. "JSON without traceEvents" is said only of real JSON.
"""
from __future__ import annotations

import gzip
import os
import random
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from verlprof.stages.gather import gather, unreadable

ROOT = Path(__file__).resolve().parents[1]
SAMPLE = ROOT / "samples" / "tiny_run"
GOOD_TRACE = next((SAMPLE / "outputs" / "profile").glob("*step2_rank0*.json.gz"))


def verlprof(*args: str | Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "verlprof.pipeline.cli", *map(str, args)],
                          capture_output=True, text=True, timeout=300, env={**os.environ, "COLUMNS": "200"})


def _noise(n: int, seed: int) -> bytes:
    return random.Random(seed).randbytes(n)


def make_bad(folder: Path) -> dict[str, str]:
    """Three corrupt candidates in `folder`; returns name -> the reason verlprof must give."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "worker_process_4242.sqlite").write_bytes(_noise(5000, 1))
    (folder / "notgzip.json.gz").write_bytes(b"\x00\x01" + _noise(3000, 2))
    (folder / "words.json.gz").write_bytes(gzip.compress(b"hello, this is plain text and not JSON\n" * 20))
    return {"worker_process_4242.sqlite": "not an SQLite database (bad header)",
            "notgzip.json.gz": "not gzip data (bad header)",
            "words.json.gz": "gzip of something that is not JSON"}


def test_gather_lists_each_unreadable_candidate_with_its_reason(tmp_path: Path) -> None:
    expect = make_bad(tmp_path / "run")
    (tmp_path / "run" / "meta.json").write_text('{"not": "a trace"}')       # real JSON, not a trace
    got = gather([tmp_path / "run"], with_hashes=False)
    assert got.artifacts == []
    assert dict(unreadable(got.skipped)) == expect
    assert dict(got.skipped)["meta.json"] == "JSON without traceEvents (not a chrome trace)"


@pytest.mark.parametrize("name", ["worker_process_4242.sqlite", "notgzip.json.gz", "words.json.gz"])
def test_a_lone_bad_file_in_a_folder_is_named_exit_4(tmp_path: Path, name: str) -> None:
    expect = make_bad(tmp_path / "all")
    (tmp_path / "run").mkdir()
    shutil.copy(tmp_path / "all" / name, tmp_path / "run" / name)
    res = verlprof("collect", tmp_path / "run", "-o", tmp_path / "out", "--work", tmp_path / "work")
    assert res.returncode == 4, res.stdout + res.stderr
    assert res.stderr.strip() == (f"verlprof: error: no readable profiler artifacts in run: {name}: "
                                  f"{expect[name]}; no bundle written")
    assert "JSON without traceEvents" not in res.stderr and "Traceback" not in res.stderr
    assert not (tmp_path / "out").exists()


def test_the_same_file_given_alone_gets_the_same_reason(tmp_path: Path) -> None:
    expect = make_bad(tmp_path / "run")
    for name, why in expect.items():
        res = verlprof("collect", tmp_path / "run" / name, "-o", tmp_path / "out", "--work", tmp_path / "work")
        assert res.returncode == 2, res.stderr
        assert res.stderr.strip().endswith(why), res.stderr
        assert "JSON without traceEvents" not in res.stderr


def test_all_three_in_one_folder_are_all_named(tmp_path: Path) -> None:
    expect = make_bad(tmp_path / "run")
    res = verlprof("collect", tmp_path / "run", "-o", tmp_path / "out", "--work", tmp_path / "work")
    assert res.returncode == 4
    for name, why in expect.items():
        assert f"{name}: {why}" in res.stderr


def test_bad_files_beside_a_good_trace_bundle_written_and_bad_ones_named(tmp_path: Path) -> None:
    expect = make_bad(tmp_path / "run")
    shutil.copy(GOOD_TRACE, tmp_path / "run")
    res = verlprof("collect", tmp_path / "run", "-o", tmp_path / "out", "--work", tmp_path / "work")
    assert res.returncode == 0, res.stdout + res.stderr       # something was summarized
    assert (tmp_path / "out" / "manifest.json").is_file()
    text = " ".join(res.stdout.split())                        # rich wraps the closing line
    closing = text[text.index("1 artifact: "):]
    assert "1 summarized" in closing and "3 files unreadable: " in closing
    for name, why in expect.items():
        assert f"{name} ({why})" in closing
