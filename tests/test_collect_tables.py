"""Issue 30, the driver's serial part: summaries/ are written and checked by a job on the run's
pool while ranks.parquet is made and checked by the driver (pipeline/bundle_tables.py), and
importing collect imports no pandas (the driver imports it while pass 2 runs).

Real collects of four real gloo exports at --jobs 2 (the pool) and --jobs 1 (inline): the
run-level check reads only what the driver wrote, the tables are the same bytes either way, and
a secret that reaches a table is still found there and nothing is published.
"""
from __future__ import annotations

import gzip
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from testdata import data_dir
from verlprof.pipeline import collect, ranks
from verlprof.stages.core.errors import RefusedError

SECRET = "hf_Zx9QwErTyUiOpAsDfGhJkLzXcVbNm12345"


def _source(tmp_path: Path) -> Path:
    src = tmp_path / "run"
    shutil.copytree(data_dir("gloo_ranks/nsys"), src)
    return src


def _one_salt(*work_dirs: Path) -> None:
    """Each WORK dir draws its own random salt (pseudonyms of user-written names cannot be
    reversed by hashing guesses); runs compared byte for byte share one, so the comparison is of
    where the jobs ran and nothing else."""
    for w in work_dirs:
        w.mkdir(parents=True, exist_ok=True)
        (w / "salt").write_text("0123456789abcdef0123456789abcdef")


def _same_review_lists(*work_dirs: Path) -> None:
    """Pool and inline publish the same pseudonyms for the same originals (names_review.txt)."""
    lists = [(w / "names_review.txt").read_text() for w in work_dirs]
    assert lists[0] and all(x == lists[0] for x in lists), lists


def test_importing_collect_imports_no_pandas() -> None:
    """pandas costs a few tenths of a second of every collect's serial start-up; only the ranks
    job and the HTML report need it, and they import it where they run."""
    code = "import sys, verlprof.pipeline.collect; print('pandas' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "False"


def test_tables_are_checked_by_their_jobs_and_the_same_bytes_inline(tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    import verlprof.stages.scrub as scrub

    src = _source(tmp_path)
    seen: list[str] = []
    at_run_level = [False]
    real_check, real_run_check = scrub.check_paths, collect.check

    def recording(paths, *args, **kwargs):
        if at_run_level[0]:
            seen.extend(Path(p).name for p in paths)
        return real_check(paths, *args, **kwargs)

    def run_level_check(*args, **kwargs):
        at_run_level[0] = True
        try:
            return real_run_check(*args, **kwargs)
        finally:
            at_run_level[0] = False

    monkeypatch.setattr(scrub, "check_paths", recording)
    monkeypatch.setattr(collect, "check", run_level_check)
    _one_salt(tmp_path / "w2", tmp_path / "w1")
    pooled = collect.run_collect(collect.CollectOptions(sources=[src], out=tmp_path / "out2", work_dir=tmp_path / "w2",
                                                        jobs=2))
    assert pooled.exit_code == 0
    shutil.move(tmp_path / "out2", tmp_path / "pooled")
    # the run-level check read what the driver wrote, and no table (their jobs checked them)
    assert sorted(seen) == ["manifest.json", "scrub_report.json"], seen
    inline = collect.run_collect(collect.CollectOptions(sources=[src], out=tmp_path / "inline",
                                                        work_dir=tmp_path / "w1", jobs=1))
    assert inline.exit_code == 0
    names = sorted(p.name for p in (tmp_path / "pooled" / "summaries").iterdir())
    assert names == ["kernels.parquet", "phases.parquet", "ranks.parquet", "steps.parquet"]
    assert not (tmp_path / "pooled" / ".ranks").exists()
    for n in names:
        assert (tmp_path / "pooled" / "summaries" / n).read_bytes() == (tmp_path / "inline" / "summaries" / n).read_bytes(), n
    assert pq.read_table(tmp_path / "pooled" / "summaries" / "ranks.parquet").num_rows > 0
    _same_review_lists(tmp_path / "w2", tmp_path / "w1")


@pytest.mark.parametrize("jobs", [1, 2])
def test_a_secret_in_ranks_parquet_refuses_the_publish(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                       jobs: int) -> None:
    """What a table job checked and found refuses the publish as the run-level check did; the
    workers are forked after the patch, so the planted table is written by the job itself."""
    src = _source(tmp_path)
    real = ranks.ranks_table

    def planted(*args, **kwargs) -> pa.Table:
        t = real(*args, **kwargs)
        i = t.schema.get_field_index("statement")
        return t.set_column(i, t.schema.field(i), pa.array([f"token={SECRET}"] * t.num_rows, pa.string()))

    monkeypatch.setattr(ranks, "ranks_table", planted)
    with pytest.raises(RefusedError, match="summaries/ranks.parquet"):
        collect.run_collect(collect.CollectOptions(sources=[src], out=tmp_path / "out", work_dir=tmp_path / "work",
                                                   jobs=jobs))
    assert not (tmp_path / "out").exists()
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".out")]   # no staging folder left


def test_the_table_jobs_start_the_pool_when_nothing_else_did(tmp_path: Path) -> None:
    """One export without its window (--no-traces) at --jobs 2: every earlier map ran here, so the
    table jobs are the pool's first work; its workers are forked on the driver's main thread, and
    the bundle is the one an inline run writes (with its HTML report, which reads ranks.parquet)."""
    src = tmp_path / "one"
    src.mkdir()
    first = sorted(_source(tmp_path).iterdir())[0]
    shutil.copy(first, src / first.name)
    outs = {}
    _one_salt(tmp_path / "w2", tmp_path / "w1")
    for jobs in (2, 1):
        res = collect.run_collect(collect.CollectOptions(sources=[src], out=tmp_path / f"out{jobs}", html=True,
                                                         work_dir=tmp_path / f"w{jobs}", jobs=jobs, traces=False))
        assert res.exit_code == 0
        outs[jobs] = tmp_path / f"out{jobs}"
    for n in ("phases", "ranks", "steps", "kernels"):
        assert (outs[2] / "summaries" / f"{n}.parquet").read_bytes() == (outs[1] / "summaries" / f"{n}.parquet").read_bytes()
    assert (outs[2] / "report.html").stat().st_size > 0
    _same_review_lists(tmp_path / "w2", tmp_path / "w1")


def test_pandas_is_imported_while_pass_two_runs_and_marks_come_from_the_ranks_rows(tmp_path: Path) -> None:
    """Through a whole pooled collect of four ranks (ranks.parquet, the merged trace and its culprit
    marks included), collect's own process imports pandas only on the thread that runs while pass
    2's jobs run, and the merged trace's marks are those of ranks.parquet's culprit rows (taken
    from the rows the ranks table was made of, not by reading the file back)."""
    src = _source(tmp_path)
    code = ("import sys, json, threading, builtins\n"
            "from verlprof.pipeline import collect\n"
            "where = []\n"
            "real = builtins.__import__\n"
            "def spy(name, *a, **k):\n"
            "    if name == 'pandas' and 'pandas' not in sys.modules:\n"
            "        where.append(threading.current_thread().name)\n"
            "    return real(name, *a, **k)\n"
            "builtins.__import__ = spy\n"
            f"r = collect.run_collect(collect.CollectOptions(sources=[{str(src)!r}], out={str(tmp_path / 'out')!r}, "
            f"work_dir={str(tmp_path / 'w')!r}, jobs=2))\n"
            "print(json.dumps([r.exit_code, where]))\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert json.loads(out.strip().splitlines()[-1]) == [0, ["verlprof-meanwhile"]]
    man = json.loads((tmp_path / "out" / "manifest.json").read_text())
    merged = json.loads(gzip.open(tmp_path / "out" / man["merged_trace"]).read())["traceEvents"]
    table = pq.read_table(tmp_path / "out" / "summaries" / "ranks.parquet").to_pylist()
    culprits = [r for r in table if r["row_kind"] == "culprit" and r["chosen"] and r["rank"] is not None]
    marks = [e for e in merged if e.get("cat") == "verlprof.culprit" and e["name"].startswith("culprit")]
    assert culprits and len(marks) == len(culprits)
    assert [m["args"]["statement"] for m in marks] == [c["statement"] for c in culprits]
