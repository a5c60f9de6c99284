"""Window: find every profiled RL step in every source and choose the steady-state one.

Why: step 1 of an RL run pays CUDA/cuDNN start-up, compilation and cache warm-up (4.2 s against
0.2 s in the H200 fixture), so summarising it would mislead. verl profiles steps in several ways and
each leaves different step boundaries; this module turns all of them into `StepSpan`s on one
absolute UTC time axis (`TARGET_INFO_SESSION_START_TIME.utcEpochNs + t` for nsys: each
capture-range report has its own time base), then picks one step for the whole run and says why in
one line.

Step boundaries, by source:
- `step` NVTX ranges of the controller/trainer: the k-th instance is step k (or the k-th entry of
  the config's `global_profiler.steps` when known) -> boundary `nvtx_step`. Other real markers:
  torch's `ProfilerStep#N` (-> step N+1, `profiler_step`), `step<N>` names (-> step N,
  `step_name`) and ranges matching the user's `--step-range REGEX` (numbered in order,
  `step_range`; when given, only they cut steps).
- capture-range reports: a series is found from the reports' content (`report_series`: the
  recording host and the one process whose ranges or GPU work a report holds; members follow one
  another in time), ordered by session start; the name's `<base>.<k>` is only a hint (it orders
  ties, gives the capture numbers where they agree with the session order, and groups reports
  whose content cannot say). Their step units (step ranges, else the whole file) are numbered in
  that order, from the config's profiled steps when known -> boundary `capture_range`; the user's
  `--step-range` ranges keep `step_range`, numbered across the series.
- files without step ranges (discrete mode: one file per stage call; continuous windows of a
  worker): top-level stage ranges are aligned on absolute time with a controller's `step` ranges
  when one is present (`aligned`), else cut where the stage sequence starts repeating (`discrete`
  / `stage_sequence`). In a discrete series a role's step is the span of its calls in that step,
  across the files (first call's start to last call's end): the waiting between calls is its
  `other`, and no stage outlasts it.
- verl's fully-async trainer: a step per weight sync (`timing_s/param_sync`), numbered by the
  parameter version it made -> boundary `param_sync`. Only verl's own stage names take part in that: a capture of another
  framework (torch emit_nvtx op ranges, Megatron, vLLM) has no step structure verlprof could know,
  so without markers its window is the whole capture (`whole_file`, one span per process) and the
  reason says so; steps are never invented.
- torch traces go through the same markers (`torch_steps.py`) and come numbered, as memory
  snapshots (`snapshot_dir`) do, through `SourceSteps.from_spans`.

Per-source discovery is a plain picklable function (`torch_steps.source_steps_item`, every format)
so the pipeline runs it anywhere; choosing is one cheap pure function over all sources
(`choice.pick_window`: numbering here, `choose_window`, and each source's spans of the chosen
step), which every caller uses. Files that name no step are numbered as their process's series
(series.py). A whole capture (no markers) runs from its first event to the end of the GPU work it
launched; a source with no GPU work and no ranges makes the window line say there is nothing to
summarize.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Sequence

import numpy as np

from ..core import formats
from ..core.errors import VerlprofError
from ..core.phases import UNSTEADY_STAGES, step_marker, verl_stage
from ..readers.nsys_sqlite import NsysExport, NvtxRanges
from .identity import identity_from_artifact, identity_from_path  # noqa: F401 - their old home
from .series import capture_orders, capture_series, capture_step, number_trace_series, series_numbers
from .types import SourceIdentity, StepSpan

# NVTX domains of libraries (cuBLAS, NCCL ...): their ranges are not verl phases.
LIBRARY_DOMAINS = frozenset({
    "cublas", "cublaslt", "cudnn", "nccl", "cub", "thrust", "cufft", "cusparse", "cusolver", "curand",
    "npp", "nvjpeg", "nvcomp", "cutensor", "nvshmem", "cudla", "tensorrt", "nvtx3",
})


#: Boundaries that come from a real step marker inside a source (not from file grouping).
MARKER_BOUNDARIES = frozenset({"nvtx_step", "profiler_step", "step_name", "step_range", "param_sync"})
#: Marker boundaries numbered by their order in the source (the others carry their own number).
_ORDERED_MARKERS = frozenset({"nvtx_step", "step_range"})
#: The note a source carries when the user's --step-range matched none of its ranges.
STEP_RANGE_UNMATCHED = "--step-range matched no range:"
NO_MARKERS = ("no step markers (verl `step` ranges, capture-range files, ProfilerStep#N or step<N> ranges); "
              "pass --step-range REGEX to name the range that marks a step")


def compile_step_range(pattern: str | None) -> "re.Pattern[str] | None":
    """The user's `--step-range REGEX`, compiled; a one-line VerlprofError when it is not valid."""
    if not pattern:
        return None
    try:
        return re.compile(pattern)
    except re.error as exc:
        raise VerlprofError(None, f"--step-range {pattern!r} is not a valid regular expression ({exc})") from None


def is_phase_range(domain: str | None) -> bool:
    """True for ranges verl (or the user) made, False for library-internal NVTX domains."""
    return not domain or domain.strip().lower() not in LIBRARY_DOMAINS


@dataclass(frozen=True)
class TopRange:
    """A top-level verl range of a source (absolute UTC ns), for grouping files into steps."""

    name: str
    stage: str
    start_ns: int
    end_ns: int
    pid: int | None = None


@dataclass(frozen=True)
class SourceSteps:
    """What the window stage learned about one source. Cheap to compute: NVTX + metadata only.

    `path` is the local file (never written to outputs); `offset_ns` turns the source's own time
    into absolute UTC ns (`abs = offset_ns + t`). `steps` are numbered once `resolve_steps` ran.
    """

    ident: SourceIdentity
    path: str
    offset_ns: int
    steps: tuple[StepSpan, ...] = ()
    top: tuple[TopRange, ...] = ()
    unsteady: tuple[TopRange, ...] = ()
    span: tuple[int, int] | None = None
    notes: tuple[str, ...] = ()
    tool_version: str | None = None     # nsys (or torch) version that wrote the source
    # Added later (additive): (pid, start, end) of every process's ranges, for whole-capture windows.
    pid_spans: tuple[tuple[int, int, int], ...] = ()
    # (pid, first start, last end) of every process's GPU work (kernels, memcpys, memsets): "the
    # whole capture" runs from the first to the last event of any kind.
    gpu_spans: tuple[tuple[int, int, int], ...] = ()
    # What ties the reports of one profiled process together, read from the report itself (a hash
    # of the recording host and the pid of the one process whose ranges or GPU work it holds): the
    # capture-range reports of a series share it whatever their files are called. None when the
    # report holds several processes, or none.
    series: str | None = None

    @property
    def has_step_ranges(self) -> bool:
        return any(s.boundary in MARKER_BOUNDARIES for s in self.steps)

    @classmethod
    def from_spans(cls, ident: SourceIdentity, spans: Sequence[StepSpan], path: str = "",
                   unsteady: Sequence[TopRange] = ()) -> "SourceSteps":
        """Wrap step spans another reader found (torch traces, memory snapshots)."""
        spans = tuple(replace(s, source=s.source or ident.source) for s in spans)
        lo = min((s.start_ns for s in spans), default=None)
        hi = max((s.end_ns for s in spans), default=None)
        return cls(ident, path, 0, spans, (), tuple(unsteady), (lo, hi) if lo is not None else None)


# ----------------------------------------------------------------------------------------------
# Per-source discovery (nsys)
# ----------------------------------------------------------------------------------------------


def nsys_source_steps(path: "str | Path | NsysExport", ident: SourceIdentity, step_range: str | None = None
                      ) -> SourceSteps:
    """Step ranges, top-level stage ranges and unsteady ranges of one nsys export (a path, or the
    export already open in this pass)."""
    with NsysExport.use(path) as db:
        path = path if not isinstance(path, NsysExport) else db.path
        offset = db.session_start_ns()
        ranges = db.nvtx_ranges()
        notes = () if offset is not None else ("no TARGET_INFO_SESSION_START_TIME: times are relative",)
        src = source_steps_from_ranges(ident, str(path), offset or 0, ranges, notes, step_range)
        src = gpu_only_spans(db, src, offset or 0)
        return replace(src, tool_version=db.nsys_version, series=report_series(db, src))


def report_series(db: NsysExport, src: "SourceSteps") -> str | None:
    """The series key of one report, from its content: the recording host (`TARGET_INFO_SYSTEM_ENV`
    row `Hostname`, hashed: the key never leaves the run) and the pid of the one process whose
    ranges or GPU work the report holds. nsys writes one report per capture range of a process
    (`-o worker_process_%p` -> `.1`, `.2` ...): they share this key, and their session start times
    (`offset_ns`) give their order, whatever a user renamed the files to."""
    import hashlib

    pids = {p for p, _a, _b in src.pid_spans} | {p for p, _a, _b in src.gpu_spans}
    if not pids and src.steps:
        pids = {s.pid for s in src.steps if s.pid is not None}
    if not pids and src.top:
        pids = {t.pid for t in src.top if t.pid is not None}
    if len(pids) != 1:
        return None
    host = ""
    if db.has("TARGET_INFO_SYSTEM_ENV", "name", "value"):
        rows = db.query("SELECT value FROM TARGET_INFO_SYSTEM_ENV WHERE name = 'Hostname' LIMIT 1")
        host = str(rows[0][0]) if rows and rows[0][0] is not None else ""
    return f"{hashlib.sha256(host.encode()).hexdigest()[:12]}:{pids.pop()}"


def source_steps_from_ranges(ident: SourceIdentity, path: str, offset: int, r: NvtxRanges,
                             notes: tuple[str, ...] = (), step_range: str | None = None) -> SourceSteps:
    """Build a SourceSteps from already-read NVTX ranges (export-relative times). `step_range`:
    the user's regex; when given, only ranges it matches (`re.search` on the raw name) are steps."""
    from ..readers.nvtx_tree import RangeIndex

    n = len(r)
    if n == 0:
        return SourceSteps(ident, path, offset, notes=notes + ("no NVTX ranges",))
    user_re = compile_step_range(step_range)
    ix = RangeIndex.build(r)
    pids = r.pid
    # Judged once per distinct name and domain, then as columns (issue 25: 10^6 ranges, few names):
    # a step marker; else a top range (no kept parent, or a marker for parent) and/or an unsteady one.
    codes, names = r.text_codes()
    marks = [(("step_range", None) if user_re.search(t) else None) if user_re else step_marker(t) for t in names]
    stages = [verl_stage(t, ident.role) for t in names]
    is_marker = np.array([m is not None for m in marks], bool)[codes]
    dom_codes, domains = r.domain_codes()
    keep = np.array([is_phase_range(d) for d in domains], bool)[dom_codes]
    parent = ix.parent
    has_kept_parent = (parent >= 0) & keep[np.maximum(parent, 0)] & ~is_marker[np.maximum(parent, 0)]
    plain = keep & ~is_marker
    is_top = plain & ~has_kept_parent
    is_unsteady = plain & np.array([st in UNSTEADY_STAGES for st in stages], bool)[codes]
    steps: list[StepSpan] = []
    per_pid_k: dict[int, int] = {}
    for i in np.flatnonzero(keep & is_marker).tolist():
        text, pid, mark = r.text[i], int(pids[i]), marks[codes[i]]
        k = per_pid_k[pid] = per_pid_k.get(pid, 0) + 1
        steps.append(StepSpan(mark[1] or k, offset + int(r.start[i]), offset + int(r.end[i]), mark[0], ident.source,
                              (), pid, text if mark[0] != "nvtx_step" else f"{text} #{k}"))

    def ranges_of(mask: np.ndarray) -> list[TopRange]:
        return [TopRange(r.text[i], stages[codes[i]], offset + int(r.start[i]), offset + int(r.end[i]), int(pids[i]))
                for i in np.flatnonzero(mask).tolist()]

    if user_re is None:
        steps, resync = _by_parameter_version(r, steps, offset, ident.source)
        notes = notes + resync
    if user_re is not None and not steps:
        notes = notes + (f"{STEP_RANGE_UNMATCHED} {step_range!r}",)
    top, unsteady = ranges_of(is_top), ranges_of(is_unsteady)
    span = (offset + int(r.start.min()), offset + int(r.end.max()))
    pid_spans = tuple((int(p), offset + int(r.start[pids == p].min()), offset + int(r.end[pids == p].max()))
                      for p in np.unique(pids[keep])) if keep.any() else ()
    return SourceSteps(ident, path, offset, tuple(steps), tuple(top), tuple(unsteady), span, notes,
                       pid_spans=pid_spans)


#: verl's fully-async trainer syncs the weights to the rollouter inside this range
#: (`FullyAsyncTrainer._trigger_parameter_sync_after_step`: `marked_timer("timing_s/param_sync")`),
#: right after raising `current_param_version`.
PARAM_SYNC_RANGE = "timing_s/param_sync"


#: The note an out-of-memory snapshot carries (verl's OOM observer, `oom_<timestamp>/`): the
#: memory at a failure, not a profiled step; the window line reads it.
OOM_NOTE = "out of memory:"
#: The note a source carries for a weight sync that closed no training step (window line reads it).
RESYNC_NOTE = "fully-async re-sync:"


def _by_parameter_version(r: NvtxRanges, steps: list[StepSpan], offset: int, source: str
                          ) -> tuple[list[StepSpan], tuple[str, ...]]:
    """Fully-async training: a step ends at each weight sync that closes a training step and is
    numbered by the parameter version it made. A process whose ranges hold `timing_s/param_sync`
    gets one step per such sync k (version k: counted from the trace's first sync, the trainer's
    `current_param_version` starting at 0), from the first `step` range after sync k-1 (or the
    trace's first) to the end of sync k; its `step` ranges (several per version,
    `trigger_parameter_sync_step`) are then parts of it, not steps. A sync with no `step` range
    since the previous one trained nothing: verl's `FullyAsyncTrainer.fit` ends with one more
    `_fit_update_weights()` when the version is not a multiple of `trainer.test_freq`, re-sending
    the same version (`current_param_version` is raised only in `_fit_update_local_step`); it is
    noted as a re-sync, not a version. Steps after the last sync belong to no version yet and are
    left out."""
    codes, names = r.text_codes()
    sync_code = [i for i, t in enumerate(names) if t == PARAM_SYNC_RANGE]
    if not sync_code:
        return steps, ()
    is_sync = codes == sync_code[0]
    out: list[StepSpan] = []
    notes: list[str] = []
    synced: set[int] = set()
    for pid in np.unique(r.pid[is_sync]).tolist():
        mine = [s for s in steps if s.pid == pid and s.boundary == "nvtx_step"]
        idx = np.flatnonzero(is_sync & (r.pid == pid))
        idx = idx[np.argsort(r.start[idx], kind="stable")]
        prev_end = None
        version = 0
        for i in idx.tolist():
            end = offset + int(r.end[i])
            starts = [s.start_ns for s in mine if (prev_end is None or s.start_ns >= prev_end) and s.start_ns < end]
            if not starts and prev_end is not None:   # trained nothing since the last sync
                notes.append(f"{RESYNC_NOTE} a weight sync after version {version} closed no training step: "
                             f"fit()'s end re-sends version {version}, not a new version")
                continue
            version += 1
            lo = min(starts) if starts else offset + int(r.start[i])
            out.append(StepSpan(version, lo, end, "param_sync", source, (), int(pid),
                                f"{PARAM_SYNC_RANGE} #{version}"))
            prev_end = end
        synced.add(int(pid))
    return out + [s for s in steps if s.pid not in synced], tuple(notes)


def gpu_only_spans(db: NsysExport, src: SourceSteps, offset: int) -> SourceSteps:
    """Record where each process's GPU work (kernels, memcpys, memsets) lies (`gpu_spans`), so a
    whole-capture window holds it all, also what ran before the first or after the last range. A
    capture without NVTX ranges (plain CUDA, MPI codes): its window is the whole capture, per
    process the span of its GPU work, so its kernels are still summarised (unattributed)."""
    from ..readers.nsys_sqlite import KERNEL, MEMCPY, MEMSET, pid_of_gtid

    got: dict[int, tuple[int, int]] = {}
    for table in (KERNEL, MEMCPY, MEMSET):
        if not db.has(table, "start", "end"):
            continue
        pid_col = "globalPid" if db.has(table, "globalPid") else "0"   # pruned exports lack it
        # one process (most exports): a plain aggregate; GROUP BY sorts every row in a temp b-tree
        # (100 MB export: 0.08 s instead of 0.27 s a table)
        one = db.query(f"SELECT min({pid_col}), max({pid_col}), min(start), max(end) FROM {table} "
                       f"WHERE {pid_col} IS NOT NULL")
        rows = [(one[0][0], one[0][2], one[0][3])] if one and one[0][0] == one[0][1] else db.query(
            f"SELECT {pid_col} AS p, min(start), max(end) FROM {table} GROUP BY p")
        for g, lo, hi in rows:
            if g is None or lo is None or hi is None:
                continue
            pid = int(pid_of_gtid(int(g)))
            old = got.get(pid, (int(lo), int(hi)))
            got[pid] = (min(old[0], int(lo)), max(old[1], int(hi)))
    spans = tuple((pid, offset + lo, offset + hi) for pid, (lo, hi) in sorted(got.items()))
    if not spans:
        return src
    if src.span is not None:
        return replace(src, gpu_spans=spans)
    whole = (min(s[1] for s in spans), max(s[2] for s in spans))
    return replace(src, span=whole, pid_spans=spans if len(spans) > 1 else (), gpu_spans=spans,
                   notes=src.notes + ("no NVTX ranges: the GPU work of the whole capture",))


def _whole_capture(src: SourceSteps) -> tuple[tuple[int, int], tuple[tuple[int, int, int], ...]]:
    """The span and per-process spans of a whole-capture window: ranges and GPU work alike."""
    assert src.span is not None
    lo, hi = src.span
    gpu = {p: (a, b) for p, a, b in src.gpu_spans}
    if gpu:
        lo, hi = min(lo, min(a for a, _ in gpu.values())), max(hi, max(b for _, b in gpu.values()))
    pids = tuple((p, min(a, gpu.get(p, (a, b))[0]), max(b, gpu.get(p, (a, b))[1])) for p, a, b in src.pid_spans)
    return (lo, hi), pids


# ----------------------------------------------------------------------------------------------
# Numbering steps across sources
# ----------------------------------------------------------------------------------------------


def _verl_tops(top: Sequence[TopRange]) -> list[TopRange]:
    """The top-level ranges named like verl's stages: the only ones stage sequences are cut from."""
    return [t for t in top if t.stage != "other"]


def _segment_by_sequence(top: Sequence[TopRange]) -> list[list[TopRange]]:
    """Cut a time-ordered run of verl stage ranges into steps where a stage repeats (other names
    take no part: cutting an unknown framework's ranges would invent steps)."""
    groups: list[list[TopRange]] = []
    seen: set[str] = set()
    for t in sorted(_verl_tops(top), key=lambda t: t.start_ns):
        key = t.stage
        if not groups or key in seen:
            groups.append([])
            seen = set()
        groups[-1].append(t)
        seen.add(key)
    return groups


def _span_of(group: Sequence[TopRange]) -> tuple[int, int]:
    return min(t.start_ns for t in group), max(t.end_ns for t in group)


def resolve_steps(sources: Sequence[SourceSteps]) -> list[SourceSteps]:
    """Number every source's steps (see the module docstring); returns new SourceSteps."""
    out: dict[int, SourceSteps] = {}
    sources = number_trace_series(sources)   # torch traces that name no step: their process's series
    # Reference timeline: controller-style step ranges of whole (non capture-range) sources.
    reference: list[StepSpan] = []
    chains = capture_series(sources)
    in_chain = {j for members in chains for j in members}
    for i, src in enumerate(sources):
        if not formats.get(src.ident.source_kind).numbers_steps or (src.steps and not src.has_step_ranges):
            out[i] = src  # torch / snapshot spans come numbered
            continue
        if i in in_chain:
            continue
        if src.has_step_ranges:
            steps = _renumber_step_ranges(src)
            out[i] = replace(src, steps=tuple(steps))
            reference.extend(steps)
    for members in chains:
        units = _chain_units(sources, members, bool(reference))
        n_groups = max((u[5] for u in units), default=-1) + 1
        first = sources[members[0]].ident
        ks = capture_orders(sources, members)
        if n_groups == len(members):  # one step per file: step k is capture k (unless config says)
            nums = [capture_step(sources[j].ident, first, k) for k, j in zip(ks, members)]
        else:
            # discrete: more files than steps, the names count calls, not steps
            nums = series_numbers(n_groups, first, ks[0] if n_groups > len(members) else 1)
        per_member: dict[int, list[StepSpan]] = {j: [] for j in members}
        for j, lo, hi, pid, boundary, group, *label in units:
            per_member[j].append(StepSpan(nums[group], lo, hi, boundary, sources[j].ident.source, (), pid,
                                          label[0] if label else None))
        for j in members:
            if per_member[j] or not reference:
                out[j] = replace(sources[j], steps=tuple(per_member[j]))
    for i, src in enumerate(sources):
        if i in out:
            continue
        if reference:
            out[i] = replace(src, steps=tuple(_align(src, reference)))
        elif _verl_tops(src.top):
            groups = _segment_by_sequence(src.top)
            nums = series_numbers(len(groups), src.ident)
            out[i] = replace(src, steps=tuple(
                StepSpan(n, *_span_of(g), "stage_sequence", src.ident.source, (), g[0].pid)
                for n, g in zip(nums, groups)))
        elif src.span is not None:
            n = src.ident.step_hint or 1
            boundary = "file_name" if src.ident.step_hint else "whole_file"
            span, pid_spans = _whole_capture(src)
            if len(pid_spans) > 1:  # one report, several processes: each its own span
                out[i] = replace(src, steps=tuple(StepSpan(n, lo, hi, boundary, src.ident.source, (), p)
                                                  for p, lo, hi in pid_spans))
            else:
                out[i] = replace(src, steps=(StepSpan(n, span[0], span[1], boundary,
                                                      src.ident.source, (), src.ident.pid),))
        else:
            out[i] = src
    return [_flag_unsteady(out[i]) for i in range(len(sources))]


def _renumber_step_ranges(src: SourceSteps) -> list[StepSpan]:
    by_pid: dict[int | None, list[StepSpan]] = {}
    for s in src.steps:
        by_pid.setdefault(s.pid, []).append(s)
    steps: list[StepSpan] = []
    for pid_steps in by_pid.values():
        pid_steps.sort(key=lambda s: s.start_ns)
        ordered = [s for s in pid_steps if s.boundary in _ORDERED_MARKERS]
        nums = series_numbers(len(ordered), src.ident)
        steps.extend(replace(s, step=n) for s, n in zip(ordered, nums))
        steps.extend(s for s in pid_steps if s.boundary not in _ORDERED_MARKERS)  # numbered by their name
    return steps


_Unit = tuple  # (member index, start, end, pid, boundary, step group)


def _chain_units(sources: Sequence[SourceSteps], members: list[int], aligned_later: bool) -> list[_Unit]:
    """Step units of one capture-range series, each tagged with its step group (0, 1, ...)."""
    units: list[_Unit] = []
    if any(sources[j].has_step_ranges for j in members):
        # the markers' steps, numbered across the series; the user's --step-range ranges keep
        # their own boundary (the window line then says the matched ranges are the steps)
        for j in members:
            for s in sorted(sources[j].steps, key=lambda s: s.start_ns):
                boundary = "step_range" if s.boundary == "step_range" else "capture_range"
                units.append((j, s.start_ns, s.end_ns, s.pid, boundary, len(units), s.label))
        return units
    if aligned_later:
        return []  # no own boundaries: aligned on the controller's step ranges instead
    if not any(_verl_tops(sources[j].top) for j in members):
        # No verl stage names: each capture-range file is one unit (its own real boundary).
        return [(j, *sources[j].span, sources[j].ident.pid, "capture_range", gi)
                for gi, j in enumerate(m for m in members if sources[m].span is not None)]
    if len(members) == 1:
        src = sources[members[0]]
        groups = _segment_by_sequence(src.top) if src.top else []
        if not groups and src.span is not None:
            return [(members[0], src.span[0], src.span[1], src.ident.pid, "capture_range", 0)]
        boundary = "stage_sequence" if len(groups) > 1 else "capture_range"
        return [(members[0], *_span_of(g), g[0].pid, boundary, gi) for gi, g in enumerate(groups)]
    # Several files without step ranges: discrete mode (one file per stage call) or continuous
    # windows. Group all their stage calls, in time order, into steps by repeating stage.
    calls: list[tuple[int, TopRange]] = []
    for j in members:
        src = sources[j]
        tops = _verl_tops(src.top) or (
            (TopRange(src.ident.source, "other", *src.span, src.ident.pid),) if src.span else ())
        calls.extend((j, t) for t in tops)
    calls.sort(key=lambda c: c[1].start_ns)
    groups: list[list[tuple[int, TopRange]]] = []
    seen: set[str] = set()
    for j, t in calls:
        key = t.stage if t.stage != "other" else t.name
        if not groups or key in seen:
            groups.append([])
            seen = set()
        groups[-1].append((j, t))
        seen.add(key)
    # A process's step is the span of its stage calls in that step, across the files (first call's
    # start to last call's end, on the run's clock): every file of the step carries that span, so
    # the waiting between calls is the step's `other` and no stage outlasts its step.
    for gi, g in enumerate(groups):
        by_role: dict[tuple[int | None, str | None], list[TopRange]] = {}
        for j, t in g:
            by_role.setdefault((t.pid, call_role(t, sources[j].ident)), []).append(t)
        spans = {k: (min(t.start_ns for t in ts), max(t.end_ns for t in ts)) for k, ts in by_role.items()}
        for j in dict.fromkeys(m for m, _ in g):
            keys = {(t.pid, call_role(t, sources[j].ident)) for m, t in g if m == j}
            lo, hi = min(spans[k][0] for k in keys), max(spans[k][1] for k in keys)
            units.append((j, lo, hi, next(iter(keys))[0], "discrete", gi))
    return units


def call_role(t: TopRange, ident: SourceIdentity) -> str | None:
    """The role of one stage call of a discrete series: the worker range's own role
    (`actor_update` -> actor, `generate_sequences` -> rollout), else the source's role."""
    from ..readers.naming import role_of_scope
    from ..readers.report_identity import WORKER_RANGE_ROLES

    return WORKER_RANGE_ROLES.get(t.name) or role_of_scope(t.stage) or ident.role


def _align(src: SourceSteps, reference: Sequence[StepSpan]) -> list[StepSpan]:
    """Assign a source's top-level ranges to the reference step whose span holds their midpoint."""
    spans: dict[int, list[int]] = {}
    items = list(src.top) or ([TopRange(src.ident.source, "other", *src.span)] if src.span else [])
    for t in items:
        mid = (t.start_ns + t.end_ns) // 2
        for ref in reference:
            if ref.start_ns <= mid <= ref.end_ns:
                lo_hi = spans.setdefault(ref.step, [t.start_ns, t.end_ns])
                lo_hi[0] = min(lo_hi[0], t.start_ns)
                lo_hi[1] = max(lo_hi[1], t.end_ns)
                break
    pid = items[0].pid if items else None
    return [StepSpan(k, lo, hi, "aligned", src.ident.source, (), pid) for k, (lo, hi) in sorted(spans.items())]


def _flag_unsteady(src: SourceSteps) -> SourceSteps:
    """Mark steps holding save_checkpoint / testing ranges (they are not steady state)."""
    if not src.unsteady or not src.steps:
        return src
    steps = []
    for s in src.steps:
        flags = {u.name for u in src.unsteady if s.start_ns <= u.start_ns < s.end_ns}
        steps.append(replace(s, flags=tuple(sorted(set(s.flags) | flags))) if flags else s)
    return replace(src, steps=tuple(steps))
