"""The Parquet schemas of verlprof's summaries, declared once.

Why: like Perfetto's TraceSummarySpec, every source (nsys SQLite, torch trace, memory snapshot)
yields rows of these schemas, so thousands of runs compare without glue code. Writers build their
Arrow tables from `arrow_schema(name)`, and the README/docs schema table is generated from here
(`python -m verlprof.stages.schema > docs/schema.md`). Changing a column means bumping
SCHEMA_VERSION.
"""
from __future__ import annotations

from dataclasses import dataclass

import pyarrow as pa

# 4: wall_ns is the union of a phase's instances; launch_span_ns, mem_scope and the recorded-history
#    memory columns; ranks gains wait/excess/floor per rank and culprit, recurrence, critical_path and
#    dispatch rows; steps gains label. 3: the ranks table. 2: phases grouped by normalised name path,
#    inherited GPU attribution, rank_source.
SCHEMA_VERSION = "4"


@dataclass(frozen=True)
class Column:
    name: str
    type: pa.DataType
    unit: str
    meaning: str
    better: str = ""  # "lower" / "higher" / "" when the direction means nothing


def _c(name: str, type_: pa.DataType, unit: str, meaning: str, better: str = "") -> Column:
    return Column(name, type_, unit, meaning, better)


_KEYS = [
    _c("source", pa.string(), "", "artifact the row comes from (relative name in the bundle)"),
    _c("source_kind", pa.string(), "", "nsys | torch | memory"),
    _c("role", pa.string(), "", "verl role: actor, rollout, ref, reward, critic, actor_rollout, actor_rollout_ref (one colocated process playing those roles), teacher, trainer (null when unknown; docs/verl_outputs.md lists where each comes from)"),
    _c("rank", pa.int32(), "", "rank within the role's worker group (null when unknown)"),
    _c("pid", pa.int64(), "", "process id of the profiled process"),
    _c("step", pa.int32(), "", "RL training step (1-based)"),
]

SCHEMAS: dict[str, list[Column]] = {
    "phases": _KEYS + [
        _c("phase", pa.string(), "", "range name (NVTX / user_annotation), normalised: per-instance suffixes "
           "(`, seq = N`, `, op_id = N`, `, sizes = [...]`), trailing `#N` counters and addresses removed; "
           "the raw names stay in the trace windows"),
        _c("stage", pa.string(), "", "canonical stage (see stages/core/phases.py), `other` when unknown"),
        _c("parent", pa.string(), "", "enclosing range name, null at the top"),
        _c("depth", pa.int32(), "", "nesting depth of the range (0 = outermost)"),
        _c("start_ns", pa.int64(), "ns", "range start, absolute UTC nanoseconds since the epoch"),
        _c("wall_ns", pa.int64(), "ns", "CPU time of the phase: the union of its instances' intervals (instances "
           "that overlap, the same name on several threads, count their common time once; a range adopted "
           "from another thread counts only its time inside the range it nests in), so no row is longer than "
           "its parent row", "lower"),
        _c("gpu_busy_ns", pa.int64(), "ns", "union of GPU activity intervals launched from the range (streams overlap-free)", "lower"),
        _c("kernel_ns", pa.int64(), "ns", "sum of kernel durations launched from the range", "lower"),
        _c("kernel_count", pa.int64(), "", "number of kernels launched from the range"),
        _c("memcpy_ns", pa.int64(), "ns", "sum of memcpy durations", "lower"),
        _c("memcpy_h2d_bytes", pa.int64(), "B", "bytes copied host to device"),
        _c("memcpy_d2h_bytes", pa.int64(), "B", "bytes copied device to host"),
        _c("memcpy_d2d_bytes", pa.int64(), "B", "bytes copied device to device (and peer)"),
        _c("memcpy_other_bytes", pa.int64(), "B", "bytes of other copy kinds"),
        _c("memset_ns", pa.int64(), "ns", "sum of memset durations", "lower"),
        _c("comm_ns", pa.int64(), "ns", "union of NCCL / collective kernel time", "lower"),
        _c("exposed_comm_ns", pa.int64(), "ns", "collective time not overlapped by compute kernels", "lower"),
        _c("idle_ns", pa.int64(), "ns", "wall_ns minus gpu_busy_ns (GPU idle inside the range)", "lower"),
        _c("api_ns", pa.int64(), "ns", "CUDA runtime/driver API time on the range's thread", "lower"),
        _c("mem_peak_bytes", pa.int64(), "B", "peak device memory in the range (null when no memory data)", "lower"),
        _c("instances", pa.int64(), "", "ranges of this process and step with this name path (their numbers add up)"),
        _c("path", pa.string(), "", "normalised names from the outermost range to this one, joined by ` > ` "
           "(one row per source, process, step and path); a range with no enclosing range on its own thread, "
           "opened on a thread other than its process's main thread, nests in the main thread's range open "
           "at its start, and its work counts in that range's figures"),
        _c("gpu_busy_inherited_ns", pa.int64(), "ns", "like gpu_busy_ns, but each GPU operation counted under its "
           "*inherited* home range: NVIDIA's same-thread range, except that an operation launched from a "
           "thread with no open range goes to the innermost range open on its process's main thread at "
           "launch, and backward work (emit_nvtx `XBackward0, seq = N`; Kineto `Sequence number`) goes to its "
           "forward op's range where that lies inside the main-thread range open at backward time (or none "
           "was open). Inclusive of nested ranges; the `(unattributed)` row holds what no "
           "rule placed. This is the figure meant by 'GPU time of update_actor'", "lower"),
        _c("kernel_inherited_ns", pa.int64(), "ns", "sum of kernel durations by the inherited rule (see gpu_busy_inherited_ns)", "lower"),
        _c("kernel_count_inherited", pa.int64(), "", "number of kernels by the inherited rule"),
        _c("rank_source", pa.string(), "", "where `rank` came from: artifact (file name / report identity), RANK env, "
           "LOCAL_RANK env, CUDA device, distributedInfo (torch trace), or `unknown: ...` with the reason"),
        _c("launch_span_ns", pa.int64(), "ns", "the phase's launch-time span: the union over its instances of [start, "
           "end of the last GPU operation the instance launched, or its own end when later]; every operation "
           "gpu_busy_ns and gpu_busy_inherited_ns count lies inside it, so GPU % = gpu_busy_inherited_ns / "
           "launch_span_ns is at most 100 (GPU work that outlives its CPU range is not set against the "
           "range's wall)", "lower"),
        # issue 31: memory snapshots without times (torch < 2.2) give step-level figures (additive)
        _c("mem_scope", pa.string(), "", "what the row's mem_* figures cover: null = the range itself; "
           "`recorded_history` = a memory snapshot whose allocation history carries no times (torch < 2.2): "
           "nothing can be placed in a phase, so the row (phase `(recorded history)`, depth 0, stage `step`) "
           "holds the figures of the snapshot's whole recorded history, which may reach back before the step"),
        _c("mem_reserved_peak_bytes", pa.int64(), "B", "`recorded_history` rows: peak reserved bytes (allocator "
           "segments) over the recorded history (mem_peak_bytes: peak allocated bytes)", "lower"),
        _c("mem_reserved_bytes", pa.int64(), "B", "`recorded_history` rows: reserved bytes when the snapshot was "
           "taken (its segments' total_size)"),
        _c("mem_allocated_bytes", pa.int64(), "B", "`recorded_history` rows: allocated bytes when the snapshot was "
           "taken (its segments' allocated_size)"),
        _c("mem_active_bytes", pa.int64(), "B", "`recorded_history` rows: active bytes when the snapshot was "
           "taken (its segments' active_size: allocated, or freed and awaiting another stream)"),
    ],
    "kernels": _KEYS + [
        _c("phase", pa.string(), "", "innermost range the kernel was launched from"),
        _c("stage", pa.string(), "", "canonical stage of `phase`"),
        _c("kernel", pa.string(), "", "demangled kernel name (`other` row: everything past --top-kernels)"),
        _c("kernel_short", pa.string(), "", "short kernel name"),
        _c("category", pa.string(), "", "gemm | attention | comm | normalization | memcpy | memset | elementwise | reduction | other"),
        _c("count", pa.int64(), "", "instances"),
        _c("total_ns", pa.int64(), "ns", "summed duration", "lower"),
        _c("avg_ns", pa.float64(), "ns", "mean duration", "lower"),
        _c("min_ns", pa.int64(), "ns", "shortest instance"),
        _c("max_ns", pa.int64(), "ns", "longest instance"),
        _c("median_ns", pa.float64(), "ns", "median duration"),
    ],
    "ranks": [
        _c("row_kind", pa.string(), "", "`rank`: one rank's phase; `ranks`: the phase across the role's ranks (rank null); "
           "`dispatch`: a verl driver stage on the controller against the slowest worker's matching stage; "
           "`culprit`: per role and step, who lost the time and who paid; `recurrence`: per role, the culprit over "
           "the profiled steps; `critical_path`: per step and role, the stage that bounds the RL step, busy and idle"),
        _c("role", pa.string(), "", "verl role"),
        _c("step", pa.int32(), "", "RL training step"),
        _c("path", pa.string(), "", "phase path (as in phases.parquet); depth <= 2 or a known stage"),
        _c("stage", pa.string(), "", "canonical stage of the phase"),
        _c("rank", pa.int32(), "", "rank (null on `ranks` rows)"),
        _c("ranks", pa.int32(), "", "`ranks` rows: how many ranks have the phase"),
        _c("wall_ns", pa.int64(), "ns", "the rank's wall time (`ranks` rows: the median)", "lower"),
        _c("gpu_busy_inherited_ns", pa.int64(), "ns", "GPU busy, inherited rule (`ranks`: median)", "lower"),
        _c("gpu_busy_ns", pa.int64(), "ns", "GPU busy, NVIDIA's same-thread rule (`ranks`: median)", "lower"),
        _c("comm_ns", pa.int64(), "ns", "collective kernel time (NCCL) in the phase (`ranks`: median)", "lower"),
        _c("collective_ns", pa.int64(), "ns", "wall of CPU-side collective ranges nested in the phase "
           "(gloo / c10d / record_param_comms / nccl:*; `ranks`: median)", "lower"),
        _c("arrival_ns", pa.int64(), "ns", "phase start minus the earliest rank's start (`ranks`: the largest)"),
        _c("mem_peak_bytes", pa.int64(), "B", "peak device memory in the phase (`ranks`: the largest)", "lower"),
        _c("wall_min_ns", pa.int64(), "ns", "`ranks`: shortest wall over the ranks"),
        _c("wall_median_ns", pa.int64(), "ns", "`ranks`: median wall"),
        _c("wall_p90_ns", pa.int64(), "ns", "`ranks`: 90th percentile wall"),
        _c("wall_max_ns", pa.int64(), "ns", "`ranks`: longest wall"),
        _c("slowest_rank", pa.int32(), "", "`ranks`: the rank with the longest wall (may be one that waited)"),
        _c("skew_ns", pa.int64(), "ns", "`ranks`: longest minus shortest wall", "lower"),
        _c("straggler_rank", pa.int32(), "", "`ranks`: the rank that lost time in the phase: the largest excess (null at or below the noise floor; "
           "see straggler_by and docs/summaries.md)"),
        _c("straggler_by", pa.string(), "", "`ranks`: `excess` (the largest own time, wall minus wait, over the others' median) or "
           "`none: why`; neither a late arrival nor being waited for decides (before issue 32: nccl, collectives, "
           "arrival)"),
        _c("straggler_ns", pa.int64(), "ns", "`ranks`: the straggler's excess over the others' median own time", "lower"),
        _c("driver_role", pa.string(), "", "`dispatch`: the controller's role (role = the workers' role; wall_ns = the "
           "controller's stage wall, wall_max_ns / slowest_rank = the slowest worker's)"),
        _c("dispatch_ns", pa.int64(), "ns", "`dispatch`: controller wall minus the slowest worker's wall of the stage "
           "(dispatch, data transfer, waiting for the slowest worker)", "lower"),
        # issue 32: culprit and victims, every profiled step, the RL step's critical path (additive)
        _c("wait_ns", pa.int64(), "ns", "`rank`: time the rank waited for the others in the phase (collective kernels, "
           "else collective ranges nested in it, else implied: the ranks leave together after arriving apart); "
           "`ranks`: median"),
        _c("excess_ns", pa.int64(), "ns", "`rank`: its own time in the phase (wall minus wait) minus the other ranks' "
           "median; `ranks`: the largest; `culprit`: the culprit's, in the phase where it lost the time", "lower"),
        _c("floor_ns", pa.int64(), "ns", "noise floor of the phase (default max(5% of its median wall, 1 ms)): "
           "excess or wait at or below it names nobody"),
        _c("chosen", pa.bool_(), "", "true on rows of the step summarized in phases.parquet (every profiled step "
           "has rows; null on `recurrence` rows)"),
        _c("statement", pa.string(), "", "`culprit` / `recurrence` / `critical_path`: the finding in one sentence "
           "(`rank 2 lost 150 ms in generate_sequences; ranks 0, 1, 3 waited 148 ms for it in actor_update "
           "(all-reduce)`)"),
        _c("victim_path", pa.string(), "", "`culprit`: the phase where the other ranks paid (waited for the culprit)"),
        _c("victim_ranks", pa.string(), "", "`culprit`: the ranks that waited, comma-separated"),
        _c("victims", pa.int32(), "", "`culprit`: how many ranks waited"),
        _c("victim_wait_ns", pa.int64(), "ns", "`culprit`: the victims' median wait beyond the culprit's own wait in "
           "victim_path", "lower"),
        _c("collective", pa.string(), "", "`culprit`: what the victims waited in (all-reduce, all-gather, barrier, "
           "NCCL collective kernels, or implied at the phase's end)"),
        _c("culprit_steps", pa.int32(), "", "`recurrence`: profiled steps in which `rank` was the culprit"),
        _c("profiled_steps", pa.int32(), "", "`recurrence`: profiled steps of the role"),
        _c("busy_ns", pa.int64(), "ns", "`critical_path`: the role's stage walls in the step (its slowest process)"),
        _c("idle_ns", pa.int64(), "ns", "`critical_path`: the step minus busy_ns", "lower"),
        _c("bound_stage", pa.string(), "", "`critical_path`: the stage that bounds the RL step (longest on the "
           "controller, else on the slowest process)"),
        _c("bound_ns", pa.int64(), "ns", "`critical_path`: that stage's wall on the controller (else the slowest "
           "process)", "lower"),
        _c("launch_span_ns", pa.int64(), "ns", "the phase's launch-time span (phases.parquet; summed over a rank's "
           "processes; `ranks`: the median over the ranks with a GPU figure): GPU % = gpu_busy_inherited_ns / "
           "launch_span_ns, at most 100"),
    ],
    "steps": _KEYS + [
        _c("start_ns", pa.int64(), "ns", "step start, absolute UTC ns"),
        _c("wall_ns", pa.int64(), "ns", "step duration", "lower"),
        _c("boundary", pa.string(), "", "how the step was found: nvtx_step | profiler_step (ProfilerStep#N) | step_name (step<N> range) | step_range (--step-range REGEX) | capture_range | aligned | discrete | stage_sequence (verl stage names only) | file_name | snapshot_dir | trace_order (the k-th trace of its process that names no step: the k-th profiled step, docs/verl_outputs.md) | param_sync (fully-async: a parameter version) | whole_file (no markers: the whole capture)"),
        _c("chosen", pa.bool_(), "", "true for the steady-state step summarized in phases/kernels"),
        _c("label", pa.string(), "", "the marker of the step as the source names it: the range (`ProfilerStep#104` "
           "is step 105, since profiler.step() counts from 0; `step #3`: the third verl `step` range), "
           "`capture range .2`, `step2 in the file name`, `whole capture`"),
        _c("reason", pa.string(), "", "one line: why this step was (not) chosen"),
    ],
}


def arrow_schema(name: str, metadata: dict[str, str] | None = None) -> pa.Schema:
    cols = SCHEMAS[name]
    meta = {"verlprof.schema": name, "verlprof.schema_version": SCHEMA_VERSION}
    meta.update(metadata or {})
    return pa.schema([pa.field(c.name, c.type, nullable=True) for c in cols], metadata=meta)


def markdown() -> str:
    """The schema tables for docs/schema.md."""
    out = [f"# verlprof summary schemas (version {SCHEMA_VERSION})", ""]
    for name, cols in SCHEMAS.items():
        out += [f"## `{name}.parquet`", "", "| column | type | unit | meaning |", "|---|---|---|---|"]
        out += [f"| `{c.name}` | {c.type} | {c.unit} | {c.meaning} |" for c in cols]
        out.append("")
    return "\n".join(out)


if __name__ == "__main__":
    print(markdown())
