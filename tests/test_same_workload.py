"""One workload traced by nsys and by torch.profiler gives the same phases (tests/data/same_workload).

Two pairs, each `samples/make_gpu_run.py` run twice with the same arguments, once under Nsight
Systems and once under torch.profiler: on this CPU machine (no kernels) and on an H200 (CUDA,
NCCL, FSDP; tests/data/same_workload/README.md). The figures are not compared with each other (two
runs), but what the rows say about the run is: the same phase paths from verl's annotations, the
same instance counts, the same kernel counts per phase, and no column left null in a torch row
where the nsys row of the same phase has a value.

What differs, and is checked to differ by exactly that: torch.profiler also records PyTorch's own
ranges (FSDP hooks, optimizers, collectives; NVTX has none of them). Those that run on autograd's
thread nest under the main-thread phase open then (the helper-thread rule), so a phase's plain
(same-thread) kernel count in the torch trace also holds the kernels launched inside them; in the
nsys capture the same kernels were launched on a thread with no range open, so only the inherited
figure has them. The test derives that difference from the raw JSON, not from the summarizer.
"""
from __future__ import annotations

import functools
import json
import sys
from collections import Counter
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))
from testdata import data_dir, data_path  # noqa: E402
from nsys_summaries import summarize_nsys  # noqa: E402
from verlprof.stages.summarize.torch_profile import TorchItem, summarize_torch_item  # noqa: E402
from verlprof.stages.summarize.types import SummarizeOptions  # noqa: E402
from verlprof.stages.window import identity_from_path, run_window, torch_source_steps, window_spans  # noqa: E402

#: ranges PyTorch itself opens with record_function (FSDP, optimizers, collectives); NVTX has none of them
TORCH_OWN = ("FullyShardedDataParallel.", "Optimizer.", "gloo:", "nccl:")

PAIRS = {
    "cpu": ("same_workload/make_gpu_run_cpu.sqlite", "same_workload/torch"),
    "cuda-h200": ("same_workload/cuda/make_gpu_run_cuda.sqlite", "same_workload/cuda/torch"),
}


@functools.lru_cache(maxsize=None)
def _load(name: str) -> dict:
    """Both halves of pair `name` summarized: the nsys export and the torch trace of the chosen step."""
    export, torch_dir = PAIRS[name]
    nsys = summarize_nsys(data_path(export))
    traces = sorted(data_dir(torch_dir).glob("*.json"))
    srcs = [torch_source_steps(p, identity_from_path(p)) for p in traces]
    resolved, choice = run_window(srcs, SummarizeOptions().step)
    phases: list[dict] = []
    chosen_trace = None
    for p, src in zip(traces, resolved):
        spans = tuple(window_spans(src, choice.step))
        if spans:
            phases += summarize_torch_item(TorchItem(str(p), src.ident, spans), SummarizeOptions())["phases"]
            chosen_trace = p
    return {"name": name, "nsys": nsys, "torch": phases, "choice": choice, "trace": chosen_trace}


@pytest.fixture(scope="module", params=sorted(PAIRS))
def pair(request) -> dict:
    return _load(request.param)


def _by_path(rows: list[dict]) -> dict[str, dict]:
    return {r["path"]: r for r in rows}


def _kernels_in_torch_own_helper_ranges(trace: Path) -> dict[str, int]:
    """Leaf phase name -> kernels launched, while that main-thread range was open, from another
    thread inside one of PyTorch's own ranges there: read from the raw JSON with plain `json`."""
    events = json.loads(trace.read_text())["traceEvents"]
    ranges = [e for e in events if e.get("ph") == "X" and e.get("cat") == "user_annotation"]
    main = next(e["tid"] for e in ranges if e["name"] == "step")
    own = [e for e in ranges if e["tid"] != main and e["name"].startswith(TORCH_OWN)]
    launches = {e["args"]["correlation"]: e for e in events
                if e.get("cat") in ("cuda_runtime", "cuda_driver") and "correlation" in e.get("args", {})}
    kernels = [e for e in events if e.get("cat") == "kernel"]
    extra: Counter = Counter()
    for k in kernels:
        call = launches.get(k["args"].get("correlation"))
        if call is None or call["tid"] == main:
            continue
        t = call["ts"]
        if not any(r["tid"] == call["tid"] and r["ts"] <= t <= r["ts"] + r["dur"] for r in own):
            continue
        for r in ranges:
            if r["tid"] == main and r["ts"] <= t <= r["ts"] + r["dur"] and not r["name"].startswith(TORCH_OWN):
                extra[r["name"]] += 1
    return dict(extra)


def test_the_same_step_is_chosen(pair) -> None:
    assert [s["step"] for s in pair["nsys"]["steps"] if s["chosen"]] == [pair["choice"].step] == [2]


def test_same_phase_paths(pair) -> None:
    nsys, torch = _by_path(pair["nsys"]["phases"]), _by_path(pair["torch"])
    assert len(set(nsys) - {"(unattributed)"}) == 13 and set(nsys) <= set(torch)
    extra = {p.rsplit(" > ", 1)[-1] for p in set(torch) - set(nsys)}
    assert extra and all(name.startswith(TORCH_OWN) for name in extra), extra


def test_same_counts_per_phase(pair) -> None:
    nsys, torch = _by_path(pair["nsys"]["phases"]), _by_path(pair["torch"])
    extra = _kernels_in_torch_own_helper_ranges(pair["trace"])
    for path, n in nsys.items():
        t = torch[path]
        assert (t["instances"], t["depth"], t["parent"], t["stage"]) == (n["instances"], n["depth"], n["parent"], n["stage"]), path
        assert t["kernel_count_inherited"] == n["kernel_count_inherited"], path
        if path == "(unattributed)":          # what the torch trace's helper ranges took in, nsys leaves here
            assert n["kernel_count"] - t["kernel_count"] == extra.get("step", 0)
        else:
            assert t["kernel_count"] - n["kernel_count"] == extra.get(path.rsplit(" > ", 1)[-1], 0), path


def test_cuda_pair_has_gpu_work_in_every_worker_phase() -> None:
    """The CUDA pair is the one that says something about kernels: each worker phase ran some, the
    backward kernels (autograd's thread) are inherited by update_actor in both, and the difference
    of plain counts above is not vacuous."""
    pair = _load("cuda-h200")
    nsys = _by_path(pair["nsys"]["phases"])
    for leaf in ("generate_sequences", "actor_compute_log_prob", "ref_compute_log_prob", "actor_update"):
        row = next(r for p, r in nsys.items() if p.endswith(leaf))
        assert row["kernel_count"] > 0, leaf
    upd = nsys["step > update_actor"]
    assert upd["kernel_count_inherited"] > upd["kernel_count"]
    assert nsys["(unattributed)"]["kernel_count_inherited"] == 0
    assert sum(_kernels_in_torch_own_helper_ranges(pair["trace"]).values()) > 0


def test_no_null_in_a_torch_row_where_nsys_has_a_value(pair) -> None:
    nsys, torch = _by_path(pair["nsys"]["phases"]), _by_path(pair["torch"])
    for path, n in nsys.items():
        missing = [c for c, v in n.items() if v is not None and torch[path].get(c) is None]
        assert not missing, (path, missing)
