"""The streaming chrome-trace reader against the real H200 torch traces and against broken input.

Expected values come from an independent, straightforward `json.load` of the same file, so every
assertion can fail if the reader drops, duplicates or mis-converts an event.
"""
from __future__ import annotations

import gzip
import json
import math
import shutil
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from testdata import fixtures_dir
from verlprof.stages.core.errors import BadInputError
from verlprof.stages.readers import chrome_stream, chrome_trace
from verlprof.stages.readers.chrome_trace import read_chrome_trace

FIXTURES = fixtures_dir() / "h200-torch-2.11"
TRACES = sorted(FIXTURES.glob("*.json.gz"))


_KEPT = {"kernel": "gpu", "gpu_memcpy": "gpu", "gpu_memset": "gpu", "cuda_runtime": "api",
         "cuda_driver": "api", "user_annotation": "range"}


def _expected(doc: dict) -> dict:
    """What the reader must find, from a plain json pass."""
    out = {"gpu": [], "api": [], "range": [], "n": len(doc["traceEvents"])}
    for e in doc["traceEvents"]:
        kind = _KEPT.get(e.get("cat"))
        if kind and e.get("ph") == "X":
            out[kind].append(e)
    return out


def _load(path: Path) -> dict:
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rb") as fh:
        return json.loads(fh.read())


@pytest.fixture(scope="module")
def step2() -> Path:
    return next(p for p in TRACES if "_step2_" in p.name)


@pytest.mark.parametrize("path", TRACES, ids=lambda p: p.name.split("_")[2])
def test_reads_every_kept_event_of_the_real_traces(path: Path) -> None:
    doc = _load(path)
    exp = _expected(doc)
    data = read_chrome_trace(path)
    assert data.n_events == exp["n"]
    assert data.parser == "typed" and not data.warnings
    assert data.n_gpu == len(exp["gpu"])
    assert len(data.api_ts) == len(exp["api"])
    assert len(data.ranges) == len(exp["range"])
    # GPU ops: same multiset of (name, ts ns, dur ns, correlation, bytes)
    got = sorted(zip((data.names[i] for i in data.gpu_name), data.gpu_ts, data.gpu_dur, data.gpu_corr,
                     data.gpu_bytes))
    want = sorted((e["name"], round(e["ts"] * 1000), round(e["dur"] * 1000), e["args"]["correlation"],
                   e["args"].get("bytes", 0)) for e in exp["gpu"])
    assert [g[0] for g in got] == [w[0] for w in want]
    assert [g[3:] for g in got] == [w[3:] for w in want]
    assert all(abs(g[1] - w[1]) <= 1 and abs(g[2] - w[2]) <= 1 for g, w in zip(got, want))
    # ranges: names, threads, durations
    got_r = sorted((n, data.threads[t][1], d) for n, _, d, t in data.ranges)
    want_r = sorted((e["name"], e["tid"], round(e["dur"] * 1000)) for e in exp["range"])
    assert [g[:2] for g in got_r] == [w[:2] for w in want_r]
    assert all(abs(g[2] - w[2]) <= 1 for g, w in zip(got_r, want_r))
    assert sorted(data.api_corr) == sorted(e["args"]["correlation"] for e in exp["api"])


def test_timestamps_are_exact_ns_and_absolute_with_base_time(step2: Path) -> None:
    doc = _load(step2)
    data = read_chrome_trace(step2)
    assert data.time_base == "baseTimeNanoseconds"
    assert data.base_ns == doc["baseTimeNanoseconds"]
    # exact to the printed microsecond decimals: parse the raw text of the first range independently
    raw = gzip.open(step2).read().decode()
    i = raw.index('"cat": "user_annotation"')
    ts_text = raw[raw.index('"ts": ', i) + 6:].split(",")[0]
    whole, frac = ts_text.split(".")
    want = int(whole) * 1000 + int(frac.ljust(3, "0")[:3])
    first = min(data.ranges, key=lambda r: r[1])
    assert first[1] == want
    # the file name's wall-clock timestamp (UTC) lies within the trace's absolute span
    stamp = step2.name.rsplit("_", 1)[1].split(".")[0]  # 20261202085621396 (local = UTC here)
    import datetime as dt

    t_name = dt.datetime.strptime(stamp[:14], "%Y%m%d%H%M%S").replace(tzinfo=dt.timezone.utc).timestamp()
    t_end = (data.base_ns + max(r[1] + r[2] for r in data.ranges)) / 1e9
    assert abs(t_end - t_name) < 5


def test_thread_names_and_metadata_after_events(step2: Path) -> None:
    data = read_chrome_trace(step2)
    names = set(data.thread_names.values())
    assert any("pt_autograd" in n for n in names)
    assert data.metadata.get("traceName")          # written after traceEvents by kineto
    assert data.metadata.get("schemaVersion") == 1  # written before


@pytest.mark.parametrize("chunk", [4096, 65536])
def test_small_chunks_give_the_same_records(step2: Path, tmp_path: Path, chunk: int,
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    plain = tmp_path / "t.json"
    plain.write_bytes(gzip.open(step2).read())
    ref = read_chrome_trace(plain)
    monkeypatch.setattr(chrome_trace, "CHUNK_BYTES", chunk)
    monkeypatch.setattr(chrome_stream, "_READ_BYTES", chunk // 4)   # the parser reads smaller blocks too
    for f in (plain, step2):
        got = read_chrome_trace(f)
        assert got.n_events == ref.n_events
        assert list(got.gpu_ts) == list(ref.gpu_ts) and list(got.api_corr) == list(ref.api_corr)
        assert got.ranges == ref.ranges and not got.warnings


def _write(tmp_path: Path, name: str, text: str | bytes, gz: bool = False) -> Path:
    p = tmp_path / name
    data = text.encode() if isinstance(text, str) else text
    p.write_bytes(gzip.compress(data) if gz else data)
    return p


_EV = ('{"ph": "X", "cat": "kernel", "name": "k%d", "pid": 0, "tid": 7, "ts": %s, "dur": 1.5, '
       '"args": {"correlation": %d, "stream": 7, "device": 0}}')
_API = '{"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 1, "ts": %s, "dur": 2, "args": {"correlation": %d}}'


def _doc(events: list[str], before: str = '"baseTimeNanoseconds": 1000', after: str = "") -> str:
    body = ",\n".join(events)
    tail = f", {after}" if after else ""
    return "{%s, \"traceEvents\": [\n%s\n]%s}" % (before, body, tail) if before else \
        "{\"traceEvents\": [\n%s\n]%s}" % (body, tail)


def test_layouts_array_format_and_keys_in_any_order(tmp_path: Path) -> None:
    evs = [_EV % (i, f"{10 + i}.25", i + 1) for i in range(5)]
    variants = {
        "object.json": _doc(evs),
        "after.json": _doc(evs, before="", after='"baseTimeNanoseconds": 1000, "x": [{"a": 1},{"b": [2]}]'),
        "array.json": "[" + ",".join(evs) + "]",
        "compact.json.gz": json.dumps(json.loads(_doc(evs)), separators=(",", ":")),
        "pretty.json": json.dumps(json.loads(_doc(evs)), indent=4),
    }
    for name, text in variants.items():
        data = read_chrome_trace(_write(tmp_path, name, text, gz=name.endswith(".gz")))
        assert data.n_gpu == 5, name
        assert list(data.gpu_ts) == [10250 + 1000 * i for i in range(5)], name
        assert [data.names[i] for i in data.gpu_name] == [f"k{i}" for i in range(5)], name
        if name != "array.json":
            assert data.base_ns == 1000 and data.time_base == "baseTimeNanoseconds", name
        assert not [w for w in data.warnings if "tolerant" in w], name


def test_braces_and_separators_inside_strings(tmp_path: Path) -> None:
    """`},{` inside names makes the fast cut wrong: the reader must notice and still be exact."""
    tricky = ['{"ph": "X", "cat": "user_annotation", "name": "a},\\n{b\\"}, {", "pid": 1, "tid": 1, '
              '"ts": %d, "dur": 1}' % i for i in range(50)]
    evs = [e for pair in zip(tricky, [_EV % (i, i, i + 1) for i in range(50)]) for e in pair]
    p = _write(tmp_path, "t.json", _doc(evs).replace("},\n{", "}, {"))
    for chunk in (64, 300, 1 << 20):
        chrome_trace.CHUNK_BYTES, old = chunk, chrome_trace.CHUNK_BYTES
        try:
            data = read_chrome_trace(p)
        finally:
            chrome_trace.CHUNK_BYTES = old
        assert data.n_events == 100 and data.n_gpu == 50
        assert {r[0] for r in data.ranges} == {'a},\n{b"}, {'}


def test_tolerant_values_nan_bigint_bad_utf8(tmp_path: Path) -> None:
    evs = [
        _EV % (0, "1.0", 1),
        '{"ph": "X", "cat": "kernel", "name": "nan_ts", "pid": 0, "tid": 7, "ts": NaN, "dur": 1, "args": {"correlation": 2}}',
        '{"ph": "X", "cat": "kernel", "name": "big", "pid": 0, "tid": 7, "ts": 3, "dur": Infinity, '
        '"args": {"correlation": 123456789012345678901234567890, "bytes": 99999999999999999999999}}',
        '{"ph": "X", "cat": "user_annotation", "name": "bad\xff utf8 \\ud800", "pid": 1, "tid": 1, "ts": 4, "dur": 1}',
        '{"ph": "X", "cat": "cpu_op", "name": "x", "pid": 1, "tid": 1, "ts": 5, "dur": 1, "args": {"v": 1e999}}',
    ]
    raw = _doc(evs).encode("latin-1")  # \xff stays one invalid UTF-8 byte
    data = read_chrome_trace(_write(tmp_path, "t.json", raw))
    assert data.n_events == 5
    assert any("tolerant" in w for w in data.warnings)
    assert any("skipped" in w for w in data.warnings)        # NaN ts
    assert data.parser in ("tolerant", "mixed")
    names = [data.names[i] for i in data.gpu_name]
    assert names == ["k0", "big"]                              # NaN-ts event skipped, not crashed
    assert list(data.gpu_dur) == [1500, 0]                     # Infinity duration -> 0
    assert list(data.gpu_bytes) == [0, 0]                      # bytes beyond int64 -> 0
    assert data.gpu_corr[1] < -1                               # big id mapped to a local id
    (rname,) = [r[0] for r in data.ranges]
    rname.encode("utf-8")                                      # Parquet-safe
    assert rname.startswith("bad") and ("\ufffd" in rname or "?" in rname)


def test_big_ids_in_typed_path_are_reported(tmp_path: Path) -> None:
    big = 2 ** 70
    evs = [_EV % (0, "1.0", big), _API % ("0.5", big)]
    data = read_chrome_trace(_write(tmp_path, "t.json", _doc(evs)))
    assert data.gpu_corr[0] == data.api_corr[0] < -1       # joined consistently
    assert any("beyond 64 bits" in w for w in data.warnings)


@pytest.mark.parametrize("content,what", [
    (b"", "empty"),
    (b"   \n ", "empty"),
    (b"hello", "not JSON"),
    (b'{"a": 1}', "without traceEvents"),
    (b'{"traceEvents": {"a": 1}}', "not a list"),
    (b'{"traceEvents": [{"ph": "X"}, ', "truncated"),
    (b'{"traceEvents": [{"ph": "X"}]', "truncated or malformed"),
    (b'{"traceEvents": [{"ph": "X"}]} trailing', "malformed"),
    (b'[{"ph": "X"}] x', "unexpected content"),
    (b'{"traceEvents": [{"ph": "X" "cat": 1}]}', "invalid JSON"),
    (b'{"traceEvents": [{"ph": "X"},,{"ph": "X"}]}', "malformed"),
    (b'{"x": [1, 2}', "not valid JSON"),
])
def test_bad_input_is_one_line_error_naming_the_file(tmp_path: Path, content: bytes, what: str) -> None:
    p = _write(tmp_path, "bad.json", content)
    with pytest.raises(BadInputError) as ei:
        read_chrome_trace(p)
    msg = str(ei.value)
    assert "\n" not in msg and str(p) in msg and what in msg


def test_truncated_and_corrupt_gzip(step2: Path, tmp_path: Path) -> None:
    blob = step2.read_bytes()
    cut = _write(tmp_path, "cut.json.gz", blob[: len(blob) // 2])
    with pytest.raises(BadInputError, match="truncated gzip"):
        read_chrome_trace(cut)
    bad = bytearray(blob)
    bad[len(bad) // 3: len(bad) // 3 + 64] = b"\x00" * 64
    broken = _write(tmp_path, "broken.json.gz", bytes(bad))
    with pytest.raises(BadInputError) as ei:
        read_chrome_trace(broken)
    assert str(broken) in str(ei.value)
    garbage = _write(tmp_path, "garbage.json.gz", gzip.compress(b'{"traceEvents": []}') + b"junk!")
    with pytest.raises(BadInputError, match="trailing garbage"):
        read_chrome_trace(garbage)


def test_multi_member_gzip_and_input_untouched(step2: Path, tmp_path: Path) -> None:
    text = _doc([_EV % (i, i, i + 1) for i in range(4)]).encode()
    p = tmp_path / "multi.json.gz"
    p.write_bytes(gzip.compress(text[:37]) + gzip.compress(text[37:]))
    assert read_chrome_trace(p).n_gpu == 4
    copy = tmp_path / step2.name
    shutil.copy2(step2, copy)
    before = (copy.read_bytes(), copy.stat().st_mtime_ns)
    read_chrome_trace(copy)
    assert (copy.read_bytes(), copy.stat().st_mtime_ns) == before


def test_no_base_time_says_times_are_relative(tmp_path: Path) -> None:
    data = read_chrome_trace(_write(tmp_path, "t.json", _doc([_EV % (0, "5.0", 1)], before='"a": 1')))
    assert data.time_base == "relative" and any("baseTimeNanoseconds" in w for w in data.warnings)
    epoch = read_chrome_trace(_write(tmp_path, "e.json", _doc([_EV % (0, "1700000000000000.0", 1)], before='"a": 1')))
    assert epoch.time_base == "epoch" and not epoch.warnings


# ------------------------------------------------------------------------------------------------
# Fuzzing
# ------------------------------------------------------------------------------------------------


_names = st.text(alphabet=st.characters(blacklist_categories=("Cs",)), max_size=12) | \
    st.sampled_from(["},{", "]", "[", "\\", '"', "},\n{", "traceEvents"])
_num = st.floats(min_value=0, max_value=1e7, allow_nan=False).map(lambda x: round(x, 3))
_event = st.fixed_dictionaries({
    "ph": st.sampled_from(["X", "X", "i", "M"]),
    "cat": st.sampled_from(["kernel", "cuda_runtime", "cpu_op", "user_annotation", "gpu_memset"]),
    "name": _names, "pid": st.integers(0, 3), "tid": st.integers(0, 3), "ts": _num, "dur": _num,
}, optional={"args": st.fixed_dictionaries({}, optional={
    "correlation": st.integers(1, 50), "bytes": st.integers(0, 10**6),
    "nested": st.recursive(st.integers() | _names, lambda c: st.lists(c, max_size=3)
                           | st.dictionaries(_names, c, max_size=3), max_leaves=6)})})


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(events=st.lists(_event, max_size=30), indent=st.sampled_from([None, 1, 2]), chunk=st.sampled_from([16, 97, 4096]),
       gz=st.booleans())
def test_fuzz_valid_traces_match_json(tmp_path: Path, events: list, indent, chunk: int, gz: bool) -> None:
    doc = {"schemaVersion": 1, "traceEvents": events, "baseTimeNanoseconds": 5}
    text = json.dumps(doc, indent=indent)
    p = _write(tmp_path, "f.json.gz" if gz else "f.json", text, gz=gz)
    old = chrome_trace.CHUNK_BYTES
    chrome_trace.CHUNK_BYTES = chunk
    try:
        data = read_chrome_trace(p)
    finally:
        chrome_trace.CHUNK_BYTES = old
    exp = _expected(doc)
    assert data.n_events == len(events)
    assert data.n_gpu == len(exp["gpu"]) and len(data.api_ts) == len(exp["api"])
    assert sorted(r[0] for r in data.ranges) == sorted(e["name"] for e in exp["range"])
    assert sorted(data.names[i] for i in data.gpu_name) == sorted(e["name"] for e in exp["gpu"])
    assert not any("tolerant" in w for w in data.warnings)


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_fuzz_corrupted_bytes_never_crash(tmp_path: Path, data: st.DataObject) -> None:
    """Flip, cut or splice bytes of a real trace (plain and gzip): a result or BadInputError."""
    base = _SMALL_TEXT
    blob = bytearray(base)
    for _ in range(data.draw(st.integers(1, 4))):
        op = data.draw(st.sampled_from(["flip", "cut", "insert"]))
        i = data.draw(st.integers(0, max(0, len(blob) - 1)))
        if op == "flip" and blob:
            blob[i] = data.draw(st.integers(0, 255))
        elif op == "cut":
            del blob[i:i + data.draw(st.integers(1, 200))]
        else:
            blob[i:i] = data.draw(st.sampled_from([b"NaN", b"\xff\xfe", b"},{", b"]", b'"', b"99999999999999999999999", b"\\"]))
    gz = data.draw(st.booleans())
    p = _write(tmp_path, "c.json.gz" if gz else "c.json", bytes(blob), gz=gz)
    if gz and data.draw(st.booleans()):
        raw = p.read_bytes()
        p.write_bytes(raw[: data.draw(st.integers(0, len(raw)))])
    old = chrome_trace.CHUNK_BYTES
    chrome_trace.CHUNK_BYTES = data.draw(st.sampled_from([64, 1000, 1 << 20]))
    try:
        got = read_chrome_trace(p)
    except BadInputError as exc:
        assert "\n" not in str(exc) and str(p) in str(exc)
    else:
        assert_consistent(got, max_events=_SMALL_EVENTS + 4)   # each edit can split one event in two
    finally:
        chrome_trace.CHUNK_BYTES = old


def assert_consistent(got, max_events: int) -> None:
    """A successful read of a damaged trace is still a well-formed TraceData: its parallel arrays
    line up, every index points into its table, and it holds no more events than were written."""
    assert 0 <= got.n_events <= max_events
    kept = len(got.ranges) + got.n_gpu + len(got.api_ts)
    assert kept <= got.n_events
    groups = [("gpu_kind", "gpu_name", "gpu_ts", "gpu_dur", "gpu_device", "gpu_stream", "gpu_corr", "gpu_bytes"),
              ("api_ts", "api_dur", "api_thread", "api_corr"), ("seq_thread", "seq_ts", "seq_dur", "seq_no"),
              ("flow_id", "flow_end", "flow_thread", "flow_ts"),
              ("mem_thread", "mem_change", "mem_ts", "mem_device", "mem_total")]
    for group in groups:
        assert len({len(getattr(got, f)) for f in group}) == 1, group
    assert all(0 <= i < len(got.names) for i in got.gpu_name)
    threads = len(got.threads)
    assert all(0 <= r[3] < threads for r in got.ranges)
    assert all(0 <= i < threads for arr in (got.api_thread, got.seq_thread, got.flow_thread, got.mem_thread)
               for i in arr)
    assert all(isinstance(r[0], str) and isinstance(r[1], int) and isinstance(r[2], int) for r in got.ranges)


def _small_text() -> bytes:
    if not TRACES:
        return b"{}"
    doc = _load(next(p for p in TRACES if "_step3_" in p.name))
    evs = doc["traceEvents"]
    keep = [e for e in evs if e.get("cat") in ("user_annotation", "kernel", "cuda_runtime", "gpu_memset")][:40]
    keep += [e for e in evs if e.get("cat") == "cpu_op"][:10]
    doc["traceEvents"] = keep
    return json.dumps(doc, indent=2).encode()


_SMALL_TEXT = _small_text()
_SMALL_EVENTS = len(json.loads(_SMALL_TEXT).get("traceEvents", []))
