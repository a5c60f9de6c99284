"""A corrupt file inside a SOURCE folder is named with its reason, as when it is given alone
(issue 34): random bytes named `worker_process_4242.sqlite`, a `.json.gz` that is not gzip, a gzip
of something that is not JSON. Alone in a folder: exit 4 (nothing summarized) and the one error
line names each file and why; beside a good trace: each is a failed artifact with that reason
(its row, the closing line, manifest.json's status.failed_artifacts) and the exit is 3. "JSON without traceEvents" is said only of real JSON.
"""
from __future__ import annotations

import gzip
import json
import random
import shutil
import subprocess
from pathlib import Path

import pytest
from inprocess import run_cli
from verlprof.stages.gather import gather, unreadable
from verlprof.stages.scrub.provenance import REVIEW_NAME, read_review_map, reveal

ROOT = Path(__file__).resolve().parents[1]
SAMPLE = ROOT / "samples" / "tiny_run"
GOOD_TRACE = next((SAMPLE / "outputs" / "profile").glob("*step2_rank0*.json.gz"))


def verlprof(*args: str | Path) -> subprocess.CompletedProcess[str]:
    """The command, in-process through the console script's `main` (exit code, stdout, stderr)."""
    return run_cli(*args, columns=200)


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


def test_bad_files_beside_a_good_trace_are_failed_artifacts_exit_3(tmp_path: Path) -> None:
    """Beside a good trace, each corrupt candidate is a failed artifact: its row says failed with
    the reason it gets when given alone, the closing line counts and names it, manifest.json lists
    it (artifacts, status.failed_artifacts) and exit 3 says the bundle is incomplete."""
    expect = make_bad(tmp_path / "run")
    shutil.copy(GOOD_TRACE, tmp_path / "run")
    res = verlprof("collect", tmp_path / "run", "-o", tmp_path / "out", "--work", tmp_path / "work")
    assert res.returncode == 3, res.stdout + res.stderr       # something summarized, some failed
    manifest = json.loads((tmp_path / "out" / "manifest.json").read_text())
    kinds = {"worker_process_4242.sqlite": "nsys_sqlite", "notgzip.json.gz": "torch_trace", "words.json.gz": "torch_trace"}
    # file names the owner chose (`notgzip.json.gz`) are published as pseudonyms, extension kept
    # (issue 39); nsys's `worker_process_<pid>` stays. The owner reads theirs back from WORK.
    names = read_review_map(tmp_path / "work" / REVIEW_NAME)
    published = {f["rel"] for f in manifest["status"]["failed_artifacts"]}
    assert "worker_process_4242.sqlite" in published
    assert sorted(r for r in published if r.startswith("name-") and r.endswith(".json.gz")) == sorted(
        r for r in published if r != "worker_process_4242.sqlite"), published
    failed = {reveal(f["rel"], names): dict(f, rel=reveal(f["rel"], names)) for f in manifest["status"]["failed_artifacts"]}
    assert set(failed) == set(expect)
    for name, why in expect.items():
        assert failed[name] == {"rel": name, "stage": "gather", "reason": f"{kinds[name]}: {why}"}
    arts = {reveal(a["rel"], names): a for a in manifest["artifacts"]}
    assert {n: arts[n]["status"] for n in expect} == {n: "failed" for n in expect}
    assert arts[GOOD_TRACE.name]["status"] == "done"
    assert not [s for s in manifest["skipped"] if s["rel"] in expect]    # failed, not also skipped
    assert manifest["status"]["summarized"] == 1 and manifest["status"]["complete"] is False
    text = " ".join(res.stdout.split())                        # rich wraps the closing line
    closing = text[text.index("4 artifacts: "):]
    assert closing.startswith("4 artifacts: 1 summarized, 0 skipped, 3 failed: ")
    for name, why in expect.items():
        assert name in closing
        assert f"{kinds[name]}: {why}" in text                 # the row's reason


def test_gather_keeps_the_unreadable_candidates_as_artifacts(tmp_path: Path) -> None:
    expect = make_bad(tmp_path / "run")
    got = gather([tmp_path / "run"], with_hashes=False)
    assert sorted(a.rel for a in got.rejected) == sorted(expect)
    assert {a.rel: a.size for a in got.rejected} == {n: (tmp_path / "run" / n).stat().st_size for n in expect}
