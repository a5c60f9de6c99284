"""Summary rows to Parquet: exactly the declared columns and types (stages/schema.py), with the
run's key-value metadata, written atomically.

Why apart from the adapters: rows of every format go through the same writer, and pyarrow is
imported only here, where Parquet is written (a summary needs neither it nor the schema).
"""
from __future__ import annotations

import json
from importlib.metadata import version
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterable

from ..core.atomic import atomic_path
from ..window import WindowChoice
from .steps import with_phase_identity
from .types import SummaryRows

if TYPE_CHECKING:
    import pyarrow as pa


def to_table(name: str, rows: "list[dict[str, Any]] | pa.Table", metadata: dict[str, str] | None = None) -> pa.Table:
    """Rows of one schema as an Arrow table with exactly the declared columns and types."""
    import pyarrow as pa

    from ..schema import SCHEMAS, arrow_schema
    from . import arrow_columns

    schema = arrow_schema(name, metadata)
    if isinstance(rows, pa.Table):
        cols = {f.name: (rows.column(f.name).cast(f.type) if f.name in rows.column_names
                         else pa.nulls(rows.num_rows, f.type)) for f in schema}
        return pa.table(cols, schema=schema)
    names = [c.name for c in SCHEMAS[name]]
    # built from buffers: pa.table would import pandas in this job (stages/summarize/arrow_columns.py)
    return arrow_columns.table({n: [row.get(n) for row in rows] for n in names}, schema)


def summary_metadata(inputs: Iterable[tuple[str, str]] = (), tools: dict[str, Iterable[str]] | None = None,
                     choice: WindowChoice | None = None) -> dict[str, str]:
    """Parquet key-value metadata: verlprof version, input hashes, tool versions, window choice."""
    try:
        ver = version("verlprof")
    except Exception:  # noqa: BLE001 - an uninstalled checkout still writes summaries
        ver = "unknown"
    meta = {"verlprof.version": ver,
            "verlprof.inputs": json.dumps(dict(sorted(inputs)), sort_keys=True)}
    for tool, versions in (tools or {}).items():
        meta[f"verlprof.{tool}_versions"] = json.dumps(sorted({v for v in versions if v}))
    if choice is not None:
        meta["verlprof.window"] = json.dumps(choice.to_manifest()["step"])
        meta["verlprof.window_reason"] = choice.reason
    return meta


def write_summaries(rows_by_schema: SummaryRows, out_dir: str | Path, metadata: dict[str, str] | None = None
                    ) -> dict[str, Path]:
    """Write `<out_dir>/<schema>.parquet` for every schema (atomically); returns name -> path."""
    import pyarrow.parquet as pq

    from ..schema import SCHEMAS

    out = Path(out_dir)
    written: dict[str, Path] = {}
    rows_by_schema = _steps_with_identity(rows_by_schema)
    for name in SCHEMAS:
        table = to_table(name, rows_by_schema.get(name, []), metadata)
        final = out / f"{name}.parquet"
        with atomic_path(final) as tmp:
            pq.write_table(table, tmp, compression="zstd")
        written[name] = final
    return written




def _steps_with_identity(rows: SummaryRows) -> SummaryRows:
    """steps rows with the pid/rank of their source's phases rows (`steps.with_phase_identity`)."""
    steps, phases = rows.get("steps"), rows.get("phases")
    if not steps or not phases:
        return rows
    as_rows = (lambda t: t.to_pylist() if hasattr(t, "to_pylist") else t)
    return {**rows, "steps": with_phase_identity(as_rows(steps), as_rows(phases))}
