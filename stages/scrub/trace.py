"""Scrub a torch.profiler chrome trace (`.json` / `.json.gz`) as a stream, at the speed of reading.

Why this shape: traces of real verl steps are hundreds of MB of JSON, nearly all of it the same few
thousand strings (kernel and op names, keys) between new numbers. The trace is read by the one
chrome-trace reader (`readers/chrome_trace.ChromeTraceStream`: batches of whole events, validated
in C, never decoded) and each batch goes through `LiteralFilter`, which finds every JSON string
literal of the batch with numpy and looks each one up, in numpy, in a table of the literals
already judged clean. A batch whose every literal (key or value, at any depth) is clean is written
as it was read; otherwise only the events holding a literal the rules may change are decoded,
walked by `TraceScrubber` and re-encoded, and the rest of the batch is copied around them. Each
distinct literal is judged once per file. Output goes through ISA-L's gzip (level from the policy)
on a thread of its own, so reading, filtering and compressing overlap on two cores.

Key-aware rules on top of the string rules: `host_name` becomes a host pseudonym, `traceName`
keeps only its file name, secret-named argument keys lose their values, unknown top-level metadata
keys (`PT_PROFILER_JOB_*` ...) keep only numbers, and absolute paths in `python_function` names
lose their home/user parts (and their virtual-env prefix). A literal is clean only when the rules
leave it alone both as a value and as a plain key, so the key-aware rules never apply to an event
that is passed through.
"""
from __future__ import annotations

from collections import Counter
from pathlib import Path, PurePosixPath, PureWindowsPath
from typing import IO, Any, Callable

import numpy as np

from ..core.errors import BadInputError
from ..core.gzip_pipe import GzipPipe
from ..readers import json_codec
from ..readers.chrome_trace import Batch, ChromeTraceStream, byte_chunks
from .identities import Identities, IdentityCollector
from .policy import Policy
from .rules import KIND_UNKNOWN, REDACTED
from .deny import denied_flag_items
from .shapes import flag_value_items
from .provenance import event_name_field
from .json_scan import BatchLiterals, BatchScan, scan_batch
from .trace_fields import user_field_events
from .scrubber import LocationNames, Scrubber
from .op_inputs import OpInputs, split_op_halves

GZIP_MAGIC = b"\x1f\x8b"

# Event keys whose values are structural (numbers or fixed vocab); strings under them are still
# scrubbed, but the key itself needs no scrubbing.
_EVENT_KEYS = frozenset({"ph", "cat", "name", "pid", "tid", "ts", "dur", "args", "id", "bp", "s",
                         "id2", "tts", "tdur", "cname", "sf", "stack", "scope"})


# --------------------------------------------------------------------------------------------
# Which literals of a batch the rules may change: numpy over the raw bytes
# --------------------------------------------------------------------------------------------

_MASK = np.array([(1 << (8 * n)) - 1 for n in range(8)] + [(1 << 64) - 1], dtype=np.uint64)
_K1I, _K2I, _M64 = 0x9E3779B97F4A7C15, 0xC2B2AE3D27D4EB4F, (1 << 64) - 1
_K1, _K2 = np.uint64(_K1I), np.uint64(_K2I)


def _words(buf: bytes) -> np.ndarray:
    """w[i] = the little-endian 8-byte word at buf[i:i+8] (zero-padded), for every offset i."""
    return np.ndarray((len(buf) + 1,), dtype="<u8", buffer=buf + bytes(8), strides=(1,))


def _literal_text(lit: bytes) -> str | None:
    """The string a literal's raw bytes (between its quotes) stand for; None if not UTF-8 JSON."""
    try:   # lone surrogates (`\ud800`) included: the codec's standard-library fallback reads them
        return lit.decode("utf-8") if b"\\" not in lit else json_codec.loads(b'"' + lit + b'"', "strict")
    except ValueError:
        return None


def _middles(length: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """For literals longer than 16 bytes: the words covering bytes 8 .. len-8 (first and last 8 are
    in the key), as (owner literal, offset in it), owner-major."""
    nm = (length - 9) // 8
    owner = np.repeat(np.arange(length.size), nm)
    k = np.arange(owner.size) - np.repeat(np.cumsum(nm) - nm, nm) + 1
    return owner, np.minimum(8 * k, np.repeat(length - 16, nm))


class LiteralFilter:
    """Finds the string literals of a batch of raw JSON that a rule may change, at numpy speed.

    Every literal (keys and values alike) of the batch is located from the quote positions and
    looked up in a hash table of the literals judged clean, on a slot chosen by its length and its
    first and last 8 bytes; a hit must match those, and a hit on a literal longer than 16 bytes is
    confirmed word by word against the stored copy, so the lookup is exact. Each distinct literal missing from the table is judged once (`judge(text)`
    -> clean?) and added, on its slot or the next; what the table cannot hold (literals alike at
    both ends: `[768, 364032, 64, 2304, 1]`) stays in Python sets. `bad` is called with a literal that is not UTF-8 JSON (it is dirty).
    """

    BITS = 17
    MAX_PY = 200_000

    def __init__(self, judge: Callable[[str], bool], bad: Callable[[bytes], None] | None = None,
                 toolchain: Callable[[str], bool] | None = None) -> None:
        self.judge = judge
        self.bad = bad
        # `toolchain(text)`: clean where the toolchain wrote it, though not in a user-written field
        # (issue 39); such literals are placed from the bytes (trace_fields.user_field_events), not walked
        self.toolchain = toolchain
        self.tool_py: set[bytes] = set()
        self.last_tool = np.zeros(0, np.int64)   # the toolchain-clean literals of the last `dirty` batch (indices)
        self.last_literals: BatchLiterals | None = None
        self.last_scan: BatchScan | None = None
        # per-(category, phase, name) verdicts of trace_fields, keyed by the literals' slots in the
        # table (a slot names one literal for the filter's life), judged once per filter
        self.name_verdicts: dict[int, bool] = {}
        n = 1 << self.BITS
        self.t_len = np.full(n, -1, np.int64)
        self.t_first = np.zeros(n, np.uint64)
        self.t_last = np.zeros(n, np.uint64)
        self.t_at = np.zeros(n, np.int64)              # where a long literal's bytes lie in _reps
        self.t_tool = np.zeros(n, bool)                # the literal is toolchain-clean (issue 39)
        self._reps = bytearray()
        self._rep_words = _words(b"")
        self.clean_py: set[bytes] = set()
        self.dirty_py: set[bytes] = set()

    def _slot(self, first: np.ndarray, last: np.ndarray, length: np.ndarray) -> np.ndarray:
        return ((first ^ last * _K2 ^ length.view(np.uint64)) * _K1 >> np.uint64(64 - self.BITS)).astype(np.int64)

    def dirty(self, raw: bytes) -> np.ndarray:
        """Start offsets (sorted) in `raw` of the literals a rule may change; empty when none. The
        toolchain-clean ones (clean only where the toolchain wrote them) are left in `last_tool`
        (indices into `last_literals`), for `events_to_walk` to place by their field."""
        self.last_tool = np.zeros(0, np.int64)
        scan = self.last_scan = scan_batch(raw)
        q = scan.q
        s, e = q[0::2] + 1, q[1::2]
        if not s.size:
            return s
        w = _words(raw)
        length = e - s
        m = _MASK[np.minimum(length, 8)]
        first, last = w[s] & m, w[np.maximum(e - 8, s)] & m
        slot = self._slot(first, last, length)

        def look(ix: np.ndarray) -> tuple[np.ndarray, np.ndarray]:   # (hit, the slot it hit): the slot, then its neighbour
            h = self._hit(w, s[ix], length[ix], first[ix], last[ix], slot[ix])
            at = slot[ix].copy()
            two = np.flatnonzero(~h)
            if two.size:
                h2 = self._hit(w, s[ix[two]], length[ix[two]], first[ix[two]], last[ix[two]], slot[ix[two]] ^ 1)
                h[two], at[two] = h2, slot[ix[two]] ^ 1
            return h, at

        every = np.arange(s.size)
        hit, at = look(every)
        miss = np.flatnonzero(~hit)
        if miss.size > 4096:   # new literals: learn one of each key, then look again
            _, one = np.unique(slot[miss], return_index=True)
            for i in miss[one].tolist():
                self._learn(raw[s[i]:e[i]])
            h2, at2 = look(miss)
            hit[miss], at[miss] = h2, at2
            miss = miss[~h2]
        tool = np.flatnonzero(hit & self.t_tool[at]) if self.toolchain is not None else np.zeros(0, np.int64)
        out, tool_py = [], []
        for i in miss.tolist():
            state = self._state(raw[s[i]:e[i]])
            if state == 1:
                tool_py.append(i)
            elif state == 2:
                out.append(i)
        if tool_py:
            tool = np.sort(np.concatenate((tool, np.asarray(tool_py, np.int64))))
        if tool.size:
            self.last_tool = tool
            self.last_literals = BatchLiterals(s, e, length, first, last, np.where(hit, at, -1))
        return s[out]

    def _hit(self, w: np.ndarray, s: np.ndarray, length: np.ndarray, first: np.ndarray,
             last: np.ndarray, slot: np.ndarray) -> np.ndarray:
        hit = (self.t_len[slot] == length) & (self.t_first[slot] == first) & (self.t_last[slot] == last)
        long_ = np.flatnonzero(hit & (length > 16))
        if long_.size:   # confirm the middle words against the stored copy
            if self._rep_words.size <= len(self._reps):
                self._rep_words = _words(bytes(self._reps))
            owner, off = _middles(length[long_])
            bad = w[s[long_][owner] + off] != self._rep_words[self.t_at[slot[long_]][owner] + off]
            hit[long_] = np.bincount(owner[bad], minlength=long_.size) == 0
        return hit

    def _clean(self, lit: bytes) -> bool:
        return self._state(lit) == 0

    def _state(self, lit: bytes) -> int:
        """0 clean, 1 toolchain-clean (clean where the toolchain wrote it), 2 dirty."""
        if lit in self.clean_py:
            return 0
        if lit in self.tool_py:
            return 1
        if lit in self.dirty_py:
            return 2
        return self._learn(lit)

    def _learn(self, lit: bytes) -> int:
        text = _literal_text(lit)
        if text is None and self.bad is not None:
            self.bad(lit)
        state = 2 if text is None else 0 if self.judge(text) else \
            1 if self.toolchain is not None and self.toolchain(text) else 2
        if state == 2:
            if len(self.dirty_py) >= self.MAX_PY:
                self.dirty_py.clear()
            self.dirty_py.add(lit)
            return 2
        n = len(lit)
        first = int.from_bytes(lit[:8], "little")
        last = int.from_bytes(lit[-8:], "little") if n >= 8 else first
        slot = ((first ^ last * _K2I ^ n) * _K1I & _M64) >> (64 - self.BITS)   # `_slot`, on one literal
        if self.t_len[slot] >= 0:
            slot ^= 1
        if self.t_len[slot] < 0:
            self.t_len[slot], self.t_first[slot], self.t_last[slot] = n, first, last
            self.t_tool[slot] = state == 1
            self.t_at[slot] = len(self._reps)
            if n > 16:
                self._reps += lit
        else:
            box = self.clean_py if state == 0 else self.tool_py
            if len(box) >= self.MAX_PY:
                box.clear()
            box.add(lit)
        return state

    def events_to_walk(self, raw: bytes) -> list[tuple[int, int, int]]:
        """(index in the batch, start, end) of each event of `raw` holding a dirty literal."""
        dirty = self.dirty(raw)
        tool = self.last_tool
        if not dirty.size and not tool.size:
            return []
        scan = self.last_scan
        assert scan is not None
        commas = scan.commas
        starts = np.concatenate(([0], commas + 1))
        ends = np.concatenate((commas, [len(raw)]))
        walk = set(np.unique(np.searchsorted(commas, dirty)).tolist())
        if tool.size:   # toolchain-clean literals: walk their event only when one sits in a user field
            assert self.last_literals is not None
            walk |= user_field_events(raw, self.last_literals, tool, scan, self.name_verdicts)
        return [(k, int(starts[k]), int(ends[k])) for k in sorted(walk)]


def unchanged_by(sc: Scrubber, rules_only: bool = False) -> Callable[[str], bool]:
    """True for a string that `sc.scrub` returns as it is and counts nothing for (judged as
    user-written text: the strictest field); `rules_only`: by the second net alone (a toolchain
    field)."""
    def ok(text: str) -> bool:
        if not text:
            return True
        if text[:2] == "--" and " " not in text and "=" not in text:
            return False            # an option: the item after it is judged as its value (_list)
        saved = sc.counts
        sc.counts = Counter()
        try:
            out = sc.scrub_rules(text, "-") if rules_only else sc.scrub(text, "-")
        finally:
            added, sc.counts = sc.counts, saved
        return out == text and not added
    return ok


def loads_event(text: bytes, path: Path) -> Any:
    """One event's raw text decoded by the one codec (NaN, integers beyond 64
    bits, lone surrogates); BadInputError when it is neither."""
    try:
        return json_codec.loads(text, "strict")
    except ValueError as exc:
        raise BadInputError(path, f"invalid JSON in traceEvents ({' '.join(str(exc).split())[:80]})") from None


# --------------------------------------------------------------------------------------------
# Scrubbing values with key context
# --------------------------------------------------------------------------------------------

class TraceScrubber:
    """Key-aware scrubbing of decoded trace values (events and top-level metadata)."""

    def __init__(self, scrubber: Scrubber, policy: Policy) -> None:
        self.sc = scrubber
        self.policy = policy
        self.keep = frozenset(policy.trace_keep_keys)
        self.host_keys = frozenset(k.lower() for k in policy.trace_host_keys)
        self.path_keys = frozenset(policy.trace_path_keys)
        self._names = LocationNames(50_000)

    def _loc(self, parent: str, key: str) -> str:
        return self._names.child(parent, key)

    def value(self, obj: Any, key: str | None, loc: str, depth: int = 0) -> Any:
        t = type(obj)
        if t is str:
            return self.sc.scrub_keyed(key, obj, loc) if key is not None else self.sc.scrub(obj, loc)
        if t is dict:
            return self._dict(obj, loc, depth)
        if t is list:
            return self._list(obj, key, loc, depth)
        return obj

    def _dict(self, obj: dict, loc: str, depth: int) -> dict:
        if depth > 100:
            raise RecursionError
        sc = self.sc
        out = {}
        top = depth == 0 and loc == "traceEvents[]"
        for k, v in obj.items():
            ks = k if k in _EVENT_KEYS else sc.scrub(k, loc + ".<key>")
            t = type(v)
            if top and k == "name" and t is str:    # who wrote an event's name: by its category
                out[ks] = sc.scrub(v, self._loc(loc, ks), event_name_field(obj.get("cat"), obj.get("ph")))
            elif t is str:
                out[ks] = sc.scrub_keyed(k, v, self._loc(loc, ks)) if v else v
            elif t is dict:
                out[ks] = self._dict(v, self._loc(loc, ks), depth + 1)
            elif t is list:
                out[ks] = self._list(v, k, self._loc(loc, ks), depth + 1)
            else:
                out[ks] = v
        return out

    def _list(self, obj: list, key: str | None, loc: str, depth: int) -> list:
        if depth > 100:
            raise RecursionError
        out = []
        values = flag_value_items(obj, self.sc.is_secret_name) if len(obj) > 1 else ()
        denied = denied_flag_items(obj) if len(obj) > 1 else ()
        for i, v in enumerate(obj):
            t = type(v)
            if i in values:         # `["--api-key", "<value>"]`: the flag's value is the next item
                out.append(self.sc.scrub_keyed(obj[i - 1], v, loc))
            elif i in denied:       # `["--run-name", "<value>"]`: deny by default (deny.py)
                out.append(self.sc.deny_value(v, loc))
            elif t is str:
                out.append(self.sc.scrub_keyed(key, v, loc) if key is not None and v else self.sc.scrub(v, loc) if v else v)
            elif t is dict or t is list:
                out.append(self.value(v, key, loc, depth + 1))
            else:
                out.append(v)
        return out

    def event(self, ev: Any) -> Any:
        return self.value(ev, None, "traceEvents[]")

    def meta(self, key: str, value: Any) -> tuple[str, Any]:
        """A top-level member: known keys scrubbed, host/path keys rewritten, unknown ones emptied."""
        loc = "$." + self.sc.scrub(key, "$.<key>")
        k2 = self.sc.scrub(key, "$.<key>")
        if key.lower() in self.host_keys and isinstance(value, str):
            return k2, self.sc.host(value, loc)
        if key in self.path_keys and isinstance(value, str):
            name = PureWindowsPath(value).name if "\\" in value else PurePosixPath(value).name
            return k2, self.sc.scrub(name, loc)
        if key in self.keep:
            return k2, self.value(value, key, loc)
        return k2, self._unknown(value, loc)

    def _unknown(self, value: Any, loc: str) -> Any:
        if isinstance(value, str):
            if value == "" or value == REDACTED:
                return value
            self.sc.counts[(KIND_UNKNOWN, loc)] += 1
            return REDACTED
        if isinstance(value, dict):
            return {self.sc.scrub(k, loc + ".<key>"): self._unknown(v, loc) for k, v in value.items()}
        if isinstance(value, list):
            return [self._unknown(v, loc) for v in value]
        return value


def scrub_trace(src: Path, dst_tmp: Path, scrubber: Scrubber, policy: Policy) -> dict[str, int]:
    """Stream `src` into `dst_tmp` (gzip when its name ends in .gz); return simple counts."""
    ts = TraceScrubber(scrubber, policy)
    gz = dst_tmp.name.endswith(".gz") or ".gz." in dst_tmp.name
    out: Any = GzipPipe(dst_tmp, policy.gzip_level) if gz else open(dst_tmp, "wb")
    try:
        n_events = write_scrubbed(ChromeTraceStream(src), ts, out)
    except RecursionError:
        out.close()
        raise BadInputError(src, "JSON nested too deeply") from None
    except BaseException:
        out.close()
        raise
    (out.finish if gz else out.close)()
    return {"events": n_events}


def _members(ts: TraceScrubber, members: dict[str, Any]) -> list[bytes]:
    out = []
    for key, value in members.items():
        k2, v2 = ts.meta(key, value)
        out.append(json_codec.dumps(k2) + b": " + json_codec.dumps(v2))
    return out


def _scrub_batch(batch: Batch, ts: TraceScrubber, lits: LiteralFilter, path: Path) -> bytes:
    """The output bytes of a batch: as read, but for the events holding a literal some rule may
    change, which are decoded, walked and re-encoded in place."""
    if batch.tolerant:   # the fast decoders refused these (NaN, Infinity, >64-bit ints): walk all
        return b",\n".join(json_codec.dumps(ts.event(ev)) for ev in batch.events or ())
    raw = batch.raw
    pieces, at = [], 0
    for _k, s, e in lits.events_to_walk(raw):
        pieces += [raw[at:s], json_codec.dumps(ts.event(loads_event(raw[s:e], path)))]
        at = e
    if not pieces:
        return raw
    pieces.append(raw[at:])
    return b"".join(pieces)


def write_scrubbed(stream: ChromeTraceStream, ts: TraceScrubber, out: IO[bytes] | Any) -> int:
    """Re-emit the document of `stream` with every member and event scrubbed, members in their
    order (those after the events stay after them); return the number of events."""
    ok = unchanged_by(ts.sc)

    def bad(_lit: bytes) -> None:
        raise BadInputError(stream.path, "not UTF-8 JSON (a string in traceEvents)")

    rules_ok = unchanged_by(ts.sc, rules_only=True)
    lits = LiteralFilter(lambda t: ok(t) and ts.sc.key_class(t) == 0, bad,
                         toolchain=lambda t: rules_ok(t) and ts.sc.key_class(t) == 0)
    n = 0
    for batch in stream:
        if n == 0:
            out.write(_opening(stream, ts))
        else:
            out.write(b",\n")
        out.write(_scrub_batch(batch, ts, lits, stream.path))
        n += batch.count
    if n == 0:
        out.write(_opening(stream, ts))
    if stream.is_array:
        out.write(b"\n]\n")
    else:
        tail = _members(ts, stream.tail)
        out.write(b"\n]" + b"".join(b",\n" + m for m in tail) + b"}\n")
    return n


def _opening(stream: ChromeTraceStream, ts: TraceScrubber) -> bytes:
    if stream.is_array:
        return b"[\n"
    return b"{" + b"".join(m + b",\n" for m in _members(ts, stream.head)) + b'"traceEvents": [\n'


# --------------------------------------------------------------------------------------------
# Identities: a regex pass over the raw text (no JSON decoding)
# --------------------------------------------------------------------------------------------

def find_trace_identities(path: Path, policy: Policy) -> Identities:
    """What a trace names about who ran it and where, and the halves of secrets split across the
    inputs of consecutive ops (`op_inputs`, judged once the whole trace is read: pairs follow
    `ts`, not file order).

    Read as scrub reads it (`LiteralFilter`): each distinct string literal is fed to the collector
    once (a value: `USER=...` in `Concrete Inputs`, a `/home/<user>` frame, `<user>@<host>` in a
    process name); only the events holding a key that gives its value a meaning (`LOGNAME`,
    `hostname`, kwargs `{"HOSTNAME": ...}`, a secret name) are decoded and walked with their keys,
    and so are the header members (`distributedInfo`, `traceName`)."""
    col = IdentityCollector(policy)
    ops = OpInputs()

    def judge(text: str) -> bool:
        col.feed(text)
        return not col.pairable(text)

    lits = LiteralFilter(judge)
    stream = ChromeTraceStream(path, require_events=False)
    for batch in stream:
        if batch.tolerant:
            for ev in batch.events or ():
                col.feed_tree(ev)
        else:
            for _k, s, e in lits.events_to_walk(batch.raw):
                col.feed_tree(loads_event(batch.raw[s:e], path))
        ops.feed_batch(batch.raw, batch.events, lambda raw: loads_event(raw, path))
    col.feed_tree(stream.head)
    col.feed_tree(stream.tail)
    if ops and policy.join_adjacent_nvtx:
        col.ids.split_values |= split_op_halves(ops.pairs(), Scrubber(policy))
    return col.ids


def sniff_json(path: Path) -> bool:
    """True when the (possibly gzipped) file starts like JSON."""
    try:
        head = next(byte_chunks(path, 64), b"")
    except (BadInputError, OSError):
        return False
    return head.lstrip()[:1] in (b"{", b"[")


__all__ = ["LiteralFilter", "TraceScrubber", "unchanged_by", "loads_event", "scrub_trace", "write_scrubbed",
           "find_trace_identities", "sniff_json"]
