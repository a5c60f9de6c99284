"""Which literals of a batch of raw chrome-trace events sit in a user-written field (issue 39).

Why: the trace fast path copies an event as read when every literal in it is clean. Under the
provenance rule a kernel name, an `aten::` op or a dtype is clean where the toolchain wrote it, but
the same string in a user-written field (a range name, an argument value) is judged as user text.
Decoding every event to know its fields would cost the fast path (most events are kernels and ops),
so the literals the rules leave alone but the provenance rule would change in a user field
("toolchain-clean") are placed from the raw bytes, with numpy over the whole batch: their depth in
the event, the key before them and the event's category. A key, a top-level `cat`/`ph`/`pid`/
`tid`, an event `name` whose category makes it toolchain (a kernel, a torch op of a `cpu_op`, a
frame of an installed package) or an item of a toolchain argument (`Input type`) needs no walk;
any other place makes the event walked and judged field by field (TraceScrubber).
"""
from __future__ import annotations

import numpy as np

from .provenance import FIELDS, Origin, event_name_field, is_toolchain_frame, is_toolchain_op, origin_of

_TOP_KEYS = frozenset({b"cat", b"ph", b"pid", b"tid", b"id", b"bp", b"s", b"cname", b"scope"})
_ARG_KEYS = frozenset(k.encode() for k in ("Input type", "kind"))
#: Kineto categories whose event names are toolchain symbols (provenance.FIELDS), all <= 16 bytes
_TOOL_CATS = frozenset(f.pattern[len("traceEvents["):-len("].name")].encode() for f in FIELDS
    if f.pattern.startswith("traceEvents[") and f.pattern.endswith("].name") and "*" not in f.pattern
    and not f.pattern.startswith("traceEvents[ph:") and f.origin is Origin.TOOLCHAIN)
assert all(len(c) <= 16 for c in _TOOL_CATS)
_NAME_VERDICT: dict[tuple[str | None, str | None, bytes], bool] = {}


def _name_is_toolchain(cat: str | None, ph: str | None, lit: bytes) -> bool:
    key = (cat, ph, lit)
    hit = _NAME_VERDICT.get(key)
    if hit is None:
        origin = origin_of(event_name_field(cat, ph))
        text = lit.decode("utf-8", "replace")
        hit = (origin is Origin.TOOLCHAIN or (origin is Origin.OP and is_toolchain_op(text, bare=True))
               or (origin is Origin.OP_NAMED and is_toolchain_op(text))
               or (origin is Origin.FRAME and is_toolchain_frame(text)))
        if len(_NAME_VERDICT) > 200_000:
            _NAME_VERDICT.clear()
        _NAME_VERDICT[key] = hit
    return hit


def _sig(keys: frozenset[bytes] | tuple[bytes, ...]) -> set[tuple[int, int]]:
    """(length, first 8 bytes as a little-endian integer) of each key: how a batch's keys are told."""
    return {(len(k), int.from_bytes(k[:8].ljust(8, b"\0"), "little")) for k in keys}


_TOP_SIG, _ARG_SIG, _NAME_SIG = _sig(_TOP_KEYS), _sig(_ARG_KEYS), _sig((b"name",))
_CAT_SIG, _PH_SIG = _sig((b"cat",)), _sig((b"ph",))
_MASK = np.array([(1 << (8 * n)) - 1 for n in range(8)] + [(1 << 64) - 1], dtype=np.uint64)


def user_field_events(raw: bytes, s: np.ndarray, e: np.ndarray, tool: list[int], event_of: np.ndarray) -> set[int]:
    """Indices of the events (by `event_of[literal]`) in which a toolchain-clean literal (indices
    `tool` into the batch's literal starts `s` / ends `e`) may sit in a user-written field."""
    a = np.frombuffer(raw, np.uint8)
    n = len(raw)
    w = np.ndarray((n + 1,), dtype="<u8", buffer=raw + bytes(8), strides=(1,))
    # depth at each literal: structural characters outside strings, counted up to its opening quote
    pos = np.flatnonzero((a == 0x7B) | (a == 0x7D) | (a == 0x5B) | (a == 0x5D))
    pos = pos[np.searchsorted(np.sort(np.concatenate((s - 1, e))), pos, side="right") % 2 == 0]
    c = a[pos]
    depth_after = np.cumsum(np.where((c == 0x7B) | (c == 0x5B), 1, -1))
    k = np.searchsorted(pos, s - 1) - 1
    depth = np.where(k >= 0, depth_after[np.maximum(k, 0)], 0)
    # a key: a colon right after its closing quote (one blank allowed)
    nxt1, nxt2 = a[np.minimum(e + 1, n - 1)], a[np.minimum(e + 2, n - 1)]
    is_key = (nxt1 == 0x3A) | ((nxt1 == 0x20) & (nxt2 == 0x3A))
    length = e - s
    first = w[s] & _MASK[np.minimum(length, 8)]

    def sig_of(ix: np.ndarray, sigs: set[tuple[int, int]]) -> np.ndarray:
        out = np.zeros(ix.size, bool)
        for ln, fw in sigs:
            out |= (length[ix] == ln) & (first[ix] == np.uint64(fw))
        return out

    # the value right after its key (`"key": "value"`)
    direct = np.zeros(len(s), bool)
    direct[1:] = is_key[:-1] & ((s[1:] - 1 == e[:-1] + 2) | (s[1:] - 1 == e[:-1] + 3))
    # each event's category and phase: its depth-1 `cat` / `ph` values, by event
    top_values = np.flatnonzero(direct & (depth == 1))
    cat_at = top_values[sig_of(top_values - 1, _CAT_SIG)]
    ph_at = top_values[sig_of(top_values - 1, _PH_SIG)]
    cat_of = dict(zip(event_of[cat_at].tolist(), cat_at.tolist()))
    ph_of = dict(zip(event_of[ph_at].tolist(), ph_at.tolist()))
    keys = np.flatnonzero(is_key)
    closers = pos[(c == 0x5D) | (c == 0x7B) | (c == 0x7D)]
    t = np.asarray(tool, dtype=np.int64)
    t = t[~is_key[t]]                                   # keys: the writing tool's own names
    if not t.size:
        return set()

    last = w[np.maximum(e - 8, s)] & _MASK[np.minimum(length, 8)]

    def _exact(ix: np.ndarray, words: frozenset[bytes]) -> np.ndarray:
        """Literals `ix` (-1: none) equal to one of `words` (each <= 16 bytes: length, first and last
        8 bytes decide exactly)."""
        out = np.zeros(ix.size, bool)
        ok = ix >= 0
        j = np.maximum(ix, 0)
        for word in words:
            f8 = int.from_bytes(word[:8], "little")
            l8 = int.from_bytes(word[-8:], "little") if len(word) >= 8 else f8
            out |= ok & (length[j] == len(word)) & (first[j] == np.uint64(f8)) & (last[j] == np.uint64(l8))
        return out

    def text(i: int | None) -> str | None:
        return None if i is None else raw[s[i]:e[i]].decode("utf-8", "replace")

    top = (depth[t] == 1) & direct[t]
    pk = np.maximum(t - 1, 0)
    safe = top & sig_of(pk, _TOP_SIG)
    named = np.flatnonzero(top & ~safe & sig_of(pk, _NAME_SIG))
    if named.size:      # an event's name: by its category; a toolchain category (kernel ...) at once
        ev_n = event_of[t[named]]
        cat_ix = np.array([cat_of.get(int(v), -1) for v in np.unique(ev_n).tolist()], dtype=np.int64)
        tool_cat = dict(zip(np.unique(ev_n).tolist(), _exact(cat_ix, _TOOL_CATS).tolist()))
        seen: dict[tuple[bytes, bytes, bytes], bool] = {}
        for x, ev in zip(named.tolist(), ev_n.tolist()):
            if tool_cat.get(ev):
                safe[x] = True
                continue
            i = int(t[x])
            ci, pi = cat_of.get(ev), ph_of.get(ev)
            key = (raw[s[ci]:e[ci]] if ci is not None else b"", raw[s[pi]:e[pi]] if pi is not None else b"",
                   raw[s[i]:e[i]])
            hit = seen.get(key)
            if hit is None:
                hit = seen[key] = _name_is_toolchain(text(ci), text(pi), key[2])
            safe[x] = hit
    deep = np.flatnonzero(~safe & (depth[t] == 3))
    if deep.size:                                       # items of `Input type`: dtypes torch writes
        kk = np.searchsorted(keys, t[deep]) - 1
        j = keys[np.maximum(kk, 0)]
        ok = (kk >= 0) & (depth[j] == 2) & sig_of(j, _ARG_SIG) & \
            (np.searchsorted(closers, e[j]) == np.searchsorted(closers, s[t[deep]]))
        safe[deep] = ok
    walk = set(np.unique(event_of[t[~safe]]).tolist())
    return walk


__all__ = ["user_field_events"]
