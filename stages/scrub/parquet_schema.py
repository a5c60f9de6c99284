"""The strings inside a Parquet file's `ARROW:schema` entry, read by structure for the checker.

Why a module of its own: pyarrow stores the table's whole Arrow schema in every Parquet file it
writes, as base64 of the schema's IPC message (13 KB for ranks.parquet). Scanned as text, that
value is one long base64 run, which the checker decodes four ways and scans again: 0.08 s a file,
on collect's serial tail once per table (issue 30). Its strings are exactly the schema's: field
names, types (a struct's child names, a timestamp's zone), field metadata and the schema's own
metadata (the same pairs the file lists in the clear). Read by structure, each is checked as what
it is: a name, or a metadata value under its key.

Nothing can hide in the bytes: the schema is used only when serializing it again gives the very
bytes decoded; anything else (another writer, bytes after a valid schema) returns None, and the
checker scans the value as text, as every other value, and its decoded bytes too
(`decoded_text`): the base64 scan looks for text in the whole run, which a secret after binary
bytes is not.
"""
from __future__ import annotations

import base64
import binascii

import pyarrow as pa

KEY = b"ARROW:schema"


def schema_texts(value: bytes) -> list[tuple[str | None, str]] | None:
    """(metadata key or None, text) for every string the schema holds; None when `value` is not
    exactly a serialized Arrow schema."""
    try:
        raw = base64.b64decode(value, validate=True)
        schema = pa.ipc.read_schema(pa.py_buffer(raw))
        if schema.serialize().to_pybytes() != raw:
            return None
    except (binascii.Error, ValueError, pa.ArrowException):
        return None
    out: list[tuple[str | None, str]] = []
    _metadata(schema.metadata, out)
    fields = list(schema)
    while fields:
        f = fields.pop()
        out += [(None, f.name), (None, str(f.type))]
        _metadata(f.metadata, out)
        fields += _children(f.type)
    return out


def decoded_text(value: bytes) -> str | None:
    """The entry's bytes as text (latin-1: every byte a character), for the plain scan; None when
    it is not base64."""
    try:
        return base64.b64decode(value, validate=True).decode("latin-1")
    except (binascii.Error, ValueError):
        return None


def _metadata(meta: dict[bytes, bytes] | None, out: list[tuple[str | None, str]]) -> None:
    for k, v in (meta or {}).items():
        key = k.decode("utf-8", "replace")
        out += [(None, key), (key, v.decode("utf-8", "replace"))]


def _children(t: pa.DataType) -> list[pa.Field]:
    """The fields nested in a type (struct members, list values, map keys and items)."""
    if isinstance(t, pa.StructType):
        return [t.field(i) for i in range(t.num_fields)]
    return [getattr(t, a) for a in ("value_field", "key_field", "item_field") if hasattr(t, a)]
