"""The nesting of NVTX ranges per thread: which ranges cover a moment, innermost first.

Why a reader: both the window stage (which top-level ranges are steps) and the summarize stage
(NVIDIA's projection, roll-ups) ask the same questions of the NVTX table, so the index lives beside
the reader of that table rather than in either stage.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from .nsys_sqlite import NvtxRanges


@dataclass
class ThreadIndex:
    """Elementary segments of one thread's ranges: boundaries and covering ranges, innermost first."""

    bounds: np.ndarray          # sorted unique range starts and ends
    cov: np.ndarray             # [n_bounds, max_depth] range indices covering bounds[i], -1 padded


def _sorted_unique(a: np.ndarray) -> np.ndarray:
    """`np.unique(a)` of a 1-D array by sort and compare. Why not np.unique: numpy 2.4's hash-based
    unique took 6.9 s for 1.44M distinct int64 (the bounds of 720k ranges) where this takes 0.09 s
    (issue 25)."""
    if a.size == 0:
        return a.copy()
    a = np.sort(a)
    keep = np.empty(a.size, dtype=bool)
    keep[0] = True
    np.not_equal(a[1:], a[:-1], out=keep[1:])
    return a[keep]


def _thread_index(idx: np.ndarray, start: np.ndarray, end: np.ndarray) -> ThreadIndex:
    """Build the covering lists of one thread's ranges `idx` (global indices, sorted ascending)."""
    s, e = start[idx], end[idx]
    bounds = _sorted_unique(np.concatenate([s, e]))
    lo = np.searchsorted(bounds, s, side="left")          # first boundary >= start (== start)
    hi = np.searchsorted(bounds, e, side="right")         # one past the last boundary <= end
    counts = hi - lo
    total = int(counts.sum())
    # One sortable int64 per (segment, range) pair: segment in the high 32 bits, then the range
    # with larger indices (inner ranges) first; built with one repeat and sorted in place, which
    # is ~3x faster than a lexsort of two arrays (issue 25: a step range spans 10^6 segments).
    inner_first = np.int64(0xFFFFFFFF) - idx
    key = np.repeat(((lo - (np.cumsum(counts) - counts)) << 32) | inner_first, counts)
    key += np.arange(total, dtype=np.int64) << 32
    key.sort()
    seg = key >> 32
    rng = np.int64(0xFFFFFFFF) - (key & 0xFFFFFFFF)
    first = np.searchsorted(seg, np.arange(bounds.size), side="left")
    pos = np.arange(total) - first[seg]
    depth = int(pos.max()) + 1 if total else 1
    cov = np.full((bounds.size, depth), -1, dtype=np.int64)
    cov[seg, pos] = rng
    return ThreadIndex(bounds, cov)


@dataclass
class RangeIndex:
    """Lookup structure for `NvtxRanges`: innermost enclosing range of (thread, start, end) calls."""

    ranges: NvtxRanges
    threads: dict[int, ThreadIndex]
    parent: np.ndarray
    depth: np.ndarray
    _levels: list[np.ndarray] = field(default_factory=list)
    _block_end: np.ndarray | None = field(default=None, repr=False)

    @classmethod
    def build(cls, ranges: NvtxRanges) -> "RangeIndex":
        n = len(ranges)
        threads: dict[int, ThreadIndex] = {}
        eligible = np.flatnonzero(ranges.same_thread)
        gt = ranges.gtid[eligible]
        for g in np.unique(gt):
            threads[int(g)] = _thread_index(eligible[gt == g], ranges.start, ranges.end)
        ri = cls(ranges, threads, np.full(n, -1, np.int64), np.zeros(n, np.int64))
        ri._nest()
        return ri

    def _nest(self) -> None:
        """parent = tightest enclosing range on the same thread (it sorts before its children)."""
        r = self.ranges
        for g, ti in self.threads.items():
            idx = np.flatnonzero((r.gtid == g) & r.same_thread)
            seg = np.searchsorted(ti.bounds, r.start[idx], side="right") - 1
            found = np.full(idx.size, -1, np.int64)
            for k in range(ti.cov.shape[1]):
                c = ti.cov[seg, k]
                ok = (found < 0) & (c >= 0) & (c < idx)
                ok &= r.end[np.maximum(c, 0)] >= r.end[idx]
                found[ok] = c[ok]
            self.parent[idx] = found
        cur = self.parent.copy()
        while True:  # depth = number of ancestors, counted level by level (vectorised)
            up = cur >= 0
            if not up.any():
                break
            self.depth[up] += 1
            cur[up] = self.parent[cur[up]]
        self._levels = [np.flatnonzero(self.depth == d) for d in range(int(self.depth.max(initial=0)), 0, -1)]

    def innermost(self, gtid: int, s: np.ndarray, e: np.ndarray) -> np.ndarray:
        """Innermost range of thread `gtid` containing each [s, e] (-1 when none)."""
        ti = self.threads.get(int(gtid))
        out = np.full(s.size, -1, np.int64)
        if ti is None or s.size == 0:
            return out
        seg = np.searchsorted(ti.bounds, s, side="right") - 1
        live = np.flatnonzero(seg >= 0)
        if live.size == 0:
            return out
        seg_l = seg[live]
        e_l = np.maximum(e[live], s[live])
        res = np.full(live.size, -1, np.int64)
        end = self.ranges.end
        for k in range(ti.cov.shape[1]):
            c = ti.cov[seg_l, k]
            todo = res < 0
            if not todo.any():
                break
            ok = todo & (c >= 0)
            ok[ok] = end[c[ok]] >= e_l[ok]
            res[ok] = c[ok]
        out[live] = res
        return out

    def rollup_sum(self, values: np.ndarray) -> np.ndarray:
        """Add every range's value into all its enclosing ranges (inclusive totals)."""
        out = values.astype(np.float64 if values.dtype.kind == "f" else np.int64).copy()
        for idx in self._levels:  # deepest level first, so children are final before parents
            np.add.at(out, self.parent[idx], out[idx])
        return out

    def _block_ends(self) -> np.ndarray:
        """Per range, one past the last range of its thread that starts before it ends (ranges are
        sorted by thread, then start), computed once."""
        if self._block_end is None:
            r = self.ranges
            n = len(self.parent)
            ends = np.empty(n, np.int64)
            cuts = np.flatnonzero(np.diff(r.gtid)) + 1 if n else np.zeros(0, np.int64)
            for a, b in zip(np.concatenate(([0], cuts)).tolist(), np.concatenate((cuts, [n])).tolist()):
                ends[a:b] = a + np.searchsorted(r.start[a:b], r.end[a:b], side="right")
            self._block_end = ends
        return self._block_end

    def rollup_min(self, values: np.ndarray) -> np.ndarray:
        out = values.copy()
        for idx in self._levels:
            np.minimum.at(out, self.parent[idx], out[idx])
        return out

    def rollup_max(self, values: np.ndarray) -> np.ndarray:
        out = values.copy()
        for idx in self._levels:
            np.maximum.at(out, self.parent[idx], out[idx])
        return out

    def subtree(self, i: int) -> np.ndarray:
        """Indices of range i and all ranges nested in it (they follow i in the sorted order).

        Fast path (issue 25: called once per phase instance, 10^5-10^6 times): the ranges of i's
        thread that start before i ends form a block right after i; when every parent in that block
        lies in [i, block end) they are all nested in i and the subtree is that block. Otherwise
        (ranges that overlap without nesting) the block is walked range by range."""
        j = int(self._block_ends()[i])
        if j <= i + 1:
            return np.asarray([i], dtype=np.int64)
        if int(self.parent[i + 1:j].min()) >= i:
            return np.arange(i, j, dtype=np.int64)
        members = [i]
        inside = {i}
        for j in range(i + 1, len(self.parent)):
            if self.ranges.gtid[j] != self.ranges.gtid[i] or self.ranges.start[j] > self.ranges.end[i]:
                break
            if self.parent[j] in inside:
                inside.add(j)
                members.append(j)
        return np.asarray(members, dtype=np.int64)
