"""Every verl layout, written by verl's own profiler code: role, rank, step and window as verl
means them (issue 31).

verl 0.9.1 (installed by .ci/install_extras.sh) writes the torch traces and moves the rollout
engines' traces; verl 0.7 / early-2026 main's `get_torch_profiler` (not in the installed release)
runs from tests/data/verl_upstream/, copied unchanged. Traces are real torch CPU profiler traces.
"""
from __future__ import annotations

import gzip
import importlib.util
import os
import shutil
from pathlib import Path

import torch
from testdata import DATA
from verlprof.pipeline.stage_runs import summarize_sources
from verlprof.stages.gather import gather
from verlprof.stages.summarize import SummarizeOptions
from verlprof.stages.window.steps import identity_from_artifact


def _work(name: str) -> None:
    with torch.profiler.record_function(name):
        x = torch.randn(32, 32)
        (x @ x).sum()


def _torch_items(root: Path):
    res = gather([root], with_hashes=False)
    arts = [a for a in res.artifacts if a.kind.value == "torch_trace"]
    return arts, [(a.path, identity_from_artifact(a)) for a in arts]


def test_verl_09_trace_names(tmp_path):
    from verl.utils.profiler.torch_profile import get_torch_profiler

    save = tmp_path / "profile"
    for step in (1, 2, 3):
        prof = get_torch_profiler(contents=["cpu"], save_path=str(save), role="train",
                                  save_file_prefix="actor_rollout_ref", rank=1, profile_step=step)
        prof.start()
        _work("actor_update")
        prof.stop()
    arts, items = _torch_items(save)
    assert sorted((a.naming, a.role, a.rank, a.step, a.scope) for a in arts) == [
        ("torch_verl", "actor_rollout_ref", 1, s, "train") for s in (1, 2, 3)]
    res = summarize_sources(items, SummarizeOptions())
    assert res.choice.step == 2 and {r["rank"] for r in res.rows["phases"]} == {1}


def test_verl_07_phase_folder_layout(tmp_path):
    """`<save_path>/<role>/prof_rank-<R>.json.gz`: the folder is the profiled scope (a stage in
    discrete mode), its role the stage's; no step in the name (each call rewrites the file)."""
    spec = importlib.util.spec_from_file_location("verl_tp_2026", DATA / "verl_upstream" / "torch_profile_2026_early.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)  # type: ignore[union-attr]
    save = tmp_path / "profile"
    for rank in (0, 1):
        for role in ("actor_update", "ref_compute_log_prob"):
            prof = mod.get_torch_profiler(["cpu"], str(save), role=role, rank=rank)
            prof.start()
            _work(role)
            prof.stop()
    arts, items = _torch_items(save)
    assert sorted((a.naming, a.scope, a.role, a.rank) for a in arts) == [
        ("torch_verl_phase", "actor_update", "actor", 0), ("torch_verl_phase", "actor_update", "actor", 1),
        ("torch_verl_phase", "ref_compute_log_prob", "ref", 0), ("torch_verl_phase", "ref_compute_log_prob", "ref", 1)]
    res = summarize_sources(items, SummarizeOptions())
    assert {(r["role"], r["rank"]) for r in res.rows["phases"]} == {("actor", 0), ("actor", 1), ("ref", 0), ("ref", 1)}
    assert {s.boundary for src in res.sources for s in src.steps} == {"whole_file"}


CONFIG = """\
global_profiler:
  tool: torch
  steps: [1]
  save_path: profile
actor_rollout_ref:
  rollout:
    tensor_model_parallel_size: 2
    data_parallel_size: 1
    pipeline_model_parallel_size: 1
    profiler:
      enable: true
      tool: torch
      all_ranks: true
      tool_config:
        torch:
          discrete: true
          profile_token_start: 4
          profile_token_end: 12
"""


def _engine_trace(path: Path) -> None:
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        _work("execute_model")
    raw = path.with_suffix("")  # .json
    prof.export_chrome_trace(str(raw))
    with open(raw, "rb") as f, gzip.open(path, "wb") as g:
        shutil.copyfileobj(f, g)
    raw.unlink()


def test_rollout_replica_tp_ranks_are_two_ranks(tmp_path):
    """SGLang-named traces of replica 1 with tp=2, where verl puts them and where verl relocates
    them: global ranks 2 and 3 either way, two ranks in the rows, the token window said."""
    from verl.utils.profiler.config import ProfilerConfig, relocate_rollout_traces, rollout_trace_dir

    save = tmp_path / "profile"
    cfg = ProfilerConfig(tool="torch", enable=True, all_ranks=True, save_path=str(save), relocate_results=True)
    replica_dir = Path(rollout_trace_dir(cfg, 1))
    replica_dir.mkdir(parents=True)
    for tp in (0, 1):
        _engine_trace(replica_dir / f"1764660000.25-TP-{tp}.trace.json.gz")
    hydra = tmp_path / "outputs" / ".hydra"
    hydra.mkdir(parents=True)
    (hydra / "config.yaml").write_text(CONFIG)

    def ranks_and_rows():
        arts, items = _torch_items(tmp_path)
        res = summarize_sources(items, SummarizeOptions())
        return sorted((a.rank, a.role) for a in arts), res

    in_dir, res = ranks_and_rows()
    assert in_dir == [(2, "rollout"), (3, "rollout")]
    assert {r["rank"] for r in res.rows["phases"]} == {2, 3}
    assert "response tokens 4 to 12 only" in res.choice.reason
    moved = relocate_rollout_traces(cfg, 1, world_size=2)
    assert sorted(os.path.basename(m).split("_")[0] for m in moved) == ["rollout-replica1-globalrank2",
                                                                         "rollout-replica1-globalrank3"]
    relocated, res = ranks_and_rows()
    assert relocated == in_dir and {r["rank"] for r in res.rows["phases"]} == {2, 3}
