"""Summary tables built from buffers (stages/summarize/arrow_columns.py) are pyarrow's own arrays,
and writing them imports no pandas (issue 30: that import sat on collect's serial tail).

The rows are a real collect's (four real gloo exports): every summaries/ table read back, built
again both ways, must give equal tables and the same Parquet bytes.
"""
from __future__ import annotations

import io
import math
import pickle
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from testdata import data_dir
from verlprof.pipeline import collect
from verlprof.stages.schema import SCHEMAS, arrow_schema
from verlprof.stages.summarize import arrow_columns

TABLES = [name for name in SCHEMAS if name != "ranks"]   # ranks.parquet is made by pipeline/ranks.py


@pytest.fixture(scope="module")
def bundle_rows(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[list[dict[str, Any]], dict]]:
    """name -> (rows, schema metadata) of every summaries/ table of a real collect."""
    tmp = tmp_path_factory.mktemp("arrow")
    src = tmp / "run"
    shutil.copytree(data_dir("gloo_ranks/nsys"), src)
    collect.run_collect(collect.CollectOptions(sources=[src], out=tmp / "out", work_dir=tmp / "work", jobs=1))
    out = {}
    for name in TABLES:
        pf = pq.ParquetFile(tmp / "out" / "summaries" / f"{name}.parquet")
        out[name] = (pf.read().to_pylist(), pf.schema_arrow.metadata)
    assert sum(len(rows) for rows, _m in out.values()) > 30
    return out


def _parquet(table: pa.Table) -> bytes:
    buf = io.BytesIO()
    pq.write_table(table, buf, compression="zstd")
    return buf.getvalue()


@pytest.mark.parametrize("name", TABLES)
def test_real_tables_equal_pyarrows_converter_byte_for_byte(bundle_rows, name: str) -> None:
    rows, meta = bundle_rows[name]
    schema = arrow_schema(name).with_metadata(meta)
    columns = {f.name: [r.get(f.name) for r in rows] for f in schema}
    ours = arrow_columns.table(columns, schema)
    theirs = pa.table(columns, schema=schema)
    assert ours.equals(theirs, check_metadata=True)
    for f in schema:
        assert ours.column(f.name).null_count == theirs.column(f.name).null_count, f.name
    assert _parquet(ours) == _parquet(theirs)


CASES = [
    (pa.int64(), [1, None, -(2**63), 2**63 - 1, 0]),
    (pa.int32(), [None, None]),
    (pa.int32(), [-(2**31), 2**31 - 1]),
    (pa.float64(), [1.5, None, math.nan, math.inf, -0.0]),
    (pa.bool_(), [True, None, False, True, True, False, False, False, True]),
    (pa.string(), ["kernel<float, 4>", None, "", "ünïcødé ≥ 𝄞", "x" * 1000]),
    (pa.string(), []),
    (pa.int64(), []),
]


@pytest.mark.parametrize("type_,values", CASES)
def test_built_arrays_equal_pa_array(type_: pa.DataType, values: list[Any]) -> None:
    ours, theirs = arrow_columns.column(values, type_), pa.array(values, type=type_)
    assert ours.null_count == theirs.null_count
    assert repr(ours.to_pylist()) == repr(theirs.to_pylist())   # repr: nan and -0.0 compare too
    as_table = (lambda a: pa.Table.from_arrays([a], names=["c"]))
    assert _parquet(as_table(ours)) == _parquet(as_table(theirs))


@pytest.mark.parametrize("type_,values", [
    (pa.int64(), [1.0, None]),          # an integral float in an int column
    (pa.float64(), [1, 2.5]),           # an int in a float column
    (pa.int64(), [1.5]),                # a fraction in an int column
    (pa.string(), [b"bytes", None]),    # bytes in a string column
    (pa.int64(), [True, 2]),            # a bool in an int column
    (pa.int32(), [2**31]),              # out of range
    (pa.int64(), [2**64]),
    (pa.string(), ["\ud800"]),          # a lone surrogate
])
def test_other_values_convert_or_fail_as_pyarrow_does(type_: pa.DataType, values: list[Any]) -> None:
    try:
        theirs = pa.array(values, type=type_)
    except Exception as exc:  # noqa: BLE001 - whatever pyarrow raises, the builder raises too
        with pytest.raises(type(exc)):
            arrow_columns.column(values, type_)
        return
    assert arrow_columns.column(values, type_).equals(theirs)


def test_writing_the_summaries_imports_no_pandas(bundle_rows, tmp_path: Path) -> None:
    """What collect's summaries job does, in a fresh process: write and read back every table."""
    rows = {name: r for name, (r, _m) in bundle_rows.items()}
    (tmp_path / "rows.pickle").write_bytes(pickle.dumps(rows))
    code = (
        "import pickle, sys\n"
        "from verlprof.stages.summarize import write_summaries\n"
        "import pyarrow.parquet as pq\n"
        f"rows = pickle.loads(open({str(tmp_path / 'rows.pickle')!r}, 'rb').read())\n"
        f"written = write_summaries(rows, {str(tmp_path / 'out')!r})\n"
        "n = sum(pq.ParquetFile(p).metadata.num_rows for p in written.values())\n"
        "print(n, 'pandas' in sys.modules)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()
    assert out == [str(sum(len(r) for r in rows.values())), "False"]
