"""The documented schema is the declared one (docs/schema.md is generated from stages/schema.py)."""
from pathlib import Path

import pyarrow.parquet as pq
from verlprof.stages import schema

REPO = Path(__file__).resolve().parents[1]


def test_schema_doc_is_current() -> None:
    assert (REPO / "docs" / "schema.md").read_text().strip() == schema.markdown().strip(), \
        "regenerate with: python -m verlprof.stages.schema > docs/schema.md"


def test_written_summaries_follow_the_declared_schema(collect_once) -> None:
    res = collect_once(REPO / "samples" / "tiny_run")
    assert res.code == 0, res.stdout + res.stderr
    for name in schema.SCHEMAS:
        table = pq.read_table(res.out / "summaries" / f"{name}.parquet")
        assert table.schema.names == [c.name for c in schema.SCHEMAS[name]]
        meta = {k.decode(): v.decode() for k, v in (table.schema.metadata or {}).items()}
        assert meta["verlprof.schema_version"] == schema.SCHEMA_VERSION
        assert meta["verlprof.version"] and "2022.4" in meta["verlprof.nsys_versions"]   # the sample's nsys
        assert meta["verlprof.window"] == "2"
