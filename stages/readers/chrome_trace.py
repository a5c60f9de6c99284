"""Read torch.profiler (kineto) chrome traces fast, in bounded memory, without trusting them:
the columns a summary needs, as compact records (`TraceData`).

Why: verl's torch traces reach hundreds of MB per rank, and the usual `json.load` of a whole
trace (what HolisticTraceAnalysis does) holds every event as a Python dict: seconds per 100 MB and
gigabytes of memory. verlprof needs only a few fields of a few kinds of events (user annotations,
CUDA runtime/driver calls, kernels, memcpys, memsets, autograd links, `[memory]` instants), so
this reader walks the trace with the streaming parser (`readers/chrome_stream.py`: chunks of a
few MB, cut at event boundaries, with its fallbacks and errors) and decodes each batch with
msgspec against a *typed* event struct that names only the fields it needs - every other field
(`args` of cpu ops, stacks, shapes) is skipped in C without creating a Python object, and names
stay raw bytes until an event is kept. Kept events become per-event records in arrays
(`array('q')`) with interned names. Batches the typed decoder refuses come decoded by the one
JSON codec and go through the same rules as plain values; the result then says so in `warnings`.

The parser's face for the callers that rewrite events (window cuts, scrub, check),
`ChromeTraceStream`, is re-exported here.

Timestamps: chrome traces store microseconds as floats. Records hold integer nanoseconds on the
trace's own clock (`ts` * 1000, rounded to the ns the three printed decimals carry); `TraceData.
base_ns` says how to reach absolute UTC (see `_time_base`).
"""
from __future__ import annotations

import math
from array import array
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional, Union

import msgspec

from ..core.errors import BadInputError
from .chrome_stream import (
    CHUNK_BYTES,
    FAST_ERRORS,
    Batch,
    ChromeTraceStream,
    StreamParser,
    byte_chunks,
    checked_path,
    prefetched,
)
from .json_codec import dumps as _dumps
from .json_codec import loads as _tolerant_loads

__all__ = ["TraceData", "read_chrome_trace", "ChromeTraceStream", "Batch", "byte_chunks", "CHUNK_BYTES",
           "RANGE", "API", "KERNEL", "MEMCPY", "MEMSET"]

# Event kinds kept (codes stored in TraceData.gpu_kind and used by summarize_torch).
RANGE, API, KERNEL, MEMCPY, MEMSET, SPAN, META = 1, 2, 3, 4, 5, 6, 7
CPU_OP, FLOW, INSTANT = 8, 9, 10

# `cat` -> kind. Newer kineto spells categories in snake case; older releases (torch <= 1.12)
# wrote "Kernel", "Memcpy", "Memset", "Runtime".
CAT_KIND: dict[str, int] = {
    "user_annotation": RANGE,
    "cuda_runtime": API, "cuda_driver": API, "Runtime": API, "Driver": API,
    "kernel": KERNEL, "Kernel": KERNEL,
    "gpu_memcpy": MEMCPY, "Memcpy": MEMCPY,
    "gpu_memset": MEMSET, "Memset": MEMSET,
    "Trace": SPAN,
    # autograd links (backward op -> forward op) and allocator levels; cpu ops are kept only when
    # they carry a `Sequence number`, instants only when named `[memory]`
    "cpu_op": CPU_OP, "Operator": CPU_OP, "fwdbwd": FLOW,
    "cpu_instant_event": INSTANT,
    "": META,   # no category: metadata (thread names), instants
}


# gc=False: these structs never form reference cycles, and keeping millions of them out of the
# cyclic garbage collector makes decoding several times faster.
class _Args(msgspec.Struct, gc=False):
    """The `args` fields verlprof reads; msgspec skips every other key without building it."""

    correlation: Optional[int] = None
    bytes: Optional[int] = None
    stream: Optional[int] = None
    device: Optional[int] = None
    name: msgspec.Raw = msgspec.Raw()   # thread_name metadata events (empty when absent)
    seq: Optional[int] = msgspec.field(name="Sequence number", default=None)
    total_allocated: Optional[int] = msgspec.field(name="Total Allocated", default=None)
    device_id: Optional[int] = msgspec.field(name="Device Id", default=None)
    device_type: Optional[int] = msgspec.field(name="Device Type", default=None)
    change: Optional[int] = msgspec.field(name="Bytes", default=None)


class _Event(msgspec.Struct, gc=False):
    """One trace event, typed: only these keys are decoded; `name` stays raw until kept."""

    ph: str = ""
    cat: str = ""
    name: msgspec.Raw = msgspec.Raw()   # raw JSON text; empty when absent
    pid: Union[int, str, None] = None
    tid: Union[int, str, None] = None
    ts: Optional[float] = None
    dur: Optional[float] = None
    args: Optional[_Args] = None
    id: Union[int, str, None] = None    # flow events (fwdbwd)


_BATCH = msgspec.json.Decoder(list[_Event])
_STR = msgspec.json.Decoder(str)


@dataclass
class TraceData:
    """What summarize needs from one chrome trace, in compact form.

    Times are integer ns on the trace's clock; add `base_ns` for absolute UTC ns. Threads are
    indices into `threads` ((pid, tid) pairs, ints or the strings some writers use).
    """

    path: Path
    metadata: dict[str, Any] = field(default_factory=dict)   # top-level keys except traceEvents
    base_ns: int = 0
    time_base: str = "relative"       # baseTimeNanoseconds | epoch | relative
    threads: list[tuple[Any, Any]] = field(default_factory=list)
    thread_names: dict[int, str] = field(default_factory=dict)
    names: list[str] = field(default_factory=list)           # interned GPU op names
    # user annotations: (name, start_ns, dur_ns, thread)
    ranges: list[tuple[str, int, int, int]] = field(default_factory=list)
    # CUDA runtime/driver calls (parallel arrays)
    api_ts: array = field(default_factory=lambda: array("q"))
    api_dur: array = field(default_factory=lambda: array("q"))
    api_thread: array = field(default_factory=lambda: array("q"))
    api_corr: array = field(default_factory=lambda: array("q"))
    # GPU activities: kernels, memcpys, memsets (parallel arrays)
    gpu_kind: array = field(default_factory=lambda: array("b"))
    gpu_name: array = field(default_factory=lambda: array("q"))
    gpu_ts: array = field(default_factory=lambda: array("q"))
    gpu_dur: array = field(default_factory=lambda: array("q"))
    gpu_device: array = field(default_factory=lambda: array("q"))
    gpu_stream: array = field(default_factory=lambda: array("q"))
    gpu_corr: array = field(default_factory=lambda: array("q"))
    gpu_bytes: array = field(default_factory=lambda: array("q"))
    profiler_span: tuple[int, int] | None = None     # the "PyTorch Profiler" Trace event
    # autograd ops with a `Sequence number` (cpu ops): thread, start, duration, seq
    seq_thread: array = field(default_factory=lambda: array("q"))
    seq_ts: array = field(default_factory=lambda: array("q"))
    seq_dur: array = field(default_factory=lambda: array("q"))
    seq_no: array = field(default_factory=lambda: array("q"))
    # `fwdbwd` flow ends: id, 0 = start ('s', the forward op) / 1 = finish ('f', the backward op), thread, ts
    flow_id: array = field(default_factory=lambda: array("q"))
    flow_end: array = field(default_factory=lambda: array("b"))
    flow_thread: array = field(default_factory=lambda: array("q"))
    flow_ts: array = field(default_factory=lambda: array("q"))
    # `[memory]` instants: thread, time, CUDA device (-1: CPU or other), `Total Allocated` bytes
    # after the event, `Bytes` it changed by
    mem_thread: array = field(default_factory=lambda: array("q"))
    mem_change: array = field(default_factory=lambda: array("q"))
    mem_ts: array = field(default_factory=lambda: array("q"))
    mem_device: array = field(default_factory=lambda: array("q"))
    mem_total: array = field(default_factory=lambda: array("q"))
    n_events: int = 0
    n_skipped: int = 0                # kept-kind events without a usable timestamp
    n_tolerant: int = 0               # events decoded by the tolerant parser
    parser: str = "typed"             # typed | tolerant | mixed
    warnings: list[str] = field(default_factory=list)

    @property
    def n_gpu(self) -> int:
        return len(self.gpu_ts)


# ------------------------------------------------------------------------------------------------
# Tolerant decoding
# ------------------------------------------------------------------------------------------------

def _clean(s: str) -> str:
    """A string safe to write to Parquet (lone surrogates from `\\ud800` escapes replaced)."""
    try:
        s.encode("utf-8")
        return s
    except UnicodeEncodeError:
        return s.encode("utf-8", errors="replace").decode("utf-8")


def _as_float(v: Any) -> float | None:
    if isinstance(v, bool) or not isinstance(v, (int, float, str)):
        return None
    try:
        f = float(v)
    except (ValueError, OverflowError):
        return None
    return f if math.isfinite(f) else None


def _as_int(v: Any) -> int | None:
    if isinstance(v, int) and not isinstance(v, bool):
        return v
    if isinstance(v, float) and math.isfinite(v) and v == int(v):
        return int(v)
    try:
        return int(v) if isinstance(v, str) else None
    except ValueError:
        return None


def _ns(us: float) -> int:
    """Microseconds (float with 3 decimals) -> integer ns, exact to the printed digits."""
    whole = int(us)
    return whole * 1000 + round((us - whole) * 1000)


_I64_MIN, _I64_MAX = -(1 << 63), (1 << 63) - 1
# |ns| below 2**62: ~146 years, and sums of a few of them still fit int64.
_TIME_LIMIT = 1 << 62


# ------------------------------------------------------------------------------------------------
# The collector: typed or dict events -> compact records
# ------------------------------------------------------------------------------------------------

class _Collector:
    """Turns decoded events into TraceData records; all the per-event work lives here."""

    def __init__(self, data: TraceData) -> None:
        self.d = data
        self._thread_ix: dict[tuple[Any, Any], int] = {}
        self._name_ix: dict[bytes, int] = {}
        self._range_names: dict[bytes, str] = {}
        self._big_ids: dict[int, int] = {}     # ids beyond int64 -> synthetic negative ids

    # -- helpers ---------------------------------------------------------------------------------
    def thread(self, pid: Any, tid: Any) -> int:
        key = (pid, tid)
        ix = self._thread_ix.get(key)
        if ix is None:
            ix = self._thread_ix[key] = len(self.d.threads)
            self.d.threads.append(key)
        return ix

    def _id(self, v: Any) -> int:
        """An id (correlation, stream, bytes) that fits array('q'); -1 when missing."""
        if v is None:
            return -1
        if _I64_MIN <= v <= _I64_MAX:
            return v
        got = self._big_ids.get(v)
        if got is None:
            got = self._big_ids[v] = -2 - len(self._big_ids)
        return got

    @staticmethod
    def _decode_name(raw: bytes) -> str:
        try:
            s = _STR.decode(raw)
            if not isinstance(s, str):
                raise ValueError("not a string")
        except FAST_ERRORS + (ValueError,):
            try:
                v = _tolerant_loads(raw)
            except (ValueError, RecursionError):
                v = raw.decode("utf-8", errors="replace")
            s = v if isinstance(v, str) else str(v)
        return _clean(s)

    def gpu_name(self, raw: bytes) -> int:
        ix = self._name_ix.get(raw)
        if ix is None:
            ix = self._name_ix[raw] = len(self.d.names)
            self.d.names.append(self._decode_name(raw) if raw else "")
        return ix

    def range_name(self, raw: bytes) -> str:
        s = self._range_names.get(raw)
        if s is None:
            s = self._range_names[raw] = self._decode_name(raw) if raw else ""
        return s

    # -- one kept event --------------------------------------------------------------------------
    def keep(self, kind: int, raw_name: bytes, pid: Any, tid: Any, ts: float, dur: float | None,
             corr: Any, nbytes: Any, stream: Any, device: Any) -> None:
        d = self.d
        try:
            t = _ns(ts)
            du = round(dur * 1000) if dur is not None else 0
        except (ValueError, OverflowError):   # NaN / inf
            d.n_skipped += 1
            return
        if du < 0:
            du = 0
        if not (-_TIME_LIMIT < t < _TIME_LIMIT and du < _TIME_LIMIT):
            d.n_skipped += 1   # beyond any real clock (and beyond int64)
            return
        if kind == API:
            d.api_ts.append(t)
            d.api_dur.append(du)
            d.api_thread.append(self.thread(pid, tid))
            d.api_corr.append(self._id(corr))
        elif kind == RANGE:
            d.ranges.append((self.range_name(raw_name), t, du, self.thread(pid, tid)))
        elif kind == SPAN:
            s = d.profiler_span
            d.profiler_span = (t, t + du) if s is None else (min(s[0], t), max(s[1], t + du))
        else:
            d.gpu_kind.append(kind)
            d.gpu_name.append(self.gpu_name(raw_name))
            d.gpu_ts.append(t)
            d.gpu_dur.append(du)
            dev = device if device is not None else pid
            st = stream if stream is not None else tid
            d.gpu_device.append(self._id(dev if isinstance(dev, int) else None))
            d.gpu_stream.append(self._id(st if isinstance(st, int) else None))
            d.gpu_corr.append(self._id(corr))
            d.gpu_bytes.append(nbytes if isinstance(nbytes, int) and 0 <= nbytes <= _I64_MAX else 0)

    def extra(self, kind: int, ph: Any, raw_name: bytes, pid: Any, tid: Any, ts: Any, dur: Any, ident: Any,
              seq: Any, total: Any, device: Any, device_type: Any, change: Any = None) -> None:
        """Rarer kinds: autograd ops (Sequence number), fwdbwd flow ends, `[memory]` instants."""
        d = self.d
        try:
            t = _ns(float(ts))
        except (TypeError, ValueError, OverflowError):
            return
        if not -_TIME_LIMIT < t < _TIME_LIMIT:
            return
        if kind == CPU_OP:
            if ph != "X" or type(seq) is not int or not _I64_MIN <= seq <= _I64_MAX:
                return
            try:
                du = max(0, round(float(dur) * 1000)) if dur is not None else 0
            except (TypeError, ValueError, OverflowError):
                return
            d.seq_thread.append(self.thread(pid, tid))
            d.seq_ts.append(t)
            d.seq_dur.append(min(du, _TIME_LIMIT))
            d.seq_no.append(seq)
        elif kind == FLOW:
            if ph not in ("s", "f") or type(ident) is not int or not _I64_MIN <= ident <= _I64_MAX:
                return
            d.flow_id.append(ident)
            d.flow_end.append(0 if ph == "s" else 1)
            d.flow_thread.append(self.thread(pid, tid))
            d.flow_ts.append(t)
        elif kind == INSTANT:
            if raw_name != b'"[memory]"' or type(total) is not int or not 0 <= total <= _I64_MAX:
                return
            dev = device if type(device) is int and device_type == 1 and 0 <= device <= _I64_MAX else -1
            d.mem_thread.append(self.thread(pid, tid))
            d.mem_change.append(change if type(change) is int and _I64_MIN <= change <= _I64_MAX else 0)
            d.mem_ts.append(t)
            d.mem_device.append(dev)
            d.mem_total.append(total)

    def thread_name(self, pid: Any, tid: Any, name: str) -> None:
        ix = self.thread(pid, tid)
        # kineto writes two thread_name events for some threads ("pt_autograd_0", then "python3"):
        # the first is the informative one.
        self.d.thread_names.setdefault(ix, _clean(name))

    # -- batches ---------------------------------------------------------------------------------
    def typed(self, events: list[_Event]) -> None:
        """Hot loop over msgspec structs: the common kinds (API calls, GPU ops) are inlined."""
        d = self.d
        kinds = CAT_KIND
        keep = self.keep
        thread_ix = self._thread_ix
        thread = self.thread
        name_ix = self._name_ix
        gpu_name = self.gpu_name
        api_ts, api_dur, api_thread, api_corr = d.api_ts, d.api_dur, d.api_thread, d.api_corr
        g_kind, g_name, g_ts, g_dur = d.gpu_kind, d.gpu_name, d.gpu_ts, d.gpu_dur
        g_dev, g_stream, g_corr, g_bytes = d.gpu_device, d.gpu_stream, d.gpu_corr, d.gpu_bytes
        d.n_events += len(events)
        for e in events:
            kind = kinds.get(e.cat)
            if kind is None:
                continue
            if kind == META:
                if e.ph == "M" and bytes(e.name) == b'"thread_name"' and e.args is not None \
                        and e.args.name:
                    self.thread_name(e.pid, e.tid, self._decode_name(bytes(e.args.name)))
                continue
            if kind >= CPU_OP:
                a = e.args
                if kind == FLOW or a is not None and (a.seq is not None or a.total_allocated is not None):
                    self.extra(kind, e.ph, bytes(e.name), e.pid, e.tid, e.ts, e.dur, e.id,
                               a.seq if a is not None else None, a.total_allocated if a is not None else None,
                               a.device_id if a is not None else None, a.device_type if a is not None else None,
                               a.change if a is not None else None)
                continue
            if e.ph != "X":
                continue
            ts, dur, a = e.ts, e.dur, e.args
            # Fast path: finite float ts/dur, int ids within int64. Anything else -> keep().
            if (kind == API or kind >= KERNEL and kind <= MEMSET) and type(ts) is float \
                    and type(dur) is float and a is not None and type(a.correlation) is int \
                    and -1 <= a.correlation <= _I64_MAX:
                try:
                    whole = int(ts)
                    t = whole * 1000 + round((ts - whole) * 1000)
                    du = round(dur * 1000)
                except (ValueError, OverflowError):
                    d.n_skipped += 1
                    continue
                if du < 0:
                    du = 0
                if not (-_TIME_LIMIT < t < _TIME_LIMIT and du < _TIME_LIMIT):
                    d.n_skipped += 1
                    continue
                if kind == API:
                    th = thread_ix.get((e.pid, e.tid))
                    api_ts.append(t)
                    api_dur.append(du)
                    api_thread.append(th if th is not None else thread(e.pid, e.tid))
                    api_corr.append(a.correlation)
                    continue
                dev = a.device if a.device is not None else e.pid
                st = a.stream if a.stream is not None else e.tid
                nb = a.bytes
                if type(dev) is int and type(st) is int and (nb is None or type(nb) is int) \
                        and _I64_MIN <= dev <= _I64_MAX and _I64_MIN <= st <= _I64_MAX \
                        and (nb is None or _I64_MIN <= nb <= _I64_MAX):
                    raw = bytes(e.name)
                    ni = name_ix.get(raw)
                    g_kind.append(kind)
                    g_name.append(ni if ni is not None else gpu_name(raw))
                    g_ts.append(t)
                    g_dur.append(du)
                    g_dev.append(dev)
                    g_stream.append(st)
                    g_corr.append(a.correlation)
                    g_bytes.append(nb if nb is not None else 0)
                    continue
            if ts is None:
                d.n_skipped += 1
                continue
            raw = bytes(e.name)
            if a is None:
                keep(kind, raw, e.pid, e.tid, ts, dur, None, None, None, None)
            else:
                keep(kind, raw, e.pid, e.tid, ts, dur, a.correlation, a.bytes, a.stream, a.device)

    def fast(self, batch: Any) -> None:
        """A batch (`[` events `]`) through the typed decoder; raises FAST_ERRORS when it refuses."""
        self.typed(_BATCH.decode(batch))

    def loose(self, events: list[Any], raw: bytes) -> None:
        self.dicts(events)

    def dicts(self, events: list[Any]) -> None:
        """The same as `typed`, for events as plain JSON values (any shape, any types) from the
        tolerant parser."""
        self.d.n_events += len(events)
        self.d.n_tolerant += len(events)
        for e in events:
            if not isinstance(e, dict):
                self.d.n_skipped += 1
                continue
            cat = e.get("cat")
            kind = CAT_KIND.get(cat) if isinstance(cat, str) else None
            name = e.get("name")
            args = e.get("args")
            args = args if isinstance(args, dict) else {}
            if kind is None or kind == META:
                if e.get("ph") == "M" and name == "thread_name" and isinstance(args.get("name"), str):
                    self.thread_name(_hashable(e.get("pid")), _hashable(e.get("tid")), args["name"])
                continue
            if kind >= CPU_OP:
                self.extra(kind, e.get("ph"), _dumps(name) if isinstance(name, str) else b"",
                           _hashable(e.get("pid")), _hashable(e.get("tid")), _as_float(e.get("ts")),
                           _as_float(e.get("dur")), _as_int(e.get("id")), _as_int(args.get("Sequence number")),
                           _as_int(args.get("Total Allocated")), _as_int(args.get("Device Id")),
                           _as_int(args.get("Device Type")), _as_int(args.get("Bytes")))
                continue
            if e.get("ph") != "X":
                continue
            ts = _as_float(e.get("ts"))
            if ts is None:
                self.d.n_skipped += 1
                continue
            raw = _dumps(name if isinstance(name, str) else ("" if name is None else str(name)))
            self.keep(kind, raw, _hashable(e.get("pid")), _hashable(e.get("tid")), ts,
                      _as_float(e.get("dur")), _as_int(args.get("correlation")),
                      _as_int(args.get("bytes")), _as_int(args.get("stream")), _as_int(args.get("device")))


def _hashable(v: Any) -> Any:
    if isinstance(v, float) and v.is_integer():
        return int(v)
    if isinstance(v, (int, str)) or v is None:
        return v
    return str(v)


# ------------------------------------------------------------------------------------------------
# Public API
# ------------------------------------------------------------------------------------------------

def _time_base(data: TraceData) -> None:
    """Decide how trace-clock ns map to absolute UTC ns.

    kineto (torch >= 2.1) writes `baseTimeNanoseconds`, and event ts are microseconds after it.
    Older traces have no base: their ts are microseconds since the epoch when they look like it
    (after 2001-09-09, i.e. > 1e15 us); otherwise the clock is unknown and times stay relative.
    """
    base = _as_int(data.metadata.get("baseTimeNanoseconds"))
    if base is not None and base > 0:
        data.base_ns, data.time_base = base, "baseTimeNanoseconds"
        return
    sample = data.ranges[0][1] if data.ranges else (data.gpu_ts[0] if len(data.gpu_ts) else
                                                    (data.api_ts[0] if len(data.api_ts) else 0))
    if sample > 10**18:
        data.base_ns, data.time_base = 0, "epoch"
    else:
        data.base_ns, data.time_base = 0, "relative"
        if data.n_events:
            data.warnings.append(f"{data.path.name}: no baseTimeNanoseconds in the trace; start_ns "
                                 "values are on the trace's own clock, not UTC")


def read_chrome_trace(path: str | Path) -> TraceData:
    """Stream-read one torch chrome trace (`.json` or `.json.gz`) into compact records.

    Raises BadInputError (one line, names the file) for anything that is not a readable trace.
    """
    p = checked_path(path)
    data = TraceData(path=p)
    col = _Collector(data)
    parser = StreamParser(p, col)
    for chunk in prefetched(byte_chunks(p, CHUNK_BYTES)):
        parser.feed(chunk)
    parser.finish()
    data.metadata = {**parser.head, **parser.tail}
    if data.n_tolerant:
        data.parser = "tolerant" if data.n_tolerant == data.n_events else "mixed"
        why = "; ".join(parser.reasons)
        data.warnings.append(f"{p.name}: {data.n_tolerant} of {data.n_events} events were read by the "
                             f"tolerant JSON parser (the typed decoder refused them: NaN/Infinity, invalid "
                             f"UTF-8 or unexpected types): {why}")
    if data.n_skipped:
        data.warnings.append(f"{p.name}: {data.n_skipped} events without a usable timestamp were skipped")
    if col._big_ids:
        data.warnings.append(f"{p.name}: {len(col._big_ids)} ids (correlation, stream, device, bytes) "
                             "beyond 64 bits were read exactly and mapped to local ids")
    _time_base(data)
    return data
