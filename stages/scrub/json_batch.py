"""Where a batch of raw chrome-trace JSON text splits: the quotes that open or close its strings and
the commas between its top-level events, found with numpy over the bytes.

Why a module of its own: the trace scrubber (trace.py) cuts its stream batches into events this way,
and the split-value scan of consecutive ops (op_inputs.py) must find the very same event boundaries;
both import it from here, so neither imports the other.
"""
from __future__ import annotations

import numpy as np


def string_quotes(raw: bytes) -> np.ndarray:
    """Offsets of the quotes that open or close a string in JSON text `raw` (escaped ones left
    out: a quote after an odd run of backslashes)."""
    a = np.frombuffer(raw, np.uint8)
    q = np.flatnonzero(a == 0x22)
    if not q.size or b"\\" not in raw:
        return q
    b = np.flatnonzero(a == 0x5C)
    j = np.searchsorted(b, q) - 1                      # the last backslash before each quote
    jj = np.maximum(j, 0)
    touching = (j >= 0) & (b[jj] == q - 1)
    first = np.ones(b.size, bool)
    first[1:] = np.diff(b) != 1
    run_start = np.maximum.accumulate(np.where(first, np.arange(b.size), 0))
    return q[~(touching & ((jj - run_start[jj]) % 2 == 0))]


def event_commas(a: np.ndarray, q: np.ndarray) -> np.ndarray:
    """Offsets of the commas between the top-level values (events) of a batch's text."""
    pos = np.flatnonzero((a == 0x2C) | (a == 0x7B) | (a == 0x7D) | (a == 0x5B) | (a == 0x5D))
    pos = pos[np.searchsorted(q, pos) % 2 == 0]        # outside strings
    c = a[pos]
    depth = np.cumsum(np.where((c == 0x7B) | (c == 0x5B), 1, np.where((c == 0x7D) | (c == 0x5D), -1, 0)))
    return pos[(c == 0x2C) & (depth == 0)]


__all__ = ["string_quotes", "event_commas"]
