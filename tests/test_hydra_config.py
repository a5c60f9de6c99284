"""Hydra config reader: verl 0.9.1 keys (as Hydra saves them, unresolved), legacy keys, bad YAML."""
from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest
import yaml
from verlprof.stages.core.errors import BadInputError
from verlprof.stages.readers.hydra_config import RunConfig, find_config_near, is_hydra_config, load_run_config

# A trimmed composed verl 0.9.1 PPO config the way Hydra writes `.hydra/config.yaml`: interpolations
# stay unresolved strings. Profiling: nsys on steps [2, 3, 5], actor + critic enabled (rollout follows
# the actor through oc.select), torch settings left at defaults.
VERL_CONFIG = """\
actor_rollout_ref:
  actor:
    strategy: fsdp
    ppo_mini_batch_size: 256
    checkpoint:
      save_contents: [model, optimizer, extra]
      load_contents: ${.save_contents}
    profiler:
      _target_: verl.utils.profiler.ProfilerConfig
      tool: ${oc.select:global_profiler.tool,null}
      enable: true
      all_ranks: false
      ranks: [0, 1]
      save_path: ${oc.select:global_profiler.save_path,null}
      relocate_results: ${oc.select:global_profiler.relocate_results,false}
      tool_config:
        nsys:
          _target_: verl.utils.profiler.config.NsightToolConfig
          discrete: ${oc.select:global_profiler.global_tool_config.nsys.discrete}
        torch:
          _target_: verl.utils.profiler.config.TorchProfilerToolConfig
          contents: []
          discrete: false
  ref:
    profiler:
      tool: ${oc.select:global_profiler.tool,null}
      enable: false
      all_ranks: false
      ranks: []
      tool_config:
        nsys:
          discrete: ${oc.select:global_profiler.global_tool_config.nsys.discrete}
  rollout:
    name: vllm
    profiler:
      tool: ${oc.select:global_profiler.tool,null}
      enable: ${oc.select:actor_rollout_ref.actor.profiler.enable,false}
      all_ranks: ${oc.select:actor_rollout_ref.actor.profiler.all_ranks,false}
      ranks: ${oc.select:actor_rollout_ref.actor.profiler.ranks,[]}
      save_path: ${oc.select:global_profiler.save_path,null}
      tool_config:
        torch:
          contents: ${oc.select:actor_rollout_ref.actor.profiler.tool_config.torch.contents,[]}
          discrete: ${oc.select:actor_rollout_ref.actor.profiler.tool_config.torch.discrete,false}
critic:
  enable: null
  profiler:
    tool: ${oc.select:global_profiler.tool,null}
    enable: true
    all_ranks: true
    ranks: []
    tool_config:
      nsys:
        discrete: ${oc.select:global_profiler.global_tool_config.nsys.discrete}
reward_model:
  enable: false
trainer:
  total_epochs: 30
  total_training_steps: 100
  project_name: verl_examples
  experiment_name: gsm8k
  default_local_dir: checkpoints/${trainer.project_name}/${trainer.experiment_name}
  wandb_key: ${oc.env:WANDB_API_KEY}
global_profiler:
  _target_: verl.utils.profiler.ProfilerConfig
  tool: nsys
  steps: [2, 3, 5]
  profile_continuous_steps: false
  save_path: outputs/profile
  global_tool_config:
    nsys:
      _target_: verl.utils.profiler.config.NsightToolConfig
      discrete: false
      worker_nsight_options:
        trace: cuda,nvtx,cublas,ucx
        capture-range: cudaProfilerApi
        capture-range-end: null
        kill: none
"""


def _write(tmp_path: Path, text: str, sub: str = "run/.hydra") -> Path:
    d = tmp_path / sub
    d.mkdir(parents=True, exist_ok=True)
    p = d / "config.yaml"
    p.write_text(text)
    return p


def test_verl_091_config(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("WANDB_API_KEY", "5f0c3e9a1b7d24e8c6a90f1b3d5e7a9c2b4d6f80")
    cfg = load_run_config(_write(tmp_path, VERL_CONFIG), rel="run/.hydra/config.yaml")
    assert isinstance(cfg, RunConfig) and not cfg.legacy
    assert cfg.tool == "nsys"
    assert cfg.steps == (2, 3, 5)
    assert cfg.profile_continuous_steps is False
    assert cfg.save_path == "outputs/profile"
    assert cfg.discrete is False
    assert cfg.enabled_roles == ("actor", "rollout", "critic")
    assert cfg.role_tools == {"actor": "nsys", "rollout": "nsys", "critic": "nsys"}
    assert cfg.role_discrete == {"actor": False, "rollout": False, "critic": False}
    assert cfg.role_ranks == {"actor": (0, 1), "rollout": (0, 1), "critic": None}
    assert cfg.total_training_steps == 100
    assert cfg.raw["trainer"]["experiment_name"] == "gsm8k"
    assert cfg.step_groups() == [(2, 2), (3, 3), (5, 5)]
    assert [cfg.capture_range_steps(k) for k in (0, 1, 2, 3, 4)] == [None, (2, 2), (3, 3), (5, 5), None]
    m = cfg.to_manifest()
    assert "raw" not in m and m["steps"] == [2, 3, 5] and m["role_ranks"]["critic"] is None
    blob = json.dumps(m)
    assert "5f0c3e9a" not in blob and str(tmp_path) not in blob


def test_env_interpolation_is_never_resolved(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from verlprof.stages.readers.hydra_config import _Resolver
    monkeypatch.setenv("WANDB_API_KEY", "secret-value")
    raw = yaml.safe_load(VERL_CONFIG)
    r = _Resolver(raw)
    assert r.lookup("trainer.wandb_key") is None
    assert r.lookup("trainer.default_local_dir") == "checkpoints/${trainer.project_name}/${trainer.experiment_name}"
    assert r.lookup("actor_rollout_ref.actor.checkpoint.load_contents") == ["model", "optimizer", "extra"]


def test_discrete_continuous_and_torch(tmp_path: Path) -> None:
    raw = yaml.safe_load(VERL_CONFIG)
    raw["global_profiler"]["global_tool_config"]["nsys"]["discrete"] = True
    cfg = load_run_config(_write(tmp_path, yaml.safe_dump(raw)))
    assert cfg.discrete is True and cfg.role_discrete["actor"] is True
    assert cfg.capture_range_steps(1) is None        # discrete: one range per stage, not per step

    raw = yaml.safe_load(VERL_CONFIG)
    raw["global_profiler"]["profile_continuous_steps"] = True
    raw["global_profiler"]["steps"] = [5, 1, 2, 3, 7, 8]
    cfg = load_run_config(_write(tmp_path, yaml.safe_dump(raw), "b/.hydra"))
    assert cfg.step_groups() == [(1, 3), (5, 5), (7, 8)]
    assert cfg.capture_range_steps(1) == (1, 3) and cfg.capture_range_steps(3) == (7, 8)

    raw = yaml.safe_load(VERL_CONFIG)
    raw["global_profiler"]["tool"] = "torch"
    raw["actor_rollout_ref"]["actor"]["profiler"]["tool_config"]["torch"]["discrete"] = True
    cfg = load_run_config(_write(tmp_path, yaml.safe_dump(raw), "c/.hydra"))
    assert cfg.tool == "torch" and cfg.role_tools["actor"] == "torch"
    assert cfg.role_discrete["actor"] is True and cfg.role_discrete["rollout"] is True  # follows actor
    assert cfg.role_discrete["critic"] is False      # critic block has no torch tool_config: default
    assert cfg.capture_range_steps(1) is None        # not nsys


@pytest.mark.parametrize("steps,expected", [(None, None), ([], ()), (4, (4,)), (["3", 1], (3, 1))])
def test_steps_forms(tmp_path: Path, steps: object, expected: object) -> None:
    raw = yaml.safe_load(VERL_CONFIG)
    raw["global_profiler"]["steps"] = steps
    cfg = load_run_config(_write(tmp_path, yaml.safe_dump(raw)))
    assert cfg.steps == expected
    assert cfg.step_groups() == ([] if not expected else cfg.step_groups())


def test_wrong_step_type_is_a_warning(tmp_path: Path) -> None:
    raw = yaml.safe_load(VERL_CONFIG)
    raw["global_profiler"]["steps"] = "all"
    cfg = load_run_config(_write(tmp_path, yaml.safe_dump(raw)))
    assert cfg.steps is None and any("steps" in w for w in cfg.warnings)


def test_nothing_enabled(tmp_path: Path) -> None:
    raw = yaml.safe_load(VERL_CONFIG)
    raw["actor_rollout_ref"]["actor"]["profiler"]["enable"] = False
    raw["critic"]["profiler"]["enable"] = False
    raw["global_profiler"]["tool"] = None
    cfg = load_run_config(_write(tmp_path, yaml.safe_dump(raw)))
    assert cfg.enabled_roles == () and cfg.tool is None


def test_legacy_verl_05_keys(tmp_path: Path) -> None:
    text = """\
actor_rollout_ref:
  profiler:
    discrete: true
    all_ranks: false
    ranks: [0]
critic:
  profiler:
    discrete: false
    all_ranks: false
    ranks: []
trainer:
  profile_steps: [1, 2]
  total_training_steps: null
"""
    cfg = load_run_config(_write(tmp_path, text))
    assert cfg.legacy and cfg.tool == "nsys" and cfg.steps == (1, 2)
    assert cfg.enabled_roles == ("actor_rollout_ref",)
    assert cfg.role_discrete == {"actor_rollout_ref": True} and cfg.discrete is True
    assert cfg.total_training_steps is None


@pytest.mark.parametrize("content,needle", [
    (b"a: [1, 2\nb: 3\n", "bad YAML"),
    (b"", "empty"),
    (b"   \n", "empty"),
    (b"- 1\n- 2\n", "not a mapping"),
    (b"\xff\xfe\x00garbage", "not UTF-8"),
    (b"a: &x [*x]\n", "bad YAML"),
])
def test_bad_yaml_is_one_line_error_naming_file(tmp_path: Path, content: bytes, needle: str) -> None:
    p = tmp_path / ".hydra" / "config.yaml"
    p.parent.mkdir()
    p.write_bytes(content)
    with pytest.raises(BadInputError) as ei:
        load_run_config(p)
    msg = str(ei.value)
    assert str(p) in msg and needle in msg and "\n" not in msg


def test_missing_file_is_bad_input(tmp_path: Path) -> None:
    with pytest.raises(BadInputError, match="cannot read"):
        load_run_config(tmp_path / "nope" / "config.yaml")


def test_is_hydra_config(tmp_path: Path) -> None:
    p = _write(tmp_path, "a: 1\n")
    assert is_hydra_config(p)
    loose = tmp_path / "copied" / "config.yaml"
    loose.parent.mkdir()
    loose.write_text("a: 1\n")
    assert not is_hydra_config(loose)
    (loose.parent / "overrides.yaml").write_text("- a=1\n")
    assert is_hydra_config(loose)
    assert not is_hydra_config(loose.parent / "overrides.yaml")


def test_find_config_near_profile_folder(tmp_path: Path) -> None:
    launch = tmp_path / "proj"
    prof = launch / "outputs" / "profile"
    prof.mkdir(parents=True)
    good = _write(launch, VERL_CONFIG, "outputs/2026-01-02/03-04-05/.hydra")
    other = yaml.safe_load(VERL_CONFIG)
    other["global_profiler"]["save_path"] = "elsewhere/profile"
    _write(launch, yaml.safe_dump(other), "outputs/2026-01-03/00-00-00/.hydra")
    _write(launch, "a: [broken\n", "outputs/2026-01-04/00-00-00/.hydra")
    assert find_config_near(prof) == good
    # a config inside the folder (or above it) wins without any save_path check
    inner = _write(prof, "a: 1\n", ".hydra")
    assert find_config_near(prof) == inner
    assert find_config_near(tmp_path / "missing") is None


def test_real_verl_generated_config(tmp_path: Path) -> None:
    """The full composed verl 0.9.1 trainer config (from the installed verl) with profiling on."""
    spec = importlib.util.find_spec("verl")
    gen = (Path(list(spec.submodule_search_locations)[0]) / "trainer/config/_generated_ppo_trainer.yaml"
           if spec and spec.submodule_search_locations else None)
    if gen is None or not gen.is_file():
        pytest.skip("verl is not installed")
    raw = yaml.safe_load(gen.read_text())
    raw["global_profiler"].update(tool="torch", steps=[1, 3])
    raw["actor_rollout_ref"]["actor"]["profiler"]["enable"] = True
    raw["actor_rollout_ref"]["actor"]["profiler"]["tool_config"]["torch"]["discrete"] = True
    cfg = load_run_config(_write(tmp_path, yaml.safe_dump(raw)))
    assert cfg.tool == "torch" and cfg.steps == (1, 3) and cfg.save_path == "outputs/profile"
    assert cfg.enabled_roles == ("actor", "rollout")
    assert cfg.role_discrete == {"actor": True, "rollout": True}
    assert cfg.role_ranks["actor"] == (0,)
    assert cfg.discrete is False and cfg.total_training_steps is None
