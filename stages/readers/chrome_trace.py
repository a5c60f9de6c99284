"""Read torch.profiler (kineto) chrome traces fast, in bounded memory, without trusting them.

Why: verl's torch traces reach hundreds of MB per rank, and the usual `json.load` of a whole
trace (what HolisticTraceAnalysis does) holds every event as a Python dict: seconds per 100 MB and
gigabytes of memory. verlprof needs only a few fields of a few kinds of events (user annotations,
CUDA runtime/driver calls, kernels, memcpys, memsets), so this reader:

1. streams the file (gzip or plain) in chunks of a few MB, never holding the whole document;
2. cuts each chunk at the last event boundary (`}` `,` `{`) and decodes the batch with msgspec
   against a *typed* event struct that names only the fields it needs - every other field
   (`args` of cpu ops, stacks, shapes) is skipped in C without creating a Python object, and names
   stay raw bytes until an event is kept;
3. keeps compact per-event records in arrays (`array('q')`) with interned names.

A batch decodes only if it is whole, balanced JSON, so a wrong cut (a `},{` inside a string or a
nested list) can never produce wrong events: it fails and falls back. Fallbacks, in order: the
standard library's tolerant parser for the same batch (accepts `NaN`, `Infinity`, integers beyond
64 bits; invalid UTF-8 is replaced), then an exact tokenizer that finds each element's true extent
and decodes elements one by one. Whenever the tolerant parser was needed the result says so in
`warnings`. Anything that is not a chrome trace (empty file, truncated or corrupt gzip, not JSON,
no `traceEvents` list, a truncated document) raises `BadInputError` naming the file.

The same parser serves the callers that rewrite events (window cuts, scrub, check):
`ChromeTraceStream` yields each batch's raw text (validated by msgspec without building a value),
so clean events can pass through as written, and the top-level
keys whole, wherever the writer put them. gzip is inflated by ISA-L where installed (twice zlib's
speed) on a thread of its own, a chunk ahead of the parser.

Timestamps: chrome traces store microseconds as floats. Records hold integer nanoseconds on the
trace's own clock (`ts` * 1000, rounded to the ns the three printed decimals carry); `TraceData.
base_ns` says how to reach absolute UTC (see `time_base`).
"""
from __future__ import annotations

import json
import math
import re
import zlib
from array import array
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator, Optional, Union

import msgspec
import orjson

try:  # ISA-L's inflate: about twice zlib's speed on traces (measured in stages/scrub/trace.py)
    from isal import isal_zlib as _zlib
except ImportError:  # pragma: no cover - the same stream, at zlib's speed
    _zlib = zlib  # type: ignore[assignment]

from ..core.errors import BadInputError

# Decompressed bytes handed to the parser per step: big enough to amortise per-batch costs, small
# enough that a batch's transient structs stay in the tens of MB.
CHUNK_BYTES = 8 << 20
# The stream's batches are smaller: scrub and check work on each batch's literals with numpy, and
# arrays that stay in the CPU's cache made a 105 MB trace's scrub 0.7 s instead of 1.2-1.5 s.
STREAM_CHUNK_BYTES = 2 << 20
_READ_BYTES = 1 << 20
# A header (keys before `traceEvents`) larger than this is not a torch trace.
HEADER_LIMIT = 256 << 20
# Below this size a document without a streamable `traceEvents` array is decoded whole, to say
# precisely what is wrong with it.
WHOLE_DECODE_LIMIT = 64 << 20

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
# cyclic garbage collector makes decoding about 3x faster.
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
_RAWS = msgspec.json.Decoder(list[msgspec.Raw])   # validates a batch and counts its events, builds nothing
_STR = msgspec.json.Decoder(str)
_FAST_ERRORS: tuple[type[Exception], ...] = (msgspec.DecodeError, msgspec.ValidationError, orjson.JSONDecodeError)

_WS = b" \t\r\n"
_KEY = re.compile(rb'"traceEvents"\s*:\s*\[')
# Exact tokenizer: whole strings (group 1 is the closing quote, empty when the buffer ends first)
# and the structural characters that matter for finding an element's extent.
_TOKEN = re.compile(rb'"(?:[^"\\]+|\\.)*("?)|[{}\[\],]', re.S)


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
# Bytes in: gzip or plain, in bounded chunks
# ------------------------------------------------------------------------------------------------

def byte_chunks(path: Path, size: int | None = None) -> Iterator[bytes]:
    """Decompressed content of `path` in chunks of at most `size` (default CHUNK_BYTES) bytes.

    Handles multi-member gzip; a truncated or corrupt gzip raises BadInputError.
    """
    size = size or CHUNK_BYTES
    try:
        fh = open(path, "rb")
    except OSError as exc:
        raise BadInputError(path, f"cannot read: {exc.strerror or exc}") from None
    with fh:
        magic = fh.read(2)
        fh.seek(0)
        if magic != b"\x1f\x8b":
            while block := fh.read(size):
                yield block
            return
        d = _zlib.decompressobj(31)
        while data := fh.read(_READ_BYTES):
            while data:
                try:
                    out = d.decompress(data, size)
                except _zlib.error as exc:
                    raise BadInputError(path, f"corrupt gzip data ({exc})") from None
                if out:
                    yield out
                data = d.unconsumed_tail
                if d.eof:
                    rest = d.unused_data + data
                    if not rest.strip(b"\x00"):
                        data = b""
                        continue
                    if rest[:2] != b"\x1f\x8b":
                        raise BadInputError(path, "trailing garbage after the gzip data")
                    d = _zlib.decompressobj(31)   # next gzip member
                    data = rest
        if not d.eof:
            raise BadInputError(path, "truncated gzip (the compressed stream ends early)")


def _prefetched(chunks: Iterator[bytes]) -> Iterator[bytes]:
    """The chunks of a generator, each made on a helper thread while the caller uses the last one.

    Why: zlib and ISA-L release the GIL while they inflate, so decompressing the next chunk
    overlaps with decoding the current one. An exception in the thread (BadInputError) is raised
    here; memory stays at two chunks."""
    with ThreadPoolExecutor(1, thread_name_prefix="verlprof-inflate") as pool:
        ahead = pool.submit(next, chunks, None)
        while (chunk := ahead.result()) is not None:
            ahead = pool.submit(next, chunks, None)
            yield chunk


# ------------------------------------------------------------------------------------------------
# Tolerant decoding
# ------------------------------------------------------------------------------------------------

def _tolerant_loads(data: bytes) -> Any:
    """The standard library's parser: NaN/Infinity, integers of any size; bad UTF-8 replaced."""
    return json.loads(data.decode("utf-8", errors="replace"))


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
        except _FAST_ERRORS + (ValueError,):
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
        """A batch (`[` events `]`) through the typed decoder; raises _FAST_ERRORS when it refuses."""
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
                self.extra(kind, e.get("ph"), json.dumps(name).encode() if isinstance(name, str) else b"",
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
            raw = json.dumps(name if isinstance(name, str) else ("" if name is None else str(name))).encode()
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
# The streaming parser
# ------------------------------------------------------------------------------------------------

def _skip_ws(buf: bytes, i: int) -> int:
    n = len(buf)
    while i < n and buf[i] in _WS:
        i += 1
    return i


def _last_boundary(buf: bytes, lo: int) -> int:
    """Index just past the last `}` in buf[lo:] that is followed by `,` and `{` (whitespace
    allowed): a candidate end of a batch of events. -1 when there is none."""
    hi = len(buf)
    while True:
        j = buf.rfind(b"}", lo, hi)
        if j < 0:
            return -1
        k = _skip_ws(buf, j + 1)
        if k < len(buf) and buf[k] == 0x2C:   # ','
            k = _skip_ws(buf, k + 1)
            if k < len(buf) and buf[k] == 0x7B:   # '{'
                return j + 1
        hi = j


class _StreamParser:
    """Feeds decompressed chunks through header -> events -> tail states.

    Each batch of whole events goes to `consumer.fast` (the `[` + events + `]` bytes); where that
    decoder refuses, the tolerant parser decodes the same bytes and
    `consumer.loose` gets the plain values."""

    def __init__(self, path: Path, consumer: Any, require_events: bool = True) -> None:
        self.path = path
        self.consumer = consumer
        self.require_events = require_events
        self.head: dict[str, Any] = {}   # top-level keys before traceEvents
        self.tail: dict[str, Any] = {}   # and after it (kineto's baseTimeNanoseconds, traceName)
        self.state = "start"
        self.fmt = "object"          # object: {"traceEvents": [...]}; array: [...]
        self.buf = bytearray()
        self.pos = 0                 # parse position in buf
        self.offset = 0              # decompressed bytes dropped before buf[0] (for messages)
        self.search = 0
        self.no_cut_before = 0       # buf[:no_cut_before] holds no batch boundary (already scanned)
        self.reasons: list[str] = []

    # -- driving ---------------------------------------------------------------------------------
    def feed(self, chunk: bytes) -> None:
        drop = self.pos
        if drop > 0:
            self.offset += drop
            buf = self.buf[drop:]
            buf += chunk
            self.buf = buf
            self.search = max(0, self.search - drop)
            self.no_cut_before = max(0, self.no_cut_before - drop)
            self.pos -= drop
        else:
            self.buf += chunk
        self._step(final=False)

    def finish(self) -> None:
        self._step(final=True)
        if self.state == "start":
            raise BadInputError(self.path, "empty file (no JSON content)" if not self.buf.strip()
                                else "not JSON")
        if self.state == "header":
            self._no_trace_events()
            return
        if self.state == "events":
            raise BadInputError(self.path, "truncated: the traceEvents array is not closed")
        self._tail()

    def _step(self, final: bool) -> None:
        if self.state == "start":
            self._start(final)
        if self.state == "header":
            self._header(final)
        if self.state == "events":
            self._events(final)

    # -- states ----------------------------------------------------------------------------------
    def _start(self, final: bool) -> None:
        buf = self.buf
        i = 3 if buf.startswith(b"\xef\xbb\xbf") else 0   # UTF-8 BOM
        i = _skip_ws(buf, i)
        if i >= len(buf):
            return
        c = buf[i:i + 1]
        if c == b"[":
            self.fmt, self.state, self.pos = "array", "events", i + 1
        elif c == b"{":
            self.state, self.search = "header", i
        else:
            raise BadInputError(self.path, f"not JSON (starts with {buf[i:i + 12]!r})")

    def _header(self, final: bool) -> None:
        buf = self.buf
        while True:
            m = _KEY.search(buf, self.search)
            if m is None:
                if len(buf) > HEADER_LIMIT:
                    raise BadInputError(self.path, f"no traceEvents array in the first {HEADER_LIMIT >> 20} MB")
                self.search = max(0, len(buf) - 64)
                return
            try:
                head = _tolerant_loads(buf[:m.start()] + b'"traceEvents": 0}')
            except (ValueError, RecursionError):
                head = None
            if isinstance(head, dict):
                head.pop("traceEvents", None)
                self.head.update(head)
                self.state, self.pos = "events", m.end()
                return
            self.search = m.end()   # "traceEvents" inside a string or a nested object: keep looking

    def _events(self, final: bool) -> None:
        while self.state == "events":
            buf = self.buf
            i = _skip_ws(buf, self.pos)
            if i < len(buf) and buf[i] == 0x2C:   # ',' between batches
                i = _skip_ws(buf, i + 1)
            self.pos = i
            if i >= len(buf):
                return
            if buf[i] == 0x5D:   # ']'
                self.state, self.pos = "tail", i + 1
                return
            cut = -1 if final else _last_boundary(buf, max(i, self.no_cut_before))
            if cut <= i:
                if final:
                    self._exact(final=True)
                else:   # one event longer than the data so far: scan only new data next time
                    self.no_cut_before = max(i, len(buf) - 64)
                return
            if not self._batch(i, cut):
                self._exact(final=final)
                return

    def _batch(self, i: int, cut: int) -> bool:
        """Decode buf[i:cut] as a batch of whole events; False when it is not one."""
        with memoryview(self.buf) as mv:
            ok = self._decode(b"".join((b"[", mv[i:cut], b"]")))
        if ok:
            self.pos = cut
        return ok

    def _decode(self, batch: Any) -> bool:
        """`[` events `]` to the consumer: fast, else tolerant; False when it is not JSON."""
        try:
            self.consumer.fast(batch)
            return True
        except _FAST_ERRORS as exc:
            try:
                loose = _tolerant_loads(bytes(batch))
            except (ValueError, RecursionError):
                return False
            if not isinstance(loose, list):
                return False
            self._note(exc)
            self.consumer.loose(loose, bytes(batch[1:-1]))
            return True

    def _exact(self, final: bool) -> None:
        """Split buf[pos:] into array elements with the exact tokenizer; decode each alone.

        Stops at the array's `]` (-> tail state) or before an incomplete element (waits for more
        data; at the end of the input that is a truncated document)."""
        buf = self.buf
        start = self.pos
        depth = 0
        for m in _TOKEN.finditer(buf, start):
            c = buf[m.start()]
            if c == 0x22:   # '"'
                if not m.group(1):
                    break   # the data ends inside this string
                continue
            if c == 0x7B or c == 0x5B:   # '{' '['
                depth += 1
            elif depth > 0:
                if c == 0x7D or c == 0x5D:   # '}' ']'
                    depth -= 1
            elif c == 0x2C or c == 0x5D:   # ',' or ']' at array level: an element ends
                text = bytes(buf[start:m.start()]).strip(_WS)
                if text:
                    if not self._decode(b"[" + text + b"]"):
                        raise BadInputError(self.path, f"invalid JSON in traceEvents near byte {self.offset + start}")
                elif c == 0x2C:
                    raise BadInputError(self.path, f"malformed JSON (empty array element) near byte {self.offset + start}")
                start = m.end()
                if c == 0x5D:
                    self.state, self.pos = "tail", start
                    return
            else:   # '}' at array level
                raise BadInputError(self.path, f"malformed JSON near byte {self.offset + m.start()}")
        if final:
            raise BadInputError(self.path, "truncated: the traceEvents array is not closed")
        self.pos = start

    def _note(self, exc: Exception) -> None:
        if len(self.reasons) < 3:
            self.reasons.append(" ".join(str(exc).split())[:120])

    def _tail(self) -> None:
        rest = self.buf[self.pos:].strip(_WS)
        if self.fmt == "array":
            if rest:
                raise BadInputError(self.path, "unexpected content after the JSON array")
            return
        if rest == b"}":
            return
        if not rest.startswith(b","):
            raise BadInputError(self.path, "truncated or malformed JSON after the traceEvents array")
        try:
            tail = _tolerant_loads(b'{"_": 0' + rest)
        except (ValueError, RecursionError) as exc:
            raise BadInputError(self.path, f"truncated or malformed JSON after the traceEvents array ({exc})") from None
        if isinstance(tail, dict):
            tail.pop("_", None)
            tail.pop("traceEvents", None)
            self.tail.update(tail)

    def _no_trace_events(self) -> None:
        """The document ended without a streamable traceEvents array: an error that says exactly
        what it is, or (require_events=False) its members in `head`."""
        if len(self.buf) > WHOLE_DECODE_LIMIT:
            raise BadInputError(self.path, "JSON without a traceEvents array (not a chrome trace)")
        try:
            doc = _tolerant_loads(self.buf)
        except ValueError as exc:
            raise BadInputError(self.path, f"not valid JSON ({exc})") from None
        except RecursionError:
            raise BadInputError(self.path, "not valid JSON (nested too deeply)") from None
        if isinstance(doc, dict) and not self.require_events:
            self.head.update(doc)
            return
        if isinstance(doc, dict) and "traceEvents" in doc:
            raise BadInputError(self.path, f"traceEvents is a {type(doc['traceEvents']).__name__}, not a list")
        raise BadInputError(self.path, "JSON without traceEvents (not a chrome trace)")


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


def _checked_path(path: str | Path) -> Path:
    """`path` as a Path; BadInputError unless it is a non-empty file."""
    p = Path(path)
    if not p.is_file():
        raise BadInputError(p, "not a file")
    if p.stat().st_size == 0:
        raise BadInputError(p, "empty file (no JSON content)")
    return p


@dataclass
class Batch:
    """Whole events of a trace, as written: `raw` is their text (`e1,e2,...`, no brackets), valid
    JSON once bracketed. `events` holds them decoded where the fast decoders refused them and the
    tolerant parser read them (NaN, Infinity)."""

    raw: bytes
    count: int
    events: list[Any] | None = None

    @property
    def tolerant(self) -> bool:
        return self.events is not None


class _Batches:
    """The stream's consumer: validates a batch with msgspec, building nothing."""

    def __init__(self) -> None:
        self.out: list[Batch] = []

    def fast(self, batch: bytes) -> None:
        self.out.append(Batch(batch[1:-1], len(_RAWS.decode(batch))))

    def loose(self, events: list[Any], raw: bytes) -> None:
        self.out.append(Batch(raw, len(events), events))


class ChromeTraceStream:
    """The one pass over a chrome trace that window cuts, scrub and check read through.

    Iterating yields `Batch`es of whole events, in file order, from the same parser as
    `read_chrome_trace` (same fallbacks and errors), never decoded: consumers decode what they
    need (a window cut the few keys it decides on, scrub the events holding a dirty literal). Top-level keys land in `head`
    (those before `traceEvents`, complete once the first batch is out; dict values whole) and
    `tail` (those after it, kineto's `baseTimeNanoseconds` among them, complete at the end).
    `require_events=False` reads any JSON object (a manifest): without a traceEvents array its
    members all land in `head` and no batch comes."""

    def __init__(self, path: str | Path, require_events: bool = True, chunk_bytes: int | None = None) -> None:
        self.path = _checked_path(path)
        self._out = _Batches()
        self._parser = _StreamParser(self.path, self._out, require_events)
        self.chunk_bytes = chunk_bytes or STREAM_CHUNK_BYTES
        self.head, self.tail = self._parser.head, self._parser.tail

    @property
    def is_array(self) -> bool:
        """The document is a bare array of events (the other chrome-trace form)."""
        return self._parser.fmt == "array"

    @property
    def header(self) -> dict[str, Any]:
        return {**self.head, **self.tail}

    def __iter__(self) -> Iterator[Batch]:
        out = self._out.out
        for chunk in _prefetched(byte_chunks(self.path, self.chunk_bytes)):
            self._parser.feed(chunk)
            yield from out
            out.clear()
        self._parser.finish()
        yield from out
        out.clear()


def read_chrome_trace(path: str | Path) -> TraceData:
    """Stream-read one torch chrome trace (`.json` or `.json.gz`) into compact records.

    Raises BadInputError (one line, names the file) for anything that is not a readable trace.
    """
    p = _checked_path(path)
    data = TraceData(path=p)
    col = _Collector(data)
    parser = _StreamParser(p, col)
    for chunk in _prefetched(byte_chunks(p)):
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
