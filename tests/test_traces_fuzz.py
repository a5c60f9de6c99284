"""Bad inputs to the trace writers: one-line BadInputError naming the file, nothing half-written.

Inputs are real fixtures damaged the ways files get damaged (cut short by a crash, overwritten,
empty, some other SQLite or JSON file), never hand-written lookalikes of traces.
"""
from __future__ import annotations

import gzip
import shutil
import sqlite3
from pathlib import Path

import orjson
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from testdata import fixtures_dir
from verlprof.stages.core.errors import BadInputError, VerlprofError
from verlprof.stages.traces.jobs import nsys_sqlite_to_chrome, window_chrome_trace, window_nsys_sqlite

FIX = fixtures_dir()
SMALL_NSYS = FIX / "h200-nsys-2025.3" / "ray-continuous" / "worker_process_1983.2.sqlite"
TORCH = sorted((FIX / "h200-torch-2.11").glob("*step3*.json.gz"))


FAR = (0, 1 << 62)  # a window holding everything


def assert_clean_failure(err: VerlprofError, src: Path, out_dir: Path) -> None:
    msg = str(err)
    assert "\n" not in msg and str(src) in msg
    assert list(out_dir.iterdir()) == [], "a failed run left files behind"


@pytest.fixture()
def out_dir(tmp_path: Path) -> Path:
    d = tmp_path / "out"
    d.mkdir()
    return d


def _nsys_writers(src: Path, out: Path) -> list:
    return [lambda: window_nsys_sqlite(src, out / "w.sqlite", *FAR),
            lambda: nsys_sqlite_to_chrome(src, out / "w.json.gz"),
            lambda: nsys_sqlite_to_chrome(src, out / "b.json.gz", *FAR)]


@pytest.mark.parametrize("damage", ["empty", "truncated", "garbage", "not_nsys", "no_clock", "missing"])
def test_nsys_bad_inputs(damage: str, tmp_path: Path, out_dir: Path) -> None:
    src = tmp_path / "in.sqlite"
    data = SMALL_NSYS.read_bytes()
    if damage == "empty":
        src.write_bytes(b"")
    elif damage == "truncated":
        src.write_bytes(data[: len(data) // 2])
    elif damage == "garbage":
        src.write_bytes(b"\x00garbage" * 4096)
    elif damage == "not_nsys":
        con = sqlite3.connect(src)
        con.execute("CREATE TABLE t (x)")
        con.commit()
        con.close()
    elif damage == "no_clock":
        src.write_bytes(data)
        con = sqlite3.connect(src)
        con.execute("DROP TABLE TARGET_INFO_SESSION_START_TIME")
        con.commit()
        con.close()
    for write in _nsys_writers(src, out_dir):
        with pytest.raises(BadInputError) as err:
            write()
        assert_clean_failure(err.value, src, out_dir)


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(offset=st.integers(min_value=0, max_value=99), length=st.integers(min_value=1, max_value=20000),
       byte=st.integers(min_value=0, max_value=255))
@example(offset=50, length=1, byte=7)      # one byte inside a page: still readable, so the window is checked
@example(offset=3, length=213, byte=3)     # found by Hypothesis: kernels naming strings StringIds lost
def test_nsys_overwritten_bytes_fail_cleanly_or_window_validly(tmp_path: Path, offset: int, length: int,
                                                               byte: int) -> None:
    """Bytes overwritten anywhere (header or pages): a clean BadInputError, or a valid window."""
    data = bytearray(SMALL_NSYS.read_bytes())
    at = offset * len(data) // 100
    data[at:at + length] = bytes([byte]) * len(data[at:at + length])
    case = tmp_path / f"c{offset}_{length}_{byte}"
    case.mkdir()
    src, out = case / "in.sqlite", case / "out"
    src.write_bytes(bytes(data))
    out.mkdir()
    try:
        window_nsys_sqlite(src, out / "w.sqlite", *FAR)
    except BadInputError as err:
        assert_clean_failure(err, src, out)
    else:
        assert_valid_window(out / "w.sqlite")
    assert src.read_bytes() == bytes(data)  # the input is never changed


def assert_valid_window(path: Path) -> None:
    """A window written from a damaged export is a sound SQLite export: integrity_check passes,
    StringIds is there, and every NVTX/kernel row it keeps lies in the asked window and names a
    string the window carries."""
    lo, hi = FAR
    with sqlite3.connect(f"file:{path}?mode=ro", uri=True) as con:
        assert con.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
        tables = {r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type='table'")}
        assert "StringIds" in tables
        ids = {r[0] for r in con.execute("SELECT id FROM StringIds")}
        if "CUPTI_ACTIVITY_KIND_KERNEL" in tables:
            for start, end, name in con.execute("SELECT start, end, shortName FROM CUPTI_ACTIVITY_KIND_KERNEL"):
                assert lo <= start <= end <= hi and name in ids
        if "NVTX_EVENTS" in tables:
            for (text_id,) in con.execute("SELECT textId FROM NVTX_EVENTS WHERE textId IS NOT NULL"):
                assert text_id in ids


def test_window_bounds_and_self_overwrite_are_refused(tmp_path: Path) -> None:
    src = tmp_path / "in.sqlite"
    shutil.copyfile(SMALL_NSYS, src)
    with pytest.raises(VerlprofError, match="before it starts"):
        window_nsys_sqlite(src, tmp_path / "w.sqlite", 10, 5)
    with pytest.raises(VerlprofError, match="overwrite"):
        window_nsys_sqlite(src, src, *FAR)
    with pytest.raises(VerlprofError, match="both window bounds"):
        nsys_sqlite_to_chrome(src, tmp_path / "w.json.gz", 5, None)
    assert src.read_bytes() == SMALL_NSYS.read_bytes()


@pytest.fixture(scope="module")
def small_trace_gz(tmp_path_factory: pytest.TempPathFactory) -> bytes:
    """A real torch trace cut to its first 3000 events (plus metadata), gzip-compressed."""
    doc = orjson.loads(gzip.open(TORCH[0]).read())
    ev = doc["traceEvents"]
    doc["traceEvents"] = ev[:3000] + [e for e in ev[3000:] if e["ph"] == "M"]
    return gzip.compress(orjson.dumps(doc), mtime=0)


@pytest.mark.parametrize("damage", ["empty", "not_gzip_json", "bad_gzip", "top_number", "no_events",
                                    "truncated_json", "missing"])
def test_torch_bad_inputs(damage: str, small_trace_gz: bytes, tmp_path: Path, out_dir: Path) -> None:
    src = tmp_path / "in.json.gz"
    raw = gzip.decompress(small_trace_gz)
    body = {
        "empty": b"", "not_gzip_json": b"this is not json", "bad_gzip": b"\x1f\x8b" + b"\x00" * 64,
        "top_number": gzip.compress(b"42"), "no_events": gzip.compress(b'{"schemaVersion": 1}'),
        "truncated_json": gzip.compress(raw[: len(raw) // 2]),
    }.get(damage)
    if body is not None:
        src.write_bytes(body)
    with pytest.raises(BadInputError) as err:
        window_chrome_trace(src, out_dir / "w.json.gz", 0, 1e18)
    assert_clean_failure(err.value, src, out_dir)


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(cut=st.floats(min_value=0.0, max_value=0.999))
def test_torch_gzip_cut_anywhere_fails_cleanly(small_trace_gz: bytes, tmp_path: Path, cut: float) -> None:
    """A trace whose .json.gz was cut short (crash, full disk, partial download) never half-writes."""
    case = tmp_path / f"cut{cut}"
    case.mkdir()
    src, out = case / "in.json.gz", case / "out"
    out.mkdir()
    src.write_bytes(small_trace_gz[: int(len(small_trace_gz) * cut)])
    with pytest.raises(BadInputError) as err:
        window_chrome_trace(src, out / "w.json.gz", 0, 1e18)
    assert_clean_failure(err.value, src, out)


def test_whole_small_trace_round_trips(small_trace_gz: bytes, tmp_path: Path) -> None:
    """The undamaged input of the fuzz cases windows fine (so the failures above are the damage)."""
    src = tmp_path / "in.json.gz"
    src.write_bytes(small_trace_gz)
    c = window_chrome_trace(src, tmp_path / "w.json.gz", 0, 1e18)
    n = len(orjson.loads(gzip.decompress(small_trace_gz))["traceEvents"])
    assert c.events + c.metadata == n and c.malformed == 0 and c.dropped == 0
