"""summarize_torch on the real H200 torch traces, checked against an independent json.load pass.

The reference below is deliberately naive (quadratic loops over plain dicts): for every kernel it
finds the launching runtime/driver call by `correlation`, then every user_annotation range on the
same (pid, tid) whose [ts, ts+dur] holds the launch timestamp. That is NVIDIA's projection rule,
written a second time without any of the reader's or summarizer's machinery.
"""
from __future__ import annotations

import gzip
import json
from collections import Counter, defaultdict
from pathlib import Path

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from testdata import fixtures_dir
from verlprof.pipeline.executors import ProcessPoolExecutorBackend
from verlprof.stages.core.errors import BadInputError
from verlprof.stages.core.phases import normalize_range_name
from verlprof.stages.schema import arrow_schema
from verlprof.stages.summarize import steps_rows, write_summaries
from verlprof.stages.summarize.torch_profile import (
    UNATTRIBUTED,
    TorchItem,
    short_kernel_name,
    summarize_torch_item,
    summarize_torch_trace,
)
from verlprof.stages.summarize.types import SummarizeOptions, merge_rows
from verlprof.stages.window import SourceIdentity, run_window, torch_source_steps

FIXTURES = fixtures_dir() / "h200-torch-2.11"
TRACES = sorted(FIXTURES.glob("*.json.gz"))


def _ident(path: Path, **kw) -> SourceIdentity:
    step = int(path.name.split("_step")[1].split("_")[0]) if "_step" in path.name else None
    base = dict(source=path.name, source_kind="torch", role="actor_rollout_ref", rank=0, pid=754, step_hint=step)
    base.update(kw)
    return SourceIdentity(**base)


def _ns(us: float) -> int:
    return round(us * 1000)


class Reference:
    """Plain-dict model of one trace: ranges, launches, GPU ops and their containing ranges."""

    def __init__(self, path: Path, inherit: bool = False) -> None:
        doc = json.loads(gzip.open(path).read())
        self.base = doc["baseTimeNanoseconds"]
        ev = doc["traceEvents"]
        self.ranges = [e for e in ev if e.get("cat") == "user_annotation" and e.get("ph") == "X"]
        self.apis = [e for e in ev if e.get("cat") in ("cuda_runtime", "cuda_driver") and e.get("ph") == "X"]
        launch = {e["args"]["correlation"]: e for e in self.apis if "correlation" in e.get("args", {})}
        self.ops = [e for e in ev if e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset") and e.get("ph") == "X"]
        annotated = {(r["pid"], r["tid"]) for r in self.ranges}
        self.holders: list[list[int]] = []   # per op: indices of ranges containing its launch
        for op in self.ops:
            la = launch.get(op["args"].get("correlation"))
            hold: list[int] = []
            if la is not None:
                same = [i for i, r in enumerate(self.ranges) if (r["pid"], r["tid"]) == (la["pid"], la["tid"])
                        and r["ts"] <= la["ts"] <= r["ts"] + r["dur"]]
                hold = same
                if inherit and not same and (la["pid"], la["tid"]) not in annotated:
                    hold = [i for i, r in enumerate(self.ranges) if r["pid"] == la["pid"]
                            and r["ts"] <= la["ts"] <= r["ts"] + r["dur"]]
            self.holders.append(hold)

    def innermost(self, hold: list[int]) -> int | None:
        return max(hold, key=lambda i: (self.ranges[i]["ts"], -self.ranges[i]["dur"])) if hold else None

    def parent_depth(self, i: int) -> tuple[str | None, int]:
        r = self.ranges[i]
        outer = [j for j, o in enumerate(self.ranges) if j != i and (o["pid"], o["tid"]) == (r["pid"], r["tid"])
                 and o["ts"] <= r["ts"] and o["ts"] + o["dur"] >= r["ts"] + r["dur"]]
        if not outer:
            return None, 0
        p = max(outer, key=lambda j: (self.ranges[j]["ts"], -self.ranges[j]["dur"]))
        return self.ranges[p]["name"], len(outer)

    def groups(self) -> dict[tuple, list[int]]:
        g: dict[tuple, list[int]] = defaultdict(list)
        for i, r in enumerate(self.ranges):
            parent, depth = self.parent_depth(i)
            g[(r["name"], parent, depth)].append(i)
        return g


@pytest.fixture(scope="module")
def step2() -> Path:
    return next(p for p in TRACES if "_step2_" in p.name)


@pytest.fixture(scope="module")
def ref2(step2: Path) -> Reference:
    return Reference(step2)


@pytest.fixture(scope="module")
def rows2(step2: Path) -> dict:
    return summarize_torch_trace(step2, _ident(step2), SummarizeOptions())


def _union(iv: list[tuple[int, int]]) -> int:
    total, end = 0, None
    for s, e in sorted(iv):
        if end is None or s > end:
            total += e - s
            end = e
        elif e > end:
            total += e - end
            end = e
    return total


def test_phases_match_the_trace(rows2: dict, ref2: Reference) -> None:
    phases = {(r["phase"], r["parent"], r["depth"]): r for r in rows2["phases"] if r["phase"] != UNATTRIBUTED}
    groups = ref2.groups()
    assert set(phases) == set(groups)
    for key, members in groups.items():
        row = phases[key]
        ops = [k for k, hold in enumerate(ref2.holders) if set(hold) & set(members)]
        kernels = [k for k in ops if ref2.ops[k]["cat"] == "kernel"]
        assert row["kernel_count"] == len(kernels), key
        assert row["wall_ns"] == sum(_ns(ref2.ranges[i]["dur"]) for i in members), key
        assert abs(row["start_ns"] - (ref2.base + min(_ns(ref2.ranges[i]["ts"]) for i in members))) <= 1
        assert abs(row["kernel_ns"] - sum(_ns(ref2.ops[k]["dur"]) for k in kernels)) <= len(kernels)
        memsets = [k for k in ops if ref2.ops[k]["cat"] == "gpu_memset"]
        assert abs(row["memset_ns"] - sum(_ns(ref2.ops[k]["dur"]) for k in memsets)) <= len(memsets)
        h2d = sum(ref2.ops[k]["args"].get("bytes", 0) for k in ops
                  if ref2.ops[k]["cat"] == "gpu_memcpy" and "HtoD" in ref2.ops[k]["name"])
        assert row["memcpy_h2d_bytes"] == h2d
        busy = _union([(_ns(ref2.ops[k]["ts"]), _ns(ref2.ops[k]["ts"]) + _ns(ref2.ops[k]["dur"])) for k in ops])
        assert abs(row["gpu_busy_ns"] - busy) <= 2 * len(ops) + 1, key
        # API time on the range's thread, launches inside the member ranges
        api = sum(_ns(a["dur"]) for a in ref2.apis if any(
            (a["pid"], a["tid"]) == (ref2.ranges[i]["pid"], ref2.ranges[i]["tid"])
            and ref2.ranges[i]["ts"] <= a["ts"] <= ref2.ranges[i]["ts"] + ref2.ranges[i]["dur"] for i in members))
        assert abs(row["api_ns"] - api) <= 200, key   # per-call ns rounding only
        assert row["idle_ns"] == max(0, row["wall_ns"] - row["gpu_busy_ns"])
        assert row["comm_ns"] == 0 and row["exposed_comm_ns"] == 0   # one GPU, no NCCL
        assert row["step"] == 2 and row["pid"] == 754 and row["source_kind"] == "torch"


def test_unattributed_work_is_the_autograd_thread(rows2: dict, ref2: Reference) -> None:
    (un,) = [r for r in rows2["phases"] if r["phase"] == UNATTRIBUTED]
    orphan = [k for k, hold in enumerate(ref2.holders) if not hold and ref2.ops[k]["cat"] == "kernel"]
    assert un["kernel_count"] == len(orphan) > 0
    # every kernel of the trace is counted exactly once between the top-level phases and (unattributed)
    top = sum(r["kernel_count"] for r in rows2["phases"] if r["depth"] == 0 and r["phase"] != UNATTRIBUTED)
    n_kernels = sum(1 for op in ref2.ops if op["cat"] == "kernel")
    assert top + un["kernel_count"] == n_kernels


def test_kernel_rows_add_up_per_innermost_phase(rows2: dict, ref2: Reference) -> None:
    per_phase: Counter = Counter()
    for k, hold in enumerate(ref2.holders):
        if ref2.ops[k]["cat"] != "kernel":
            continue
        inner = ref2.innermost(hold)
        per_phase[ref2.ranges[inner]["name"] if inner is not None else UNATTRIBUTED] += 1
    got: Counter = Counter()
    for r in rows2["kernels"]:
        got[r["phase"]] += r["count"]
        assert r["min_ns"] <= r["avg_ns"] <= r["max_ns"]
        assert r["category"] in ("gemm", "attention", "comm", "normalization", "elementwise", "reduction", "other")
    assert got == per_phase
    top50 = [r for r in rows2["kernels"] if r["phase"] == "train"]
    assert len(top50) <= 51 and top50[-1]["kernel"] == "other"   # train has > 50 distinct kernels
    totals = [r["total_ns"] for r in top50[:-1]]
    assert totals == sorted(totals, reverse=True)


def test_top_option_and_other_row(step2: Path) -> None:
    rows = summarize_torch_trace(step2, _ident(step2), SummarizeOptions(top=3))
    by_phase: dict[str, list] = defaultdict(list)
    for r in rows["kernels"]:
        by_phase[r["phase"]].append(r)
    full = summarize_torch_trace(step2, _ident(step2), SummarizeOptions(top=1000))
    for phase, rs in by_phase.items():
        assert len(rs) <= 4
        want = sum(r["total_ns"] for r in full["kernels"] if r["phase"] == phase)
        assert sum(r["total_ns"] for r in rs) == want


def test_steps_of_three_files_choose_step_two() -> None:
    rows = steps_rows(*run_window([torch_source_steps(p, _ident(p)) for p in TRACES]))
    assert [r["step"] for r in rows] == [1, 2, 3]
    assert [r["chosen"] for r in rows] == [False, True, False]
    for p, r in zip(TRACES, rows):
        doc = json.loads(gzip.open(p).read())
        ranges = [e for e in doc["traceEvents"] if e.get("cat") == "user_annotation"]
        lo = min(_ns(x["ts"]) for x in ranges)      # top-level ranges hold all others
        hi = max(_ns(x["ts"]) + _ns(x["dur"]) for x in ranges)
        assert abs(r["wall_ns"] - (hi - lo)) <= 1
        assert abs(r["start_ns"] - (doc["baseTimeNanoseconds"] + lo)) <= 1
        assert r["boundary"] == "file_name"
    assert rows[0]["wall_ns"] > 5 * rows[1]["wall_ns"]   # step 1 warms up (about 3.4 s vs 0.37 s)
    assert "step 2" in rows[1]["reason"]
    # plain paths work too (identity from the file name)
    assert [s.step for p in TRACES for s in torch_source_steps(p, SourceIdentity(source=p.name, source_kind="torch")).steps] == [1, 2, 3]


def test_inherited_figures_take_autograd_kernels(step2: Path) -> None:
    """Kernels autograd's thread launched are inherited by the range open on the main thread then."""
    ref = Reference(step2, inherit=True)
    rows = summarize_torch_trace(step2, _ident(step2), SummarizeOptions())
    phases = {(r["phase"], r["parent"], r["depth"]): r for r in rows["phases"]}
    (un,) = [r for r in rows["phases"] if r["phase"] == UNATTRIBUTED]
    assert un["kernel_count"] > 0 and un["kernel_count_inherited"] == 0   # NVIDIA's figure keeps them apart
    for key, members in ref.groups().items():
        want = sum(1 for k, hold in enumerate(ref.holders) if set(hold) & set(members) and ref.ops[k]["cat"] == "kernel")
        assert phases[key]["kernel_count_inherited"] == want, key


def _profiler_step_trace(src: Path, dst: Path) -> tuple[list[tuple[int, int]], list[dict]]:
    """The step-3 trace with two ProfilerStep ranges cutting its "train" range in halves."""
    doc = json.loads(gzip.open(src).read())
    (train,) = [e for e in doc["traceEvents"] if e.get("cat") == "user_annotation" and e["name"] == "train"]
    half = round(train["dur"] / 2, 3)
    steps = []
    for k, ts in enumerate((train["ts"], train["ts"] + half)):
        doc["traceEvents"].append({"ph": "X", "cat": "user_annotation", "name": f"ProfilerStep#{k + 4}",
                                   "pid": train["pid"], "tid": train["tid"], "ts": ts, "dur": half})
        steps.append((_ns(ts), _ns(ts) + _ns(half)))
    dst.write_bytes(json.dumps(doc).encode())
    return steps, doc["traceEvents"]


def test_profiler_step_ranges_when_the_name_says_nothing(tmp_path: Path) -> None:
    src = next(p for p in TRACES if "_step3_" in p.name)
    dst = tmp_path / "trace_rank0.json"
    steps, events = _profiler_step_trace(src, dst)
    ident = SourceIdentity(source=dst.name, source_kind="torch")
    spans = torch_source_steps(dst, ident).steps
    assert [s.step for s in spans] == [5, 6] and {s.boundary for s in spans} == {"profiler_step"}
    rows = summarize_torch_trace(dst, ident, SummarizeOptions(step=6))
    base = json.loads(gzip.open(src).read())["baseTimeNanoseconds"]
    lo, hi = steps[1]
    want = {normalize_range_name(e["name"]) for e in events
            if e.get("cat") == "user_annotation" and lo <= _ns(e["ts"]) <= hi}
    assert {r["phase"] for r in rows["phases"]} - {UNATTRIBUTED} == want
    # the marker as the trace names it: ProfilerStep#5 counts from 0, so it is step 6
    assert [r["label"] for r in rows["steps"]] == ["ProfilerStep#4", "ProfilerStep#5"]
    assert {r["step"] for r in rows["phases"]} == {6}
    assert [r["chosen"] for r in rows["steps"]] == [False, True]
    assert rows["steps"][1]["start_ns"] == base + lo
    assert any("ProfilerStep" in w["message"] for w in rows["warnings"])


def test_rows_fit_the_parquet_schemas(rows2: dict, tmp_path: Path) -> None:
    for name in ("phases", "kernels", "steps"):
        table = pa.Table.from_pylist(rows2[name], schema=arrow_schema(name))
        assert table.num_rows == len(rows2[name]) > 0
    written = write_summaries(rows2, tmp_path)
    import pyarrow.parquet as pq

    assert pq.read_table(written["phases"]).num_rows == len(rows2["phases"])


def test_parallel_items_equal_inline(tmp_path: Path) -> None:
    items = [TorchItem(str(p), _ident(p)) for p in TRACES]
    opts = SummarizeOptions()
    inline = [summarize_torch_item(it, opts) for it in items]
    pooled = [None] * len(items)
    for res in ProcessPoolExecutorBackend(2).map_unordered(summarize_torch_item, items, opts):
        assert res.error is None
        pooled[res.index] = res.value
    assert pooled == inline
    merged = merge_rows(pooled)
    assert {r["step"] for r in merged["steps"]} == {1, 2, 3}


def test_bad_trace_raises_one_line_error(tmp_path: Path) -> None:
    p = tmp_path / "x_step2_rank0.json.gz"
    p.write_bytes(gzip.compress(b'{"traceEvents": [')[:-8])
    with pytest.raises(BadInputError) as ei:
        summarize_torch_trace(p, _ident(p), SummarizeOptions())
    assert str(p) in str(ei.value) and "\n" not in str(ei.value)


def test_short_kernel_names() -> None:
    assert short_kernel_name("void at::native::vectorized_gather_kernel<16, long>(char*, long)") == "vectorized_gather_kernel"
    assert short_kernel_name("void at::native::(anonymous namespace)::cunn_SoftMaxForward<4, float>(float*)") \
        == "cunn_SoftMaxForward"
    assert short_kernel_name("nvjet_sm90_tst_192x192_64x4_2x1_v_bz_coopB_bias_TNN") \
        == "nvjet_sm90_tst_192x192_64x4_2x1_v_bz_coopB_bias_TNN"
    assert short_kernel_name("ncclDevKernel_AllReduce_Sum_bf16_RING_LL(ncclDevKernelArgsStorage<4096ul>)") \
        == "ncclDevKernel_AllReduce_Sum_bf16_RING_LL"


def _hand_made(tmp_path: Path, name: str) -> Path:
    """A tiny trace whose numbers are known by construction (microseconds in the comments)."""
    big = 2 ** 70

    def x(cat, nm, pid, tid, ts, dur, **args):
        e = {"ph": "X", "cat": cat, "name": nm, "pid": pid, "tid": tid, "ts": ts, "dur": dur}
        if args:
            e["args"] = args
        return e

    events = [
        x("user_annotation", "update_actor", 1, 1, 0, 1000),      # [0, 1000]
        x("user_annotation", "mini_batch0", 1, 1, 100, 300),      # [100, 400]
        x("cuda_runtime", "cudaLaunchKernel", 1, 1, 50, 2, correlation=1),
        x("cuda_runtime", "cudaLaunchKernel", 1, 1, 150, 2, correlation=2),
        x("cuda_runtime", "cudaMemcpyAsync", 1, 1, 200, 2, correlation=big),
        x("cuda_runtime", "cudaMemsetAsync", 1, 1, 500, 2, correlation=4),
        x("cuda_driver", "cuLaunchKernelEx", 1, 2, 300, 2, correlation=5),   # unannotated thread
        x("kernel", "ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevKernelArgsStorage<4096ul>)", 0, 7, 1000, 100,
          correlation=1, stream=7, device=0),
        x("kernel", "void cutlass_gemm_kernel<1>(int)", 0, 13, 1050, 30, correlation=2, stream=13, device=0),
        x("gpu_memcpy", "Memcpy HtoD (Pinned -> Device)", 0, 7, 1200, 10, correlation=big, bytes=4096),
        x("gpu_memset", "Memset (Device)", 0, 7, 1300, 5, correlation=4, bytes=4),
        x("kernel", "void at::native::elementwise_kernel<4>(int)", 0, 7, 1400, 20, correlation=5),
        x("cpu_op", "aten::mm", 1, 1, 149, 3),
    ]
    p = tmp_path / name
    text = json.dumps({"baseTimeNanoseconds": 10 ** 18, "traceEvents": events}).encode()
    p.write_bytes(gzip.compress(text) if name.endswith(".gz") else text)
    return p


def test_hand_made_numbers(tmp_path: Path) -> None:
    p = _hand_made(tmp_path, "actor_train_step7_rank0-of-1_pid1_20260101000000000.json.gz")
    ident = SourceIdentity(source=p.name, source_kind="torch")   # step from the file name
    rows = summarize_torch_trace(p, ident, SummarizeOptions())
    ph = {r["phase"]: r for r in rows["phases"]}
    ua, mb, un = ph["update_actor"], ph["mini_batch0"], ph[UNATTRIBUTED]
    assert {r["step"] for r in rows["phases"]} == {7} and rows["steps"][0]["boundary"] == "file_name"
    assert ua["stage"] == "actor_update" and mb["parent"] == "update_actor" and mb["depth"] == 1
    assert ua["start_ns"] == 10 ** 18 and ua["wall_ns"] == 1_000_000 and mb["wall_ns"] == 300_000
    assert (ua["kernel_count"], ua["kernel_ns"], ua["comm_ns"], ua["exposed_comm_ns"]) == (2, 130_000, 100_000, 70_000)
    assert (ua["memcpy_h2d_bytes"], ua["memcpy_ns"], ua["memset_ns"], ua["gpu_busy_ns"]) == (4096, 10_000, 5_000, 115_000)
    assert ua["api_ns"] == 8_000 and mb["api_ns"] == 4_000
    assert (mb["kernel_count"], mb["comm_ns"], mb["memcpy_h2d_bytes"], mb["gpu_busy_ns"]) == (1, 0, 4096, 40_000)
    assert un["kernel_count"] == 1 and un["api_ns"] is None
    kern = {(r["phase"], r["kernel_short"]): r for r in rows["kernels"]}
    assert kern[("update_actor", "ncclDevKernel_AllReduce_Sum_f32_RING_LL")]["category"] == "comm"
    assert kern[("mini_batch0", "cutlass_gemm_kernel")]["category"] == "gemm"
    assert kern[(UNATTRIBUTED, "elementwise_kernel")]["total_ns"] == 20_000
    assert any("beyond 64 bits" in w["message"] for w in rows["warnings"])
    # the unannotated thread's kernel (launched at 300 us) is inherited by the main thread's mini_batch0
    assert (mb["kernel_count_inherited"], ua["kernel_count_inherited"], un["kernel_count_inherited"]) == (2, 3, 0)



_t = st.integers(0, 2000)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(ranges=st.lists(st.tuples(st.sampled_from(["gen", "update_actor", "mini_batch0", "x"]), st.integers(1, 2), _t, _t),
                       max_size=8),
       launches=st.lists(st.tuples(st.integers(1, 3), _t, st.integers(1, 30)), max_size=30),
       kernels=st.lists(st.tuples(st.integers(0, 35), _t, st.integers(0, 50),
                                  st.sampled_from(["kernel", "gpu_memcpy", "gpu_memset"])), max_size=40))
def test_fuzz_summaries_are_consistent(tmp_path: Path, ranges, launches, kernels) -> None:
    events = [{"ph": "X", "cat": "user_annotation", "name": n, "pid": 1, "tid": tid, "ts": min(a, b), "dur": abs(a - b)}
              for n, tid, a, b in ranges]
    events += [{"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": tid, "ts": ts, "dur": 1,
                "args": {"correlation": c}} for tid, ts, c in launches]
    events += [{"ph": "X", "cat": cat, "name": f"k{c % 4}", "pid": 0, "tid": 7, "ts": ts, "dur": d,
                "args": {"correlation": c, "bytes": 8}} for c, ts, d, cat in kernels]
    p = tmp_path / "x.json"
    p.write_text(json.dumps({"baseTimeNanoseconds": 10 ** 18, "traceEvents": events}))
    ident = SourceIdentity(source=p.name, source_kind="torch", step_hint=3)
    for _ in (0,):
        rows = summarize_torch_trace(p, ident, SummarizeOptions(top=2))
        for name in ("phases", "kernels", "steps"):
            pa.Table.from_pylist(rows[name], schema=arrow_schema(name))
        n_kernels = sum(1 for e in events if e["cat"] == "kernel")
        top = sum(r["kernel_count"] for r in rows["phases"] if r["depth"] == 0)
        assert top == n_kernels
        assert sum(r["count"] for r in rows["kernels"]) == n_kernels
        for r in rows["phases"]:
            assert 0 <= r["exposed_comm_ns"] <= r["comm_ns"] <= r["gpu_busy_ns"] <= r["kernel_ns"] + r["memcpy_ns"] + r["memset_ns"]
            assert r["idle_ns"] >= 0
