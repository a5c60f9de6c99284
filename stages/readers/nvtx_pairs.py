"""The distinct pairs of NVTX texts that follow each other on one thread, found over columns.

Why here, below the scrub stage: the split-value scan (`scrub/sqlite.iter_adjacent_nvtx`) judges
these pairs, and pass 1 of collect already reads every NVTX event of a raw export
(`nsys_sqlite.NsysExport.nvtx_ranges`). Both find the pairs with this one function over the same
integer columns, so pass 1 finds them while it reads and keeps them in the ranges cache, and pass 2
judges them without reading the NVTX table again (issue 25: 720k events, a read costs seconds).
"""
from __future__ import annotations

from typing import Any, Callable

import numpy as np

#: (rowid, StringIds id or None, text) of one half of a pair
Side = tuple[int, Any, str]
Pair = tuple[Side, Side]


def adjacent_pairs(rid: np.ndarray, gtid: np.ndarray, start: np.ndarray, code: np.ndarray, keys: list[Any],
                   string_values: Callable[[set[int]], dict[int, Any]]) -> list[Pair]:
    """Each DISTINCT pair ((rowid, id, text), (rowid, id, text)) of texts of NVTX events that follow
    each other on one thread (ordered by start, then rowid), once, with the rowids of its first
    occurrence, in the order of those first rowids; pairs with an empty or missing half left out.

    `keys[code[i]]` is event i's text: its StringIds id (int, resolved by `string_values` for the
    few ids the pairs need), its own text (str, or bytes read as latin-1), or None (no text).
    Why distinct: a range-heavy capture holds 10^6 events but a few hundred distinct neighbour
    pairs, so they are found with one numpy sort over integer codes and judged once each.
    """
    if rid.size < 2:
        return []
    order = np.lexsort((rid, start, gtid))
    g, c, r = gtid[order], code[order], rid[order]
    same = g[1:] == g[:-1]
    first, second = c[:-1][same], c[1:][same]
    _, at = np.unique(first * len(keys) + second, return_index=True)
    ids = {keys[i] for i in np.union1d(first[at], second[at]).tolist() if isinstance(keys[i], int)}
    strings = string_values(ids) if ids else {}

    def side(code: int, rid: int) -> Side | None:
        key = keys[code]
        val = strings.get(key) if isinstance(key, int) else key
        if isinstance(val, bytes):
            val = val.decode("latin-1")
        if not isinstance(val, str) or not val:
            return None
        return (rid, key if isinstance(key, int) else None, val)

    rid_first, rid_second = r[:-1][same], r[1:][same]
    out: list[Pair] = []
    for i in sorted(at.tolist(), key=lambda j: int(rid_first[j])):
        a = side(int(first[i]), int(rid_first[i]))
        b = side(int(second[i]), int(rid_second[i]))
        if a is not None and b is not None:
            out.append((a, b))
    return out
