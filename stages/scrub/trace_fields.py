"""Which literals of a raw chrome-trace event sit in a user-written field (issue 39), from the bytes.

Why: the trace fast path copies an event as read when every literal in it is clean. Under the
provenance rule a kernel name, an `aten::` op or a dtype is clean where the toolchain wrote it, but
the same string in a user-written field (a range name, an argument value) would be judged as user
text. Deciding that by decoding every event would cost the fast path (most events are kernels and
ops). So the literals the rules leave alone but the provenance rule would change in a user field
("toolchain-clean") are placed from the raw bytes: a key, the event's `cat`/`ph`, its `name` when
the category is a toolchain one (or a torch op of a `cpu_op`), or an item of a toolchain argument
(`Input type`, `kind`) needs no walk; anything else is walked and judged by its field.
"""
from __future__ import annotations

import re

from .provenance import Origin, event_name_field, is_toolchain_frame, is_toolchain_op, origin_of

_CAT_RE = re.compile(rb'"cat"\s*:\s*"([^"\\]*)"')
_PH_RE = re.compile(rb'"ph"\s*:\s*"([^"\\]*)"')
_ARGS_RE = re.compile(rb'"args"\s*:\s*\{')
_KEY_BEFORE = re.compile(rb'"((?:[^"\\]|\\.)*)"\s*:\s*\[?\s*(?:"(?:[^"\\]|\\.)*"\s*,\s*)*$')
_TOP_KEYS = (b"cat", b"ph", b"pid", b"tid", b"id", b"bp", b"s", b"cname")


def _origin(field: str) -> Origin:
    return origin_of(field)


def needs_walk(event: bytes, spans: list[tuple[int, int]]) -> bool:
    """True when one of the toolchain-clean literals at `spans` (offsets in `event`, between the
    quotes) may sit in a user-written field: the event must be decoded and judged by field."""
    cat_m = _CAT_RE.search(event)
    ph_m = _PH_RE.search(event)
    cat = cat_m.group(1).decode("utf-8", "replace") if cat_m else None
    ph = ph_m.group(1).decode("utf-8", "replace") if ph_m else None
    args_m = _ARGS_RE.search(event)
    args_at = args_m.start() if args_m else len(event)
    for a, b in spans:
        after = event[b + 1:b + 40].lstrip()
        if after[:1] == b":":
            continue                                   # a key: the writing tool's own name
        head = event[max(0, a - 1 - 200):a - 1]
        m = _KEY_BEFORE.search(head)
        if m is None:
            return True
        key = m.group(1)
        if a < args_at:                                # a top-level member of the event
            if key in _TOP_KEYS:
                continue
            if key == b"name":
                origin = _origin(event_name_field(cat, ph))
                if origin is Origin.TOOLCHAIN:
                    continue
                text = event[a:b].decode("utf-8", "replace")
                if origin is Origin.OP and is_toolchain_op(text, bare=True):
                    continue
                if origin is Origin.OP_NAMED and is_toolchain_op(text):
                    continue
                if origin is Origin.FRAME and is_toolchain_frame(text):
                    continue
            return True
        inner = event[args_m.end():a - 1] if args_m else b"{"
        if b"{" not in inner and b"}" not in inner and \
                _origin("traceEvents[].args." + key.decode("utf-8", "replace")) is Origin.TOOLCHAIN:
            continue                                   # an item of a toolchain argument (`Input type`)
        return True
    return False


__all__ = ["needs_walk"]
