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

from .json_scan import BatchLiterals, BatchScan
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


def user_field_events(raw: bytes, lits: BatchLiterals, tool: np.ndarray, scan: BatchScan,
                      verdicts: dict[int, bool]) -> set[int]:
    """Indices of the events (by `event_of[literal]`) in which a toolchain-clean literal (indices
    `tool` into the batch's literals `lits`, as the literal table read them) may sit in a
    user-written field. `scan`: the batch's structure (json_scan.scan_batch: each literal's depth
    and event). A literal's slot in the table names it, so an event name is judged once per
    (category, phase, name) in `verdicts` (kept by the caller for the whole file), not per event."""
    a = np.frombuffer(raw, np.uint8)
    n = len(raw)
    s, e, length, first, last, slots = lits
    depth, event_of = scan.lit_depth, scan.lit_event
    # a key: a colon right after its closing quote (one blank allowed)
    nxt1, nxt2 = a[np.minimum(e + 1, n - 1)], a[np.minimum(e + 2, n - 1)]
    is_key = (nxt1 == 0x3A) | ((nxt1 == 0x20) & (nxt2 == 0x3A))
    t = tool[~is_key[tool]]                             # keys: the writing tool's own names
    if not t.size:
        return set()

    def sig_of(ix: np.ndarray, sigs: set[tuple[int, int]]) -> np.ndarray:
        out = np.zeros(ix.size, bool)
        ln_ix, fw_ix = length[ix], first[ix]
        for ln, fw in sigs:
            out |= (ln_ix == ln) & (fw_ix == np.uint64(fw))
        return out

    # the value right after its key (`"key": "value"`)
    direct = np.zeros(len(s), bool)
    direct[1:] = is_key[:-1] & ((s[1:] - 1 == e[:-1] + 2) | (s[1:] - 1 == e[:-1] + 3))
    # each event's category and phase: its depth-1 `cat` / `ph` values, by event (the last one, as
    # a decoder keeps it)
    top_values = np.flatnonzero(direct & (depth == 1))
    n_events = int(event_of[-1]) + 1
    cat_of = np.full(n_events, -1, np.int64)
    ph_of = np.full(n_events, -1, np.int64)
    cat_at = top_values[sig_of(top_values - 1, _CAT_SIG)]
    ph_at = top_values[sig_of(top_values - 1, _PH_SIG)]
    np.maximum.at(cat_of, event_of[cat_at], cat_at)
    np.maximum.at(ph_of, event_of[ph_at], ph_at)

    def _exact(ix: np.ndarray, words: frozenset[bytes]) -> np.ndarray:
        """Literals `ix` (-1: none) equal to one of `words` (each <= 16 bytes: length, first and last
        8 bytes decide exactly)."""
        out = np.zeros(ix.size, bool)
        ok = ix >= 0
        j = np.maximum(ix, 0)
        ln_j, f_j, l_j = length[j], first[j], last[j]
        for word in words:
            f8 = int.from_bytes(word[:8], "little")
            l8 = int.from_bytes(word[-8:], "little") if len(word) >= 8 else f8
            out |= ok & (ln_j == len(word)) & (f_j == np.uint64(f8)) & (l_j == np.uint64(l8))
        return out

    def text(i: int) -> str | None:
        return None if i < 0 else raw[s[i]:e[i]].decode("utf-8", "replace")

    def lit(i: int) -> bytes:
        return raw[s[i]:e[i]] if i >= 0 else b""

    top = (depth[t] == 1) & direct[t]
    pk = np.maximum(t - 1, 0)
    safe = top & sig_of(pk, _TOP_SIG)
    named = np.flatnonzero(top & ~safe & sig_of(pk, _NAME_SIG))
    if named.size:      # an event's name: by its category; a toolchain category (kernel ...) at once
        ev_n = event_of[t[named]]
        ci, pi = cat_of[ev_n], ph_of[ev_n]
        tool_cat = _exact(ci, _TOOL_CATS)
        safe[named[tool_cat]] = True
        rest = np.flatnonzero(~tool_cat)
        if rest.size:   # other categories: one verdict per distinct (category, phase, name) literal
            names, ci, pi = t[named[rest]], ci[rest], pi[rest]
            absent = 1 << 17          # no `cat` / `ph`: a slot of its own (the table has 1 << 17)
            sc = np.where(ci >= 0, slots[np.maximum(ci, 0)], absent)
            sp = np.where(pi >= 0, slots[np.maximum(pi, 0)], absent)
            sn = slots[names]
            known = (sc >= 0) & (sp >= 0) & (sn >= 0)
            key = np.where(known, (sc << 36) | (sp << 18) | sn, -1 - np.arange(rest.size))
            uniq, first_of, inverse = np.unique(key, return_index=True, return_inverse=True)
            hits = np.zeros(uniq.size, bool)
            for u, (kk, x) in enumerate(zip(uniq.tolist(), first_of.tolist())):
                hit = verdicts.get(kk) if kk >= 0 else None
                if hit is None:
                    i, cc, pp = int(names[x]), int(ci[x]), int(pi[x])
                    hit = _name_is_toolchain(text(cc), text(pp), lit(i))
                    if kk >= 0:
                        verdicts[kk] = hit
                hits[u] = hit
            safe[named[rest]] = hits[inverse.reshape(-1)]
    deep = np.flatnonzero(~safe & (depth[t] == 3))
    if deep.size:                                       # items of `Input type`: dtypes torch writes
        keys = np.flatnonzero(is_key)
        closers = scan.closers()
        kk = np.searchsorted(keys, t[deep]) - 1
        j = keys[np.maximum(kk, 0)]
        ok = (kk >= 0) & (depth[j] == 2) & sig_of(j, _ARG_SIG) & \
            (np.searchsorted(closers, e[j]) == np.searchsorted(closers, s[t[deep]]))
        safe[deep] = ok
    walk = set(np.unique(event_of[t[~safe]]).tolist())
    return walk


__all__ = ["user_field_events"]
