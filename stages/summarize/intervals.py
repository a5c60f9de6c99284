"""Interval sweeps on numpy arrays: union, union length, overlap of two interval sets.

Why: a phase's `gpu_busy_ns` is the union of its GPU activity (streams overlap, so summing
durations double-counts), and `exposed_comm_ns` is collective time not covered by compute. Both
reduce to sorted sweeps that numpy does in O(n log n) without a Python loop per interval, so a step
with millions of kernels costs milliseconds. Intervals are closed-open `[start, end)` in ns; an
interval with end <= start is empty and ignored.
"""
from __future__ import annotations

import numpy as np

_I64 = np.int64


def _as_i64(a: "np.ndarray | list[int]") -> np.ndarray:
    return np.asarray(a, dtype=_I64)


def union(starts: "np.ndarray | list[int]", ends: "np.ndarray | list[int]") -> tuple[np.ndarray, np.ndarray]:
    """Merge intervals into sorted, disjoint, non-touching intervals `(starts, ends)`."""
    s = _as_i64(starts)
    e = _as_i64(ends)
    keep = e > s
    s, e = s[keep], e[keep]
    if s.size == 0:
        return s, e
    order = np.argsort(s, kind="stable")
    s, e = s[order], e[order]
    run_end = np.maximum.accumulate(e)
    # A new merged interval begins where a start lies after every earlier end.
    new = np.empty(s.size, dtype=bool)
    new[0] = True
    new[1:] = s[1:] > run_end[:-1]
    first = np.flatnonzero(new)
    last = np.append(first[1:], s.size) - 1
    return s[first], run_end[last]


def union_length(starts: "np.ndarray | list[int]", ends: "np.ndarray | list[int]") -> int:
    """Total length covered by at least one interval."""
    us, ue = union(starts, ends)
    return int((ue - us).sum())


def _covered_before(us: np.ndarray, ue: np.ndarray, cum: np.ndarray, t: np.ndarray) -> np.ndarray:
    """For disjoint sorted intervals (us, ue) with cumulative lengths `cum`: length covered before t."""
    k = np.searchsorted(us, t, side="right")  # intervals starting at or before t
    out = np.zeros(t.shape, dtype=_I64)
    has = k > 0
    i = k[has] - 1
    before = cum[i] - (ue[i] - us[i])  # full length of intervals 0..i-1
    out[has] = before + np.minimum(t[has], ue[i]) - us[i]
    return out


def overlap_length(a_starts: "np.ndarray | list[int]", a_ends: "np.ndarray | list[int]",
                   b_starts: "np.ndarray | list[int]", b_ends: "np.ndarray | list[int]") -> int:
    """Length covered by both interval sets (each may overlap itself; both are merged first)."""
    aus, aue = union(a_starts, a_ends)
    bus, bue = union(b_starts, b_ends)
    if aus.size == 0 or bus.size == 0:
        return 0
    cum = np.cumsum(bue - bus)
    return int((_covered_before(bus, bue, cum, aue) - _covered_before(bus, bue, cum, aus)).sum())


def exposed_length(a_starts: "np.ndarray | list[int]", a_ends: "np.ndarray | list[int]",
                   b_starts: "np.ndarray | list[int]", b_ends: "np.ndarray | list[int]") -> int:
    """Length covered by A and not by B (e.g. communication not hidden behind compute)."""
    return union_length(a_starts, a_ends) - overlap_length(a_starts, a_ends, b_starts, b_ends)


def clip(starts: "np.ndarray | list[int]", ends: "np.ndarray | list[int]", lo: int, hi: int) -> tuple[np.ndarray, np.ndarray]:
    """Intervals cut to the window [lo, hi); empty ones dropped."""
    s = np.maximum(_as_i64(starts), lo)
    e = np.minimum(_as_i64(ends), hi)
    keep = e > s
    return s[keep], e[keep]
