"""The pipeline's own machinery: atomic writes, done records, executors, one-line errors."""
from __future__ import annotations

import os
import pickle
from pathlib import Path

import pytest
from testdata import fixtures_dir
from verlprof.pipeline.executors import InlineExecutor, ProcessPoolExecutorBackend, run_all
from verlprof.stages.core import atomic
from verlprof.stages.core.done_records import DoneRecords
from verlprof.stages.core.errors import BadInputError, VerlprofError
from verlprof.stages.readers.memory_snapshot import load_snapshot, loads_restricted

FIXTURES = fixtures_dir()


def test_atomic_write_leaves_nothing_on_failure(tmp_path: Path) -> None:
    target = tmp_path / "out" / "x.bin"
    with pytest.raises(RuntimeError):
        with atomic.atomic_path(target) as tmp:
            tmp.write_bytes(b"half")
            raise RuntimeError("crash mid-write")
    assert not target.exists()
    assert list((tmp_path / "out").iterdir()) == []


def test_atomic_write_replaces_whole_file(tmp_path: Path) -> None:
    target = tmp_path / "x.json"
    atomic.write_json(target, {"a": 1})
    atomic.write_json(target, {"a": 2})
    assert target.read_text().strip().endswith("}") and '"a": 2' in target.read_text()
    assert [p.name for p in tmp_path.iterdir()] == ["x.json"]


def test_done_records_resume_and_invalidate(tmp_path: Path) -> None:
    out = tmp_path / "o.txt"
    out.write_text("done")
    rec = DoneRecords(tmp_path / "work", "export")
    assert rec.lookup("k1", {"opt": 1}) is None
    rec.record("k1", {"opt": 1}, {"sqlite": str(out)})
    assert rec.lookup("k1", {"opt": 1})["outputs"]["sqlite"] == str(out)
    assert rec.lookup("k1", {"opt": 2}) is None          # other options: redo
    out.unlink()
    assert rec.lookup("k1", {"opt": 1}) is None          # output gone: redo


def _square_or_fail(x: int, options: object) -> int:
    if x == 3:
        raise BadInputError(f"/data/in{x}.sqlite", "truncated\nfile")
    return x * x


@pytest.mark.parametrize("executor", [InlineExecutor(), ProcessPoolExecutorBackend(2)], ids=["inline", "pool"])
def test_executors_keep_order_and_turn_errors_into_one_line(executor) -> None:
    results = run_all(executor, _square_or_fail, [1, 2, 3, 4])
    assert [r.value for r in results] == [1, 4, None, 16]
    assert results[2].error == "/data/in3.sqlite: truncated file"


def test_error_message_is_one_line() -> None:
    err = VerlprofError("a.nsys-rep", "bad\n  header")
    assert str(err) == "a.nsys-rep: bad header"


def test_restricted_unpickler_refuses_code() -> None:
    class Evil:
        def __reduce__(self):
            return (os.system, ("echo pwned > /tmp/verlprof_pwned",))

    with pytest.raises(pickle.UnpicklingError):
        loads_restricted(pickle.dumps(Evil()))
    assert not Path("/tmp/verlprof_pwned").exists()


def test_real_memory_snapshot_loads_and_bad_ones_fail_cleanly(tmp_path: Path) -> None:
    snap = load_snapshot(FIXTURES / "h200-torch-2.11" / "step2" / "torch_memory_rank0_pid804.pickle")
    assert snap["device_traces"][0] and snap["external_annotations"]
    empty = tmp_path / "empty.pickle"
    empty.write_bytes(b"")
    truncated = tmp_path / "trunc.pickle"
    truncated.write_bytes((FIXTURES / "h200-torch-2.11" / "step2" / "torch_memory_rank0_pid804.pickle").read_bytes()[:5000])
    for bad in (empty, truncated):
        with pytest.raises(BadInputError) as exc:
            load_snapshot(bad)
        assert bad.name in str(exc.value) and "\n" not in str(exc.value)
