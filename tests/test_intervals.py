"""Interval sweeps checked against a brute-force count over integer time points."""
from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st
from verlprof.stages.summarize import intervals

_iv = st.lists(st.tuples(st.integers(0, 60), st.integers(0, 25)), max_size=25)


def _cover(ivs: list[tuple[int, int]]) -> set[int]:
    return {t for s, d in ivs for t in range(s, s + d)}


def _arrays(ivs: list[tuple[int, int]]) -> tuple[np.ndarray, np.ndarray]:
    s = np.array([a for a, _ in ivs], dtype=np.int64)
    return s, s + np.array([d for _, d in ivs], dtype=np.int64)


@settings(max_examples=200, deadline=None)
@given(_iv)
def test_union_length_equals_covered_points(ivs):
    assert intervals.union_length(*_arrays(ivs)) == len(_cover(ivs))


@settings(max_examples=200, deadline=None)
@given(_iv)
def test_union_is_sorted_disjoint_and_covers_the_same_points(ivs):
    us, ue = intervals.union(*_arrays(ivs))
    assert np.all(ue > us)
    assert np.all(us[1:] > ue[:-1])  # disjoint and not touching
    assert {t for s, e in zip(us, ue) for t in range(s, e)} == _cover(ivs)


@settings(max_examples=200, deadline=None)
@given(_iv, _iv)
def test_overlap_and_exposed(a, b):
    ov = intervals.overlap_length(*_arrays(a), *_arrays(b))
    assert ov == len(_cover(a) & _cover(b))
    assert intervals.exposed_length(*_arrays(a), *_arrays(b)) == len(_cover(a) - _cover(b))


def test_empty_and_degenerate_inputs():
    assert intervals.union_length([], []) == 0
    assert intervals.union_length([5, 7], [5, 6]) == 0  # empty and reversed intervals are ignored
    assert intervals.overlap_length([0], [10], [], []) == 0
    s, e = intervals.clip([0, 5, 20], [10, 30, 25], 8, 22)
    assert list(zip(s.tolist(), e.tolist())) == [(8, 10), (8, 22), (20, 22)]
