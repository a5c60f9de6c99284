"""`nvtx_tree.same_thread_parents` (pointer jumping) against the block index's own nesting
(`ThreadIndex.last_covering`, the Fenwick descent `RangeIndex` uses for lookups): the same parent for
every range, on real exports and on adversarial ranges (equal starts, zero length, crossing, ranges
ended on another thread, several threads, ends rising in a staircase), and through its fallback.
"""
from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).parent))
from testdata import data_path  # noqa: E402
from verlprof.stages.readers import nvtx_tree  # noqa: E402
from verlprof.stages.readers.nsys_sqlite import NsysExport  # noqa: E402

EXPORTS = ["gpu_captures/whole-emit-nvtx/whole_956.sqlite",
           "captures/nsysai_h100_2gpu/h100_2gpu_1s.sqlite",
           "captures/fuser_2024_6/fuser_report1.sqlite",
           "h200-nsys-2025.3/whole/whole_1873.sqlite"]


def _by_block_index(start: np.ndarray, end: np.ndarray, gtid: np.ndarray, same: np.ndarray) -> np.ndarray:
    return nvtx_tree._parents(end, nvtx_tree._thread_indexes(start, end, gtid, same), int(start.size))


def _sorted(start: np.ndarray, end: np.ndarray, gtid: np.ndarray, same: np.ndarray) -> tuple[np.ndarray, ...]:
    o = np.lexsort((-end, start, gtid))        # the readers' order: thread, start, -end
    return start[o], end[o], gtid[o], same[o]


@pytest.mark.parametrize("rel", EXPORTS)
def test_parents_of_real_exports(rel: str) -> None:
    with NsysExport.open(data_path(rel)) as db:
        r = db.nvtx_ranges()
    assert len(r) > 0
    got = nvtx_tree.same_thread_parents(r.start, r.end, r.gtid, r.same_thread)
    assert np.array_equal(got, _by_block_index(r.start, r.end, r.gtid, r.same_thread))
    assert (got >= 0).any()


@pytest.mark.parametrize("rounds", [nvtx_tree._JUMP_ROUNDS, 1])   # 1: most inputs take the fallback
def test_parents_of_adversarial_ranges(rounds: int, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(nvtx_tree, "_JUMP_ROUNDS", rounds)
    rng = np.random.default_rng(25)
    for trial in range(1500):
        n = int(rng.integers(0, 50))
        start = rng.integers(0, 12, n)                     # few distinct starts: many equal
        end = start + rng.integers(0, 10, n) * (rng.random(n) < 0.8)   # a fifth zero-length, others cross
        gtid = rng.integers(0, 3, n) << 24
        same = rng.random(n) < 0.85                        # the rest ended on another thread
        args = _sorted(start, end, gtid, same)
        assert np.array_equal(nvtx_tree.same_thread_parents(*args), _by_block_index(*args)), trial
    n = 50_000                                              # one long range, then ends rising: log n rounds
    start = np.arange(n)
    end = np.concatenate(([10 * n], np.arange(1, n) + n))
    args = (start, end, np.zeros(n, np.int64), np.ones(n, bool))
    assert np.array_equal(nvtx_tree.same_thread_parents(*args), _by_block_index(*args))
