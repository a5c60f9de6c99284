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

from .json_scan import scan_batch
from .scrubber import Scrubber

# The args keys whose values are an op's inputs as written by the caller.
INPUT_KEYS = ("Concrete Inputs", "kwargs")
# A `Concrete Inputs` list: up to the first `]` that does not close a string item (`"[768]"`).
_CI_LIST = re.compile(rb'"Concrete Inputs":\s*(\[[^\]]*(?:\]"[^\]]*)*\])')
# A list worth decoding holds two letters in a row once booleans and None are taken out (not
# `1e-05`, not `[768]`, not `True`, not `[True, False]`).
_TRIVIAL_WORDS = re.compile(rb"True|False|None|inf|nan")
_LETTERS2 = re.compile(rb"[A-Za-z]{2}")
# Inputs that are no text anyone wrote: numbers, shapes, booleans, None.
_TRIVIAL = re.compile(r"^(?:[\s\[\]\(\),.+\-0-9eE]|True|False|None|true|false|none|inf|nan)*$")
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
        self._verdicts: dict[bytes, bool] = {}     # distinct input lists -> may hold written text

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
                   decode: Any = None, commas: np.ndarray | None = None) -> None:
        """A batch of the chrome-trace reader: `raw` its text; `events` when the reader decoded it
        (tolerant batches); `decode(bytes) -> event` decodes one event's text. Only the events
        whose input value holds a non-trivial literal are decoded (`_candidates`). `commas`: the
        batch's event boundaries when the caller's scan already found them (check's literal filter),
        so the batch is not scanned twice."""
        if events is not None:
            for ev in events:
                self.feed_event(ev)
            return
        hits = _candidates(raw, self._verdicts)
        if not hits:
            return
        if commas is None:
            commas = scan_batch(raw).commas     # the batch's event boundaries, as scrub finds them
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


def _candidates(raw: bytes, verdicts: dict[bytes, bool]) -> list[int]:
    """Offsets of the input values (`Concrete Inputs` lists, `kwargs`) of a batch that may hold
    text someone wrote. Real traces write tens of thousands of `Concrete Inputs` lists per MB, but
    a few thousand distinct ones (numbers, shapes, booleans): the lists are cut out by one regex
    in C, and each distinct one judged once (`verdicts`); positions are looked up only in a batch
    where one may hold text."""
    out: list[int] = []
    lists = set(_CI_LIST.findall(raw))
    for lst in lists:
        if lst not in verdicts:
            # a list cut short (an item `"[1, 2] by x"`, an escape `"a\\"]b"`) is read whole
            cut = b"\\" in lst or lst[:-1].rstrip()[-1:] not in (b'"', b"[")
            verdicts[lst] = cut or _LETTERS2.search(_TRIVIAL_WORDS.sub(b"", lst)) is not None
    if any(verdicts[x] for x in lists):
        out = [m.start() for m in _CI_LIST.finditer(raw) if verdicts[m.group(1)]]
    if b'"kwargs"' in raw:        # rare: every one is read
        i = raw.find(b'"kwargs"')
        while i != -1:
            out.append(i)
            i = raw.find(b'"kwargs"', i + 1)
    return out


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
