"""Streaming writer of gzip-compressed Chrome trace JSON (`{..., "traceEvents": [...]}`).

Why a module of its own: both trace writers (nsys SQLite -> Chrome, torch trace -> window) stream
events of unbounded count to disk; neither may hold a whole trace in memory. Events arrive as
ready-made JSON bytes and are flushed in ~1 MiB batches.

Output is byte-for-byte deterministic for the same events: the gzip header carries no file name and
mtime 0 (a gzip header normally stores the temp file's name and the time of writing). Header keys
are written with the standard library's `json.dumps` separators (`"key": value`), because
HolisticTraceAnalysis finds a trace's rank with the regex `"rank":\\s+(\\d+)`. Compression is
level 9, as kineto writes its traces: these files are made to be sent, and level 9 costs ~25 ms/MB.
"""
from __future__ import annotations

import gzip
import json
from pathlib import Path
from types import TracebackType
from typing import Any, BinaryIO

_FLUSH_BYTES = 1 << 20


class ChromeTraceWriter:
    """Write `{<header keys>, "traceEvents": [<events>]}` to a gzip file, one event at a time.

    Use as a context manager on a path that is already a temp name (the caller renames it with
    `atomic_path`); leaving the block with an exception closes the file without the closing `]}`.
    """

    def __init__(self, path: Path, header: dict[str, Any] | None = None, compresslevel: int = 9) -> None:
        self._raw: BinaryIO = open(path, "wb")
        self._gz = gzip.GzipFile(filename="", mode="wb", fileobj=self._raw, mtime=0,
                                 compresslevel=compresslevel)
        self._buf: list[bytes] = []
        self._pending = 0
        self._first = True
        self.count = 0
        head = b"{"
        for key, value in (header or {}).items():
            if key == "traceEvents":
                continue
            head += json.dumps(key).encode() + b": " + json.dumps(value).encode() + b",\n"
        self._gz.write(head + b'"traceEvents": [\n')

    def write(self, event_json: bytes) -> None:
        """Append one event, given as the bytes of a JSON object."""
        if self._first:
            self._first = False
        else:
            self._buf.append(b",\n")
        self._buf.append(event_json)
        self._pending += len(event_json) + 2
        self.count += 1
        if self._pending >= _FLUSH_BYTES:
            self._flush()

    def _flush(self) -> None:
        if self._buf:
            self._gz.write(b"".join(self._buf))
            self._buf.clear()
            self._pending = 0

    def finish(self) -> None:
        """Write the closing brackets and close the file."""
        self._flush()
        self._gz.write(b"\n]}\n")
        self.close()

    def close(self) -> None:
        try:
            self._gz.close()
        finally:
            self._raw.close()

    def __enter__(self) -> "ChromeTraceWriter":
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        if exc_type is None:
            self.finish()
        else:
            self.close()
