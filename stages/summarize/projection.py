"""NVIDIA's NVTX-to-GPU projection as one streaming sweep over an nsys export.

The rule (nsys `nvtxgpuproj`, `nsys recipe nvtx_gpu_proj_sum`): a GPU operation (kernel, memcpy,
memset) belongs to an NVTX range when the CUDA API call that launched it (runtime or driver table,
joined by correlationId within the same process) lies inside the range, on the range's thread.
Only ranges that start and end on the same thread count. A range's projection spans from its
first to its last GPU operation; NumGPUOps counts distinct launching calls.

How, without a database join: ranges per thread are cut into elementary segments, each with the
list of ranges covering it, innermost first. A chunk of API calls is mapped to its innermost
enclosing range with one `searchsorted` and a few vectorised candidate checks; only calls inside
some range are kept, as sorted (process, correlationId) keys (`CallMap`). GPU operations are then streamed
and looked up by key. Every number is first attributed to the innermost range and then rolled up
to the enclosing ranges, so nested ranges are each exact (as NVIDIA computes them independently).
Memory is O(ranges + API calls inside ranges), never a whole table as Python objects.

Beyond NVIDIA's rule (inherited attribution, issue 10): when a `window` is given, the same sweep
also keeps the launch time and thread of every API call in the window that no range encloses
(autograd's backward thread, a thread pool). Operations those calls launched carry it in
`ops.launch` / `ops.launch_tid`, so summarize can hand them to the range open on the
process's main thread at that moment. NVIDIA's numbers are untouched by this.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from ..readers.events import KIND_KERNEL, KIND_MEMCPY, KIND_MEMSET, PID_SHIFT, GpuOps, pid_of_gtid
from ..readers.nsys_sqlite import DRIVER, KERNEL, MEMCPY, MEMSET, RUNTIME, NsysExport
from ..readers.nvtx_tree import RangeIndex
from ..readers.sqlite_export import quote_ident
_I64_MAX = np.iinfo(np.int64).max
_CORR_BITS = 32
_DUR_BITS = 40


@dataclass
class OpBatch:
    """GPU operations kept for detailed summaries: those launched from selected ranges."""

    rng: list[np.ndarray] = field(default_factory=list)
    start: list[np.ndarray] = field(default_factory=list)
    end: list[np.ndarray] = field(default_factory=list)
    kind: list[np.ndarray] = field(default_factory=list)
    name: list[np.ndarray] = field(default_factory=list)     # kernel demangled-name id, else -1
    nbytes: list[np.ndarray] = field(default_factory=list)
    copy_kind: list[np.ndarray] = field(default_factory=list)
    pid: list[np.ndarray] = field(default_factory=list)
    launch: list[np.ndarray] = field(default_factory=list)      # launch time of rng < 0 ops, else -1
    launch_tid: list[np.ndarray] = field(default_factory=list)  # launching globalTid of rng < 0 ops, else -1

    def add(self, **cols: np.ndarray) -> None:
        for k, v in cols.items():
            getattr(self, k).append(v)

    def arrays(self) -> GpuOps:
        out = {}
        for k in ("rng", "start", "end", "kind", "name", "nbytes", "copy_kind", "pid", "launch", "launch_tid"):
            parts = getattr(self, k)
            out[k] = np.concatenate(parts) if parts else np.zeros(0, np.int64)
        return GpuOps(**out)


@dataclass
class KernelTotals:
    """Whole-report kernel statistics per demangled-name id (NVIDIA's gpukernsum)."""

    name_id: np.ndarray
    count: np.ndarray
    total: np.ndarray
    min: np.ndarray
    max: np.ndarray
    median: np.ndarray


@dataclass
class ProjectionResult:
    """Per-range numbers (innermost attribution; roll up with RangeIndex) plus kept GPU operations."""

    index: RangeIndex
    proj_start: np.ndarray      # min GPU start per innermost range (INT64 max when none)
    proj_end: np.ndarray        # max GPU end (-1 when none)
    n_ops: np.ndarray           # distinct launching calls
    kernel_ns: np.ndarray
    kernel_count: np.ndarray
    api_ns: np.ndarray
    ops: GpuOps                 # OpBatch.arrays() for selected ranges (+ unattributed in window)
    kernel_totals: KernelTotals | None
    api_calls_in_ranges: int = 0

    def projection(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Inclusive (rolled-up) projected start, end and GPU-op count of every range."""
        ix = self.index
        return ix.rollup_min(self.proj_start), ix.rollup_max(self.proj_end), ix.rollup_sum(self.n_ops)


def _drain_concat(parts: list[np.ndarray], dtype: type) -> np.ndarray:
    """Concatenate and free the parts as they are copied (peak ~1x the result, not 2x)."""
    out = np.empty(sum(p.size for p in parts), dtype=dtype)
    at = 0
    parts.reverse()
    while parts:
        p = parts.pop()
        out[at:at + p.size] = p
        at += p.size
    return out


class CallMap:
    """Sorted (process, correlationId) -> innermost range of the API calls inside ranges.

    Why packed: a 1 GB export holds ~10 M such calls. Key and range share one int64
    (`pidx | corr | range`), sorted in place, so the map costs 8 bytes a call and sorting it
    needs no second copy; lookups `searchsorted` the key shifted past the range bits. Exports
    with more ranges or processes than the bits allow use two parallel arrays instead.
    """

    def __init__(self, n_ranges: int, n_procs: int) -> None:
        self.rng_bits = max(1, int(n_ranges).bit_length())
        pid_bits = max(1, int(n_procs).bit_length())
        self.packed_ok = self.rng_bits + _CORR_BITS + pid_bits <= 63
        self.parts: list[np.ndarray] = []
        self.rng_parts: list[np.ndarray] = []
        self.keys = np.zeros(0, np.int64)
        self.rng = np.zeros(0, np.int64)

    def add(self, key: np.ndarray, rng: np.ndarray) -> None:
        if self.packed_ok:
            self.parts.append((key << self.rng_bits) | rng)
        else:
            self.parts.append(key)
            self.rng_parts.append(rng.astype(np.int32))

    def finish(self) -> None:
        self.keys = _drain_concat(self.parts, np.int64)
        if self.packed_ok:
            self.keys.sort()  # in place: the range bits ride along
            return
        self.rng = _drain_concat(self.rng_parts, np.int32)
        if self.keys.size and not np.all(self.keys[1:] >= self.keys[:-1]):
            order = np.argsort(self.keys, kind="stable")
            self.keys, self.rng = self.keys[order], self.rng[order]

    def __len__(self) -> int:
        return int(self.keys.size)

    def find(self, key: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(positions, found mask) of `key` in the map."""
        if self.keys.size == 0:
            return np.zeros(key.size, np.int64), np.zeros(key.size, bool)
        probe = key << self.rng_bits if self.packed_ok else key
        pos = np.minimum(np.searchsorted(self.keys, probe), self.keys.size - 1)
        stored = self.keys[pos] >> self.rng_bits if self.packed_ok else self.keys[pos]
        return pos, stored == key

    def range_at(self, pos: np.ndarray) -> np.ndarray:
        if self.packed_ok:
            return self.keys[pos] & ((1 << self.rng_bits) - 1)
        return self.rng[pos].astype(np.int64)


def _pid_index(known: np.ndarray, pids: np.ndarray) -> np.ndarray:
    """Map process keys to their position in sorted `known` (-1 when unknown)."""
    if known.size == 0:
        return np.full(pids.size, -1, np.int64)
    pos = np.searchsorted(known, pids)
    pos_c = np.minimum(pos, known.size - 1)
    return np.where(known[pos_c] == pids, pos_c, -1)


def project(db: NsysExport, index: RangeIndex, selected: np.ndarray | None = None,
            window: tuple[int, int] | None = None, kernel_totals: bool = True,
            kernel_name: str = "demangledName") -> ProjectionResult:
    """One sweep over API calls and GPU operations of `db`.

    selected: bool per range; GPU operations launched from these ranges are kept in `ops` (for
    phase details: busy union, comm, top kernels). window: (t0, t1) export-relative; operations
    starting in it that no range launched are kept too, with rng = -1 ("unattributed").
    kernel_name: the KERNEL column kernels are named (and totals grouped) by.

    With a window (and no whole-report kernel totals), only the rows the window's figures can
    depend on are read (`_narrow`): a 1 GB export of hundreds of steps is summarized for its one
    step without parsing the others; every kept figure equals the full read's.
    """
    r = index.ranges
    n = len(r)
    sel = np.zeros(n + 1, bool)  # last slot: "no range" (-1 indexes it)
    if selected is not None:
        sel[:n] = selected
    proc_keys = np.unique(r.gtid[r.same_thread] >> PID_SHIFT) if n else np.zeros(0, np.int64)
    api_ns = np.zeros(n, np.int64)
    calls = CallMap(n, proc_keys.size)

    # 1. API calls -> innermost range, on threads that have ranges, within the ranges' time span.
    #    The thread comes back as a small index instead of the 15-digit globalTid (SQLite's integer
    #    formatting is much of the cost). start/end stay raw: arithmetic in SQL would read a
    #    corrupt text value as 0 silently, while numpy's parser refuses it.
    #    With a window, calls in it outside every range are kept too (`orphans`, for inheritance):
    #    the thread column then carries -2 - globalTid for threads without ranges.
    threads = sorted(index.threads)
    t_lo = int(min(index.threads[g].bounds[0] for g in threads)) if threads else 0
    orphans = _Orphans(proc_keys)
    read_corr = [_I64_MAX, -1]   # bounds of the correlation ids of the API calls read
    narrow: tuple[int, int, int, int] | None = None
    if threads:
        t_hi = int(max(index.threads[g].bounds[-1] for g in threads))
        tid_list = ",".join(str(g) for g in threads)
        thread_of = " ".join(f"WHEN {g} THEN {i}" for i, g in enumerate(threads))
        other = "-2 - globalTid" if window is not None else "-1"
        exprs = ["start", "end", "correlationId", f"CASE globalTid {thread_of} ELSE {other} END"]
        narrow = _narrow(db, index, selected, window, t_lo, t_hi) if window is not None and not kernel_totals else None
        for table in (RUNTIME, DRIVER):
            if not db.has(table, "start", "end", "correlationId", "globalTid"):
                continue
            where = f"globalTid IN ({tid_list}) AND start >= ? AND start <= ?"
            params: tuple[int, ...] = (t_lo, t_hi)
            if narrow is not None:
                lo, hi, kmin, kmax = narrow
                where = (f"(globalTid IN ({tid_list}) AND start >= ? AND start <= ? AND (start BETWEEN ? AND ? "
                         f"OR correlationId BETWEEN ? AND ?)) OR (start >= ? AND start <= ?)")
                params = (t_lo, t_hi, lo, hi, kmin, kmax, int(window[0]), int(window[1]))
            elif window is not None:
                where = f"({where}) OR (start >= ? AND start <= ?)"
                params = (t_lo, t_hi, int(window[0]), int(window[1]))
            for s, e, corr, g in db.iter_columns(table, exprs, where, params):
                if corr.size:
                    read_corr[0] = min(read_corr[0], int(corr.min()))
                    read_corr[1] = max(read_corr[1], int(corr.max()))
                if window is not None:
                    free = g < 0
                    if free.any():
                        orphans.add(s[free], corr[free], -2 - g[free])
                        s, e, corr, g = s[~free], e[~free], corr[~free], g[~free]
                    if s.size == 0:
                        continue
                for gi in (np.unique(g) if len(threads) > 1 else (0,)):
                    if gi < 0:
                        continue
                    m = g == gi if len(threads) > 1 else slice(None)
                    gval = threads[int(gi)]
                    ss, ee, cc = s[m], e[m], corr[m]
                    inner = index.innermost(gval, ss, ee)
                    if window is not None:
                        out_rng = (inner < 0) & (ss >= window[0]) & (ss <= window[1])
                        if out_rng.any():
                            orphans.add(ss[out_rng], cc[out_rng], np.full(int(out_rng.sum()), gval, np.int64))
                        inner = np.where((ss >= t_lo) & (ss <= t_hi), inner, -1)
                    hit = inner >= 0
                    if not hit.any():
                        continue
                    inner, ss, ee, cc = inner[hit], ss[hit], ee[hit], cc[hit]
                    api_ns += np.bincount(inner, weights=(ee - ss), minlength=n).astype(np.int64)
                    pidx = _pid_index(proc_keys, np.full(cc.size, gval >> PID_SHIFT, np.int64))
                    ok = (cc >= 0) & (cc < (1 << _CORR_BITS)) & (pidx >= 0)
                    calls.add((pidx[ok] << _CORR_BITS) | cc[ok], inner[ok])
    calls.finish()
    orphans.finish()
    seen = np.zeros(len(calls), bool)

    proj_start = np.full(n, _I64_MAX, np.int64)
    proj_end = np.full(n, -1, np.int64)
    kernel_ns = np.zeros(n, np.int64)
    kernel_count = np.zeros(n, np.int64)
    batch = OpBatch()
    kt_parts: list[np.ndarray] = []

    def lookup(corr: np.ndarray, gpid: np.ndarray) -> np.ndarray:
        out = np.full(corr.size, -1, np.int64)
        if len(calls) == 0:
            return out
        pidx = _pid_index(proc_keys, gpid >> PID_SHIFT)
        ok = (pidx >= 0) & (corr >= 0) & (corr < (1 << _CORR_BITS))
        pos, found = calls.find((pidx[ok] << _CORR_BITS) | corr[ok])
        idx_ok = np.flatnonzero(ok)
        out[idx_ok[found]] = calls.range_at(pos[found])
        seen[pos[found]] = True
        return out

    def attribute(kind: int, s: np.ndarray, e: np.ndarray, rr: np.ndarray, gpid: np.ndarray, corr: np.ndarray,
                  name: np.ndarray | None = None, nbytes: np.ndarray | None = None,
                  ck: np.ndarray | None = None) -> None:
        hit = rr >= 0
        if hit.any():
            np.minimum.at(proj_start, rr[hit], s[hit])
            np.maximum.at(proj_end, rr[hit], e[hit])
        keep = sel[rr]
        if window is not None:
            keep |= (rr < 0) & (s >= window[0]) & (s <= window[1])
        if keep.any():
            size = int(keep.sum())
            neg = np.full(size, -1, np.int64)
            rk = rr[keep]
            launch, ltid = orphans.lookup(corr[keep], gpid[keep], rk < 0)
            batch.add(rng=rk, start=s[keep], end=e[keep], kind=np.full(size, kind, np.int64),
                      name=name[keep] if name is not None else neg,
                      nbytes=nbytes[keep] if nbytes is not None else neg,
                      copy_kind=ck[keep] if ck is not None else neg,
                      pid=pid_of_gtid(gpid[keep]), launch=launch, launch_tid=ltid)

    # With a narrowed read, GPU operations are read where a read call launched them (its
    # correlation id lies within the read calls' bounds) or where they start in the window; the
    # others can only be dropped by `attribute` (launched from an unselected range, or outside it).
    gpu_where: tuple[str, tuple[int, ...]] = ("", ())
    if narrow is not None:
        gpu_where = ("correlationId BETWEEN ? AND ? OR start BETWEEN ? AND ?",
                     (read_corr[0], read_corr[1], int(window[0]), int(window[1])))

    # 2. Kernels.
    # A table without globalPid (pruned exports) still has kernels: their process is unknown (0),
    # so no range claims them, but whole-report totals count them.
    if db.has(KERNEL, "start", "end", "correlationId"):
        kcols = db.columns(KERNEL)
        name_col = next((c for c in (kernel_name, "demangledName", "shortName") if c in kcols), "-1")
        pid_col = "globalPid" if "globalPid" in kcols else "0"
        for s, e, corr, gpid, name in db.iter_columns(KERNEL, ["start", "end", "correlationId", pid_col, name_col],
                                                      *gpu_where):
            dur = e - s
            rr = lookup(corr, gpid)
            hit = rr >= 0
            if hit.any():
                kernel_ns += np.bincount(rr[hit], weights=dur[hit], minlength=n).astype(np.int64)
                kernel_count += np.bincount(rr[hit], minlength=n)
            attribute(KIND_KERNEL, s, e, rr, gpid, corr, name=name)
            if kernel_totals:
                kt_parts.append(_pack_name_dur(name, dur))
    # 3. Copies and memsets.
    if db.has(MEMCPY, "start", "end", "correlationId"):
        cols = db.columns(MEMCPY)
        b = "bytes" if "bytes" in cols else "-1"
        ck = "copyKind" if "copyKind" in cols else "-1"
        pid_col = "globalPid" if "globalPid" in cols else "0"
        for s, e, corr, gpid, nb, kind in db.iter_columns(MEMCPY, ["start", "end", "correlationId", pid_col, b, ck],
                                                          *gpu_where):
            attribute(KIND_MEMCPY, s, e, lookup(corr, gpid), gpid, corr, nbytes=nb, ck=kind)
    if db.has(MEMSET, "start", "end", "correlationId"):
        b = "bytes" if "bytes" in db.columns(MEMSET) else "-1"
        pid_col = "globalPid" if "globalPid" in db.columns(MEMSET) else "0"
        for s, e, corr, gpid, nb in db.iter_columns(MEMSET, ["start", "end", "correlationId", pid_col, b], *gpu_where):
            attribute(KIND_MEMSET, s, e, lookup(corr, gpid), gpid, corr, nbytes=nb)

    n_ops = (np.bincount(calls.range_at(np.flatnonzero(seen)), minlength=n).astype(np.int64)
             if len(calls) else np.zeros(n, np.int64))
    totals = _kernel_totals(kt_parts) if kernel_totals else None
    return ProjectionResult(index, proj_start, proj_end, n_ops, kernel_ns, kernel_count, api_ns,
                            batch.arrays(), totals, len(calls))


def _narrow(db: NsysExport, index: RangeIndex, selected: np.ndarray | None, window: tuple[int, int],
            t_lo: int, t_hi: int) -> tuple[int, int, int, int] | None:
    """(lo, hi, kmin, kmax) of a narrowed read, or None when the window spans (nearly) all ranges.

    Why these bounds give the full read's figures: the selected ranges' calls start in [lo, hi]
    (their span and the window's); a GPU operation that starts in the window has its launch call
    read through its correlation id (kmin..kmax of the window's operations), so it meets the same
    range, selected or not, as in a full read. Calls read are a subset of the full read's, each
    treated the same way, so nothing is attributed that a full read would not attribute.
    """
    r = index.ranges
    lo, hi = int(window[0]), int(window[1])
    if selected is not None and selected.any():
        lo = min(lo, int(r.start[selected].min()))
        hi = max(hi, int(r.end[selected].max()))
    if hi - lo >= 0.5 * (t_hi - t_lo):
        return None
    kmin, kmax = _I64_MAX, -1
    for table in (KERNEL, MEMCPY, MEMSET):
        if db.has(table, "start", "correlationId"):
            got = db.query(f'SELECT min(correlationId), max(correlationId) FROM {quote_ident(table)} '
                           "WHERE start >= ? AND start <= ?", (int(window[0]), int(window[1])))
            if got and got[0][0] is not None:
                kmin, kmax = min(kmin, int(got[0][0])), max(kmax, int(got[0][1]))
    return lo, hi, kmin, kmax


class _Orphans:
    """API calls in the window that no range encloses: (process, correlationId) -> launch time and
    thread. Small: only the window's calls outside ranges are kept."""

    def __init__(self, proc_keys: np.ndarray) -> None:
        self.proc_keys = proc_keys
        self.parts: list[tuple[np.ndarray, np.ndarray, np.ndarray]] = []
        self.keys = np.zeros(0, np.int64)
        self.start = np.zeros(0, np.int64)
        self.gtid = np.zeros(0, np.int64)

    def add(self, start: np.ndarray, corr: np.ndarray, gtid: np.ndarray) -> None:
        pidx = _pid_index(self.proc_keys, gtid >> PID_SHIFT)
        ok = (pidx >= 0) & (corr >= 0) & (corr < (1 << _CORR_BITS))
        self.parts.append(((pidx[ok] << _CORR_BITS) | corr[ok], start[ok], gtid[ok]))

    def finish(self) -> None:
        if not self.parts:
            return
        keys = np.concatenate([p[0] for p in self.parts])
        order = np.argsort(keys, kind="stable")
        self.keys = keys[order]
        self.start = np.concatenate([p[1] for p in self.parts])[order]
        self.gtid = np.concatenate([p[2] for p in self.parts])[order]
        self.parts = []

    def lookup(self, corr: np.ndarray, gpid: np.ndarray, want: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(launch time, launching globalTid) of the operations where `want`, else -1."""
        launch = np.full(corr.size, -1, np.int64)
        tid = np.full(corr.size, -1, np.int64)
        if self.keys.size == 0 or not want.any():
            return launch, tid
        idx = np.flatnonzero(want)
        pidx = _pid_index(self.proc_keys, gpid[idx] >> PID_SHIFT)
        ok = (pidx >= 0) & (corr[idx] >= 0) & (corr[idx] < (1 << _CORR_BITS))
        idx, key = idx[ok], (pidx[ok] << _CORR_BITS) | corr[idx][ok]
        pos = np.minimum(np.searchsorted(self.keys, key), self.keys.size - 1)
        found = self.keys[pos] == key
        launch[idx[found]] = self.start[pos[found]]
        tid[idx[found]] = self.gtid[pos[found]]
        return launch, tid


def _pack_name_dur(name: np.ndarray, dur: np.ndarray) -> np.ndarray:
    """(name id, duration) packed in one int64 so one sort groups by name and orders durations."""
    d = np.clip(dur, 0, (1 << _DUR_BITS) - 1)
    nm = np.clip(name, 0, (1 << (63 - _DUR_BITS)) - 1)
    return (nm << _DUR_BITS) | d


def _kernel_totals(parts: list[np.ndarray]) -> KernelTotals:
    if not parts:
        z = np.zeros(0, np.int64)
        return KernelTotals(z, z, z, z, z, z.astype(np.float64))
    packed = _drain_concat(parts, np.int64)
    packed.sort()
    names = packed >> _DUR_BITS
    durs = packed & ((1 << _DUR_BITS) - 1)
    del packed
    first = np.flatnonzero(np.r_[True, names[1:] != names[:-1]])
    last = np.r_[first[1:], names.size] - 1
    count = last - first + 1
    total = np.add.reduceat(durs, first)
    med = (durs[first + (count - 1) // 2] + durs[first + count // 2]) / 2.0
    return KernelTotals(names[first], count, total, durs[first], durs[last], med)
