"""The raw-text fast path of trace scrub and check (`LiteralFilter`): an event is passed through
only when every string literal in it, key or value, at any depth, is one the rules leave alone;
every other event takes the decoded walk. Judged against the walk itself, event by event."""
from __future__ import annotations

import gzip
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

import orjson
from hypothesis import given, settings
from hypothesis import strategies as st
from testdata import fixtures_dir
from verlprof.stages.scrub.check import check_paths
from verlprof.stages.scrub.policy import load_policy
from verlprof.stages.scrub.rules import REDACTED
from verlprof.stages.scrub.scrubber import Scrubber
from verlprof.stages.readers.chrome_trace import ChromeTraceStream
from verlprof.stages.scrub.trace import LiteralFilter, TraceScrubber, scrub_trace, unchanged_by

POLICY = load_policy(use_local_environment=False)
TOKEN = "ghp_" + "Z8kq2LmN4pR7sT1vW3xY5zA9bC0dE6fG8hJ2"

EVENTS = [
    {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "ts": 1.5, "dur": 2, "args": {"External id": 3}},  # clean
    {"ph": "X", "name": "aten::mm", "args": {"note": f"push {TOKEN}"}},                    # secret value
    {"ph": "X", "cat": "user_annotation", "name": "sm90_xmma_gemm_bf16"},   # a kernel-like name in a user field
    {"ph": "X", "cat": "cpu_op", "name": "x", "args": {"Concrete Inputs": ["sm90_xmma_gemm_bf16"]}},  # and in args
    {"ph": "X", "name": "step", "args": {"api_key": "abcdefgh12345678"}},                 # secret-named key
    {"ph": "M", "name": "process_name", "args": {"host_name": "node-17.cluster.internal"}},  # host key
    {"ph": "X", "name": "x", "args": {"deep": [{"k": [f"{TOKEN}"]}]}},                       # nested
    {"ph": "X", "name": "x", "args": {f"tok {TOKEN}": 1}},                                   # secret in a key
    {"ph": "X", "name": "x", "args": {"v": float("nan")}},                                  # NaN: the walk
]


def _raw(ev: dict) -> str:
    return json.dumps(ev)


def _walked(f: LiteralFilter, events: list[str]) -> list[bool]:
    """Per event: does the filter send it to the walk (one batch, as the stream hands it over)."""
    raw = ",\n".join(events).encode()
    walk = {k for k, _s, _e in f.events_to_walk(raw)}
    return [k in walk for k in range(len(events))]


def test_filter_passes_only_what_the_rules_leave_alone(tmp_path: Path) -> None:
    sc = Scrubber(POLICY)
    ok, rules_ok = unchanged_by(sc), unchanged_by(sc, rules_only=True)
    # as write_scrubbed builds it: a torch op is clean in a cpu_op's name, not in a user field
    f = LiteralFilter(lambda t: ok(t) and sc.key_class(t) == 0, toolchain=lambda t: rules_ok(t) and sc.key_class(t) == 0)
    ts = TraceScrubber(Scrubber(POLICY), POLICY)
    nan = EVENTS[-1]
    events = EVENTS[:-1]
    verdicts = [not w for w in _walked(f, [_raw(ev) for ev in events])]
    assert verdicts == [True] + [False] * (len(events) - 1)
    for ev, clean in zip(events, verdicts):
        if clean:   # passing the raw text through equals what the walk writes
            assert ts.event(json.loads(_raw(ev))) == json.loads(_raw(ev))
    # a JSON escape hides nothing: "\u005f" is "_"
    escaped = _raw({"name": "x", "args": {"note": "push ghp\\u005f" + TOKEN[4:]}}).replace("\\\\u005f", "\\u005f")
    assert "\\u005f" in escaped and _walked(f, [_raw(EVENTS[0]), escaped]) == [False, True]
    # NaN is no JSON literal: the stream hands such a batch over decoded (tolerant), all walked
    src = tmp_path / "nan.json"
    src.write_text(json.dumps({"traceEvents": [EVENTS[0], nan]}, allow_nan=True))
    loose = [ev for b in ChromeTraceStream(src) if b.tolerant for ev in b.events or ()]
    assert len(loose) == 1 and loose[0]["args"]["v"] != loose[0]["args"]["v"]


def test_scrubbed_trace_matches_the_walk_and_checks_clean(tmp_path: Path) -> None:
    src = tmp_path / "t.json"
    src.write_text(json.dumps({"traceEvents": EVENTS * 3, "displayTimeUnit": "ms"}, allow_nan=True))
    dst = tmp_path / "out.json.gz"
    sc = Scrubber(POLICY)
    scrub_trace(src, dst, sc, POLICY)
    with gzip.open(dst, "rb") as g:
        out = json.loads(g.read())
    walk = TraceScrubber(Scrubber(POLICY), POLICY)
    expect = [orjson.loads(orjson.dumps(walk.event(ev))) for ev in EVENTS * 3]
    assert out["traceEvents"] == expect
    text = json.dumps(out)
    assert TOKEN not in text and "abcdefgh12345678" not in text and "node-17" not in text
    assert REDACTED in text
    assert check_paths([dst], POLICY) == []
    # check finds each planted kind in the raw input, through the same filter
    kinds = {f.kind for f in check_paths([src], POLICY)}
    assert any(k.startswith("pattern:") for k in kinds) and "secret_by_name" in kinds


def test_real_trace_fast_path_equals_walk(tmp_path: Path) -> None:
    src = next(iter(sorted((fixtures_dir() / "h200-torch-2.11").glob("*.json.gz"))))
    dst = tmp_path / "out.json.gz"
    scrub_trace(src, dst, Scrubber(POLICY), POLICY)
    walk = TraceScrubber(Scrubber(POLICY), POLICY)
    with gzip.open(src, "rb") as g:
        expect = [orjson.loads(orjson.dumps(walk.event(v))) for v in json.loads(g.read())["traceEvents"]]
    with gzip.open(dst, "rb") as g:
        got = json.loads(g.read())["traceEvents"]
    assert got == expect


# Literals alike at both ends and in length, escapes, keys and values: the lookup must stay exact.
_ALIKE = st.text(alphabet="ab\"\\é", min_size=0, max_size=40).map(lambda t: "[768, " + t + " 2304, 1]" if len(t) % 3 else t)


@settings(max_examples=150, deadline=None)
@given(events=st.lists(st.dictionaries(_ALIKE, st.one_of(_ALIKE, st.integers(), st.lists(_ALIKE, max_size=3)),
                                       max_size=4), min_size=1, max_size=12),
       bad=st.sets(_ALIKE, max_size=4), bits=st.sampled_from([1, 2, 17]))
def test_literal_filter_is_exact(events: list, bad: set, bits: int) -> None:
    """An event goes to the walk exactly when one of its strings (key or value, at any depth) is
    judged dirty, however alike the literals are and however full the table (2 slots: most
    literals overflow into the Python sets); every batch is seen twice (learning, then the table)."""
    f = type("Small", (LiteralFilter,), {"BITS": bits})(lambda t: t not in bad)
    raw = ",\n".join(json.dumps(ev, ensure_ascii=False) for ev in events).encode()

    def strings(v: object) -> set:
        if isinstance(v, str):
            return {v}
        if isinstance(v, dict):
            return set(v) | set().union(*(strings(x) for x in v.values()))
        if isinstance(v, list):
            return set().union(*(strings(x) for x in v))
        return set()

    expect = [k for k, ev in enumerate(events) if strings(ev) & bad]
    for _ in range(2):
        assert [k for k, _s, _e in f.events_to_walk(raw)] == expect
        for k, s, e in f.events_to_walk(raw):
            assert json.loads(raw[s:e]) == events[k]
