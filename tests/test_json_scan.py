"""`json_scan.scan_batch`, the one scan of a batch of raw trace events the fast path relies on to
place literals by field (issue 39): every literal's span, depth and event, and the commas between
events, equal a character-by-character reading of the same bytes, on real traces and on text
built to trip it (brackets, commas and escaped quotes inside strings)."""
from __future__ import annotations

import json
import lzma
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

from hypothesis import given, settings
from hypothesis import strategies as st
from verlprof.stages.readers.chrome_trace import ChromeTraceStream
from verlprof.stages.scrub.json_scan import scan_batch, string_quotes

DATA = Path(__file__).parent / "data"
TRACES = [DATA / "h200-torch-2.11" / "actor-rollout-ref_train_step1_rank0-of-1_pid754_20261202085618976.json.gz",
          DATA / "kineto_public" / "hta_ddp_nccl_rank0.json.xz"]


def _read(raw: bytes) -> tuple[list[tuple[int, int, int, int]], list[int]]:
    """(start, end, depth, event) of each string literal and the offsets of the commas between
    events, read one character at a time."""
    lits, commas, depth, event, i = [], [], 0, 0, 0
    while i < len(raw):
        c = raw[i]
        if c == 0x22:
            j = i + 1
            while raw[j] != 0x22:
                j += 2 if raw[j] == 0x5C else 1
            lits.append((i + 1, j, depth, event))
            i = j + 1
            continue
        if c in b"{[":
            depth += 1
        elif c in b"}]":
            depth -= 1
        elif c == 0x2C and depth == 0:
            event += 1
            commas.append(i)
        i += 1
    return lits, commas


def _check(raw: bytes) -> None:
    scan = scan_batch(raw)
    lits, commas = _read(raw)
    q = scan.q
    assert list(zip((q[0::2] + 1).tolist(), q[1::2].tolist(), scan.lit_depth.tolist(),
                    scan.lit_event.tolist())) == lits
    assert scan.commas.tolist() == commas
    assert string_quotes(raw).tolist() == q.tolist()
    inside = bytearray(len(raw))
    for a, b, _d, _e in lits:
        inside[a:b] = b"\1" * (b - a)
    closers = [i for i, c in enumerate(raw) if c in b"]{}" and not inside[i]]
    assert scan.closers().tolist() == closers


def test_real_traces_read_as_one_character_at_a_time(tmp_path: Path) -> None:
    for path in TRACES:
        if path.suffix == ".xz":
            plain = tmp_path / path.stem
            plain.write_bytes(lzma.decompress(path.read_bytes()))
            path = plain
        batches = 0
        for batch in ChromeTraceStream(path, chunk_bytes=1 << 16):
            if not batch.tolerant:
                _check(batch.raw)
                batches += 1
            if batches == 8:
                break
        assert batches


_TEXT = st.text(alphabet=st.sampled_from(list('a",{}[]:\\ é\x02\x0c')), max_size=8)
_JSON = st.recursive(st.one_of(_TEXT, st.integers(0, 99), st.none()),
                     lambda inner: st.lists(inner, max_size=3) | st.dictionaries(_TEXT, inner, max_size=3),
                     max_leaves=12)


@settings(max_examples=300, deadline=None)
@given(st.lists(_JSON, min_size=1, max_size=5), st.booleans())
def test_strings_that_look_like_structure(events: list, ascii_only: bool) -> None:
    _check(b",".join(json.dumps(ev, ensure_ascii=ascii_only).encode() for ev in events))
