"""The nesting of NVTX ranges per thread: which ranges cover a moment, innermost first.

Why a reader: both the window stage (which top-level ranges are steps) and the summarize stage
(NVIDIA's projection, roll-ups) ask the same questions of the NVTX table, so the index lives beside
the reader of that table rather than in either stage.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional, Protocol

import numpy as np


class Ranges(Protocol):
    """The columns of ranges an index is built over (`events.NvtxRanges` has them), sorted by
    (thread, start, -end). Why a protocol: the index sits below the event model, which holds one."""

    start: np.ndarray
    end: np.ndarray
    gtid: np.ndarray
    same_thread: np.ndarray
    parent: Optional[np.ndarray]


@dataclass
class ThreadIndex:
    """One thread's ranges (those NVIDIA's projection uses), in start order, with the maxima of their
    ends over aligned blocks of 1, 2, 4 ... ranges: "the last range that starts by t and ends at u
    or later" is then a descent over at most 2 log2(n) blocks, for many moments at once.

    Why not the list of ranges covering each moment: a step range covers every moment of the step,
    so such lists hold n x depth entries (10^7 at 10^6 ranges, issue 25); this holds 2n."""

    idx: np.ndarray             # global range indices, ascending (= start order on the thread)
    start: np.ndarray           # their starts
    maxima: np.ndarray          # maxima[first[k] + b]: max end of ranges b*2^k .. (b+1)*2^k - 1 (whole blocks)
    first: np.ndarray           # where level k begins in `maxima` (one array: a lookup is one gather)
    bounds: np.ndarray          # (first start, last end) of the thread's ranges

    @classmethod
    def build(cls, idx: np.ndarray, start: np.ndarray, end: np.ndarray) -> "ThreadIndex":
        e = end[idx]
        levels = [e]
        while levels[-1].size > 1:
            prev = levels[-1][: levels[-1].size // 2 * 2]
            levels.append(np.maximum(prev[0::2], prev[1::2]))
        first = np.concatenate(([0], np.cumsum([lv.size for lv in levels])[:-1])).astype(np.int64)
        return cls(idx, start[idx], np.concatenate(levels), first, np.array([start[idx].min(), e.max()], np.int64))

    def last_covering(self, before: np.ndarray, at_least: np.ndarray) -> np.ndarray:
        """Per query q, the largest position j < before[q] whose range ends at or after
        at_least[q] (-1 if none): walk down from `before` over whole aligned blocks whose max end is
        too early (Fenwick order), then halve the block that holds one down to the position."""
        pos = before.astype(np.int64)
        lev = np.full(pos.size, -1, np.int64)          # level of the found block; -1: none (yet)
        look = np.flatnonzero(pos > 0)
        while look.size:
            p = pos[look]
            k = np.log2(p & -p).astype(np.int64)        # the aligned block ending at p: 2^k ranges
            hit = self._max(k, (p >> k) - 1) >= at_least[look]
            lev[look[hit]] = k[hit]
            miss = look[~hit]
            pos[miss] -= np.left_shift(1, k[~hit])
            look = miss[pos[miss] > 0]
        down = np.flatnonzero(lev > 0)
        while down.size:
            lev[down] -= 1
            k, p = lev[down], pos[down]
            low = self._max(k, (p >> k) - 1) < at_least[down]   # none in the right half: go left
            pos[down[low]] -= np.left_shift(1, k[low])
            down = down[lev[down] > 0]
        return np.where(lev >= 0, pos - 1, -1)

    def _max(self, k: np.ndarray, b: np.ndarray) -> np.ndarray:
        return self.maxima[self.first[k] + b]


def _thread_indexes(start: np.ndarray, end: np.ndarray, gtid: np.ndarray, same_thread: np.ndarray
                    ) -> dict[int, ThreadIndex]:
    """One ThreadIndex per thread, over the ranges NVIDIA's projection uses (`same_thread`)."""
    eligible = np.flatnonzero(same_thread)
    gt = gtid[eligible]
    return {int(g): ThreadIndex.build(eligible[gt == g], start, end) for g in np.unique(gt)}


def _parents(end: np.ndarray, threads: dict[int, ThreadIndex], n: int) -> np.ndarray:
    """parent = tightest enclosing range on the same thread (it sorts before its children): the
    last range before it on its thread that ends at or after its end."""
    parent = np.full(n, -1, np.int64)
    for ti in threads.values():
        found = ti.last_covering(np.arange(ti.idx.size), end[ti.idx])
        parent[ti.idx] = np.where(found >= 0, ti.idx[np.maximum(found, 0)], -1)
    return parent


#: rounds of pointer jumping before `same_thread_parents` leaves the nesting to the block index
_JUMP_ROUNDS = 64


def same_thread_parents(start: np.ndarray, end: np.ndarray, gtid: np.ndarray, same_thread: np.ndarray) -> np.ndarray:
    """Each range's tightest enclosing range on its own thread (-1: none), for ranges sorted by
    (thread, start, -end): the last earlier range of its thread (of those `same_thread`) ending at
    or after its end, what `_parents` finds with the block index; for the reader to keep.

    How, without a Python step per range or a descent per level: pointer jumping. Each range
    starts at its predecessor on the thread; while the range pointed at ends before it does, it
    jumps to that range's pointer. Every range skipped ends before it (an invariant of each jump),
    so where the jumps stop is exactly the answer, for any ranges (crossing ones too). Nested
    ranges stop within a few rounds; a pathological order
    that needs more than `_JUMP_ROUNDS` rounds is nested by the block index instead."""
    idx = np.flatnonzero(same_thread)
    e, g = end[idx], gtid[idx]
    p = np.arange(-1, idx.size - 1, dtype=np.int64)
    if idx.size:
        p[1:][g[1:] != g[:-1]] = -1
    act = np.flatnonzero(p >= 0)
    for _ in range(_JUMP_ROUNDS):
        act = act[e[p[act]] < e[act]]
        if not act.size:
            break
        p[act] = p[p[act]]
        act = act[p[act] >= 0]
    else:
        return _parents(end, _thread_indexes(start, end, gtid, same_thread), int(start.size))
    parent = np.full(start.size, -1, np.int64)
    parent[idx] = np.where(p >= 0, idx[np.maximum(p, 0)], -1)
    return parent


@dataclass
class RangeIndex:
    """Lookup structure for `events.NvtxRanges`: innermost enclosing range of (thread, start, end) calls."""

    ranges: Ranges
    threads: dict[int, ThreadIndex]
    parent: np.ndarray
    depth: np.ndarray
    _levels: list[np.ndarray] = field(default_factory=list)
    _block_end: np.ndarray | None = field(default=None, repr=False)
    _parent_pad: np.ndarray | None = field(default=None, repr=False)

    @classmethod
    def build(cls, ranges: Ranges) -> "RangeIndex":
        """The index of `ranges`; their nesting is taken from `ranges.parent` when the reader kept
        it (the ranges cache: collect's second pass), else found here (`same_thread_parents`)."""
        n = int(ranges.start.size)
        threads = _thread_indexes(ranges.start, ranges.end, ranges.gtid, ranges.same_thread)
        known = ranges.parent is not None and ranges.parent.size == n
        parent = (ranges.parent.copy() if known else
                  same_thread_parents(ranges.start, ranges.end, ranges.gtid, ranges.same_thread))
        ri = cls(ranges, threads, parent, np.zeros(n, np.int64))
        ri._nest()
        return ri

    def _nest(self) -> None:
        """depth = number of ancestors, and the ranges of each depth (deepest first) for roll-ups."""
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
        if ti is None or s.size == 0:
            return np.full(s.size, -1, np.int64)
        found = ti.last_covering(np.searchsorted(ti.start, s, side="right"), np.maximum(e, s))
        return np.where(found >= 0, ti.idx[np.maximum(found, 0)], -1)

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

    def subtrees(self, ids: "np.ndarray | list[int]") -> np.ndarray:
        """`subtree(i)` of every i of `ids`, concatenated in that order.

        Why: a phase of a range-heavy capture has 10^4-10^5 instances (issue 25), and one call per
        instance costs more than the work. When every block is nested whole (`subtree`'s fast path,
        checked for all blocks at once by one `minimum.reduceat` over the parents) the result is a
        concatenation of aranges, built without a Python call per range; otherwise range by range."""
        ids = np.asarray(ids, dtype=np.int64)
        if ids.size == 0:
            return np.zeros(0, np.int64)
        ends = np.maximum(self._block_ends()[ids], ids + 1)
        multi = ends > ids + 1
        if multi.any():
            if self._parent_pad is None:      # one spare slot: a block may end at the last range
                self._parent_pad = np.append(self.parent, np.iinfo(np.int64).max)
            bounds = np.column_stack((ids[multi] + 1, ends[multi])).ravel()
            if (np.minimum.reduceat(self._parent_pad, bounds)[::2] < ids[multi]).any():
                return np.concatenate([self.subtree(i) for i in ids.tolist()])
        n = ends - ids
        return (np.repeat(ids - (np.cumsum(n) - n), n) + np.arange(int(n.sum()))).astype(np.int64, copy=False)

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
