"""The checker reads a Parquet file's `ARROW:schema` entry by structure (stages/scrub/parquet_schema.py):
every string of the schema is still checked, and an entry that is not exactly a serialized schema
is scanned as text, as before.

Real tables: the summaries of a real collect (four real gloo exports); the planted values are fake.
"""
from __future__ import annotations

import base64
import shutil
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from testdata import data_dir
from verlprof.pipeline import collect
from verlprof.stages import scrub as scrub_stage
from verlprof.stages.scrub.parquet_schema import KEY, schema_texts

SECRET = "hf_Zx9QwErTyUiOpAsDfGhJkLzXcVbNm12345"


@pytest.fixture(scope="module")
def tables(tmp_path_factory: pytest.TempPathFactory) -> list[Path]:
    tmp = tmp_path_factory.mktemp("schema")
    shutil.copytree(data_dir("gloo_ranks/nsys"), tmp / "run")
    collect.run_collect(collect.CollectOptions(sources=[tmp / "run"], out=tmp / "out", work_dir=tmp / "work", jobs=1))
    paths = sorted((tmp / "out" / "summaries").glob("*.parquet"))
    assert len(paths) == 4
    return paths


def test_every_string_of_a_real_tables_schema_is_read(tables: list[Path]) -> None:
    for path in tables:
        pf = pq.ParquetFile(path)
        texts = schema_texts(pf.metadata.metadata[KEY])
        assert texts is not None, path.name
        names = {t for k, t in texts if k is None}
        assert set(pf.schema_arrow.names) <= names
        pairs = {(k, t) for k, t in texts if k is not None}
        assert {(k.decode(), v.decode()) for k, v in pf.schema_arrow.metadata.items()} == pairs
        assert ("verlprof.schema", path.stem) in pairs


def _table_with(tmp_path: Path, name: str, schema: pa.Schema) -> Path:
    path = tmp_path / name
    pq.write_table(pa.Table.from_arrays([pa.array([1], f.type) for f in schema], schema=schema), path)
    return path


def test_a_secret_only_inside_the_schema_is_found(tmp_path: Path) -> None:
    """Field metadata is stored nowhere but in ARROW:schema."""
    clean = _table_with(tmp_path, "clean.parquet", pa.schema([pa.field("x", pa.int64(), metadata={"unit": "ns"})]))
    dirty = _table_with(tmp_path, "dirty.parquet", pa.schema([pa.field("x", pa.int64(), metadata={"note": SECRET})]))
    assert scrub_stage.check_paths([clean]) == []
    found = scrub_stage.check_paths([dirty])
    assert found and all(f.location.startswith("key-value metadata") for f in found)


def test_an_entry_that_is_not_exactly_a_schema_is_scanned_as_text(tmp_path: Path) -> None:
    """Another writer's or a crafted entry is never vouched for by structure: a valid schema with
    a secret after it is not read as a schema; pyarrow still opens the file, and the secret in
    the entry's decoded bytes is found. An entry that is no schema at all makes the file
    unreadable, which the checker reports."""
    table = pa.table({"x": [1]})
    raw = table.schema.serialize().to_pybytes()
    assert schema_texts(base64.b64encode(raw)) == [(None, "x"), (None, "int64")]
    for name, value in (("after.parquet", base64.b64encode(raw + SECRET.encode())),
                        ("hand.parquet", base64.b64encode(f"written by hand: {SECRET}".encode()))):
        assert schema_texts(value) is None
        path = tmp_path / name
        pq.write_table(table.replace_schema_metadata({KEY: value}), path)
        found = scrub_stage.check_paths([path])
        assert found, name
    assert pq.ParquetFile(tmp_path / "after.parquet").metadata.metadata[KEY] == base64.b64encode(raw + SECRET.encode())
