"""Scrub a torch.profiler chrome trace (`.json` / `.json.gz`) as a stream.

Why streaming: traces of real verl steps are hundreds of MB of JSON; decoding one whole would take
gigabytes of Python objects. `JsonEventStream` reads the top-level object incrementally, hands out
the elements of `traceEvents` one at a time (decoded by the C scanner of the standard library), and
the writer re-encodes each scrubbed event with orjson straight into a gzip stream. Peak memory is
one read buffer plus the scrubber's string cache, whatever the trace size.

Key-aware rules on top of the string rules: `host_name` becomes a host pseudonym, `traceName`
keeps only its file name, secret-named argument keys lose their values, unknown top-level metadata
keys (`PT_PROFILER_JOB_*` ...) keep only numbers, and absolute paths in `python_function` names
lose their home/user parts (and their virtual-env prefix).
"""
from __future__ import annotations

import codecs
import gzip
import json
import re
import zlib
from collections import Counter
from pathlib import Path, PurePosixPath, PureWindowsPath
from typing import IO, Any, Callable, Iterator

import orjson

from ..core.errors import BadInputError
from .secrets import KIND_UNKNOWN, REDACTED, Identities, IdentityCollector, LocationNames, Policy, Scrubber

GZIP_MAGIC = b"\x1f\x8b"
_CHUNK = 1 << 20
_MAX_VALUE = 256 << 20   # one JSON value (event or metadata) larger than this is refused
_WS = " \t\r\n"

# Event keys whose values are structural (numbers or fixed vocab); strings under them are still
# scrubbed, but the key itself needs no scrubbing.
_EVENT_KEYS = frozenset({"ph", "cat", "name", "pid", "tid", "ts", "dur", "args", "id", "bp", "s",
                         "id2", "tts", "tdur", "cname", "sf", "stack", "scope"})


def open_text(path: Path) -> IO[bytes]:
    """Binary stream of the (possibly gzipped) file."""
    try:
        f = open(path, "rb")
    except OSError as exc:
        raise BadInputError(path, f"cannot read: {exc.strerror or exc}") from None
    head = f.read(2)
    f.seek(0)
    if head == GZIP_MAGIC:
        return gzip.GzipFile(fileobj=f, mode="rb")  # type: ignore[return-value]
    return f


class JsonEventStream:
    """Incremental reader of one JSON document shaped like a chrome trace.

    Yields ("key", name) / ("value", obj) for top-level members, ("events", None) when the
    `traceEvents` array starts, ("event", obj) for each of its elements and ("end_events", None).
    A top-level array (the other chrome trace form) yields its elements as events.
    """

    def __init__(self, raw: IO[bytes], path: Path, chunk: int = _CHUNK, max_value: int = _MAX_VALUE) -> None:
        self.raw = raw
        self.path = path
        self.chunk = chunk
        self.max_value = max_value
        self.dec = codecs.getincrementaldecoder("utf-8")("strict")
        self.buf = ""
        self.pos = 0
        self.eof = False
        self.consumed = 0   # characters dropped from the front of buf (for error offsets)
        self._decoder = json.JSONDecoder()
        self.is_array = False   # the document is a bare array of events
        self.last_start = 0

    # -- buffer -------------------------------------------------------------------------------
    def _fill(self, need: int = 1) -> bool:
        """Read more input; return False at end of input."""
        if self.eof:
            return False
        try:
            data = self.raw.read(max(self.chunk, need))
        except (EOFError, gzip.BadGzipFile, zlib.error, OSError) as exc:
            raise BadInputError(self.path, f"truncated or corrupt gzip stream ({type(exc).__name__}: {exc})") from None
        try:
            text = self.dec.decode(data, final=not data)
        except UnicodeDecodeError:
            raise BadInputError(self.path, f"not UTF-8 JSON (bad byte near offset {self.consumed + len(self.buf)})") from None
        if self.pos > 0:
            self.consumed += self.pos
            self.buf = self.buf[self.pos:]
            self.pos = 0
        self.buf += text
        if not data:
            self.eof = True
        return bool(data) or bool(text)

    def _peek(self) -> str | None:
        """Next non-whitespace character (not consumed), None at the end of input."""
        while True:
            while self.pos < len(self.buf) and self.buf[self.pos] in _WS:
                self.pos += 1
            if self.pos < len(self.buf):
                return self.buf[self.pos]
            if not self._fill():
                return None

    def _expect(self, chars: str) -> str:
        c = self._peek()
        if c is None or c not in chars:
            self._bad(f"expected one of {chars!r}, found {c!r}")
        self.pos += 1
        return c  # type: ignore[return-value]

    def _bad(self, what: str) -> None:
        raise BadInputError(self.path, f"invalid JSON at offset {self.consumed + self.pos}: {what}")

    def _value(self) -> Any:
        """Decode one JSON value at the cursor, reading more input until it is complete."""
        if self._peek() is None:
            self._bad("unexpected end of input")
        while True:
            try:
                obj, end = self._decoder.raw_decode(self.buf, self.pos)
            except json.JSONDecodeError as exc:
                if self.eof:
                    self._bad(exc.msg if "Expecting" in exc.msg or "Unterminated" in exc.msg else str(exc.msg))
                if len(self.buf) - self.pos > self.max_value:
                    self._bad(f"a value larger than {self.max_value >> 20} MiB")
                self._fill(len(self.buf))
                continue
            except RecursionError:
                self._bad("nested too deeply")
            # A number (or literal) touching the end of the buffer may continue in the next chunk.
            if end >= len(self.buf) and not self.eof:
                self._fill()
                continue
            self.last_start = self.pos
            self.pos = end
            return obj

    def last_raw(self) -> str:
        """The raw JSON text of the value just returned (valid until the stream reads on)."""
        return self.buf[self.last_start:self.pos]

    # -- document -----------------------------------------------------------------------------
    def __iter__(self) -> Iterator[tuple[str, Any]]:
        first = self._peek()
        if first is None:
            raise BadInputError(self.path, "empty file, not a chrome trace")
        if first == "[":
            self.is_array = True
            self.pos += 1
            yield ("events", None)
            yield from self._array()
            yield ("end_events", None)
            self._end()
            return
        if first != "{":
            self._bad("a chrome trace is a JSON object or array")
        self.pos += 1
        if self._peek() == "}":
            self.pos += 1
            self._end()
            return
        while True:
            key = self._value()
            if not isinstance(key, str):
                self._bad("object key is not a string")
            self._expect(":")
            yield ("key", key)
            if key == "traceEvents" and self._peek() == "[":
                self.pos += 1
                yield ("events", None)
                yield from self._array()
                yield ("end_events", None)
            else:
                yield ("value", self._value())
            if self._expect(",}") == "}":
                break
        self._end()

    def _array(self) -> Iterator[tuple[str, Any]]:
        if self._peek() == "]":
            self.pos += 1
            return
        while True:
            yield ("event", self._value())
            if self._expect(",]") == "]":
                return

    def _end(self) -> None:
        if self._peek() is not None:
            self._bad("trailing data after the JSON document")


# --------------------------------------------------------------------------------------------
# Events the rules leave alone: judged from their raw text, token by token
# --------------------------------------------------------------------------------------------

# A JSON string literal, and whether it is an object key (a literal followed by `:` is always one).
_STR_TOKEN = re.compile(r'"([^"\\]*(?:\\.[^"\\]*)*)"(\s*:)?', re.S)
# Events holding NaN/Infinity (the standard decoder accepts them, orjson writes null) take the walk.


class RawEventFilter:
    """Says whether an event, from its raw JSON text, holds nothing any rule would touch.

    Why: most events of a trace are the same few dozen kernel/op names and keys with new numbers;
    walking each decoded event in Python cost most of a scrub. Every string literal of the raw
    text (keys and values, at any depth) is judged once per distinct literal: an event is clean
    when every key is a plain key (not secret-named, host, UUID or hash-allowlisted: those have
    key-specific rules) that `key_ok` accepts and every value passes `value_ok`. A clean event is
    passed through (scrub) or skipped (check); any other event takes the full decoded walk.
    """

    MAX = 200_000

    def __init__(self, sc: Scrubber, key_ok: Callable[[str], bool], value_ok: Callable[[str], bool]) -> None:
        self.sc = sc
        self.key_ok = key_ok
        self.value_ok = value_ok
        self._ok: set[tuple[str, str]] = set()   # (literal, "" or the `:` after a key) judged clean

    def clean(self, raw: str) -> bool:
        if "NaN" in raw or "Infinity" in raw:
            return False
        pending = set(_STR_TOKEN.findall(raw))
        pending -= self._ok
        for tok, colon in pending:
            if not self._judge(tok, bool(colon)):
                return False
            if len(self._ok) >= self.MAX:
                self._ok.clear()
            self._ok.add((tok, colon))
        return True

    def _judge(self, tok: str, is_key: bool) -> bool:
        try:
            text = json.loads('"' + tok + '"') if "\\" in tok else tok
        except ValueError:
            return False
        if not isinstance(text, str):
            return False
        if is_key:
            return self.sc._key_class(text) == 0 and self.key_ok(text)
        return self.value_ok(text)


def unchanged_by(sc: Scrubber) -> Callable[[str], bool]:
    """True for a string that `sc.scrub` returns as it is and counts nothing for."""
    def ok(text: str) -> bool:
        if not text:
            return True
        saved = sc.counts
        sc.counts = Counter()
        try:
            out = sc.scrub(text, "-")
        finally:
            added, sc.counts = sc.counts, saved
        return out == text and not added
    return ok


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
        for k, v in obj.items():
            ks = k if k in _EVENT_KEYS else sc.scrub(k, loc + ".<key>")
            t = type(v)
            if t is str:
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
        for v in obj:
            t = type(v)
            if t is str:
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


def _dumps(obj: Any) -> bytes:
    try:
        return orjson.dumps(obj)
    except (orjson.JSONEncodeError, TypeError):
        # >64-bit integers or lone surrogates: the standard library copes (ASCII-escaped).
        return json.dumps(obj, ensure_ascii=True, allow_nan=True).encode("ascii")


def scrub_trace(src: Path, dst_tmp: Path, scrubber: Scrubber, policy: Policy) -> dict[str, int]:
    """Stream `src` into `dst_tmp` (gzip when its name ends in .gz); return simple counts."""
    ts = TraceScrubber(scrubber, policy)
    gz = dst_tmp.name.endswith(".gz") or ".gz." in dst_tmp.name
    raw = open_text(src)
    try:
        with open(dst_tmp, "wb") as fout:
            if gz:
                with gzip.GzipFile(filename="", mode="wb", fileobj=fout, compresslevel=policy.gzip_level, mtime=0) as gzout:
                    n_events = write_scrubbed(JsonEventStream(raw, src), ts, gzout)
            else:
                n_events = write_scrubbed(JsonEventStream(raw, src), ts, fout)
    except RecursionError:
        raise BadInputError(src, "JSON nested too deeply") from None
    finally:
        raw.close()
    return {"events": n_events}


def write_scrubbed(stream: JsonEventStream, ts: TraceScrubber, out: IO[bytes]) -> int:
    """Re-emit the document of `stream` with every member and event scrubbed; return #events."""
    ok = unchanged_by(ts.sc)
    fast = RawEventFilter(ts.sc, ok, ok)
    batch: list[bytes] = []
    size = 0
    first_member = True
    first_event = True
    n = 0
    key = ""
    for tag, val in stream:
        if tag == "key":
            key = val
        elif tag == "value":
            k2, v2 = ts.meta(key, val)
            out.write((b"{" if first_member else b",\n") + _dumps(k2) + b": " + _dumps(v2))
            first_member = False
        elif tag == "events":
            if stream.is_array:
                out.write(b"[\n")
            else:
                out.write((b"{" if first_member else b",\n") + _dumps(ts.sc.scrub(key, "$.<key>")) + b": [\n")
                first_member = False
            first_event = True
        elif tag == "event":
            raw = stream.last_raw()
            b = raw.encode("utf-8") if fast.clean(raw) else _dumps(ts.event(val))
            batch.append(b if first_event else b",\n" + b)
            first_event = False
            n += 1
            size += len(b)
            if size >= _CHUNK:
                out.write(b"".join(batch))
                batch.clear()
                size = 0
        elif tag == "end_events":
            if batch:
                out.write(b"".join(batch))
                batch.clear()
                size = 0
            out.write(b"\n]")
    if stream.is_array:
        out.write(b"\n")
    elif first_member:
        out.write(b"{}\n")
    else:
        out.write(b"}\n")
    return n


# --------------------------------------------------------------------------------------------
# Identities: a regex pass over the raw text (no JSON decoding)
# --------------------------------------------------------------------------------------------

def find_trace_identities(path: Path, policy: Policy, chunk: int = 4 << 20) -> Identities:
    col = IdentityCollector(policy)
    raw = open_text(path)
    dec = codecs.getincrementaldecoder("utf-8")("replace")
    tail = ""
    try:
        while True:
            try:
                data = raw.read(chunk)
            except (EOFError, gzip.BadGzipFile, zlib.error, OSError) as exc:
                raise BadInputError(path, f"truncated or corrupt gzip stream ({type(exc).__name__})") from None
            text = tail + dec.decode(data, final=not data)
            if text:
                col.feed_bulk(text)
            if not data:
                break
            tail = text[-8192:]
    finally:
        raw.close()
    return col.ids


def sniff_json(path: Path) -> bool:
    """True when the (possibly gzipped) file starts like JSON."""
    try:
        raw = open_text(path)
        try:
            head = raw.read(64)
        finally:
            raw.close()
    except (BadInputError, EOFError, OSError, zlib.error):
        return False
    return head.lstrip()[:1] in (b"{", b"[")


__all__ = ["JsonEventStream", "RawEventFilter", "TraceScrubber", "unchanged_by", "scrub_trace", "write_scrubbed", "find_trace_identities", "open_text", "sniff_json"]
