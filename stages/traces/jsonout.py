"""Streaming writer of gzip-compressed Chrome trace JSON (`{..., "traceEvents": [...]}`).

Why a module of its own: both trace writers (nsys SQLite -> Chrome, torch trace -> window) stream
events of unbounded count to disk; neither may hold a whole trace in memory. Events arrive as
ready-made JSON bytes and are flushed in ~1 MiB batches.

Compression runs on a thread of its own (zlib releases the GIL), fed through a short bounded queue:
while it deflates one batch the producer (SQLite formatting rows, or the torch reader) makes the
next, so a 2-core machine writes at the speed of the slower of the two, and memory stays a few MiB.

Output is byte-for-byte deterministic for the same events: the gzip header carries no file name and
mtime 0 (a gzip header normally stores the temp file's name and the time of writing). Header keys
are written with the standard library's `json.dumps` separators (`"key": value`), because
HolisticTraceAnalysis finds a trace's rank with the regex `"rank":\\s+(\\d+)`. Compression is
level 9 by default, as kineto writes its traces (a torch window stays no bigger than the step
kineto wrote); the nsys converter asks for level 1 (ISA-L where installed): on range-heavy traces
(10^5-10^6 near-identical events) the higher levels cost many times the CPU for files a few
percent smaller, and on two cores shared by a collect's summary and window jobs that CPU was the
largest part of writing the window (issue 25; measurements in bench/README.md).
"""
from __future__ import annotations

import json
from pathlib import Path
from types import TracebackType
from typing import Any

from ..core.gzip_pipe import GzipPipe

_FLUSH_BYTES = 1 << 20  # events buffered before one write to the compressor thread


class ChromeTraceWriter:
    """Write `{<header keys>, "traceEvents": [<events>]}` to a gzip file, one event at a time.

    Use as a context manager on a path that is already a temp name (the caller renames it with
    `atomic_path`); leaving the block with an exception closes the file without the closing `]}`.
    """

    def __init__(self, path: Path, header: dict[str, Any] | None = None, compresslevel: int = 9) -> None:
        self._pipe = GzipPipe(path, compresslevel)
        self._buf: list[bytes] = []
        self._pending = 0
        self._first = True
        self.count = 0
        head = b"{"
        for key, value in (header or {}).items():
            if key == "traceEvents":
                continue
            head += json.dumps(key).encode() + b": " + json.dumps(value).encode() + b",\n"
        self._pipe.write(head + b'"traceEvents": [\n')

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

    def write_joined(self, events: list[bytes], count: int | None = None) -> None:
        """Append many events at once (each the bytes of one JSON object, or of several joined by
        `,\n`; `count` says how many events that is, default one per item).

        Why: the nsys converter formats whole batches of rows inside SQLite; one join per batch
        instead of a method call per event is what keeps 10^6 ranges at C speed.
        """
        if not events:
            return
        self.write(b",\n".join(events))
        self.count += (len(events) if count is None else count) - 1   # write counted one

    def _flush(self) -> None:
        if self._buf:
            self._pipe.write(b"".join(self._buf))
            self._buf.clear()
            self._pending = 0

    def finish(self) -> None:
        """Write the closing brackets and close the file."""
        self._flush()
        self._pipe.write(b"\n]}\n")
        self._pipe.finish()

    def close(self) -> None:
        self._pipe.close()

    def __enter__(self) -> "ChromeTraceWriter":
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        if exc_type is None:
            self.finish()
        else:
            self.close()
