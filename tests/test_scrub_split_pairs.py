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
from verlprof.stages.readers.sqlite_export import decode_text, open_readonly  # noqa: E402
from verlprof.stages.scrub.sqlite_cells import iter_adjacent_nvtx  # noqa: E402

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
    con = open_readonly(db, decode_text)
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


def test_pass_two_judges_the_kept_pairs_without_reading_nvtx(tmp_path: Path) -> None:
    """A raw export with a token split across two adjacent ranges: the summary's scrubber made from
    the export open in pass 2 (ranges cache filled by pass 1) redacts the same halves as one made
    from the file's path (its own read), and its connection runs no statement on NVTX_EVENTS."""
    from verlprof.stages.readers.nsys_sqlite import NsysExport
    from verlprof.stages.scrub import build_options, load_policy
    from verlprof.stages.scrub.sqlite_cells import split_nvtx_texts
    from verlprof.stages.scrub.scrubber import Scrubber

    halves = ("hf_Sp1itT0kenPa1r", "tQ9wE8rT7yU6iO5p")     # FAKE: joined, an hf token; alone, nothing
    db = tmp_path / "raw.sqlite"
    shutil.copy(data_path(EXPORTS[2]), db)
    con = sqlite3.connect(db)
    (a, b), = con.execute("SELECT n1.rowid, n2.rowid FROM NVTX_EVENTS n1 JOIN NVTX_EVENTS n2 ON n2.globalTid = "
                          "n1.globalTid AND n2.start > n1.start WHERE NOT EXISTS (SELECT 1 FROM NVTX_EVENTS m WHERE "
                          "m.globalTid = n1.globalTid AND m.start > n1.start AND m.start < n2.start) "
                          "ORDER BY n1.rowid LIMIT 1").fetchall()
    for rid, text in ((a, halves[0]), (b, halves[1])):
        con.execute("UPDATE NVTX_EVENTS SET text = ?, textId = NULL WHERE rowid = ?", (text, rid))
    con.commit()
    con.close()
    opts = build_options([], load_policy(use_local_environment=False), salt="t", include_local=False)
    by_path = split_nvtx_texts(db, Scrubber(opts.policy, opts.pseudonyms))
    assert by_path == set(halves)
    cache = tmp_path / "ranges"
    cache.mkdir()
    with NsysExport.open(db, ranges_cache=cache) as first:        # pass 1: reads, keeps
        first.nvtx_ranges()
    with NsysExport.open(db, ranges_cache=cache) as second:       # pass 2: loads
        seen: list[str] = []
        second.con.set_trace_callback(seen.append)
        second.nvtx_ranges()
        assert split_nvtx_texts(second, Scrubber(opts.policy, opts.pseudonyms)) == by_path
        assert seen and not [s for s in seen if "NVTX_EVENTS" in s]
