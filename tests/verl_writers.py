"""Real torch profiler traces of small CPU work, laid out as verl and its rollout engines write
them (issue 40). Test helpers, not tests: tests/test_trace_series.py uses them.

The traces are real (`torch.profiler.profile` over a few matmuls under the `record_function` names
the engines and verl's workers use) and made once per test session (a session fixture calls
`profile_engine_steps` / `profile_stage_calls`); each layout then copies them to where verl's own
code puts them:

- `rollout_trace_dir`, `build_vllm_profiler_args`, `build_sglang_profiler_args`,
  `relocate_rollout_traces` (verl 0.9.1, `verl/utils/profiler/config.py`) give every folder and
  every relocated name;
- the engines' own file names are reproduced by hand, each with its writer:
  vLLM: `torch.profiler.tensorboard_trace_handler(dir, worker_name=...)` writes
  `<worker_name>.<time_ns>.pt.trace.json.gz`, vLLM's worker name carrying `-rank-<tp>` (as
  verl's `rollout_trace_local_rank` reads it); older vLLM passes no worker name, so torch's
  default `<hostname>_<pid>` is used; SGLang's profiler (`scheduler_profiler_mixin`) writes
  `<profile_id>-TP-<tp>.trace.json.gz` with `profile_id = str(time.time())` at each start;
- verl 0.8.0's per-call layout is written live by its own `get_torch_profiler`
  (tests/data/verl_upstream/torch_profile_0_8_0.py, copied unchanged), called as
  `DistProfiler.annotate(role=<stage>)` calls it in discrete mode.
"""
from __future__ import annotations

import gzip
import importlib.util
import json
import shutil
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import torch
from testdata import DATA

#: verl's trainer profiles these steps unless the run's config says otherwise (tests: 3 steps).
STEPS = (1, 2, 3)
REPLICAS = (0, 1)
TP = 2
#: The stage calls of one verl 0.8 training step in discrete mode, in the trainer's order
#: (`ray_trainer.fit`: ref log-prob, old log-prob, update; `engine_workers.py` annotate roles).
STAGES = ("ref_compute_log_prob", "actor_compute_log_prob", "actor_update")


def _work(name: str, iterations: int, pause_s: float) -> None:
    """`iterations` engine iterations under `name` (a few 32x32 matmuls each), the step's wall set
    by a pause so step walls are ordered (step s pauses s times as long)."""
    for _ in range(iterations):
        with torch.profiler.record_function(name):
            x = torch.randn(32, 32)
            for _ in range(2):
                x = x @ x
            time.sleep(pause_s)


def annotation_counts(path: Path) -> Counter:
    """How many `user_annotation` ranges of each name a raw trace holds (read from the file)."""
    with gzip.open(path, "rt") as f:
        events = json.load(f)["traceEvents"]
    return Counter(e["name"] for e in events if e.get("ph") == "X" and e.get("cat") == "user_annotation")


def op_counts(path: Path) -> Counter:
    """How many `cpu_op` events of each name (`aten::mm` ...) a trace holds (read from the file)."""
    with gzip.open(path, "rt") as f:
        events = json.load(f)["traceEvents"]
    return Counter(e["name"] for e in events if e.get("ph") == "X" and e.get("cat") == "cpu_op")


@dataclass(frozen=True)
class RawTrace:
    """One real trace: the profiled step it holds, which replica and tensor-parallel rank ran it."""

    step: int
    replica: int
    tp: int
    path: Path


def profile_engine_steps(out: Path, iterations: int | None = None) -> list[RawTrace]:
    """One trace per profiled step, replica and tp rank, in step order (each start/stop of the
    engine profiler is one `ray_trainer` profiled step). Step s runs `iterations` engine
    iterations (`execute_model`), else 2 + s, so one step's count differs from any other's."""
    out.mkdir(parents=True, exist_ok=True)
    traces = []
    for step in STEPS:
        for replica in REPLICAS:
            for tp in range(TP):
                path = out / f"raw_s{step}_r{replica}_tp{tp}.json.gz"
                with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
                    _work("execute_model", iterations or 2 + step, 0.002 * step)
                prof.export_chrome_trace(str(path))
                traces.append(RawTrace(step, replica, tp, path))
    return traces


def _verl_08():
    spec = importlib.util.spec_from_file_location("verl_tp_080", DATA / "verl_upstream" / "torch_profile_0_8_0.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)  # type: ignore[union-attr]
    return mod


def profile_stage_calls(save_path: Path, ranks: tuple[int, ...] = (0, 1)) -> dict[Path, int]:
    """verl 0.8.0 discrete mode, written by its own `get_torch_profiler`: per profiled step and
    rank, one file per stage call under `<save_path>/<stage>/`. Returns file -> the step it holds."""
    mod = _verl_08()
    written: dict[Path, int] = {}
    for step in STEPS:
        for stage in STAGES:
            for rank in ranks:
                before = set(save_path.rglob("*.json.gz"))
                prof = mod.get_torch_profiler(contents=["cpu"], save_path=str(save_path), role=stage, rank=rank)
                prof.start()
                _work(stage, 1 + step, 0.002 * step)
                prof.stop()
                new = set(save_path.rglob("*.json.gz")) - before
                assert len(new) == 1, new   # the name's ms timestamp keeps every call's file
                written[new.pop()] = step
                time.sleep(0.002)
    return written


def place(raw: Path, dst: Path) -> Path:
    """Copy a raw trace to where a writer puts it (the folder is created as the writer does)."""
    dst.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(raw, dst)
    return dst
