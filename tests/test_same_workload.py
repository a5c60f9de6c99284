"""One workload traced by nsys and by torch.profiler gives the same phases (tests/data/same_workload).

The figures are not compared with each other (two runs), but what the rows say about the run is:
the same phase paths from verl's annotations, the same instance and kernel counts per phase, and
no column left null in a torch row where the nsys row of the same phase has a value.
"""
from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))
from testdata import data_dir, data_path  # noqa: E402
from verlprof.stages.summarize.nsys import summarize_nsys  # noqa: E402
from verlprof.stages.summarize.torch_profile import TorchItem, summarize_torch_item  # noqa: E402
from verlprof.stages.summarize.types import SummarizeOptions  # noqa: E402
from verlprof.stages.window import identity_from_path, run_window, torch_source_steps, window_spans  # noqa: E402

#: ranges PyTorch itself opens with record_function (FSDP, optimizers, collectives); NVTX has none of them
TORCH_OWN = ("FullyShardedDataParallel.", "Optimizer.", "gloo:", "nccl:")


@pytest.fixture(scope="module")
def pair() -> tuple[dict, dict]:
    nsys = summarize_nsys(data_path("same_workload/make_gpu_run_cpu.sqlite"))
    traces = sorted(data_dir("same_workload/torch").glob("*.json"))
    srcs = [torch_source_steps(p, identity_from_path(p)) for p in traces]
    resolved, choice = run_window(srcs, SummarizeOptions().step)
    rows: dict = {"phases": [], "steps": []}
    for p, src in zip(traces, resolved):
        spans = tuple(window_spans(src, choice.step))
        if spans:
            rows["phases"] += summarize_torch_item(TorchItem(str(p), src.ident, spans), SummarizeOptions())["phases"]
    return nsys, {"phases": rows["phases"], "choice": choice}


def _by_path(rows: list[dict]) -> dict[str, dict]:
    return {r["path"]: r for r in rows}


def test_the_same_step_is_chosen(pair) -> None:
    nsys, torch = pair
    assert [s["step"] for s in nsys["steps"] if s["chosen"]] == [torch["choice"].step] == [2]


def test_same_phase_paths(pair) -> None:
    nsys, torch = _by_path(pair[0]["phases"]), _by_path(pair[1]["phases"])
    assert len(nsys) == 13 and set(nsys) <= set(torch)
    extra = {p.rsplit(" > ", 1)[-1] for p in set(torch) - set(nsys)}
    assert extra and all(name.startswith(TORCH_OWN) for name in extra), extra


def test_same_counts_per_phase(pair) -> None:
    nsys, torch = _by_path(pair[0]["phases"]), _by_path(pair[1]["phases"])
    for path, n in nsys.items():
        t = torch[path]
        assert (t["instances"], t["depth"], t["parent"], t["stage"]) == (n["instances"], n["depth"], n["parent"], n["stage"]), path
        assert (t["kernel_count"], t["kernel_count_inherited"]) == (n["kernel_count"], n["kernel_count_inherited"]), path


def test_no_null_in_a_torch_row_where_nsys_has_a_value(pair) -> None:
    nsys, torch = _by_path(pair[0]["phases"]), _by_path(pair[1]["phases"])
    for path, n in nsys.items():
        missing = [c for c, v in n.items() if v is not None and torch[path].get(c) is None]
        assert not missing, (path, missing)
