"""Arrow columns from Python values, built from buffers: the summary tables without pandas.

Why a module of its own: `pa.array(values)` first asks whether `values` is a pandas object, and
asking imports pandas (0.3-0.4 s) in any process that has not imported it yet, whether or not the
values have anything to do with pandas. collect writes summaries/ in a job on the run's pool after
pass 2 (pipeline/bundle_tables.py), so that import sat on the run's serial tail and tripled the
job (issue 30). The summary schemas use five types (stages/schema.py); a column of those, holding
exactly the Python types pyarrow would accept without conversion (int, float, bool, str, None), is
built here with `pa.Array.from_buffers`: the same values, validity and null count as pyarrow's
converter gives, hence the same Parquet bytes. Anything else (a numpy scalar, an int in a float
column, a value out of range, a lone surrogate) goes to `pa.array`, which converts or raises as it
always did.
"""
from __future__ import annotations

from typing import Any, Callable, Sequence

import numpy as np
import pyarrow as pa

_INT_RANGE = {"int32": (np.int32, -(2**31), 2**31 - 1), "int64": (np.int64, -(2**63), 2**63 - 1)}


def column(values: Sequence[Any], type_: pa.DataType) -> pa.Array:
    """`values` as an Arrow array of `type_` (None is null), equal to `pa.array(values, type_)`."""
    build = _BUILDERS.get(str(type_))
    built = build(values, type_) if build is not None else None
    return built if built is not None else pa.array(values, type=type_)


def table(columns: dict[str, Sequence[Any]], schema: pa.Schema) -> pa.Table:
    """A table of `schema` (its metadata kept) from one sequence of values per field."""
    return pa.Table.from_arrays([column(columns[f.name], f.type) for f in schema], schema=schema)


def _validity(values: Sequence[Any]) -> tuple[pa.Buffer | None, int]:
    """The validity bitmap (None when nothing is null, as pyarrow leaves it) and the null count."""
    valid = np.fromiter((v is not None for v in values), dtype=bool, count=len(values))
    nulls = len(values) - int(np.count_nonzero(valid))
    return (pa.py_buffer(np.packbits(valid, bitorder="little")) if nulls else None), nulls


def _all(values: Sequence[Any], kind: type) -> bool:
    return all(type(v) is kind or v is None for v in values)   # type(): a bool is no int here


def _ints(values: Sequence[Any], type_: pa.DataType) -> pa.Array | None:
    np_type, low, high = _INT_RANGE[str(type_)]
    if not _all(values, int):
        return None
    filled = [0 if v is None else v for v in values]
    if filled and (min(filled) < low or max(filled) > high):
        return None   # out of range: pyarrow's error
    bitmap, nulls = _validity(values)
    data = np.array(filled, dtype=np_type)
    return pa.Array.from_buffers(type_, len(values), [bitmap, pa.py_buffer(data)], null_count=nulls)


def _floats(values: Sequence[Any], type_: pa.DataType) -> pa.Array | None:
    if not _all(values, float):
        return None
    bitmap, nulls = _validity(values)
    data = np.array([0.0 if v is None else v for v in values], dtype=np.float64)
    return pa.Array.from_buffers(type_, len(values), [bitmap, pa.py_buffer(data)], null_count=nulls)


def _bools(values: Sequence[Any], type_: pa.DataType) -> pa.Array | None:
    if not _all(values, bool):
        return None
    bitmap, nulls = _validity(values)
    bits = np.packbits(np.fromiter((v is True for v in values), dtype=bool, count=len(values)), bitorder="little")
    return pa.Array.from_buffers(type_, len(values), [bitmap, pa.py_buffer(bits)], null_count=nulls)


def _strings(values: Sequence[Any], type_: pa.DataType) -> pa.Array | None:
    if not _all(values, str):
        return None
    try:
        encoded = [b"" if v is None else v.encode() for v in values]
    except UnicodeEncodeError:
        return None   # a lone surrogate: pyarrow's error
    offsets = np.zeros(len(values) + 1, dtype=np.int64)
    np.cumsum(np.fromiter((len(b) for b in encoded), dtype=np.int64, count=len(encoded)), out=offsets[1:])
    if offsets[-1] > 2**31 - 1:
        return None   # too large for 32-bit offsets: pyarrow's chunking
    bitmap, nulls = _validity(values)
    return pa.Array.from_buffers(type_, len(values), [bitmap, pa.py_buffer(offsets.astype(np.int32)),
                                                      pa.py_buffer(b"".join(encoded))], null_count=nulls)


_BUILDERS: dict[str, Callable[[Sequence[Any], pa.DataType], pa.Array | None]] = {
    "int32": _ints, "int64": _ints, "double": _floats, "bool": _bools, "string": _strings}
