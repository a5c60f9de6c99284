"""collect opens each raw export once per pass (issue 24).

A real collect of four real nsys exports, every `sqlite3.connect` counted by a pass-through wrapper
(the real SQLite opens the real file): pass 1 (identify: identity, identities, steps) and pass 2
(the summary, the split-value scan and the window cut) each open a raw export exactly once. The
window files cut from it are other files (in the work dir, then the bundle) and are not counted.
"""
from __future__ import annotations

import os
import shutil
import sqlite3
from collections import Counter
from pathlib import Path
from urllib.parse import unquote

import pandas as pd
import pytest
from testdata import data_dir
from verlprof.pipeline import collect


def _db_file(database: object) -> str:
    """The file a `sqlite3.connect` argument names (a path or a `file:` URI)."""
    text = os.fspath(database) if not isinstance(database, str) else database
    if text.startswith("file:"):
        text = unquote(text[5:].split("?", 1)[0])
    return os.path.realpath(text)


def test_each_raw_export_is_opened_once_per_pass(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """--jobs 1 (inline), so every open happens in this process where it is counted."""
    src = tmp_path / "run"
    shutil.copytree(data_dir("gloo_ranks/nsys"), src)
    opens: Counter = Counter()
    phase = ["before"]
    real_connect = sqlite3.connect

    def counting_connect(database, *args, **kwargs):   # the real open, counted
        opens[(phase[0], _db_file(database))] += 1
        return real_connect(database, *args, **kwargs)

    raw: list[str] = []

    def in_phase(name: str, fn):
        def run(*args, **kwargs):
            phase[0] = name
            try:
                return fn(*args, **kwargs)
            finally:
                phase[0] = "after"
        return run

    real_raw_inputs = collect.raw_inputs

    def noting_raw_inputs(*args, **kwargs):
        found = real_raw_inputs(*args, **kwargs)
        raw.extend(os.path.realpath(i.path) for i in found if i.kind == "nsys")
        return found

    monkeypatch.setattr(sqlite3, "connect", counting_connect)
    monkeypatch.setattr(collect, "raw_inputs", noting_raw_inputs)
    monkeypatch.setattr(collect, "identify", in_phase("pass 1", collect.identify))
    monkeypatch.setattr(collect, "summarize_and_cut", in_phase("pass 2", collect.summarize_and_cut))
    res = collect.run_collect(collect.CollectOptions(sources=[src], out=tmp_path / "out", work_dir=tmp_path / "work",
                                                     jobs=1))
    assert res.exit_code == 0
    assert len(raw) == 4
    for path in raw:
        assert opens[("pass 1", path)] == 1, (path, opens)
        assert opens[("pass 2", path)] == 1, (path, opens)
    # pass 2 did all three things on that one open: rows of every export, a window of each
    phases = pd.read_parquet(tmp_path / "out" / "summaries" / "phases.parquet")
    assert phases["source"].nunique() == 4
    assert len(list((tmp_path / "out" / "traces").glob("*.sqlite"))) == 4


def test_a_lone_export_on_two_cores_publishes_what_one_core_does(tmp_path: Path) -> None:
    """One source on several cores: in pass 1 its steps and its identities scan, in pass 2 its summary
    and its window run as two jobs side by side (each opens the export once), and the bundle is the
    one a single job writes (the identities found apart give the same pseudonyms): the same rows, the same
    window files byte for byte, and no merged trace (one window). Real pool, real exports."""
    src = tmp_path / "run"
    src.mkdir()
    shutil.copy(data_dir("gpu_captures") / "whole-emit-nvtx" / "whole_956.sqlite", src)
    out = {}
    for jobs in (1, 2):
        out[jobs] = tmp_path / f"out{jobs}"
        # one work dir: it holds the run's pseudonym salt (GPU UUIDs become salted hashes)
        res = collect.run_collect(collect.CollectOptions(sources=[src], out=out[jobs], work_dir=tmp_path / "work",
                                                         jobs=jobs))
        assert res.exit_code == 0
    for name in ("phases", "kernels", "steps", "ranks"):
        a = pd.read_parquet(out[1] / "summaries" / f"{name}.parquet")
        b = pd.read_parquet(out[2] / "summaries" / f"{name}.parquet")
        assert len(a) and a.equals(b), name
    one = sorted(p.relative_to(out[1]) for p in (out[1] / "traces").rglob("*") if p.is_file())
    two = sorted(p.relative_to(out[2]) for p in (out[2] / "traces").rglob("*") if p.is_file())
    assert one == two and len(one) == 2 and not any("all_ranks" in str(p) for p in one)
    for rel in one:
        assert (out[1] / rel).read_bytes() == (out[2] / rel).read_bytes(), rel


def test_one_local_collect_starts_one_process_pool(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """--jobs 2 over four real exports: export, pass 1 and pass 2 all run on real worker processes
    of ONE pool, started once (its workers keep what they imported), and every worker is gone when
    collect returns."""
    from concurrent.futures import ProcessPoolExecutor

    from verlprof.pipeline import executors

    src = tmp_path / "run"
    shutil.copytree(data_dir("gloo_ranks/nsys"), src)
    pools: list[ProcessPoolExecutor] = []
    workers: set[int] = set()

    class CountedPool(ProcessPoolExecutor):   # the real pool, counted
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            pools.append(self)

        def submit(self, *args, **kwargs):
            fut = super().submit(*args, **kwargs)
            workers.update(getattr(self, "_processes", {}) or {})
            return fut

    monkeypatch.setattr(executors, "ProcessPoolExecutor", CountedPool)
    res = collect.run_collect(collect.CollectOptions(sources=[src], out=tmp_path / "out", work_dir=tmp_path / "work",
                                                     jobs=2))
    assert res.exit_code == 0
    assert len(pools) == 1
    assert len(workers) == 2 and not any(Path(f"/proc/{pid}").exists() for pid in workers)
