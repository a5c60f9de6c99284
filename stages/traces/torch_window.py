"""Cut a time window out of a torch.profiler Chrome trace (`.json` or `.json.gz`), streaming.

Why: verl's torch traces run to hundreds of MB; loading one whole (as HolisticTraceAnalysis does)
costs GBs of RAM. Events are read in batches by the one chrome-trace reader
(`readers/chrome_trace.ChromeTraceStream`: batches cut at event boundaries, decoded by the one
JSON codec, `readers/json_codec.py`) and written as they come, so memory stays flat whatever
the trace size.

What is kept:
- every metadata event (`ph: "M"`: process/thread names, labels, sort indexes), so the viewer still
  names the tracks the window's events sit on;
- complete events (`ph: "X"`) whose closed interval [ts, ts + dur] overlaps [start_us, end_us];
- every other event with a `ts` (instants, counters, flow starts/ends) whose ts lies in the window.
  A flow arrow whose other end lies outside the window is left dangling; viewers ignore it.
- the top-level keys (`deviceProperties`, `baseTimeNanoseconds`, `distributedInfo`, versions ...),
  whole (dict values included), wherever the writer put them: kineto writes some after
  `traceEvents` (`baseTimeNanoseconds` too, in 5 of 9 real traces checked); except `traceName` (a
  local path). They go before the events in the window, so streaming readers meet them first.

Windows by launch time (`window_chrome_trace_utc`): GPU work launched inside the step belongs to
it, also when it runs after the step's CPU ranges end (a serving trace's kernels queue behind the
CPU), so the window's end moves out to the end of the last GPU operation launched inside it. Where
the step's launches are is read with the one chrome-trace reader (`readers/chrome_trace.py`), which
also says where the trace's clock starts: `baseTimeNanoseconds` before or after the events, or none
(then the summaries and the window both stay on the trace's own clock).

Clock: `window_chrome_trace` takes the window on the trace's own `ts` axis (microseconds);
`window_chrome_trace_utc` takes it as absolute UTC ns (like `StepSpan`) and converts it with the
trace's `baseTimeNanoseconds` (unix_ns = base_ns + ts * 1000, the rule HolisticTraceAnalysis uses),
in integers first, so the bounds stay exact (a float of Unix microseconds only resolves ~0.25 us).
Timestamps are written back unchanged, so the window lines up with the full trace and with other
ranks exactly as the originals do.
"""
from __future__ import annotations

import itertools
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Iterator, Optional, Union

import msgspec
import numpy as np

from ..core.atomic import atomic_path
from ..core.errors import VerlprofError
from ..readers.chrome_trace import Batch, ChromeTraceStream, TraceData, read_chrome_trace
from ..readers.json_codec import dumps, loads
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
    """`window_chrome_trace` with the window in absolute UTC ns (e.g. a `StepSpan`), extended to
    the end of the GPU work launched inside it (module docstring)."""
    data = read_chrome_trace(Path(src))
    base = data.base_ns
    lo, hi = int(start_ns_abs) - base, int(end_ns_abs) - base
    hi = max(hi, launched_until(data, lo, hi))
    header = {k: v for k, v in data.metadata.items() if k != "traceEvents"}
    return window_chrome_trace(src, dst_json_gz, lo / 1000.0, hi / 1000.0, header)


def launched_until(data: TraceData, lo: int, hi: int) -> int:
    """The end (trace-clock ns) of the last GPU operation whose launching call lies in [lo, hi]."""
    api_ts = np.frombuffer(data.api_ts, np.int64) if len(data.api_ts) else np.zeros(0, np.int64)
    g_corr = np.frombuffer(data.gpu_corr, np.int64) if len(data.gpu_corr) else np.zeros(0, np.int64)
    if not api_ts.size or not g_corr.size:
        return hi
    corr = np.frombuffer(data.api_corr, np.int64)[(api_ts >= lo) & (api_ts <= hi)]
    corr = corr[(corr > 0) | (corr < -1)]
    mine = np.isin(g_corr, corr)
    if not mine.any():
        return hi
    end = np.frombuffer(data.gpu_ts, np.int64)[mine] + np.frombuffer(data.gpu_dur, np.int64)[mine]
    return int(end.max())


def window_chrome_trace(src: Path, dst_json_gz: Path, start_us: float, end_us: float,
                        header: dict[str, Any] | None = None) -> TraceWindowCounts:
    """Write the events of [start_us, end_us] (trace `ts` axis) of Chrome trace `src` to `dst_json_gz`.

    `header`: the trace's top-level keys when the caller has read them all (else those before the
    events)."""
    src, dst = Path(src), Path(dst_json_gz)
    if end_us < start_us:
        raise VerlprofError(src, f"window ends ({end_us}) before it starts ({start_us})")
    if dst.exists() and dst.resolve() == src.resolve():
        raise VerlprofError(dst, "the window would overwrite its own input")
    stream = ChromeTraceStream(src)
    batches = iter(stream)
    head = next(batches, None)          # the keys before the events are known from here on
    header = dict(stream.head) if header is None else header
    lo, hi = float(start_us), float(end_us)
    kept_header = {k: v for k, v in header.items() if k not in UNSAFE_HEADER_KEYS}
    dropped_keys = tuple(k for k in header if k in UNSAFE_HEADER_KEYS)
    with atomic_path(dst) as tmp:
        with ChromeTraceWriter(tmp, kept_header) as writer:
            counts = _copy_window(itertools.chain([head] if head else [], batches), writer, lo, hi)
    return TraceWindowCounts(
        kept=counts["kept"], metadata=counts["metadata"], dropped=counts["dropped"],
        malformed=counts["malformed"], header_keys=tuple(kept_header), dropped_keys=dropped_keys,
        start_us=lo, end_us=hi, size=dst.stat().st_size)


class _Event(msgspec.Struct, gc=False):
    """The keys a window cut decides on; msgspec skips the rest, and a kept event is copied as
    it was written."""

    ph: Optional[str] = None
    cat: Optional[str] = None
    ts: Union[int, float, None] = None
    dur: Union[int, float, None] = None


_TYPED = msgspec.json.Decoder(list[_Event])
_RAWS = msgspec.json.Decoder(list[msgspec.Raw])


def _events(batch: Batch) -> Iterator[tuple[Any, Any, Any, Any, Any]]:
    """(ph, cat, ts, dur, the event) per event of a batch: typed, the event its raw text; else
    (NaN, odd types, events that are not objects) decoded values, the event a dict or None."""
    if batch.events is None:
        text = b"[" + batch.raw + b"]"
        try:
            typed = _TYPED.decode(text)
        except (msgspec.DecodeError, msgspec.ValidationError):
            events = loads(text)
        else:
            yield from ((e.ph, e.cat, e.ts, e.dur, r) for e, r in zip(typed, _RAWS.decode(text)))
            return
    else:
        events = batch.events
    for ev in events:
        if type(ev) is dict:
            yield ev.get("ph"), ev.get("cat"), ev.get("ts"), ev.get("dur"), ev
        else:
            yield None, None, None, None, None


def _copy_window(batches: Iterable[Batch], writer: ChromeTraceWriter, lo: float, hi: float) -> dict[str, Any]:
    kept: Counter[str] = Counter()
    metadata = dropped = malformed = 0
    for batch in batches:
        for ph, cat, ts, dur, ev in _events(batch):
            if ev is None:
                malformed += 1
            elif ph == "M":
                writer.write(bytes(ev) if type(ev) is msgspec.Raw else dumps(ev))
                metadata += 1
            elif type(ts) not in (float, int):
                malformed += 1
            elif ts <= hi and (ts + dur if ph == "X" and type(dur) in (float, int) else ts) >= lo:
                writer.write(bytes(ev) if type(ev) is msgspec.Raw else dumps(ev))
                kept[cat or f"ph:{ph}"] += 1
            else:
                dropped += 1
    return {"kept": dict(kept), "metadata": metadata, "dropped": dropped, "malformed": malformed}


def trace_header(src: Path) -> dict[str, Any]:
    """The top-level keys of a trace before `traceEvents` (cheap: stops at the first events)."""
    stream = ChromeTraceStream(Path(src))
    batches = iter(stream)
    next(batches, None)
    batches.close()   # type: ignore[attr-defined]
    return stream.head
