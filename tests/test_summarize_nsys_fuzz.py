"""Bad inputs: every failure is a one-line VerlprofError naming the file, never a traceback."""
from __future__ import annotations

import shutil
import sqlite3
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from inprocess import run_cli
from testdata import fixtures_dir
from verlprof.stages.core.errors import BadInputError, VerlprofError
from nsys_summaries import project_ranges, summarize_nsys
from verlprof.stages.window.steps import identity_from_path, nsys_source_steps

FIXTURES = fixtures_dir()
WHOLE = FIXTURES / "h200-nsys-2025.3" / "whole" / "whole_1873.sqlite"
RAY2 = FIXTURES / "h200-nsys-2025.3" / "ray-continuous" / "worker_process_1983.2.sqlite"



def _copy(src: Path, dst: Path) -> Path:
    shutil.copyfile(src, dst)
    dst.chmod(0o644)
    return dst


def _assert_one_line_error(path: Path, fn=summarize_nsys) -> str:
    with pytest.raises(VerlprofError) as ei:
        fn(path)
    msg = str(ei.value)
    assert "\n" not in msg and str(path) in msg
    return msg


def test_empty_file(tmp_path):
    p = tmp_path / "empty.sqlite"
    p.write_bytes(b"")
    _assert_one_line_error(p)


def test_random_bytes(tmp_path):
    p = tmp_path / "noise.sqlite"
    p.write_bytes(bytes(range(256)) * 64)
    _assert_one_line_error(p)


def test_truncated_export(tmp_path):
    p = tmp_path / "cut.sqlite"
    p.write_bytes(WHOLE.read_bytes()[: WHOLE.stat().st_size // 2])
    _assert_one_line_error(p)


def test_sqlite_but_not_an_export(tmp_path):
    p = tmp_path / "other.sqlite"
    with sqlite3.connect(p) as con:
        con.execute("CREATE TABLE t (x INTEGER)")
    _assert_one_line_error(p)


def test_export_without_any_trace_table(tmp_path):
    p = tmp_path / "bare.sqlite"
    with sqlite3.connect(p) as con:
        con.execute("CREATE TABLE StringIds (id INTEGER PRIMARY KEY, value TEXT)")
        con.execute("INSERT INTO StringIds VALUES (0, 'x')")
    assert "nothing to summarize" in _assert_one_line_error(p)


def test_non_numeric_times_are_a_clear_error(tmp_path):
    p = _copy(RAY2, tmp_path / "text.sqlite")
    with sqlite3.connect(p) as con:
        con.execute("UPDATE CUPTI_ACTIVITY_KIND_KERNEL SET start = 'soon' WHERE rowid = 7")
    assert "non-numeric" in _assert_one_line_error(p)


def test_real_valued_times_still_summarize(tmp_path):
    p = _copy(RAY2, tmp_path / RAY2.name)
    with sqlite3.connect(p) as con:
        con.execute("UPDATE CUPTI_ACTIVITY_KIND_KERNEL SET start = start + 0.0, end = end + 0.0")
    assert summarize_nsys(p)["phases"] == summarize_nsys(RAY2)["phases"]


def test_open_ranges_and_missing_columns(tmp_path):
    """NVTX ranges left open end at the last timestamp; a RUNTIME table without correlationId
    (older/odd schema) means no projection, not a crash."""
    p = _copy(RAY2, tmp_path / "odd.sqlite")
    with sqlite3.connect(p) as con:
        con.execute("UPDATE NVTX_EVENTS SET end = NULL WHERE textId IN (SELECT id FROM StringIds WHERE value = 'adv')")
        con.execute("ALTER TABLE CUPTI_ACTIVITY_KIND_RUNTIME RENAME COLUMN correlationId TO corr")
    rows = summarize_nsys(p)
    adv = [r for r in rows["phases"] if r["phase"] == "adv"]
    assert adv and adv[0]["wall_ns"] > 0
    assert all(r["kernel_count"] == 0 for r in rows["phases"] if r["phase"] != "(unattributed)")


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(offset=st.integers(min_value=4096, max_value=2_000_000), junk=st.binary(min_size=16, max_size=4096))
def test_corrupt_pages_never_crash(tmp_path, offset, junk):
    p = tmp_path / "corrupt.sqlite"
    data = bytearray(RAY2.read_bytes())
    data[offset:offset + len(junk)] = junk
    p.write_bytes(bytes(data[: len(RAY2.read_bytes())]))
    for fn, check in ((summarize_nsys, assert_summary_consistent), (project_ranges, None),
                      (lambda q: nsys_source_steps(q, identity_from_path(q)), assert_steps_consistent)):
        try:
            got = fn(p)
        except VerlprofError as err:
            assert "\n" not in str(err) and str(p) in str(err)
        else:
            if check is not None:
                check(got)


def assert_summary_consistent(rows: dict) -> None:
    """A summary read from a damaged export is still a valid one: every table fits its declared
    schema, durations and counts are not negative, and children nest under a parent that exists."""
    import pyarrow as pa
    from verlprof.stages.schema import arrow_schema

    for name in ("phases", "kernels", "steps"):
        schema = arrow_schema(name)
        pa.Table.from_pylist([{k: r.get(k) for k in schema.names} for r in rows.get(name, [])], schema=schema)
        for r in rows.get(name, []):
            for k, v in r.items():
                if v is not None and (k.endswith(("_count", "_bytes")) or (k.endswith("_ns") and k != "start_ns")):
                    assert v >= 0, (name, k, v)
    paths = {(r["source"], r["step"], r["path"]) for r in rows.get("phases", [])}
    for r in rows.get("phases", []):                  # `step > gen > x` nests under `step > gen`
        if r.get("depth"):
            head, _, last = r["path"].rpartition(" > ")
            assert (r["source"], r["step"], head) in paths and head.rpartition(" > ")[2] == r["parent"], r


def assert_steps_consistent(src) -> None:
    for s in src.steps:
        assert s.step >= 1 and s.end_ns >= s.start_ns, s


def test_cli_reports_bad_input_in_one_line(tmp_path):
    p = tmp_path / "bad.sqlite"
    p.write_bytes(b"not sqlite at all")
    out = run_cli("window", p)
    assert out.returncode == BadInputError.exit_code
    assert out.stderr.strip().count("\n") == 0 and str(p) in out.stderr and "Traceback" not in out.stderr
