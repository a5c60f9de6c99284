"""Exit codes and final statuses of `collect`, `summarize` and `scrub` on real broken files.

Every broken file is made here from the real H200 fixtures, the way runs break: a torch trace cut
at 300 KB (the writer was killed), a 0-byte trace and a 0-byte report (never written), a SQLite
export cut short (a partial copy), a pickle whose __reduce__ would run os.system (hostile), and
torch traces whose "ts" are strings (numbers in quotes: readable; words: not). The commands run as
a user runs them (the `verlprof` console script, real exit status), so each code is the real one.
"""
from __future__ import annotations

import gzip
import json
import os
import pickle
import shutil
import subprocess
from pathlib import Path

import pytest
from testdata import fixtures_dir, owner_names
from verlprof.stages.scrub.provenance import reveal
from verlprof.pipeline.collect import verify
from verlprof.pipeline.progress import NoProgress
from verlprof.stages.core.errors import ExitCode, RefusedError, human_size, plain_reason

FIXTURES = fixtures_dir()
RAY = FIXTURES / "h200-nsys-2025.3" / "ray-continuous"
WHOLE = FIXTURES / "h200-nsys-2025.3" / "whole" / "whole_1873.sqlite"
TORCH = FIXTURES / "h200-torch-2.11"
STEP2_TRACE = next(TORCH.glob("*_step2_rank0-of-1_*.json.gz"))
STEP3_TRACE = next(TORCH.glob("*_step3_rank0-of-1_*.json.gz"))

# The broken files of the partial run: name under the run folder -> what its reason must say.
TRUNC_GZ = "profile/" + STEP2_TRACE.name
EMPTY_TRACE = "profile/" + STEP3_TRACE.name
EMPTY_REPORT = "nsight/worker_process_2000.nsys-rep"
TRUNC_SQLITE = "nsight/worker_process_1873.sqlite"
HOSTILE = "mem/step2/torch_memory_rank0_pid754.pickle"
WORDS_TS = "words_ts/actor-rollout-ref_train_step2_rank1-of-2_pid755_20261202085621396.json.gz"
GOOD = "nsight/worker_process_1983.2.sqlite"


class _Hostile:
    """Unpickling this would run a shell command; a memory snapshot reader must refuse it."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self):
        return (os.system, (f"touch {self.marker}",))


#: CPU-side detail verlprof does not read (it reads annotations, CUDA calls, kernels, copies);
#: dropped from the retimed copies so the tests stay fast.
_CPU_DETAIL = {"python_function", "cpu_op", "ac2g", "fwdbwd"}


def _retimed_trace(dst: Path, ts) -> None:
    """The real step-2 trace, minus CPU-side detail, with every "ts" replaced by `ts(old)`."""
    with gzip.open(STEP2_TRACE, "rt") as f:
        doc = json.load(f)
    doc["traceEvents"] = [ev for ev in doc["traceEvents"] if ev.get("cat") not in _CPU_DETAIL]
    for ev in doc["traceEvents"]:
        if "ts" in ev:
            ev["ts"] = ts(ev["ts"])
    dst.parent.mkdir(parents=True, exist_ok=True)
    with gzip.open(dst, "wt") as f:
        json.dump(doc, f)


def broken_run(root: Path, marker: Path) -> Path:
    """One good nsys export of step 2 plus every kind of broken file."""
    run = root / "run"
    (run / "nsight").mkdir(parents=True)
    (run / "profile").mkdir()
    (run / "mem" / "step2").mkdir(parents=True)
    shutil.copy(RAY / "worker_process_1983.2.sqlite", run / GOOD)
    (run / TRUNC_GZ).write_bytes(STEP2_TRACE.read_bytes()[:300_000])
    (run / EMPTY_TRACE).write_bytes(b"")
    (run / EMPTY_REPORT).write_bytes(b"")
    (run / TRUNC_SQLITE).write_bytes(WHOLE.read_bytes()[:1_000_000])
    (run / HOSTILE).write_bytes(pickle.dumps({"segments": [], "device_traces": [], "x": _Hostile(marker)}))
    _retimed_trace(run / WORDS_TS, lambda t: f"at {t}")
    return run


def verlprof(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["verlprof", *args], capture_output=True, text=True, timeout=300, cwd=cwd,
                          env={**os.environ, "COLUMNS": "80"})


def collect(src: Path, out: Path, work: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    return verlprof("collect", str(src), "-o", str(out), "--work", str(work), "--jobs", "1", *extra)


@pytest.fixture(scope="module")
def partial(tmp_path_factory: pytest.TempPathFactory) -> dict:
    """One collect over the broken run (shared by the tests that read its bundle and output)."""
    root = tmp_path_factory.mktemp("partial")
    marker = root / "PWNED"
    run = broken_run(root, marker)
    res = collect(run, root / "bundle", root / "work")
    return {"root": root, "run": run, "res": res, "out": root / "bundle", "marker": marker}


def _statuses(out: Path, work: Path | None = None) -> dict[str, dict]:
    """rel -> manifest row, by the owner's own names when WORK is given."""
    m = json.loads((out / "manifest.json").read_text())
    names = owner_names(work)
    return {reveal(a["rel"], names): a for a in m["artifacts"]}


def test_exit_3_bundle_written_failures_named_in_rows_closing_line_and_manifest(partial: dict) -> None:
    res, out = partial["res"], partial["out"]
    assert res.returncode == ExitCode.PARTIAL, res.stdout + res.stderr
    assert (out / "summaries" / "phases.parquet").is_file()
    assert not partial["marker"].exists(), "the hostile pickle was loaded"
    arts = _statuses(out, partial["root"] / "work")
    names = owner_names(partial["root"] / "work")
    assert arts[GOOD]["status"] in ("done", "reused") and arts[GOOD]["reason"] == ""
    sizes = {rel: (partial["run"] / rel).stat().st_size for rel in arts}
    expect = {
        TRUNC_GZ: f"gzip stream truncated at {human_size(sizes[TRUNC_GZ])}: the writer was killed?",
        EMPTY_TRACE: "empty file (0 bytes)",
        EMPTY_REPORT: "empty file (0 bytes)",
        TRUNC_SQLITE: f"SQLite file truncated at {human_size(sizes[TRUNC_SQLITE])} of "
                      f"{human_size(WHOLE.stat().st_size)}",
        HOSTILE: "loading it would call posix.system",
        WORDS_TS: 'with a numeric "ts"',
    }
    for rel, words in expect.items():
        assert arts[rel]["status"] == "failed", (rel, arts[rel])
        assert words in arts[rel]["reason"], (rel, arts[rel]["reason"])
        reason = arts[rel]["reason"]
        assert "\n" not in reason and "Error" not in reason and "/" not in reason.replace(" / ", "")
    m = json.loads((out / "manifest.json").read_text())
    assert m["status"]["complete"] is False
    assert sorted(reveal(f["rel"], names) for f in m["status"]["failed_artifacts"]) == sorted(expect)
    assert m["status"]["failed"] == len(expect) and m["status"]["summarized"] >= 1
    # the terminal: each failed row shows its reason; the closing line counts and names each file
    text = res.stdout
    closing = text[text.index(f"{len(arts)} artifacts: "):].split("s\n", 1)[0].replace("\n", "")
    assert f"{len(expect)} failed" in closing and "summarized" in closing and "skipped" in closing
    for rel in expect:
        parent, name = rel.rsplit("/", 1)
        tail = name.replace("_20261202085621396", "").replace("_20261202085624147", "")[-20:]
        assert parent + "/" in closing and tail in closing, (rel, closing)
    assert "gzip stream truncated at" in text and "incomplete" in text


def test_exit_3_table_is_readable_at_80_columns(partial: dict) -> None:
    table = partial["res"].stdout.split(" artifacts: ")[0]
    rows = [ln for ln in table.splitlines() if ln.split(" ")[0] in ("done", "reused", "skipped", "failed")]
    assert len(rows) == len(_statuses(partial["out"]))
    assert all(len(ln.rstrip()) <= 80 for ln in table.splitlines())
    # one line per artifact: its status, size, kind and a recognisable name (step and rank kept)
    assert any("step2_rank0-of-1_pid754.json.gz" in ln for ln in rows)
    assert any("worker_process_1873.sqlite" in ln for ln in rows)


def test_strict_turns_partial_into_failure_without_a_bundle(partial: dict, tmp_path: Path) -> None:
    out = tmp_path / "strict"
    res = collect(partial["run"], out, partial["root"] / "work", "--strict")
    assert res.returncode == ExitCode.PARTIAL, res.stdout + res.stderr
    assert not out.exists()
    err = res.stderr.strip().splitlines()
    assert len(err) == 1 and "--strict" in err[0] and "worker_process_1873.sqlite" in err[0]
    assert "no bundle written" in res.stdout


def test_exit_0_every_artifact_summarized_or_skipped_on_purpose(tmp_path: Path) -> None:
    run = tmp_path / "run"
    run.mkdir()
    for n in (1, 2):         # step 1 is skipped (not the chosen step): not a failure
        shutil.copy(RAY / f"worker_process_1983.{n}.sqlite", run)
    _retimed_trace(run / STEP2_TRACE.name, lambda t: str(t))
    res = collect(run, tmp_path / "b", tmp_path / "w")
    assert res.returncode == ExitCode.OK, res.stdout + res.stderr
    arts = _statuses(tmp_path / "b")
    assert {a["status"] for a in arts.values()} <= {"done", "reused", "skipped"}
    # numbers written as strings are still timestamps: that trace is summarized
    assert arts[STEP2_TRACE.name]["status"] == "done"
    skipped = [a for a in arts.values() if a["status"] == "skipped"]
    assert len(skipped) == 1 and "holds step 1 only; the summary is of step 2" in skipped[0]["reason"]
    text = " ".join(res.stdout.split())
    assert "3 artifacts: 2 summarized, 1 skipped, 0 failed" in text and "(safe to share;" in text


def test_exit_4_nothing_summarized_no_bundle_and_old_bundle_kept(partial: dict, tmp_path: Path) -> None:
    run = tmp_path / "dead"
    (run / "profile").mkdir(parents=True)
    (run / TRUNC_GZ).write_bytes(STEP2_TRACE.read_bytes()[:300_000])
    (run / EMPTY_TRACE).write_bytes(b"")
    out = tmp_path / "b"
    shutil.copytree(partial["out"], out)                  # an earlier bundle at OUT stays as it was
    before = (out / "manifest.json").read_bytes()
    res = collect(run, out, tmp_path / "w")
    assert res.returncode == ExitCode.NOTHING, res.stdout + res.stderr
    assert (out / "manifest.json").read_bytes() == before
    err = res.stderr.strip().splitlines()
    assert len(err) == 1 and "nothing could be summarized" in err[0] and "Traceback" not in res.stderr
    assert STEP2_TRACE.name in err[0] and STEP3_TRACE.name in err[0]
    assert "2 artifacts: 0 summarized, 0 skipped, 2 failed" in res.stdout.replace("\n", " ")
    assert "safe to share" not in res.stdout
    assert not [p for p in tmp_path.iterdir() if ".tmp-" in p.name]


def test_exit_2_bad_usage(tmp_path: Path) -> None:
    for args in (["collect", str(tmp_path / "missing"), "-o", str(tmp_path / "b")],
                 ["collect", str(RAY), "-o", str(tmp_path / "b"), "--step", "zero"],
                 ["collect", str(RAY)]):                      # no -o
        res = verlprof(*args, "--work", str(tmp_path / "w"))
        assert res.returncode == ExitCode.USAGE, (args, res.stdout, res.stderr)
        assert "Traceback" not in res.stderr
    assert not (tmp_path / "b").exists()


def test_exit_1_refused_when_check_finds_a_secret(tmp_path: Path) -> None:
    staging = tmp_path / "staging"
    staging.mkdir()
    (staging / "manifest.json").write_text(json.dumps({"note": "HF_TOKEN=hf_kQ7ZpLm2XvB9tR4sWc8YnD1eUfA6gHjK3o"}))
    with pytest.raises(RefusedError) as info:
        verify(staging, NoProgress())
    assert info.value.exit_code == ExitCode.REFUSED and "refusing to publish" in str(info.value)
    assert "hf_kQ7Z" not in str(info.value)
    res = verlprof("check", str(staging), "--no-local-env")
    assert res.returncode == ExitCode.REFUSED


def test_summarize_shows_incomplete_runs_and_exits_3(partial: dict, tmp_path: Path) -> None:
    good = tmp_path / "good"
    run = tmp_path / "run"
    run.mkdir()
    shutil.copy(RAY / "worker_process_1983.2.sqlite", run)
    assert collect(run, good, tmp_path / "w").returncode == ExitCode.OK
    res = verlprof("summarize", str(good), str(partial["out"]), "-o", str(tmp_path / "cmp"),
                   "--work", str(tmp_path / "w"), "-j", "1")
    assert res.returncode == ExitCode.PARTIAL, res.stdout + res.stderr
    text = " ".join(res.stdout.split())
    assert "incomplete" in text and "6 artifacts failed" in text
    assert "2 runs: 1 summarized, 1 incomplete, 0 skipped: bundle" in text
    import pandas as pd

    runs = pd.read_parquet(tmp_path / "cmp" / "runs.parquet")
    assert dict(zip(runs.run, runs.failed_artifacts)) == {"good": 0, "bundle": 6}
    strict = verlprof("summarize", str(good), str(partial["out"]), "-o", str(tmp_path / "cmp2"),
                      "--work", str(tmp_path / "w"), "-j", "1", "--strict")
    assert strict.returncode == ExitCode.PARTIAL and not (tmp_path / "cmp2").exists()


def test_scrub_exit_codes(tmp_path: Path) -> None:
    src = tmp_path / "in"
    src.mkdir()
    shutil.copy(RAY / "worker_process_1983.2.sqlite", src)
    marker = tmp_path / "PWNED"
    (src / "torch_memory_rank0_pid754.pickle").write_bytes(pickle.dumps({"segments": [], "x": _Hostile(marker)}))
    args = ["--work", str(tmp_path / "w"), "--no-local-env"]
    res = verlprof("scrub", str(src), "-o", str(tmp_path / "o"), *args)
    assert res.returncode == ExitCode.PARTIAL, res.stdout + res.stderr
    assert (tmp_path / "o" / "worker_process_1983.2.sqlite").is_file() and not marker.exists()
    assert "posix.system" in res.stderr and "1 failed: torch_memory_rank0_pid754.pickle" in res.stdout
    assert len(res.stderr.strip().splitlines()) == 1   # the failure, once, with its reason (issue 41)
    res = verlprof("scrub", str(src), "-o", str(tmp_path / "s"), *args, "--strict")
    assert res.returncode == ExitCode.PARTIAL and not list((tmp_path / "s").glob("*.sqlite"))
    res = verlprof("scrub", str(src / "torch_memory_rank0_pid754.pickle"), "-o", str(tmp_path / "x.pickle"), *args)
    assert res.returncode == ExitCode.NOTHING and not (tmp_path / "x.pickle").exists()


@pytest.mark.parametrize("message, size, kind, expect", [
    ("p/x.json.gz: truncated or corrupt gzip stream (EOFError: Compressed file ended before the "
     "end-of-stream marker was reached)", 300_000, "torch_trace", "gzip stream truncated at 293 KB: the writer was killed?"),
    ("empty file (0 bytes), whatever", 0, "nsys_report", "empty file (0 bytes): nsys never finished"),
    ("/root/.cache/verlprof/scrubbed/9aa4.sqlite: corrupt or unreadable export (database disk image is malformed)",
     5, None, "corrupt SQLite database"),
    ("'ts'", 5, None, "could not read it: unexpected data ('ts'); please report"),
    ("x.sqlite: an nsys export without NVTX_EVENTS or CUDA tables: nothing to summarize", 5, None,
     "an nsys export without NVTX_EVENTS or CUDA tables: nothing to summarize"),
])
def test_plain_reason_words(message: str, size: int, kind: str | None, expect: str) -> None:
    got = plain_reason(message, size=size, kind=kind)
    assert got.startswith(expect) or expect in got, got
    assert "/root" not in got and "Error" not in got and "\n" not in got
