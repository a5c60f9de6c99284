"""One scan of a batch of raw JSON events for the trace fast path: where its strings are, how deep
each one sits and which event holds it.

Why one scan: the fast path needs the string literals (to look them up), the commas between events
(to copy the clean ones around a walked event) and, under the provenance rule (issue 39), each
literal's depth and event (trace_fields places toolchain literals by field). Finding quotes and
structural characters in separate passes over the bytes, then relating them with binary searches,
cost several times the lookup itself; here one pass over the bytes finds every quote and
structural character in order, and running sums over those few tokens give the rest.
"""
from __future__ import annotations

from typing import NamedTuple

import numpy as np


def _escaped(a: np.ndarray, q: np.ndarray) -> np.ndarray:
    """Which of the quotes at offsets `q` (sorted) are escaped: after an odd run of backslashes."""
    b = np.flatnonzero(a == 0x5C)
    j = np.searchsorted(b, q) - 1                      # the last backslash before each quote
    jj = np.maximum(j, 0)
    touching = (j >= 0) & (b[jj] == q - 1)
    first = np.ones(b.size, bool)
    first[1:] = np.diff(b) != 1
    run_start = np.maximum.accumulate(np.where(first, np.arange(b.size), 0))
    return touching & ((jj - run_start[jj]) % 2 == 0)


def string_quotes(raw: bytes) -> np.ndarray:
    """Offsets of the quotes that open or close a string in JSON text `raw` (escaped ones left
    out: a quote after an odd run of backslashes)."""
    a = np.frombuffer(raw, np.uint8)
    q = np.flatnonzero(a == 0x22)
    if not q.size or b"\\" not in raw:
        return q
    return q[~_escaped(a, q)]


class BatchScan(NamedTuple):
    """A batch's strings and structure. `q`: offsets of the string quotes (open, close, ...);
    `commas`: the commas between events; `lit_depth` / `lit_event`: each literal's depth and the
    index of its event in the batch; `tokens` / `chars` / `outside`: every quote and structural
    character in order, and the indices of the structural ones outside strings (`closers`, read
    only where a literal's list is in question)."""
    q: np.ndarray
    commas: np.ndarray
    lit_depth: np.ndarray
    lit_event: np.ndarray
    tokens: np.ndarray
    chars: np.ndarray
    outside: np.ndarray

    def closers(self) -> np.ndarray:
        """Offsets of the `]`, `{` and `}` outside strings (what ends a list item's scope)."""
        ch = self.chars[self.outside]
        return self.tokens[self.outside[(ch == 0x5D) | (ch == 0x7B) | (ch == 0x7D)]]


class BatchLiterals(NamedTuple):
    """A batch's string literals as the literal table sees them: starts and ends (between the
    quotes), lengths, first and last 8 bytes (masked to the length), and each one's slot in the
    table (-1: not there). Computed once by the lookup and reused to place them (trace_fields)."""
    s: np.ndarray
    e: np.ndarray
    length: np.ndarray
    first: np.ndarray
    last: np.ndarray
    slots: np.ndarray


def scan_batch(raw: bytes) -> BatchScan:
    """The strings and structure of `raw` (a run of JSON values separated by commas)."""
    a = np.frombuffer(raw, np.uint8)
    b = a | np.uint8(0x20)              # `[` -> `{`, `]` -> `}`: four compares find all six
    m = np.flatnonzero((b == 0x22) | (b == 0x2C) | (b == 0x7B) | (b == 0x7D))
    ch = a[m]
    if b"\x02" in raw or b"\x0c" in raw:  # the control bytes that alias a token (`"`, `,`)
        real = (ch != 0x02) & (ch != 0x0C)
        m, ch = m[real], ch[real]
    is_q = ch == 0x22
    if b"\\" in raw:                    # escaped quotes are no tokens
        qi = np.flatnonzero(is_q)
        esc = _escaped(a, m[qi])
        if esc.any():
            keep = np.ones(m.size, bool)
            keep[qi[esc]] = False
            m, ch, is_q = m[keep], ch[keep], is_q[keep]
    qi = np.flatnonzero(is_q)
    # a structural character is outside strings when an even number of quotes precede it: the
    # k-th non-quote token at index j has j - k quotes before it (no running sum over all tokens)
    nq = np.flatnonzero(~is_q)
    outside = nq[((nq - np.arange(nq.size)) & 1) == 0]
    # depth and event by running sums over the structure and the opening quotes only
    mark = np.zeros(m.size, bool)
    mark[outside] = True
    mark[qi[0::2]] = True
    sel = np.flatnonzero(mark)
    cs = ch[sel]
    bc = cs | np.uint8(0x20)
    depth = np.cumsum((bc == 0x7B).view(np.int8) - (bc == 0x7D).view(np.int8), dtype=np.int32)
    is_comma = (cs == 0x2C) & (depth == 0)
    event = np.cumsum(is_comma, dtype=np.int32)
    opening = cs == 0x22
    return BatchScan(q=m[qi], commas=m[sel[is_comma]], lit_depth=depth[opening], lit_event=event[opening],
                     tokens=m, chars=ch, outside=outside)


__all__ = ["BatchLiterals", "BatchScan", "scan_batch", "string_quotes"]
