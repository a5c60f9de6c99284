"""The split-value scan's neighbour pairs (`scrub/sqlite.iter_adjacent_nvtx`) against SQLite's own
window function: per thread in (start, rowid) order, `LAG` gives each event's predecessor, and the
distinct (predecessor text, text) pairs must be exactly the pairs the scan yields, each at rowids that
really are neighbours. Checked on real exports whose texts are registered (`textId`), and on a copy
whose texts are moved into the `text` column (unregistered strings: the other read path).
"""
from __future__ import annotations

import shutil
import sqlite3
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))
from testdata import data_path  # noqa: E402
from verlprof.stages.scrub.sqlite import iter_adjacent_nvtx, open_ro  # noqa: E402

EXPORTS = ["gpu_captures/whole-emit-nvtx/whole_956.sqlite",
           "captures/nsysai_h100_2gpu/h100_2gpu_1s.sqlite",
           "h200-nsys-2025.3/whole/whole_1873.sqlite"]

_LAG = """
SELECT prev_rid, rid, prev_text, text FROM (
  SELECT n.rowid AS rid, coalesce(n.text, s.value) AS text,
         lag(n.rowid) OVER w AS prev_rid, lag(coalesce(n.text, s.value)) OVER w AS prev_text
  FROM NVTX_EVENTS n LEFT JOIN StringIds s ON n.text IS NULL AND s.id = n.textId
  WINDOW w AS (PARTITION BY ifnull(n.globalTid, 0) ORDER BY n.start, n.rowid))
WHERE prev_rid IS NOT NULL AND text <> '' AND prev_text <> ''
"""


def _expected(db: Path) -> tuple[set[tuple[str, str]], set[tuple[int, int]]]:
    """(distinct text pairs, neighbour rowid pairs) by SQLite's window function alone."""
    con = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    try:
        rows = con.execute(_LAG).fetchall()
    finally:
        con.close()
    return {(a, b) for _, _, a, b in rows}, {(x, y) for x, y, _, _ in rows}


def _scan(db: Path) -> list[tuple[tuple, tuple]]:
    con = open_ro(db)
    try:
        return list(iter_adjacent_nvtx(con))
    finally:
        con.close()


def _text_column_copy(src: Path, dst: Path) -> Path:
    """`src` with two of every three ranges' texts moved from StringIds into the `text` column."""
    shutil.copy(src, dst)
    con = sqlite3.connect(dst)
    con.execute("UPDATE NVTX_EVENTS SET text = (SELECT value FROM StringIds WHERE id = textId), textId = NULL "
                "WHERE text IS NULL AND textId IS NOT NULL AND rowid % 3 != 0")
    con.commit()
    con.close()
    return dst


@pytest.mark.parametrize("rel", EXPORTS)
def test_pairs_equal_sqlite_lag(rel: str, tmp_path: Path) -> None:
    for db in (data_path(rel), _text_column_copy(data_path(rel), tmp_path / "text.sqlite")):
        texts, neighbours = _expected(db)
        got = _scan(db)
        assert texts, db
        assert {(a[2], b[2]) for a, b in got} == texts, db
        assert {(a[0], b[0]) for a, b in got} <= neighbours, db
        for a, b in got:     # a text-column half carries no id; a StringIds half its id
            for half in (a, b):
                assert half[1] is None or isinstance(half[1], int)


# -- the pairs found by the ranges' read (pass 1 of collect), judged by pass 2 without a second read --

READ_EXPORTS = EXPORTS + ["captures/fuser_2024_6/fuser_report1.sqlite",
                          "captures/extrap_concurrent_s16/profile16.sqlite",
                          "captures/pipit_saxpy_mpi/saxpy-mpi-cuda_nsys_perlmutter0.sqlite",
                          "same_workload/cuda/make_gpu_run_cuda.sqlite"]


def _mixed_copy(src: Path, dst: Path) -> Path:
    """`src` with every way an NVTX event names its text at once: own `text` rows (a third), no text
    at all (textId NULL), marks (at a range's start) with text of their own, not UTF-8 or a blob or
    none, and each thread's events spread over a second thread."""
    _text_column_copy(src, dst)
    con = sqlite3.connect(dst)
    con.execute("UPDATE NVTX_EVENTS SET textId = NULL, text = NULL WHERE rowid % 11 = 0")
    con.execute("UPDATE NVTX_EVENTS SET globalTid = globalTid + 1 WHERE rowid % 5 = 0 AND globalTid IS NOT NULL")
    rows = con.execute("SELECT start, globalTid FROM NVTX_EVENTS WHERE start IS NOT NULL ORDER BY rowid LIMIT 40").fetchall()
    for i, (start, gtid) in enumerate(rows):
        text = {0: b"mark \xff\xfe not utf-8", 1: None}.get(i % 4, f"mark {i}")
        con.execute("INSERT INTO NVTX_EVENTS(start, end, eventType, text, globalTid) "
                    "VALUES (?, NULL, 34, CAST(? AS TEXT), ?)", (start, text, gtid))
    con.execute("INSERT INTO NVTX_EVENTS(start, end, eventType, text, globalTid) VALUES (?, NULL, 34, ?, ?)",
                (rows[0][0], b"blob half", rows[0][1]))
    con.commit()
    con.close()
    return dst


@pytest.mark.parametrize("rel", READ_EXPORTS)
def test_pairs_of_the_ranges_read_equal_the_scan(rel: str, tmp_path: Path) -> None:
    """`NsysExport.adjacent_nvtx_pairs` (found by the ranges' read, kept in the ranges cache) are
    exactly the pairs `iter_adjacent_nvtx` reads, in the same order with the same rowids, fresh
    and loaded from the cache, on the real export and on a copy mixing every text form."""
    from verlprof.stages.readers.nsys_sqlite import NsysExport

    for db in (data_path(rel), _mixed_copy(data_path(rel), tmp_path / "mixed.sqlite")):
        expected = _scan(db)
        assert expected, db
        for cache in (None, tmp_path / f"cache-{db.stem}", tmp_path / f"cache-{db.stem}"):   # fresh, keeps, loads
            if cache is not None:
                cache.mkdir(exist_ok=True)
            with NsysExport.open(db, ranges_cache=cache) as exp:
                assert exp.adjacent_nvtx_pairs() == expected, (db, cache)
