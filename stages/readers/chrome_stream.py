"""The streaming parser of chrome traces: decompressed bytes in bounded chunks, cut into batches of
whole events, never the whole document in memory.

Why a module of its own: every reader of traces walks them through this one parser, the summary's
columns (`chrome_trace.read_chrome_trace`) and the callers that rewrite events (window cuts, scrub,
check: `ChromeTraceStream`), so they share its fallbacks and its errors.

How: the file (gzip or plain) is inflated a chunk ahead on a thread of its own (ISA-L where
installed, else zlib); each chunk is cut at the last event boundary (`}` `,` `{`) and the batch
goes to a consumer's `fast` decoder. A batch decodes only if it is whole, balanced JSON, so a wrong
cut (a `},{` inside a string or a nested list) can never produce wrong events: it fails and falls
back. Fallbacks, in order: the one JSON codec (`json_codec.loads`: NaN, Infinity, integers beyond
64 bits; invalid UTF-8 replaced) for the same batch, handed to the consumer's `loose`, then an
exact tokenizer that finds each element's true extent and decodes elements one by one. Anything
that is not a chrome trace (empty file, truncated or corrupt gzip, not JSON, no `traceEvents`
list, a truncated document) raises `BadInputError` naming the file.
"""
from __future__ import annotations

import re
import zlib
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator

import msgspec
import orjson

try:  # ISA-L's inflate: about twice zlib's speed on traces
    from isal import isal_zlib as _zlib
except ImportError:  # pragma: no cover - the same stream, at zlib's speed
    _zlib = zlib  # type: ignore[assignment]

from ..core.errors import BadInputError
from .json_codec import loads as _tolerant_loads

# Decompressed bytes handed to the parser per step by default: big enough to amortise per-batch
# costs, small enough that a batch's transient structs stay in the tens of MB.
CHUNK_BYTES = 8 << 20
# The stream's batches are smaller: scrub and check work on each batch's literals with numpy, and
# arrays that stay in the CPU's cache make that faster.
STREAM_CHUNK_BYTES = 2 << 20
_READ_BYTES = 1 << 20
# A header (keys before `traceEvents`) larger than this is not a torch trace.
HEADER_LIMIT = 256 << 20
# Below this size a document without a streamable `traceEvents` array is decoded whole, to say
# precisely what is wrong with it.
WHOLE_DECODE_LIMIT = 64 << 20

_RAWS = msgspec.json.Decoder(list[msgspec.Raw])   # validates a batch and counts its events, builds nothing
#: what a consumer's `fast` decoder raises for a batch it refuses (then the batch goes to `loose`)
FAST_ERRORS: tuple[type[Exception], ...] = (msgspec.DecodeError, msgspec.ValidationError, orjson.JSONDecodeError)

_WS = b" \t\r\n"
_KEY = re.compile(rb'"traceEvents"\s*:\s*\[')
# Exact tokenizer: whole strings (group 1 is the closing quote, empty when the buffer ends first)
# and the structural characters that matter for finding an element's extent.
_TOKEN = re.compile(rb'"(?:[^"\\]+|\\.)*("?)|[{}\[\],]', re.S)


# ------------------------------------------------------------------------------------------------
# Bytes in: gzip or plain, in bounded chunks
# ------------------------------------------------------------------------------------------------

def byte_chunks(path: Path, size: int | None = None) -> Iterator[bytes]:
    """Decompressed content of `path` in chunks of at most `size` (default CHUNK_BYTES) bytes.

    Handles multi-member gzip; a truncated or corrupt gzip raises BadInputError.
    """
    size = size or CHUNK_BYTES
    try:
        fh = open(path, "rb")
    except OSError as exc:
        raise BadInputError(path, f"cannot read: {exc.strerror or exc}") from None
    with fh:
        magic = fh.read(2)
        fh.seek(0)
        if magic != b"\x1f\x8b":
            while block := fh.read(size):
                yield block
            return
        d = _zlib.decompressobj(31)
        while data := fh.read(_READ_BYTES):
            while data:
                try:
                    out = d.decompress(data, size)
                except _zlib.error as exc:
                    raise BadInputError(path, f"corrupt gzip data ({exc})") from None
                if out:
                    yield out
                data = d.unconsumed_tail
                if d.eof:
                    # Past a member's end every input byte left is in unused_data. unconsumed_tail
                    # may still repeat some of it (CPython's zlib and ISA-L before 1.9 leave it set
                    # when the member ends in the same call), so it is not added: adding it read a
                    # small last member twice (the merged trace's `]}` closing, then not JSON).
                    rest = d.unused_data
                    if not rest.strip(b"\x00"):
                        data = b""
                        continue
                    if rest[:2] != b"\x1f\x8b":
                        raise BadInputError(path, "trailing garbage after the gzip data")
                    d = _zlib.decompressobj(31)   # next gzip member
                    data = rest
        if not d.eof:
            raise BadInputError(path, "truncated gzip (the compressed stream ends early)")


def prefetched(chunks: Iterator[bytes]) -> Iterator[bytes]:
    """The chunks of a generator, each made on a helper thread while the caller uses the last one.

    Why: zlib and ISA-L release the GIL while they inflate, so decompressing the next chunk
    overlaps with decoding the current one. An exception in the thread (BadInputError) is raised
    here; memory stays at two chunks."""
    with ThreadPoolExecutor(1, thread_name_prefix="verlprof-inflate") as pool:
        ahead = pool.submit(next, chunks, None)
        while (chunk := ahead.result()) is not None:
            ahead = pool.submit(next, chunks, None)
            yield chunk



# ------------------------------------------------------------------------------------------------
# The streaming parser
# ------------------------------------------------------------------------------------------------

def _skip_ws(buf: bytes, i: int) -> int:
    n = len(buf)
    while i < n and buf[i] in _WS:
        i += 1
    return i


def _last_boundary(buf: bytes, lo: int) -> int:
    """Index just past the last `}` in buf[lo:] that is followed by `,` and `{` (whitespace
    allowed): a candidate end of a batch of events. -1 when there is none."""
    hi = len(buf)
    while True:
        j = buf.rfind(b"}", lo, hi)
        if j < 0:
            return -1
        k = _skip_ws(buf, j + 1)
        if k < len(buf) and buf[k] == 0x2C:   # ','
            k = _skip_ws(buf, k + 1)
            if k < len(buf) and buf[k] == 0x7B:   # '{'
                return j + 1
        hi = j


class StreamParser:
    """Feeds decompressed chunks through header -> events -> tail states.

    Each batch of whole events goes to `consumer.fast` (the `[` + events + `]` bytes); where that
    decoder refuses, the tolerant parser decodes the same bytes and
    `consumer.loose` gets the plain values."""

    def __init__(self, path: Path, consumer: Any, require_events: bool = True) -> None:
        self.path = path
        self.consumer = consumer
        self.require_events = require_events
        self.head: dict[str, Any] = {}   # top-level keys before traceEvents
        self.tail: dict[str, Any] = {}   # and after it (kineto's baseTimeNanoseconds, traceName)
        self.state = "start"
        self.fmt = "object"          # object: {"traceEvents": [...]}; array: [...]
        self.buf = bytearray()
        self.pos = 0                 # parse position in buf
        self.offset = 0              # decompressed bytes dropped before buf[0] (for messages)
        self.search = 0
        self.no_cut_before = 0       # buf[:no_cut_before] holds no batch boundary (already scanned)
        self.reasons: list[str] = []

    # -- driving ---------------------------------------------------------------------------------
    def feed(self, chunk: bytes) -> None:
        drop = self.pos
        if drop > 0:
            self.offset += drop
            buf = self.buf[drop:]
            buf += chunk
            self.buf = buf
            self.search = max(0, self.search - drop)
            self.no_cut_before = max(0, self.no_cut_before - drop)
            self.pos -= drop
        else:
            self.buf += chunk
        self._step(final=False)

    def finish(self) -> None:
        self._step(final=True)
        if self.state == "start":
            raise BadInputError(self.path, "empty file (no JSON content)" if not self.buf.strip()
                                else "not JSON")
        if self.state == "header":
            self._no_trace_events()
            return
        if self.state == "events":
            raise BadInputError(self.path, "truncated: the traceEvents array is not closed")
        self._tail()

    def _step(self, final: bool) -> None:
        if self.state == "start":
            self._start(final)
        if self.state == "header":
            self._header(final)
        if self.state == "events":
            self._events(final)

    # -- states ----------------------------------------------------------------------------------
    def _start(self, final: bool) -> None:
        buf = self.buf
        i = 3 if buf.startswith(b"\xef\xbb\xbf") else 0   # UTF-8 BOM
        i = _skip_ws(buf, i)
        if i >= len(buf):
            return
        c = buf[i:i + 1]
        if c == b"[":
            self.fmt, self.state, self.pos = "array", "events", i + 1
        elif c == b"{":
            self.state, self.search = "header", i
        else:
            raise BadInputError(self.path, f"not JSON (starts with {buf[i:i + 12]!r})")

    def _header(self, final: bool) -> None:
        buf = self.buf
        while True:
            m = _KEY.search(buf, self.search)
            if m is None:
                if len(buf) > HEADER_LIMIT:
                    raise BadInputError(self.path, f"no traceEvents array in the first {HEADER_LIMIT >> 20} MB")
                self.search = max(0, len(buf) - 64)
                return
            try:
                head = _tolerant_loads(buf[:m.start()] + b'"traceEvents": 0}')
            except (ValueError, RecursionError):
                head = None
            if isinstance(head, dict):
                head.pop("traceEvents", None)
                self.head.update(head)
                self.state, self.pos = "events", m.end()
                return
            self.search = m.end()   # "traceEvents" inside a string or a nested object: keep looking

    def _events(self, final: bool) -> None:
        while self.state == "events":
            buf = self.buf
            i = _skip_ws(buf, self.pos)
            if i < len(buf) and buf[i] == 0x2C:   # ',' between batches
                i = _skip_ws(buf, i + 1)
            self.pos = i
            if i >= len(buf):
                return
            if buf[i] == 0x5D:   # ']'
                self.state, self.pos = "tail", i + 1
                return
            cut = -1 if final else _last_boundary(buf, max(i, self.no_cut_before))
            if cut <= i:
                if final:
                    self._exact(final=True)
                else:   # one event longer than the data so far: scan only new data next time
                    self.no_cut_before = max(i, len(buf) - 64)
                return
            if not self._batch(i, cut):
                self._exact(final=final)
                return

    def _batch(self, i: int, cut: int) -> bool:
        """Decode buf[i:cut] as a batch of whole events; False when it is not one."""
        with memoryview(self.buf) as mv:
            ok = self._decode(b"".join((b"[", mv[i:cut], b"]")))
        if ok:
            self.pos = cut
        return ok

    def _decode(self, batch: Any) -> bool:
        """`[` events `]` to the consumer: fast, else tolerant; False when it is not JSON."""
        try:
            self.consumer.fast(batch)
            return True
        except FAST_ERRORS as exc:
            try:
                loose = _tolerant_loads(bytes(batch))
            except (ValueError, RecursionError):
                return False
            if not isinstance(loose, list):
                return False
            self._note(exc)
            self.consumer.loose(loose, bytes(batch[1:-1]))
            return True

    def _exact(self, final: bool) -> None:
        """Split buf[pos:] into array elements with the exact tokenizer; decode each alone.

        Stops at the array's `]` (-> tail state) or before an incomplete element (waits for more
        data; at the end of the input that is a truncated document)."""
        buf = self.buf
        start = self.pos
        depth = 0
        for m in _TOKEN.finditer(buf, start):
            c = buf[m.start()]
            if c == 0x22:   # '"'
                if not m.group(1):
                    break   # the data ends inside this string
                continue
            if c == 0x7B or c == 0x5B:   # '{' '['
                depth += 1
            elif depth > 0:
                if c == 0x7D or c == 0x5D:   # '}' ']'
                    depth -= 1
            elif c == 0x2C or c == 0x5D:   # ',' or ']' at array level: an element ends
                text = bytes(buf[start:m.start()]).strip(_WS)
                if text:
                    if not self._decode(b"[" + text + b"]"):
                        raise BadInputError(self.path, f"invalid JSON in traceEvents near byte {self.offset + start}")
                elif c == 0x2C:
                    raise BadInputError(self.path, f"malformed JSON (empty array element) near byte {self.offset + start}")
                start = m.end()
                if c == 0x5D:
                    self.state, self.pos = "tail", start
                    return
            else:   # '}' at array level
                raise BadInputError(self.path, f"malformed JSON near byte {self.offset + m.start()}")
        if final:
            raise BadInputError(self.path, "truncated: the traceEvents array is not closed")
        self.pos = start

    def _note(self, exc: Exception) -> None:
        if len(self.reasons) < 3:
            self.reasons.append(" ".join(str(exc).split())[:120])

    def _tail(self) -> None:
        rest = self.buf[self.pos:].strip(_WS)
        if self.fmt == "array":
            if rest:
                raise BadInputError(self.path, "unexpected content after the JSON array")
            return
        if rest == b"}":
            return
        if not rest.startswith(b","):
            raise BadInputError(self.path, "truncated or malformed JSON after the traceEvents array")
        try:
            tail = _tolerant_loads(b'{"_": 0' + rest)
        except (ValueError, RecursionError) as exc:
            raise BadInputError(self.path, f"truncated or malformed JSON after the traceEvents array ({exc})") from None
        if isinstance(tail, dict):
            tail.pop("_", None)
            tail.pop("traceEvents", None)
            self.tail.update(tail)

    def _no_trace_events(self) -> None:
        """The document ended without a streamable traceEvents array: an error that says exactly
        what it is, or (require_events=False) its members in `head`."""
        if len(self.buf) > WHOLE_DECODE_LIMIT:
            raise BadInputError(self.path, "JSON without a traceEvents array (not a chrome trace)")
        try:
            doc = _tolerant_loads(self.buf)
        except ValueError as exc:
            raise BadInputError(self.path, f"not valid JSON ({exc})") from None
        except RecursionError:
            raise BadInputError(self.path, "not valid JSON (nested too deeply)") from None
        if isinstance(doc, dict) and not self.require_events:
            self.head.update(doc)
            return
        if isinstance(doc, dict) and "traceEvents" in doc:
            raise BadInputError(self.path, f"traceEvents is a {type(doc['traceEvents']).__name__}, not a list")
        raise BadInputError(self.path, "JSON without traceEvents (not a chrome trace)")



def checked_path(path: str | Path) -> Path:
    """`path` as a Path; BadInputError unless it is a non-empty file."""
    p = Path(path)
    if not p.is_file():
        raise BadInputError(p, "not a file")
    if p.stat().st_size == 0:
        raise BadInputError(p, "empty file (no JSON content)")
    return p


@dataclass
class Batch:
    """Whole events of a trace, as written: `raw` is their text (`e1,e2,...`, no brackets), valid
    JSON once bracketed. `events` holds them decoded where the fast decoders refused them and the
    tolerant parser read them (NaN, Infinity)."""

    raw: bytes
    count: int
    events: list[Any] | None = None

    @property
    def tolerant(self) -> bool:
        return self.events is not None


class _Batches:
    """The stream's consumer: validates a batch with msgspec, building nothing."""

    def __init__(self) -> None:
        self.out: list[Batch] = []

    def fast(self, batch: bytes) -> None:
        self.out.append(Batch(batch[1:-1], len(_RAWS.decode(batch))))

    def loose(self, events: list[Any], raw: bytes) -> None:
        self.out.append(Batch(raw, len(events), events))


class ChromeTraceStream:
    """The one pass over a chrome trace that window cuts, scrub and check read through.

    Iterating yields `Batch`es of whole events, in file order, from the same parser as
    `read_chrome_trace` (same fallbacks and errors), never decoded: consumers decode what they
    need (a window cut the few keys it decides on, scrub the events holding a dirty literal). Top-level keys land in `head`
    (those before `traceEvents`, complete once the first batch is out; dict values whole) and
    `tail` (those after it, kineto's `baseTimeNanoseconds` among them, complete at the end).
    `require_events=False` reads any JSON object (a manifest): without a traceEvents array its
    members all land in `head` and no batch comes."""

    def __init__(self, path: str | Path, require_events: bool = True, chunk_bytes: int | None = None) -> None:
        self.path = checked_path(path)
        self._out = _Batches()
        self._parser = StreamParser(self.path, self._out, require_events)
        self.chunk_bytes = chunk_bytes or STREAM_CHUNK_BYTES
        self.head, self.tail = self._parser.head, self._parser.tail

    @property
    def is_array(self) -> bool:
        """The document is a bare array of events (the other chrome-trace form)."""
        return self._parser.fmt == "array"

    @property
    def header(self) -> dict[str, Any]:
        return {**self.head, **self.tail}

    def __iter__(self) -> Iterator[Batch]:
        out = self._out.out
        for chunk in prefetched(byte_chunks(self.path, self.chunk_bytes)):
            self._parser.feed(chunk)
            yield from out
            out.clear()
        self._parser.finish()
        yield from out
        out.clear()


