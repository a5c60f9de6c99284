"""The one JSON codec of the trace readers and writers: orjson, with the standard library for what
orjson refuses.

Why one: chrome traces are written by many tools, and a few write what orjson (strict RFC 8259,
64-bit integers) refuses: `NaN`, `Infinity`, integers beyond 64 bits, invalid UTF-8. Every reader
and writer of traces goes through these two functions, so each such value is handled one way
everywhere instead of by a fallback of its own in each module.
"""
from __future__ import annotations

import json
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
        return orjson.loads(data)
    except orjson.JSONDecodeError:
        text = data if isinstance(data, str) else bytes(data).decode("utf-8", errors=invalid_utf8)
        return json.loads(text)


def dumps(value: Any) -> bytes:
    """Compact JSON bytes of `value` (UTF-8, no spaces): orjson, else the standard library for what
    orjson cannot write (integers beyond 64 bits, NaN read by `loads`)."""
    try:
        return orjson.dumps(value)
    except (orjson.JSONEncodeError, TypeError):
        return json.dumps(value, separators=(",", ":")).encode()
