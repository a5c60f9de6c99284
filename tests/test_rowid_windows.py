"""Column reads walk the rowids that exist, not the span between the smallest and the largest.

A corrupt or hand-made export can hold a rowid near 2**63 (a fuzzed page did, and a read of its
memory table ran for minutes, one empty window after another). The real export from tests/data,
its NVTX and memory rows moved to the far end of the rowid space and scattered in between: every
column read and the split-value scan return the same events as from the untouched copy, and fast.
"""
from __future__ import annotations

import shutil
import sqlite3
from pathlib import Path

import numpy as np
from testdata import fixtures_dir
from verlprof.stages.readers.nsys_sqlite import NsysExport
from verlprof.stages.readers.sqlite_export import MAX_ROWID, rowid_windows
from verlprof.stages.scrub.sqlite_cells import iter_adjacent_nvtx

RAY2 = fixtures_dir() / "h200-nsys-2025.3" / "ray-continuous" / "worker_process_1983.2.sqlite"


def _spread(src: Path, dst: Path) -> Path:
    """A copy whose NVTX rows keep their order but sit at rowids 1, 2**40, 2**40 + 1, ..., and the last near 2**63."""
    shutil.copyfile(src, dst)
    dst.chmod(0o644)
    with sqlite3.connect(dst) as con:
        rids = [r for (r,) in con.execute("SELECT rowid FROM NVTX_EVENTS ORDER BY rowid")]
        new = [1] + [(1 << 40) + k for k in range(len(rids) - 2)] + [MAX_ROWID - 3]
        for r, n in sorted(zip(rids, new), reverse=True):   # from the top: no collision on the way
            con.execute("UPDATE NVTX_EVENTS SET rowid = ? WHERE rowid = ?", (n + (1 << 61) if n < (1 << 61) else n, r))
        con.execute("UPDATE NVTX_EVENTS SET rowid = rowid - (1 << 61) WHERE rowid < ?", (MAX_ROWID - 3,))
    return dst


def test_windows_skip_gaps_and_reach_the_last_rowid(tmp_path: Path) -> None:
    con = sqlite3.connect(":memory:")
    con.execute("CREATE TABLE t (x)")
    con.executemany("INSERT INTO t (rowid, x) VALUES (?, ?)", [(1, 0), (2, 0), (1 << 50, 0), (MAX_ROWID, 0)])
    assert list(rowid_windows(con, "t", 10)) == [(1, 10), (1 << 50, (1 << 50) + 9), (MAX_ROWID, MAX_ROWID)]
    con.execute("DELETE FROM t")
    assert list(rowid_windows(con, "t", 10)) == []


def test_a_far_rowid_reads_the_same_events_quickly(tmp_path: Path) -> None:
    plain = tmp_path / "plain.sqlite"
    shutil.copyfile(RAY2, plain)
    far = _spread(RAY2, tmp_path / "far.sqlite")
    exprs = ["start", "ifnull(end, 0)", "ifnull(globalTid, 0)"]
    with NsysExport.open(plain) as a, NsysExport.open(far) as b:
        want = [np.concatenate(c) for c in zip(*a.iter_columns("NVTX_EVENTS", exprs))]
        got = [np.concatenate(c) for c in zip(*b.iter_columns("NVTX_EVENTS", exprs))]   # was 3.5e13 windows
        assert b.query("SELECT max(rowid) FROM NVTX_EVENTS")[0][0] == MAX_ROWID - 3
    assert all(np.array_equal(w, g) for w, g in zip(want, got))
    texts = lambda path: [(x[2], y[2]) for x, y in iter_adjacent_nvtx(sqlite3.connect(path))]  # noqa: E731
    assert texts(far) == texts(plain) and texts(plain)
