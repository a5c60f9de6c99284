"""`RangeIndex.subtrees(ids)` (one vectorised call for all instances of a phase, issue 25) must give
what one `subtree(i)` per id gives, concatenated in order; and each subtree must be exactly the
ranges whose parent chain reaches i (checked from the parent array alone), on real exports.
"""
from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).parent))
from testdata import data_path  # noqa: E402
from verlprof.stages.readers.nsys_sqlite import NsysExport  # noqa: E402
from verlprof.stages.readers.nvtx_tree import RangeIndex  # noqa: E402

EXPORTS = ["gpu_captures/whole-emit-nvtx/whole_956.sqlite",
           "captures/nsysai_h100_2gpu/h100_2gpu_1s.sqlite",
           "captures/fuser_2024_6/fuser_report1.sqlite",
           "h200-nsys-2025.3/whole/whole_1873.sqlite"]


@pytest.mark.parametrize("rel", EXPORTS)
def test_subtrees_equal_one_subtree_per_id(rel: str) -> None:
    with NsysExport.open(data_path(rel)) as db:
        index = RangeIndex.build(db.nvtx_ranges())
    n = len(index.parent)
    ids = np.random.default_rng(0).permutation(n)[: min(n, 3000)]
    for part in (ids, np.flatnonzero(index.depth == 1), np.zeros(0, np.int64)):
        expected = (np.concatenate([index.subtree(int(i)) for i in part]) if part.size
                    else np.zeros(0, np.int64))
        got = index.subtrees(part)
        assert got.dtype == np.int64 and np.array_equal(got, expected)
    below: dict[int, set[int]] = {}
    for j in range(n):               # every ancestor of j holds j
        p = j
        while p >= 0:
            below.setdefault(p, set()).add(j)
            p = int(index.parent[p])
    for i in ids[:300].tolist():
        assert set(index.subtrees([i]).tolist()) == below[i]
