"""The one summarizer: phases and kernels rows from the one event model, for every format.

Why one module: nsys exports and torch (Kineto) traces must give the same rows for the same
workload, so the rules live once. Format adapters (`nsys.py`, `torch_profile.py`) fill an
`EventModel` (`readers/events.py`: ranges, GPU operations, API time per range, memory levels,
identity) and `phase_rows(model, spans, top)` computes every figure from it.

Rules (all formats): NVIDIA's same-thread projection gives each GPU operation its plain home
(`nsys stats -r nvtxgpuproj`). Nesting (`_nesting`): a range's parent is the tightest enclosing
range on its thread; a range with none on a thread other than its process's main thread nests in
the innermost range open on the main thread at its start. Phases group by the path of normalised
names along that nesting (`core/phases.normalize_range_name`), counting `instances`, and a phase's
figures hold the work of every range nested in it; library-domain ranges (NCCL, cuBLAS) take no
place in a path. Nesting you can trust: a range adopted from another thread counts only its time
inside the range it nests in (`_clipped_ends`), and a phase's `wall_ns` is the union of its
instances' intervals, so ranges of one path that overlap in time (the same name on several worker
threads under one main-thread range) count their common time once: no row is longer than its
parent row. A phase's `launch_span_ns` is its launch-time span: the union over its instances of
[start, the end of the last GPU operation the instance launched, or its own end when later]
(`_launch_span`); every operation a phase's GPU figures count lies inside it, so GPU % =
gpu_busy(_inherited)_ns / launch_span_ns never exceeds 100. Inherited figures (`*_inherited`): each GPU operation gets
one home range: NVIDIA's, except that (a) an operation launched from a thread with no open range
goes to the innermost range open on its process's main thread at launch time (autograd's backward
thread -> `## backward ##` / `update_actor`), the rule the nesting follows too, and (b) backward
work goes to its forward op's range on the main thread (emit_nvtx: the op of the same `seq`;
Kineto: the `fwd_t` of `Sequence number` / `fwdbwd`) where that is the more specific home
(`_more_specific`: no main-thread range was open then, or the forward op lies inside it). What no
rule places stays in the `(unattributed)` row's inherited figures. GPU work no range launched
counts in the step its launch (else its start) falls into.
"""
from __future__ import annotations

from typing import Any, Iterable

import numpy as np

from ..core.phases import UNATTRIBUTED, autograd_seq, canonical_stage, normalize_range_name
from ..readers.events import (
    KIND_KERNEL,
    KIND_MEMCPY,
    KIND_MEMSET,
    EventModel,
    GpuOps,
    Identity,
    NvtxRanges,
    Span,
    pid_of_gtid,
    tid_of_gtid,
)
from ..readers.nvtx_tree import RangeIndex
from ..window import is_phase_range
from . import intervals
from .kernel_category import categorize

OTHER_KERNELS = "other"


def _nesting(r: NvtxRanges, index: RangeIndex, main: dict[int, int]) -> np.ndarray:
    """Each range's parent in the model: the tightest enclosing range on its own thread; a range
    with none on a thread other than its process's main thread nests in the innermost range open
    on the main thread at its start (DDP's `nccl:all_reduce` on autograd's thread under `##
    backward ##`), the rule launches from such threads follow for their GPU work."""
    parent = index.parent.copy()
    roots = np.flatnonzero(parent < 0)
    roots = roots[~np.isin(r.gtid[roots], np.fromiter(main.values(), np.int64, len(main)))]
    pids = r.pid[roots]
    for pid, g in main.items():
        h = roots[pids == pid]
        if h.size:
            parent[h] = index.innermost(g, r.start[h], r.start[h])
    return parent


def _parents_first(r: NvtxRanges, main: dict[int, int]) -> np.ndarray:
    """An order of the ranges in which every parent of the model's nesting comes before its
    children: main-thread ranges, then the others (each thread's own order puts parents first)."""
    on_main = np.isin(r.gtid, np.fromiter(main.values(), np.int64, len(main)))
    return np.concatenate([np.flatnonzero(on_main), np.flatnonzero(~on_main)])


def _phase_mask(r: NvtxRanges) -> np.ndarray:
    """Per range: made by verl or the user (not a library NVTX domain); judged once per domain."""
    codes, domains = r.domain_codes()
    return np.array([is_phase_range(d) for d in domains], bool)[codes] if domains else np.zeros(len(r), bool)


def _owner(r: NvtxRanges, parent: np.ndarray, order: np.ndarray) -> np.ndarray:
    """Each range's phase: itself, or its nearest ancestor outside library NVTX domains."""
    own = np.arange(len(r))
    is_phase = _phase_mask(r)
    for i in order[~is_phase[order]].tolist():
        p = parent[i]
        own[i] = own[p] if p >= 0 else -1
    return own


def _adopted(index: RangeIndex, parent: np.ndarray) -> dict[int, list[int]]:
    """Range -> the other threads' ranges the model nests anywhere below it (`_nesting`), so a
    phase's figures hold their work too."""
    out: dict[int, list[int]] = {}
    for h in np.flatnonzero((index.parent < 0) & (parent >= 0)).tolist():
        p = int(parent[h])
        while p >= 0:
            out.setdefault(p, []).append(h)
            p = int(parent[p])
    return out


def _in_span(ops: GpuOps, ids: np.ndarray, lo: int, hi: int, pid: int | None) -> np.ndarray:
    """The operations of `ids` that belong to the step span [lo, hi] of process `pid` (None: any)."""
    if pid is not None:
        ids = ids[ops.pid[ids] == pid]
    w = ops.when(ids)
    return ids[(w >= lo) & (w <= hi)]


def phase_rows(model: EventModel, spans: list[Span], top: int) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """phases and kernels rows of a step (`spans`: its spans on the model's clock): one row per
    (process, path) of the ranges starting in the spans, one `(unattributed)` row per span for the
    GPU work in it that no range launched, and the top `top` kernels per (process, phase)."""
    r, index, ident, offset = model.ranges, model.index, model.ident, model.offset_ns
    selected = r.selected(spans)
    ops = model.ops
    keep = ops.rng < 0          # the step's ranges' work, and work no range launched
    keep[~keep] = selected[ops.rng[~keep]]
    ops = ops.take(np.flatnonzero(keep)[np.argsort(ops.rng[keep], kind="stable")])
    rng = ops.rng
    names = model.kernel_names
    uniq, inv = np.unique(ops.name, return_inverse=True)
    cat_of = np.array([categorize(*reversed(names.get(int(n), ("", "")))) for n in uniq.tolist()], dtype=object)
    cat = cat_of[inv.reshape(-1)] if uniq.size else np.zeros(0, dtype=object)
    cat[ops.kind == KIND_MEMCPY] = "memcpy"
    cat[ops.kind == KIND_MEMSET] = "memset"
    is_phase = _phase_mask(r)
    main = _main_threads(r, index)
    parent = _nesting(r, index, main)
    owner = _owner(r, parent, _parents_first(r, main))
    adopted = _adopted(index, parent)
    end = _clipped_ends(r, index, parent)
    step_of_pid = {s.pid: s.step for s in spans}
    default_step = spans[0].step if spans else None

    # Group selected phase ranges by (pid, path of normalised names): repeated instances add up.
    irng = _inherited_ranges(r, index, parent, main, ops, selected)
    iorder = np.argsort(irng, kind="stable")
    irng_sorted = irng[iorder]

    groups = _phase_groups(r, parent, owner, np.flatnonzero(selected & is_phase))
    phases: list[dict[str, Any]] = []
    for (pid, path), members in groups.items():
        tree = index.subtrees([j for i in members.tolist() for j in (i, *adopted.get(i, ()))] if adopted else members)
        sel_ops = _runs_of(rng, tree)
        inh_ops = iorder[_runs_of(irng_sorted, tree)]
        starts, ends = r.start[members], r.end[members]
        lvl = model.memory.get(pid)
        peak = None
        if lvl is not None:
            peak = max(max(0, lvl.peak(s, e)) for s, e in zip(starts.tolist(), ends.tolist()))
        row = _numbers(ops, cat, sel_ops)
        wall = _covered(starts, end[members])
        both = np.concatenate((sel_ops, inh_ops))
        span = _launch_span(r, ops, starts, end[members], np.concatenate((rng[sel_ops], irng[inh_ops])), both) \
            if both.size else wall
        name = path[-1]
        phases.append({
            **ident.keys(step_of_pid.get(pid, default_step)), "pid": pid,
            "phase": name, "stage": canonical_stage(name, ident.role), "parent": path[-2] if len(path) > 1 else None,
            "depth": len(path) - 1, "path": PATH_SEP.join(path), "instances": len(members),
            "start_ns": offset + int(starts.min()), "wall_ns": wall, **row,
            **_inherited_numbers(ops, inh_ops),
            "idle_ns": max(0, wall - row["gpu_busy_ns"]),
            "api_ns": int(model.api_ns[tree].sum()), "mem_peak_bytes": peak, "launch_span_ns": span,
        })
    # GPU work in the step that no range launched (other threads, no NVTX): one row per process.
    un = np.flatnonzero(rng < 0)
    un_inh = np.flatnonzero(irng < 0)
    for s in spans:
        olo, ohi = s.gpu
        ids = _in_span(ops, un, olo, ohi, s.pid)
        if ids.size == 0:
            continue
        left = _in_span(ops, un_inh, olo, ohi, s.pid)
        row = _numbers(ops, cat, ids)
        wall = s.hi - s.lo
        both = np.concatenate((ids, left))
        span = intervals.union_length(np.append(ops.start[both], s.lo), np.append(ops.end[both], s.hi))
        phases.append({
            **ident.keys(s.step), "pid": s.pid if s.pid is not None else int(ops.pid[ids[0]]),
            "phase": UNATTRIBUTED, "stage": "other", "parent": None, "depth": 0, "path": UNATTRIBUTED,
            "instances": 1, "start_ns": offset + s.lo, "wall_ns": wall, **row, **_inherited_numbers(ops, left),
            "idle_ns": max(0, wall - row["gpu_busy_ns"]), "api_ns": None, "mem_peak_bytes": None,
            "launch_span_ns": span,
        })
    kernels = _kernel_rows(ident, r, ops, cat, names, owner, step_of_pid, default_step, spans, top)
    return phases, kernels


def _clipped_ends(r: NvtxRanges, index: RangeIndex, parent: np.ndarray) -> np.ndarray:
    """Each range's end as the model's nesting counts it: a range adopted from another thread
    (`_nesting`: it nests in the main-thread range open at its start) and everything nested in it
    on its thread end no later than that range, so a child's time lies inside its parent's."""
    end = r.end
    adopted = np.flatnonzero((index.parent < 0) & (parent >= 0))
    if adopted.size == 0 or not (end[adopted] > end[parent[adopted]]).any():
        return end
    end = end.copy()
    end[adopted] = np.minimum(end[adopted], end[parent[adopted]])
    up = index.parent
    has = np.flatnonzero(up >= 0)
    while True:   # down each thread's nesting, one level a round
        new = np.minimum(end[has], end[up[has]])
        if not (new < end[has]).any():
            return end
        end[has] = new


def _launch_span(r: NvtxRanges, ops: GpuOps, starts: np.ndarray, ends: np.ndarray, home: np.ndarray,
                 ids: np.ndarray) -> int:
    """A phase's launch-time span: the union over its instances [starts, ends] of [start, the end of
    the last GPU operation the instance launched, or its own end when later]. `ids` are the
    operations its figures count and `home` their home ranges (each inside one instance, found by
    the home's start). An operation a clock puts before its instance's start joins the union with
    its own interval, so every counted operation lies inside the span."""
    if starts.size > 1 and not (starts[1:] >= starts[:-1]).all():   # instances on several threads
        order = np.argsort(starts, kind="stable")
        starts, ends = starts[order], ends[order]
    e = ends.copy()
    at = np.clip(np.searchsorted(starts, r.start[home], "right") - 1, 0, starts.size - 1)
    np.maximum.at(e, at, ops.end[ids])
    early = ops.start[ids] < starts[at]
    if early.any():
        return intervals.union_length(np.concatenate((starts, ops.start[ids][early])),
                                      np.concatenate((e, ops.end[ids][early])))
    return _covered(starts, e)


def _covered(starts: np.ndarray, ends: np.ndarray) -> int:
    """The time covered by intervals: their sum where they are in start order and do not overlap
    (the instances of a phase on one thread), else their union."""
    if starts.size < 2 or ((starts[1:] >= starts[:-1]).all() and (starts[1:] >= ends[:-1]).all()):
        return int((ends - starts).clip(min=0).sum())
    return intervals.union_length(starts, ends)


def _runs_of(sorted_keys: np.ndarray, ids: Iterable[int]) -> np.ndarray:
    """Positions in `sorted_keys` whose key is one of `ids`, run by run in the order of `ids`: the
    concatenation of one `arange(searchsorted(left), searchsorted(right))` per id, computed with two
    vectorised searchsorted calls (issue 25: 3.7M scalar calls on a 720k-range capture)."""
    keys = np.asarray(ids if isinstance(ids, np.ndarray) else list(ids), dtype=np.int64)
    lo = np.searchsorted(sorted_keys, keys, "left")
    n = np.searchsorted(sorted_keys, keys, "right") - lo
    total = int(n.sum())
    if total == 0:
        return np.zeros(0, np.int64)
    return (np.repeat(lo - (np.cumsum(n) - n), n) + np.arange(total)).astype(np.int64, copy=False)


PATH_SEP = " > "


def _phase_groups(r: NvtxRanges, parent: np.ndarray, owner: np.ndarray, ids: np.ndarray
                  ) -> dict[tuple[int, tuple[str, ...]], np.ndarray]:
    """(pid, path) -> the ranges of `ids` with that path in that process (ascending), in the order of
    each group's first range; a path is the normalised names of a range's phase ancestors and itself
    (`step > gen > aten::mm`).

    Library-domain ranges (NCCL, cuBLAS) take no place in a path; their work belongs to the phase
    around them (`owner`). Why columns: 10^5-10^6 ranges share a few thousand paths (issue 25), so a
    path is an integer id (its parent path's id and its own name's), found level by level with
    numpy, and spelled out once per distinct path."""
    if ids.size == 0:
        return {}
    text_code, texts = r.text_codes()
    norm: dict[str, int] = {}
    names_of = np.array([norm.setdefault(normalize_range_name(t), len(norm)) for t in texts], np.int64)
    names = list(norm)
    name = names_of[text_code]
    up = np.where(parent >= 0, owner[np.maximum(parent, 0)], -1)   # the phase a range's path extends
    level = np.zeros(len(r), np.int64)
    cur = up.copy()
    while (live := cur >= 0).any():
        level[live] += 1
        cur[live] = up[cur[live]]
    path_id = np.full(len(r), -1, np.int64)
    path_up: list[int] = []        # path id -> its parent path's id (-1: none)
    path_name: list[int] = []      # path id -> its last name
    for lv in range(int(level.max()) + 1):
        at = np.flatnonzero(level == lv)
        if at.size == 0:
            continue
        base = path_id[up[at]] if lv else np.full(at.size, -1, np.int64)
        pairs, inv = np.unique((base + 1) * len(names) + name[at], return_inverse=True)   # (base, name) order
        path_id[at] = len(path_up) + inv.reshape(-1)
        path_up += (pairs // len(names) - 1).tolist()
        path_name += (pairs % len(names)).tolist()
    spelled: dict[int, tuple[str, ...]] = {}

    def spell(k: int) -> tuple[str, ...]:
        if k not in spelled:
            spelled[k] = (spell(path_up[k]) if path_up[k] >= 0 else ()) + (names[path_name[k]],)
        return spelled[k]

    pids, pid_code = np.unique(pid_of_gtid(r.gtid[ids]), return_inverse=True)
    keys, first, inv = np.unique(pid_code.reshape(-1) * len(path_up) + path_id[ids], return_index=True,
                                 return_inverse=True)   # (pid, path) order, as one integer per range
    inv = inv.reshape(-1)
    members = np.split(ids[np.argsort(inv, kind="stable")], np.cumsum(np.bincount(inv, minlength=len(keys)))[:-1])
    return {(int(pids[k // len(path_up)]), spell(int(k % len(path_up)))): members[g]
            for g, k in ((g, int(keys[g])) for g in np.argsort(first).tolist())}


def _main_threads(r: NvtxRanges, index: RangeIndex) -> dict[int, int]:
    """pid -> globalTid of its main (range-issuing) thread: the thread whose id is the pid when it
    opened ranges, else the thread with most ranges."""
    out: dict[int, int] = {}
    counts: dict[int, int] = {}
    for g in index.threads:
        counts[g] = int(np.count_nonzero(r.gtid == g))
    for g in sorted(index.threads, key=lambda g: -counts[g]):
        pid = int(pid_of_gtid(g))
        if int(tid_of_gtid(g)) == pid:
            out[pid] = g
        else:
            out.setdefault(pid, g)
    return out


def _seq_homes(r: NvtxRanges, index: RangeIndex, parent: np.ndarray, main: dict[int, int]) -> np.ndarray:
    """Range index -> the forward op range (main thread) whose autograd `seq` it shares, for ranges
    on other threads (emit_nvtx backward ops and everything nested in them), where `_more_specific`
    lets it win over the main-thread range the backward range nests in; -1 elsewhere."""
    n = len(r)
    home = np.full(n, -1, np.int64)
    seq = {i: autograd_seq(t) for i, t in enumerate(r.text) if "seq" in t}
    if not seq:
        return home
    mains = set(main.values())
    forward: dict[tuple[int, int], list[int]] = {}
    for i, q in seq.items():
        if q is not None and int(r.gtid[i]) in mains:
            forward.setdefault((int(pid_of_gtid(int(r.gtid[i]))), q), []).append(i)
    if not forward:
        return home
    anchor = np.full(n, -1, np.int64)    # the main-thread range a backward range nests in
    for i in range(n):  # parents sort before children on their own thread
        if int(r.gtid[i]) in mains:
            continue
        up = int(index.parent[i])
        anchor[i] = parent[i] if up < 0 else anchor[up]
        q = seq.get(i)
        f = -1
        if q is not None:
            cands = [c for c in forward.get((int(pid_of_gtid(int(r.gtid[i]))), q), ()) if r.start[c] <= r.start[i]]
            if cands:  # the outermost op of that seq, the latest forward pass before this backward
                f = min(cands, key=lambda c: (index.depth[c], -int(r.start[c])))
        home[i] = f if f >= 0 or up < 0 else home[up]
    return np.where(_more_specific(index.parent, anchor, home), home, -1)


def _more_specific(parent: np.ndarray, at: np.ndarray, fwd: np.ndarray) -> np.ndarray:
    """The one forward-op rule, for emit_nvtx `seq` and Kineto `Sequence number` alike: backward
    work goes to its forward op's range `fwd` instead of the main-thread range `at` open at backward
    time only where that is the more specific home: no range was open (`at` < 0), or `fwd` lies
    inside `at` (`update_actor > micro_batch3 > ... aten::mm` rather than `update_actor`). A range
    open at backward time that does not hold the forward op (the user's own `## backward ##` beside
    `## forward ##`) keeps the work: it is what the user named that time."""
    take = (fwd >= 0) & ((at < 0) | (at == fwd))
    cur = np.where(take | (fwd < 0) | (at < 0), -1, fwd)
    while (cur >= 0).any():   # walk up from the forward range: is `at` an ancestor?
        cur = np.where(cur >= 0, parent[np.maximum(cur, 0)], -1)
        hit = (cur >= 0) & (cur == at)
        take |= hit
        cur[hit] = -1
    return take


def _inherited_ranges(r: NvtxRanges, index: RangeIndex, parent: np.ndarray, main: dict[int, int],
                      ops: GpuOps, selected: np.ndarray) -> np.ndarray:
    """Each kept GPU operation's home range for the inherited figures (module docstring), -1 when none."""
    rng = ops.rng
    irng = rng.copy()
    if len(r) == 0 or rng.size == 0:
        return np.full(rng.size, -1, np.int64)
    home = _seq_homes(r, index, parent, main)
    on = rng >= 0
    h = np.where(on, home[np.maximum(rng, 0)], -1)
    irng = np.where(h >= 0, h, irng)
    orphan = (rng < 0) & (ops.launch >= 0)
    ft, ftid = ops.fwd_t, ops.fwd_tid
    for pid in np.unique(ops.pid[orphan]).tolist():
        g = main.get(int(pid))
        if g is None:
            continue
        m = np.flatnonzero(orphan & (ops.pid == pid))
        irng[m] = index.innermost(g, ops.launch[m], ops.launch[m])
        if ft is not None and ftid is not None:   # Kineto: the forward op of the backward op running at launch
            j = m[(ft[m] >= 0) & (ftid[m] == g)]
            fwd = index.innermost(g, ft[j], ft[j])
            take = _more_specific(index.parent, irng[j], fwd)
            irng[j[take]] = fwd[take]
    ok = irng >= 0
    ok[ok] = selected[irng[ok]]
    return np.where(ok, irng, -1)


def _inherited_numbers(ops: GpuOps, ids: np.ndarray) -> dict[str, int]:
    """GPU busy, kernel time and kernel count of the operations a phase inherits."""
    k = ops.kind[ids] == KIND_KERNEL
    dur = ops.end[ids] - ops.start[ids]
    return {"gpu_busy_inherited_ns": intervals.union_length(ops.start[ids], ops.end[ids]),
            "kernel_inherited_ns": int(dur[k].sum()), "kernel_count_inherited": int(k.sum())}


def _numbers(ops: GpuOps, cat: np.ndarray, ids: np.ndarray) -> dict[str, int]:
    """GPU numbers of a set of operations (indices into ops)."""
    s, e, kind = ops.start[ids], ops.end[ids], ops.kind[ids]
    dur = e - s
    k = kind == KIND_KERNEL
    mc = kind == KIND_MEMCPY
    ms = kind == KIND_MEMSET
    c = cat[ids] == "comm" if ids.size else np.zeros(0, bool)
    nb = ops.nbytes[ids]
    ck = ops.copy_kind[ids]
    comm_s, comm_e = s[c & k], e[c & k]
    comp = k & ~c
    return {
        "gpu_busy_ns": intervals.union_length(s, e),
        "kernel_ns": int(dur[k].sum()), "kernel_count": int(k.sum()),
        "memcpy_ns": int(dur[mc].sum()),
        "memcpy_h2d_bytes": int(nb[mc & (ck == 1)].sum()),
        "memcpy_d2h_bytes": int(nb[mc & (ck == 2)].sum()),
        "memcpy_d2d_bytes": int(nb[mc & (ck == 3)].sum()),
        "memcpy_other_bytes": int(nb[mc & (ck == 0)].clip(min=0).sum()),
        "memset_ns": int(dur[ms].sum()),
        "comm_ns": intervals.union_length(comm_s, comm_e),
        "exposed_comm_ns": intervals.exposed_length(comm_s, comm_e, s[comp], e[comp]),
    }


def _kernel_rows(ident: Identity, r: NvtxRanges, ops: GpuOps, cat: np.ndarray,
                 names: dict[int, tuple[str, str]], owner: np.ndarray,
                 step_of_pid: dict, default_step: int | None, spans: list[Span], top: int) -> list[dict[str, Any]]:
    """Top kernels per (process, phase) by total time, plus one `other` row so totals add up.

    Grouped with numpy sorts (no pandas: its import alone is half a torch summary's memory)."""
    k = np.flatnonzero(ops.kind == KIND_KERNEL)
    if k.size == 0:
        return []
    rng = ops.rng[k]
    if (rng < 0).any():  # unattributed kernels count only inside their process's span
        inside = rng >= 0
        for s in spans:
            inside |= np.isin(k, _in_span(ops, k[~inside], *s.gpu, s.pid))
        k, rng = k[inside], rng[inside]
    own = np.where(rng >= 0, owner[np.maximum(rng, 0)], -1) if owner.size else np.full(rng.size, -1, np.int64)
    u_own, inv = np.unique(own, return_inverse=True)
    labels = [normalize_range_name(r.text[o]) if o >= 0 else UNATTRIBUTED for o in u_own.tolist()]
    u_lab, lab_of = np.unique(np.array(labels, dtype=object), return_inverse=True)
    ph = lab_of.reshape(-1)[inv.reshape(-1)]
    pid, name, dur = ops.pid[k], ops.name[k], ops.end[k] - ops.start[k]
    o = np.lexsort((dur, name, ph, pid))             # groups (pid, phase, kernel), durations ascending
    pid, ph, name, dur, kc = pid[o], ph[o], name[o], dur[o], cat[k][o]
    cut = np.flatnonzero((np.diff(pid) != 0) | (np.diff(ph) != 0) | (np.diff(name) != 0)) + 1
    a = np.concatenate(([0], cut))
    b = np.concatenate((cut, [pid.size]))
    cnt, tot = b - a, np.add.reduceat(dur, a)
    mid = a + (cnt - 1) // 2
    med = (dur[mid] + dur[a + cnt // 2]) / 2
    first = np.minimum.reduceat(o, a)               # (pid, phase) groups in the order ops first show them
    gkey = [(int(p), int(q)) for p, q in zip(pid[a].tolist(), ph[a].tolist())]
    order: dict[tuple[int, int], list[int]] = {}
    for g in sorted(range(a.size), key=lambda g: first[g]):
        order.setdefault(gkey[g], []).append(g)
    rows: list[dict[str, Any]] = []
    for (p, q), members in order.items():
        members.sort(key=lambda g: (-int(tot[g]), int(name[a[g]])))
        head, rest = members[:top], members[top:]
        keys = ident.keys(step_of_pid.get(p, default_step))
        keys["pid"] = p
        phase = str(u_lab[q])
        stage = "other" if phase == UNATTRIBUTED else canonical_stage(phase, ident.role)
        for g in head:
            n = int(name[a[g]])
            dem, short = names.get(n, (f"<kernel {n}>",) * 2)
            rows.append({**keys, "phase": phase, "stage": stage, "kernel": dem, "kernel_short": short,
                         "category": kc[a[g]], "count": int(cnt[g]), "total_ns": int(tot[g]),
                         "avg_ns": float(tot[g]) / int(cnt[g]), "min_ns": int(dur[a[g]]), "max_ns": int(dur[b[g] - 1]),
                         "median_ns": float(med[g])})
        if rest:
            c, t = int(cnt[rest].sum()), int(tot[rest].sum())
            rows.append({**keys, "phase": phase, "stage": stage, "kernel": OTHER_KERNELS, "kernel_short": OTHER_KERNELS,
                         "category": "other", "count": c, "total_ns": t, "avg_ns": t / c,
                         "min_ns": int(dur[a[rest]].min()), "max_ns": int(dur[b[rest] - 1].max()), "median_ns": None})
    return rows
