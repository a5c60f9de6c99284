"""The one JSON codec of the trace readers and writers: orjson, with the standard library for what
orjson refuses.

Why one: chrome traces are written by many tools, and a few write what orjson (strict RFC 8259,
64-bit integers) refuses: `NaN`, `Infinity`, integers beyond 64 bits, invalid UTF-8. Every reader
and writer of traces goes through these two functions, so each such value is handled one way
everywhere instead of by a fallback of its own in each module.
"""
from __future__ import annotations

import json
import re
from typing import Any

import orjson

#: what `loads` raises for text that is not JSON (both are ValueErrors)
DecodeError = ValueError


def loads(data: "bytes | bytearray | memoryview | str", invalid_utf8: str = "replace") -> Any:
    """The value of a JSON text: orjson, else the standard library's tolerant parser (NaN,
    Infinity, integers of any size, lone surrogates). ValueError (or RecursionError, nested
    beyond the standard library's limit) when it is not JSON at all.

    `invalid_utf8`: what bytes that are not UTF-8 become: "replace" (U+FFFD: the readers, which
    only measure) or "strict" (a ValueError: the scrub, which never rewrites bytes it cannot read
    into an output meant for sharing, and says so instead)."""
    try:
        value = orjson.loads(data)
    except orjson.JSONDecodeError:
        value = _WIDE_INT   # not JSON to orjson: the standard library decides below
    if value is not _WIDE_INT and not _may_hold_wide_int(data):
        return value
    text = data if isinstance(data, str) else bytes(data).decode("utf-8", errors=invalid_utf8)
    return json.loads(text)


#: orjson reads an integer outside [-2**63, 2**64) as a float without a word (`-2**63-1` becomes
#: -9.223372036854776e+18), so a text that may hold one is read by the standard library, which keeps
#: every integer exact. Only a minus sign and 19 digits or 20 digits can be out of range; real traces
#: (microseconds, `baseTimeNanoseconds`) never write those, so the fast path stays orjson's.
_WIDE_INT = object()
_WIDE_BYTES = re.compile(rb"-\d{19}|\d{20}")
_WIDE_TEXT = re.compile(r"-\d{19}|\d{20}")


def _may_hold_wide_int(data: "bytes | bytearray | memoryview | str") -> bool:
    if isinstance(data, str):
        return _WIDE_TEXT.search(data) is not None
    return _WIDE_BYTES.search(data) is not None


def dumps(value: Any) -> bytes:
    """Compact JSON bytes of `value` (UTF-8, no spaces): orjson, else the standard library for what
    orjson cannot write (integers beyond 64 bits, NaN read by `loads`)."""
    try:
        return orjson.dumps(value)
    except (orjson.JSONEncodeError, TypeError):
        return json.dumps(value, separators=(",", ":")).encode()
