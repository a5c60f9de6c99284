"""Split values in Kineto traces: a secret written across the string inputs of consecutive ops.

Why: the NVTX side already joins adjacent ranges of one thread (`sqlite_cells.iter_adjacent_nvtx`,
`Scrubber.joined_halves`), because a token passed in two pieces (`tok = a + b`, two calls) shows
itself only when the pieces are read together. A torch trace records the same pieces as the
`Concrete Inputs` (and `kwargs`) of consecutive ops of one thread: each piece alone passes every
rule. `OpInputs` collects, per (pid, tid), the string inputs of the ops that have any, in `ts`
order, straight from the raw batches of the one chrome-trace reader (only events whose input list
holds a literal with letters are decoded: real traces hold numbers, shapes and `True` there), and
`split_op_halves` judges each adjacent pair joined, as the NVTX scan does. The halves found are
redacted whole wherever they appear (`Scrubber.force_redact`, kind `split_value`).

"Adjacent" is over the sequence of non-trivial string inputs of one thread: the items of one
op's list in order, then the next op's (ops with no string input are skipped, so an op between
the two halves that takes only tensors does not hide them).
"""
from __future__ import annotations

import re
from collections import defaultdict
from typing import Any, Iterable, Iterator

import numpy as np

from .scrubber import Scrubber

# The args keys whose values are an op's inputs as written by the caller.
INPUT_KEYS = ("Concrete Inputs", "kwargs")
_KEY_RE = re.compile(rb'"(?:Concrete Inputs|kwargs)"\s*:\s*')
# A value worth decoding: its raw text holds two letters in a row (not `1e-05`, not `[768]`).
_LETTERS = re.compile(rb"[A-Za-z]{2}")
_TOKEN = re.compile(rb'"(?:[^"\\]|\\.)*"|[\[\]{}]')
# Inputs that are no text anyone wrote: numbers, shapes, booleans, None.
_TRIVIAL = re.compile(r"^(?:[\s\[\]\(\),.+\-0-9eE]*|True|False|None|true|false|none|inf|-inf|nan)$")
# A half shorter than this is left: redacted wherever it stands in the bundle, `1` or `ab` would
# take every number and word with it; three characters of a secret are no secret.
MIN_HALF = 4
# Where check reports a half (the template of its finding; kind `split_value`).
SPLIT_OP_LOCATION = "<inputs of consecutive ops>"


def _strings(value: Any, out: list[str], depth: int = 0) -> None:
    """The non-trivial strings of an input value (lists and dicts in order, values only)."""
    if isinstance(value, str):
        if not _TRIVIAL.match(value):
            out.append(value)
    elif isinstance(value, list) and depth < 8:
        for v in value:
            _strings(v, out, depth + 1)
    elif isinstance(value, dict) and depth < 8:
        for v in value.values():
            _strings(v, out, depth + 1)


def _sort_key(ts: Any) -> float:
    try:
        return float(ts)
    except (TypeError, ValueError):
        return 0.0


class OpInputs:
    """The string inputs of the ops of a trace, per thread, for the split-value scan."""

    def __init__(self) -> None:
        self._threads: dict[tuple[str, str], list[tuple[float, int, tuple[str, ...]]]] = defaultdict(list)
        self._n = 0

    def feed_event(self, ev: Any) -> None:
        """One decoded event: its inputs, if it has any."""
        if not isinstance(ev, dict):
            return
        args = ev.get("args")
        if not isinstance(args, dict):
            return
        found: list[str] = []
        for k in INPUT_KEYS:
            if k in args:
                _strings(args[k], found)
        if found:
            key = (str(ev.get("pid")), str(ev.get("tid")))
            self._threads[key].append((_sort_key(ev.get("ts")), self._n, tuple(found)))
            self._n += 1

    def feed_batch(self, raw: bytes, events: list[Any] | None = None,
                   decode: Any = None) -> None:
        """A batch of the chrome-trace reader: `raw` its text; `events` when the reader decoded it
        (tolerant batches); `decode(bytes) -> event` decodes one event's text."""
        if events is not None:
            for ev in events:
                self.feed_event(ev)
            return
        hits = []
        for m in _KEY_RE.finditer(raw):
            end = _value_end(raw, m.end())
            if _LETTERS.search(raw, m.end(), end):
                hits.append(m.start())
        if not hits:
            return
        from .trace import _event_commas, _quotes   # the batch's event boundaries, as scrub finds them
        a = np.frombuffer(raw, np.uint8)
        commas = _event_commas(a, _quotes(raw))
        starts = np.concatenate(([0], commas + 1))
        ends = np.concatenate((commas, [len(raw)]))
        for k in np.unique(np.searchsorted(commas, np.asarray(hits))).tolist():
            self.feed_event(decode(raw[int(starts[k]):int(ends[k])]))

    def pairs(self) -> Iterator[tuple[str, str]]:
        """Adjacent (first, second) string inputs of one thread, in ts order."""
        for ops in self._threads.values():
            ops.sort()
            seq = [s for _ts, _n, items in ops for s in items]
            yield from zip(seq, seq[1:])

    def __bool__(self) -> bool:
        return bool(self._threads)


def _value_end(raw: bytes, at: int) -> int:
    """Where the input value starting at `at` ends: a string literal, or a list or dict of them
    (its closing bracket, string literals skipped). Capped, so a malformed value costs a bounded
    scan."""
    depth = 0
    for m in _TOKEN.finditer(raw, at, min(len(raw), at + 65536)):
        c = m.group(0)[:1]
        if c == b'"':
            if depth == 0:
                return m.end()
        elif c in (b"[", b"{"):
            depth += 1
        else:
            depth -= 1
            if depth <= 0:
                return m.end()
    return min(len(raw), at + 65536)


def split_op_halves(pairs: Iterable[tuple[str, str]], scrubber: Scrubber) -> set[str]:
    """The inputs of `pairs` that are half of a secret the two make together
    (`Scrubber.joined_halves`, shape rules only), at least `MIN_HALF` characters long."""
    out: set[str] = set()
    for a, b in pairs:
        for text, hit in zip((a, b), scrubber.joined_halves(a, b)):
            if hit and len(text) >= MIN_HALF:
                out.add(text)
    return out


__all__ = ["INPUT_KEYS", "MIN_HALF", "SPLIT_OP_LOCATION", "OpInputs", "split_op_halves"]
