"""`NsysExport.nvtx_ranges` with `ranges_cache` (issue 25): collect reads an export's NVTX ranges in
pass 1 (steps) and pass 2 (summary); pass 1 keeps the columns in the work dir and pass 2 loads them.
What comes back must be the very arrays and lists a fresh read gives, on exports with registered
strings, with texts in the `text` column and with named domains; a rewritten export is read afresh;
and a real collect writes one cache file per export, in its work dir only. The cache keeps the
ranges' same-thread nesting too: the index pass 2 builds from it equals one nested afresh.
"""
from __future__ import annotations

import os
import shutil
import sqlite3
import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).parent))
from testdata import data_path  # noqa: E402
from verlprof.stages.readers.nsys_sqlite import NsysExport, NvtxRanges  # noqa: E402
from verlprof.stages.readers.nvtx_tree import RangeIndex  # noqa: E402

EXPORTS = ["gpu_captures/whole-emit-nvtx/whole_956.sqlite",          # emit_nvtx, registered strings
           "captures/nsysai_h100_2gpu/h100_2gpu_1s.sqlite",
           "captures/pipit_saxpy_mpi/saxpy-mpi-cuda_nsys_perlmutter0.sqlite",
           "h200-nsys-2025.3/whole/whole_1873.sqlite"]
FIELDS = ("start", "end", "gtid", "event_type", "same_thread", "rowid", "text", "domain")


def _read(path: Path, cache: Path | None) -> NvtxRanges:
    with NsysExport.open(path, ranges_cache=cache) as db:
        return db.nvtx_ranges()


def _assert_same(a: NvtxRanges, b: NvtxRanges) -> None:
    for f in FIELDS:
        x, y = getattr(a, f), getattr(b, f)
        if isinstance(x, list):
            assert x == y, f
        else:
            assert x.dtype == y.dtype and np.array_equal(x, y), f


@pytest.mark.parametrize("rel", EXPORTS)
def test_cached_ranges_equal_a_fresh_read(rel: str, tmp_path: Path) -> None:
    src = data_path(rel)
    fresh = _read(src, None)
    assert len(fresh) > 0
    _assert_same(_read(src, tmp_path), fresh)            # reads and keeps
    assert len(list(tmp_path.glob("*.npz"))) == 1
    _assert_same(_read(src, tmp_path), fresh)            # loads
    assert any(d for d in fresh.domain) or rel != EXPORTS[0]   # emit_nvtx names its domain


@pytest.mark.parametrize("rel", EXPORTS)
def test_cached_nesting_equals_nesting_afresh(rel: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Pass 1 finds the nesting and keeps it; pass 2's index takes it instead of nesting again."""
    from verlprof.stages.readers import nvtx_tree

    src = data_path(rel)
    fresh = _read(src, None)
    assert fresh.parent is None                          # no cache: nothing kept, the index nests
    a = RangeIndex.build(fresh)
    _read(src, tmp_path)
    cached = _read(src, tmp_path)
    assert cached.parent is not None and cached.parent.dtype == np.int64

    def no_nesting(*_args: object) -> None:
        raise AssertionError("nested again")

    monkeypatch.setattr(nvtx_tree, "_parents", no_nesting)
    b = RangeIndex.build(cached)
    assert np.array_equal(a.parent, b.parent) and np.array_equal(a.depth, b.depth)
    assert (a.parent >= 0).any() or rel not in EXPORTS[:2]   # the emit_nvtx captures nest deeply


def test_text_column_and_rewritten_export(tmp_path: Path) -> None:
    """Texts held in the `text` column come back too; an export replaced by another file (as the
    export stage replaces its cache files, by rename) is read afresh, never answered from the cache."""
    db = tmp_path / "x.sqlite"
    shutil.copy(data_path(EXPORTS[0]), db)
    con = sqlite3.connect(db)
    con.execute("UPDATE NVTX_EVENTS SET text = (SELECT value FROM StringIds WHERE id = textId) || ' own', "
                "textId = NULL WHERE textId IS NOT NULL AND rowid % 2 = 0")
    con.commit()
    con.close()
    cache = tmp_path / "cache"
    first = _read(db, cache)
    assert any(t.endswith(" own") for t in first.text)
    _assert_same(_read(db, cache), _read(db, None))
    other = tmp_path / "y.sqlite"
    shutil.copy(data_path(EXPORTS[3]), other)
    os.replace(other, db)
    _assert_same(_read(db, cache), _read(db, None))
    assert len(list(cache.glob("*.npz"))) == 2


def test_collect_keeps_ranges_in_the_work_dir_only(tmp_path: Path) -> None:
    from verlprof.pipeline.collect import CollectOptions, run_collect

    src = tmp_path / "in"
    src.mkdir()
    shutil.copy(data_path(EXPORTS[0]), src / "whole_956.sqlite")
    out, work = tmp_path / "out", tmp_path / "work"
    run_collect(CollectOptions(sources=[src], out=out, work_dir=work, jobs=1))
    kept = list((work / "ranges").glob("*.npz"))
    assert len(kept) == 1
    with np.load(kept[0]) as z:
        assert z["start"].size == len(_read(src / "whole_956.sqlite", None))
    assert not list(out.rglob("*.npz"))


def test_the_cache_keeps_within_its_budget_least_recently_used_first(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Every export (and every rewrite of one) leaves a file; past the budget the least recently
    used go, the file just written and the ones just loaded stay, and a pruned export is simply
    read again, equal to a fresh read."""
    from verlprof.stages.readers import ranges_cache

    cache = tmp_path / "ranges"
    cache.mkdir()
    (cache / "old-format.npz").write_bytes(b"x" * 1000)          # a file no pass will read again
    os.utime(cache / "old-format.npz", (1, 1))
    srcs = [data_path(r) for r in EXPORTS[:3]]
    for src in srcs:
        _read(src, cache)
    files = {f.name: f.stat().st_size for f in cache.glob("*.npz")}
    assert len(files) == 4                                        # the default budget (1 GiB) holds them all
    _read(srcs[0], cache)                                         # loaded: now the most recently used
    sizes = sorted(v for k, v in files.items() if k != "old-format.npz")
    budget = sizes[-1] + sizes[-2]                                # room for two of the three
    monkeypatch.setattr(ranges_cache, "RANGES_CACHE_BYTES", budget)
    gone = ranges_cache.prune(cache, budget=budget)
    left = list(cache.glob("*.npz"))
    assert not (cache / "old-format.npz").exists() and gone >= 1
    assert sum(f.stat().st_size for f in left) <= budget
    kept = ranges_cache.cache_file(cache, srcs[0])
    assert kept is not None and kept.exists()                     # the one just loaded stayed
    for src in srcs:                                              # pruned or not: the same ranges
        _assert_same(_read(src, cache), _read(src, None))
