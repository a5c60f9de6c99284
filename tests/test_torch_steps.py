"""Step finding of torch traces lives in the window stage and follows the nsys marker rules.

The public DDP Kineto trace (HTA, MIT) with its `ProfilerStep#N` ranges renamed to the other markers
verl and users write: verl's `step` range (numbered in order), `train_step <N>` (its own number), and
`--step-range REGEX`; every expected span is read from the raw JSON. `source_steps_item` answers for
every format (nsys, torch, memory snapshot).
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))
from testdata import data_path, fixtures_dir  # noqa: E402
from verlprof.stages.summarize.types import SummarizeOptions  # noqa: E402
from verlprof.stages.window import SourceIdentity, identity_from_path, source_steps_item  # noqa: E402

DDP = "kineto_public/hta_ddp_nccl_rank0.json"


def _renamed(tmp_path: Path, rename) -> tuple[Path, list[dict], int]:
    doc = json.loads(data_path(DDP).read_text())
    marks = sorted((e for e in doc["traceEvents"] if e.get("cat") == "user_annotation"
                    and e["name"].startswith("ProfilerStep#")), key=lambda e: e["ts"])
    for k, e in enumerate(marks):
        e["name"] = rename(k)
    p = tmp_path / "ddp_rank0.json"
    p.write_text(json.dumps(doc))
    return p, marks, doc["baseTimeNanoseconds"]


def _steps(p: Path, step_range: str | None = None) -> list:
    src = source_steps_item((str(p), identity_from_path(p)), SummarizeOptions(step_range=step_range))
    assert src.ident.source_kind == "torch" and src.ident.rank == 0     # distributedInfo
    return sorted(src.steps, key=lambda s: s.start_ns)


@pytest.mark.parametrize("rename, boundary, numbers", [
    (lambda k: "step", "nvtx_step", [1, 2, 3]),                  # verl's own step range, in order
    (lambda k: f"train_step {10 + k}", "step_name", [10, 11, 12]),
    (lambda k: f"ProfilerStep#{4 + k}", "profiler_step", [5, 6, 7]),
])
def test_torch_markers_follow_the_nsys_rules(tmp_path: Path, rename, boundary: str, numbers: list[int]) -> None:
    p, marks, base = _renamed(tmp_path, rename)
    steps = _steps(p)
    assert [s.step for s in steps] == numbers and {s.boundary for s in steps} == {boundary}
    for s, e in zip(steps, marks):   # ns from float us: the reader's rounding may differ by 1 ns
        lo = base + round(e["ts"] * 1000)
        assert abs(s.start_ns - lo) <= 1 and abs(s.end_ns - (lo + round(e["dur"] * 1000))) <= 2


def test_step_range_wins_and_a_file_name_step_beats_profiler_steps(tmp_path: Path) -> None:
    p, _, _ = _renamed(tmp_path, lambda k: f"ProfilerStep#{k}")
    opt = _steps(p, r"^## optimizer ##$")
    assert [s.boundary for s in opt] == ["step_range"] * 3 and [s.label for s in opt] == ["## optimizer ##"] * 3
    named = p.rename(tmp_path / "ddp_step4_rank0.json")         # verl's torch traces: one step per file
    (one,) = _steps(named)
    assert (one.step, one.boundary) == (4, "file_name")


def test_every_format_through_one_item_function() -> None:
    snap = fixtures_dir() / "h200-torch-2.11" / "step2" / "torch_memory_rank0_pid804.pickle"
    ident = SourceIdentity(source="step2/torch_memory_rank0_pid804.pickle", source_kind="memory", pid=804, step_hint=2)
    src = source_steps_item((str(snap), ident))
    assert src.steps and src.steps[-1].step == 2 and {s.boundary for s in src.steps} == {"snapshot_dir"}
    nsys = data_path("h200-nsys-2025.3/whole/whole_1873.sqlite")
    assert source_steps_item((str(nsys), identity_from_path(nsys))).steps


def test_window_summarizes_a_snapshot_beside_its_trace() -> None:
    """`verlprof window --phases` path: a memory snapshot is a source like any other (its steps from
    the window stage, its rows by the snapshot summarizer), not sent to the nsys reader."""
    from verlprof.pipeline.stage_runs import summarize_sources

    folder = fixtures_dir() / "h200-torch-2.11"
    trace = next(folder.glob("*_step2_*.json.gz"))
    snap = folder / "step2" / "torch_memory_rank0_pid804.pickle"
    res = summarize_sources([(trace, identity_from_path(trace)), (snap, identity_from_path(snap))])
    assert res.errors == [] and res.choice.step == 2
    mem = [r for r in res.rows["phases"] if r["source_kind"] == "memory"]
    assert mem and {r["step"] for r in mem} == {2} and all(r["mem_peak_bytes"] for r in mem)


# ---------------------------------------------------------------------------------------------
# the whole capture covers its GPU work; an empty capture says so (issue 31)
# ---------------------------------------------------------------------------------------------


def test_whole_capture_holds_the_gpu_work_after_its_ranges():
    """A CUDA-graph replay range of 3.5 ms whose kernels run 114 ms: the whole-capture window runs
    from the first event to the end of the last kernel (from the JSON itself)."""
    import gzip
    import json

    from testdata import data_path
    from verlprof.stages.window import identity_from_path, run_window, source_steps_item

    path = data_path("graph-replay/graph_replay.pt.trace.json.gz")
    doc = json.load(gzip.open(path))
    base = int(doc["baseTimeNanoseconds"])
    ev = doc["traceEvents"]
    cpu = [e for e in ev if e.get("cat") == "user_annotation"]
    gpu = [e for e in ev if e.get("cat") == "kernel"]
    lo = min(min(e["ts"] for e in cpu), min(e["ts"] for e in gpu))
    hi = max(max(e["ts"] + e["dur"] for e in cpu), max(e["ts"] + e["dur"] for e in gpu))
    ident = identity_from_path(path)
    resolved, choice = run_window([source_steps_item((str(path), ident))])
    (span,) = resolved[0].steps
    assert span.boundary == "whole_file" and choice.step == span.step
    assert abs(span.start_ns - (base + round(lo * 1000))) <= 1000
    assert abs(span.end_ns - (base + round(hi * 1000))) <= 1000
    busy = sum(e["dur"] for e in gpu) * 1000
    assert busy <= span.wall_ns          # GPU % of the step can no longer pass 100


def test_capture_with_no_gpu_work_and_no_ranges_says_so():
    from testdata import data_path
    from verlprof.stages.window import identity_from_path, run_window, source_steps_item

    path = data_path("idle-capture/idle_5815.sqlite")
    _resolved, choice = run_window([source_steps_item((str(path), identity_from_path(path)))])
    assert choice.step is None
    assert choice.reason == "nothing to summarize: no GPU work and no ranges in idle_5815.sqlite"
