"""`NsysExport.iter_columns` on several threads (issue 25): a table of several windows is aggregated
on up to `READ_THREADS` threads, each with its own read-only connection, and the windows still come
back in rowid order. On real exports, with windows made small so every table takes the threaded
path, the NVTX ranges and the kernel, runtime and memcpy columns must equal a one-thread read; a
window numpy cannot parse still goes through the row-by-row path and names the file."""
from __future__ import annotations

import shutil
import sqlite3
import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).parent))
from testdata import data_path  # noqa: E402
from verlprof.stages.core.errors import BadInputError  # noqa: E402
from verlprof.stages.readers import nsys_sqlite  # noqa: E402
from verlprof.stages.readers.nsys_sqlite import KERNEL, MEMCPY, RUNTIME, NsysExport  # noqa: E402

EXPORTS = ["captures/nsysai_h100_2gpu/h100_2gpu_1s.sqlite",          # emit_nvtx ranges, 2 GPUs
           "gpu_captures/whole-emit-nvtx/whole_956.sqlite",
           "h200-nsys-2025.3/whole/whole_1873.sqlite"]
TABLES = {KERNEL: ["start", "end", "correlationId", "globalPid"],
          RUNTIME: ["start", "end", "correlationId", "globalTid"],
          MEMCPY: ["start", "end", "bytes", "copyKind"]}


def _read_all(path: Path, threads: int, monkeypatch: pytest.MonkeyPatch) -> dict[str, list[np.ndarray]]:
    monkeypatch.setattr(nsys_sqlite, "READ_THREADS", threads)
    monkeypatch.setattr(nsys_sqlite, "PARALLEL_CHUNK_ROWS", 997)   # many windows, one not a power of two
    out: dict[str, list[np.ndarray]] = {}
    with NsysExport.open(path) as db:
        r = db.nvtx_ranges()
        out["nvtx"] = [r.start, r.end, r.gtid, r.event_type, r.same_thread, r.rowid,
                       np.array(r.text, dtype=object), np.array(r.domain, dtype=object)]
        for table, cols in TABLES.items():
            if db.has(table, *cols):
                parts = list(db.iter_columns(table, cols))
                out[table] = [np.concatenate(c) for c in zip(*parts)] if parts else []
    return out


@pytest.mark.parametrize("rel", EXPORTS)
def test_threaded_read_equals_one_thread(rel: str, monkeypatch: pytest.MonkeyPatch) -> None:
    path = data_path(rel)
    one = _read_all(path, 1, monkeypatch)
    many = _read_all(path, 3, monkeypatch)
    assert one.keys() == many.keys()
    assert max(len(cols[0]) for cols in one.values() if cols) > 3 * 997   # some table took the threaded path
    for key in one:
        for a, b in zip(one[key], many[key], strict=True):
            assert a.dtype == b.dtype and np.array_equal(a, b), key


def test_threaded_read_of_a_bad_value_names_the_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A text value among the kernel starts: numpy refuses the window, the row path reports it."""
    path = tmp_path / "bad.sqlite"
    shutil.copyfile(data_path(EXPORTS[0]), path)
    con = sqlite3.connect(path)
    con.execute(f"UPDATE {KERNEL} SET start = 'x' WHERE rowid = (SELECT max(rowid) FROM {KERNEL})")
    con.commit()
    con.close()
    monkeypatch.setattr(nsys_sqlite, "READ_THREADS", 2)
    monkeypatch.setattr(nsys_sqlite, "PARALLEL_CHUNK_ROWS", 500)
    with NsysExport.open(path) as db, pytest.raises(BadInputError, match="bad.sqlite.*non-numeric"):
        list(db.iter_columns(KERNEL, ["start", "end"]))
