"""Cut a time window out of a torch.profiler Chrome trace (`.json` or `.json.gz`), streaming.

Why: verl's torch traces run to hundreds of MB; loading one whole (as HolisticTraceAnalysis does)
costs GBs of RAM. Events are read one at a time with ijson's C parser and written as they come, so
memory stays flat whatever the trace size.

What is kept:
- every metadata event (`ph: "M"`: process/thread names, labels, sort indexes), so the viewer still
  names the tracks the window's events sit on;
- complete events (`ph: "X"`) whose closed interval [ts, ts + dur] overlaps [start_us, end_us];
- every other event with a `ts` (instants, counters, flow starts/ends) whose ts lies in the window.
  A flow arrow whose other end lies outside the window is left dangling; viewers ignore it.
- the top-level keys written before `traceEvents` (kineto writes `deviceProperties`,
  `baseTimeNanoseconds`, `distributedInfo`, versions ... there), except `traceName` (a local path).
  Keys after `traceEvents` are neither read nor written (kineto writes only `traceName` there), so
  nothing the window does not need can slip through at the end of a file.

Clock: `window_chrome_trace` takes the window on the trace's own `ts` axis (microseconds);
`window_chrome_trace_utc` takes it as absolute UTC ns (like `StepSpan`) and converts it with the
trace's `baseTimeNanoseconds` (unix_ns = base_ns + ts * 1000, the rule HolisticTraceAnalysis uses),
in integers first, so the bounds stay exact (a float of Unix microseconds only resolves ~0.25 us).
Timestamps are written back unchanged, so the window lines up with the full trace and with other
ranks exactly as the originals do.
"""
from __future__ import annotations

import gzip
import json
import zlib
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, BinaryIO, Iterator

import ijson
import orjson

from ..core.atomic import atomic_path
from ..core.errors import BadInputError, VerlprofError
from .jsonout import ChromeTraceWriter

UNSAFE_HEADER_KEYS = frozenset({"traceName"})


@dataclass(frozen=True)
class TraceWindowCounts:
    """Kept events per category (`cat`, or `ph:<ph>` without one), dropped counts, output size."""

    kept: dict[str, int] = field(default_factory=dict)
    metadata: int = 0
    dropped: int = 0             # events outside the window
    malformed: int = 0           # events without a numeric ts (or not objects)
    header_keys: tuple[str, ...] = ()
    dropped_keys: tuple[str, ...] = ()
    start_us: float = 0.0        # the window on the trace's own ts axis
    end_us: float = 0.0
    size: int = 0

    @property
    def events(self) -> int:
        """Non-metadata events kept."""
        return sum(self.kept.values())


def window_chrome_trace_utc(src: Path, dst_json_gz: Path, start_ns_abs: int,
                            end_ns_abs: int) -> TraceWindowCounts:
    """`window_chrome_trace` with the window in absolute UTC ns (e.g. a `StepSpan`)."""
    base = trace_header(Path(src)).get("baseTimeNanoseconds")
    if not isinstance(base, int) or isinstance(base, bool):
        raise BadInputError(src, "no integer baseTimeNanoseconds: cannot place a UTC window on "
                                 "this trace's clock")
    return window_chrome_trace(src, dst_json_gz, (int(start_ns_abs) - base) / 1000.0,
                               (int(end_ns_abs) - base) / 1000.0)


def window_chrome_trace(src: Path, dst_json_gz: Path, start_us: float, end_us: float) -> TraceWindowCounts:
    """Write the events of [start_us, end_us] (trace `ts` axis) of Chrome trace `src` to `dst_json_gz`."""
    src, dst = Path(src), Path(dst_json_gz)
    if end_us < start_us:
        raise VerlprofError(src, f"window ends ({end_us}) before it starts ({start_us})")
    if dst.exists() and dst.resolve() == src.resolve():
        raise VerlprofError(dst, "the window would overwrite its own input")
    header, root = _read_header(src)
    lo, hi = float(start_us), float(end_us)
    kept_header = {k: v for k, v in header.items() if k not in UNSAFE_HEADER_KEYS}
    dropped_keys = tuple(k for k in header if k in UNSAFE_HEADER_KEYS)
    with atomic_path(dst) as tmp:
        with ChromeTraceWriter(tmp, kept_header) as writer:
            counts = _copy_window(src, root, writer, lo, hi)
    return TraceWindowCounts(
        kept=counts["kept"], metadata=counts["metadata"], dropped=counts["dropped"],
        malformed=counts["malformed"], header_keys=tuple(kept_header), dropped_keys=dropped_keys,
        start_us=lo, end_us=hi, size=dst.stat().st_size)


def open_trace(src: Path) -> BinaryIO:
    """Open a trace for reading, gzip or plain (decided by the magic bytes, not the name)."""
    try:
        raw = open(src, "rb")
    except FileNotFoundError:
        raise BadInputError(src, "file not found") from None
    except OSError as exc:
        raise BadInputError(src, f"cannot read it ({exc.strerror or exc})") from None
    magic = raw.read(2)
    raw.seek(0)
    if not magic:
        raw.close()
        raise BadInputError(src, "empty file (0 bytes), not a Chrome trace")
    if magic == b"\x1f\x8b":
        return gzip.GzipFile(fileobj=raw, mode="rb")  # type: ignore[return-value]
    return raw


def _bad(src: Path, exc: BaseException) -> BadInputError:
    if isinstance(exc, (EOFError, gzip.BadGzipFile, zlib.error)):
        return BadInputError(src, f"truncated or corrupt gzip ({exc or type(exc).__name__})")
    if isinstance(exc, ijson.IncompleteJSONError) and "premature" in str(exc).lower():
        return BadInputError(src, "truncated JSON (the trace ends early)")
    return BadInputError(src, f"not valid JSON ({str(exc).splitlines()[0] if str(exc) else type(exc).__name__})")


_READ_ERRORS = (EOFError, gzip.BadGzipFile, zlib.error, ijson.JSONError, UnicodeDecodeError, OSError)


def _read_header(src: Path) -> tuple[dict[str, Any], str]:
    """Top-level keys before `traceEvents`, and the ijson prefix of the events list.

    Stops parsing at the events list, so only the (small) head of the file is read.
    """
    header: dict[str, Any] = {}
    with open_trace(src) as f:
        try:
            events = ijson.parse(f, use_float=True)
            first = next(events, None)
            if first is None:
                raise BadInputError(src, "empty trace (no JSON value)")
            if first[1] == "start_array":
                return header, "item"  # JSON Array Format: the file is the event list
            if first[1] != "start_map":
                raise BadInputError(src, "not a Chrome trace (top level is neither object nor list)")
            key: str | None = None
            builder: ijson.ObjectBuilder | None = None
            for prefix, event, value in events:
                if prefix == "" and event == "map_key":
                    if value == "traceEvents":
                        return header, "traceEvents.item"
                    key, builder = value, ijson.ObjectBuilder()
                    continue
                if prefix == "" and event == "end_map":
                    break
                if builder is not None:
                    builder.event(event, value)
                    if key is not None and _value_done(prefix, event, key):
                        header[key] = builder.value
                        key, builder = None, None
        except _READ_ERRORS as exc:
            raise _bad(src, exc) from None
    raise BadInputError(src, "not a Chrome trace (no traceEvents list)")


def _value_done(prefix: str, event: str, key: str) -> bool:
    """True when the token just fed finished the value of top-level `key`."""
    if prefix == key:
        return event not in ("start_map", "start_array")
    return False


def _events(src: Path, root: str) -> Iterator[Any]:
    with open_trace(src) as f:
        try:
            yield from ijson.items(f, root, use_float=True)
        except _READ_ERRORS as exc:
            raise _bad(src, exc) from None


def dumps(ev: Any) -> bytes:
    """orjson, with the standard library for what orjson refuses (integers beyond 64 bits)."""
    try:
        return orjson.dumps(ev)
    except (orjson.JSONEncodeError, TypeError):
        return json.dumps(ev, separators=(",", ":")).encode()


def _copy_window(src: Path, root: str, writer: ChromeTraceWriter, lo: float, hi: float) -> dict[str, Any]:
    kept: Counter[str] = Counter()
    metadata = dropped = malformed = 0
    for ev in _events(src, root):
        if type(ev) is not dict:
            malformed += 1
            continue
        ph = ev.get("ph")
        if ph == "M":
            writer.write(dumps(ev))
            metadata += 1
            continue
        ts = ev.get("ts")
        if type(ts) not in (float, int):
            malformed += 1
            continue
        end = ts
        if ph == "X":
            dur = ev.get("dur")
            if type(dur) in (float, int):
                end = ts + dur
        if ts <= hi and end >= lo:
            writer.write(dumps(ev))
            kept[ev.get("cat") or f"ph:{ph}"] += 1
        else:
            dropped += 1
    return {"kept": dict(kept), "metadata": metadata, "dropped": dropped, "malformed": malformed}


def trace_header(src: Path) -> dict[str, Any]:
    """The top-level keys of a trace before `traceEvents` (cheap: stops at the events)."""
    return _read_header(Path(src))[0]

