"""Tests for `verlprof doctor`: each check with a case that fires and one that does not.

Configs are real YAML files in tmp_path, laid out like a composed verl config (with the same
``${oc.select:...}`` interpolations verl's generated config uses); the CLI is exercised with
typer's CliRunner on an app built with ``doctor_cmd.register``. No mocks.
"""

from __future__ import annotations

from pathlib import Path

import json
import os
import time

import pytest
import typer
import yaml
from typer.testing import CliRunner
from verlprof.pipeline.commands import doctor_cmd
from verlprof.stages import doctor as D

BASE_YAML = """
actor_rollout_ref:
  hybrid_engine: true
  model:
    path: /models/tiny
    lora_rank: 0
    lora_adapter_path: null
  actor:
    use_kl_loss: true
    profiler:
      tool: ${oc.select:global_profiler.tool,null}
      enable: true
      all_ranks: false
      ranks: [0]
      save_path: ${oc.select:global_profiler.save_path,null}
      tool_config:
        torch:
          discrete: false
          contents: []
  ref:
    profiler:
      tool: ${oc.select:global_profiler.tool,null}
      enable: false
      tool_config:
        torch:
          discrete: false
  rollout:
    name: vllm
    profiler:
      tool: ${oc.select:global_profiler.tool,null}
      enable: ${oc.select:actor_rollout_ref.actor.profiler.enable,false}
      tool_config:
        torch:
          discrete: ${oc.select:actor_rollout_ref.actor.profiler.tool_config.torch.discrete,false}
critic:
  enable: false
  profiler:
    enable: false
algorithm:
  adv_estimator: grpo
  use_kl_in_reward: false
reward:
  reward_model:
    enable: false
    rollout:
      name: vllm
trainer:
  total_epochs: 30
  total_training_steps: 2
  save_freq: -1
  test_freq: -1
  resume_mode: disable
  default_local_dir: checkpoints/${trainer.project_name}/x
  project_name: demo
global_profiler:
  tool: nsys
  steps: [1, 2]
  profile_continuous_steps: false
  save_path: outputs/profile
  global_tool_config:
    nsys:
      discrete: false
      controller_nsight_options:
        trace: cuda,nvtx
        cuda-memory-usage: 'true'
        discard-environment: true
      worker_nsight_options:
        trace: cuda,nvtx
        capture-range: cudaProfilerApi
        capture-range-end: repeat-shutdown:2
        kill: none
        discard-environment: true
"""


def _set(d: dict, path: str, value) -> None:
    parts = path.split(".")
    for p in parts[:-1]:
        d = d.setdefault(p, {})
    if value is _DEL:
        d.pop(parts[-1], None)
    else:
        d[parts[-1]] = value


_DEL = object()


def write_config(tmp_path, changes: dict | None = None, name: str = "config.yaml") -> str:
    data = yaml.safe_load(BASE_YAML)
    for k, v in (changes or {}).items():
        _set(data, k, v)
    path = tmp_path / name
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return str(path)


def make_cfg(tmp_path, changes: dict | None = None, words=(), **kw) -> D.ProfileConfig:
    base = D.load_yaml(write_config(tmp_path, changes))
    return D.build_profile_config(base, list(words), base_kind="config", **kw)


def codes(findings, severity=None) -> list[str]:
    return [f.code for f in findings if severity is None or f.severity == severity]


def make_app() -> typer.Typer:
    app = typer.Typer()

    @app.callback()
    def _root() -> None:  # keep `doctor` a subcommand, as in verlprof's CLI
        pass

    doctor_cmd.register(app)
    return app


runner = CliRunner()


def invoke(*args: str):
    return runner.invoke(make_app(), ["doctor", "--nsys", "none", *args])


# ---------------------------------------------------------------------------------------------
# override parsing and interpolation
# ---------------------------------------------------------------------------------------------


def test_parse_overrides_applies_hydra_forms_and_records_duplicates():
    base = {"a": {"b": 1, "c": 2}, "t": {"x": 0}}
    p = D.parse_overrides(
        ["python3", "-m", "verl.trainer.main_ppo", "a.b=5", "+a.d=[1,2]", "++a.c=null", "~t.x",
         "a.b=7", "+a.d=3", "hydra.run.dir=/tmp/x", "model_engine@foo=megatron", "e.f={k:1}", "--config-name=x"],
        base,
    )
    assert p.config["a"] == {"b": 7, "c": None, "d": [1, 2]}  # +a.d=3 refused: already there
    assert p.config["t"] == {}
    assert p.config["e"] == {"f": {"k": 1}}
    assert p.entrypoint == "verl.trainer.main_ppo"
    assert "hydra.run.dir=/tmp/x" in p.ignored and "--config-name=x" in p.ignored
    dup = {d.key: d for d in p.duplicates}
    assert dup["a.b"].winner == "a.b=7" and dup["a.b"].words == ("a.b=5", "a.b=7")
    assert dup["a.d"].winner == "+a.d=3"
    second_add = [o for o in p.overrides if o.word == "+a.d=3"][0]
    assert second_add.existed is True
    assert base["a"] == {"b": 1, "c": 2}  # the base is not mutated


def test_parse_overrides_without_base_knows_no_existence():
    p = D.parse_overrides(["trainer.save_freq=-1", "global_profiler.steps=[1,2]"])
    assert p.config == {"trainer": {"save_freq": -1}, "global_profiler": {"steps": [1, 2]}}
    assert all(o.existed is None for o in p.overrides)
    assert p.duplicates == []


def test_interpolations_resolve_like_omegaconf(tmp_path):
    cfg = make_cfg(tmp_path, words=["actor_rollout_ref.actor.profiler.tool_config.torch.discrete=True"])
    assert cfg.get("actor_rollout_ref.rollout.profiler.enable") is True  # inherited from the actor
    assert cfg.get("actor_rollout_ref.rollout.profiler.tool_config.torch.discrete") is True
    assert cfg.get("actor_rollout_ref.actor.profiler.tool") == "nsys"
    assert cfg.get("trainer.default_local_dir") == "checkpoints/demo/x"
    assert not cfg.explicit("actor_rollout_ref.rollout.profiler.enable")
    assert cfg.explicit("actor_rollout_ref.actor.profiler.enable")


# ---------------------------------------------------------------------------------------------
# pins
# ---------------------------------------------------------------------------------------------


def test_pins_clean_config_has_no_pin_findings(tmp_path):
    assert D.check_pins(make_cfg(tmp_path)) == []


@pytest.mark.parametrize(
    "changes,code,severity",
    [
        ({"trainer.total_training_steps": None}, "pin-total-steps", "error"),
        ({"trainer.total_training_steps": 1}, "pin-profile-steps", "error"),  # step 2 never runs
        ({"trainer.total_training_steps": 5}, "pin-total-steps", "warning"),
        ({"trainer.save_freq": 5}, "pin-save-freq", "error"),
        ({"trainer.test_freq": 1}, "pin-test-freq", "error"),
        ({"trainer.resume_mode": "auto"}, "pin-resume-mode", "error"),
        ({"global_profiler.steps": None}, "pin-profile-steps", "error"),
        ({"global_profiler.steps": [0, 1]}, "pin-profile-steps", "error"),
        ({"global_profiler.tool": None}, "profiler-tool", "error"),
    ],
)
def test_pins_fire(tmp_path, changes, code, severity):
    found = D.check_pins(make_cfg(tmp_path, changes))
    assert [f for f in found if f.code == code and f.severity == severity], found


def test_pins_fixed_by_overrides(tmp_path):
    cfg = make_cfg(tmp_path, {"trainer.save_freq": 10, "trainer.resume_mode": "auto"},
                   words=["trainer.save_freq=-1", "trainer.resume_mode=disable"])
    assert D.check_pins(cfg) == []


def test_pins_from_overrides_only_warn_when_unpinned():
    cfg = D.build_profile_config(None, ["global_profiler.tool=nsys", "global_profiler.steps=[1]",
                                        "actor_rollout_ref.actor.profiler.enable=True"])
    found = D.check_pins(cfg)
    assert set(codes(found, "warning")) == {"pin-total-steps", "pin-save-freq", "pin-test-freq", "pin-resume-mode"}
    cfg = D.build_profile_config(None, ["global_profiler.tool=nsys", "global_profiler.steps=[1]",
                                        "actor_rollout_ref.actor.profiler.enable=True",
                                        "trainer.total_training_steps=1", "trainer.save_freq=-1",
                                        "trainer.test_freq=-1", "trainer.resume_mode=disable"])
    assert D.check_pins(cfg) == []


def test_pins_skipped_when_not_profiling(tmp_path):
    cfg = make_cfg(tmp_path, {"global_profiler.steps": None, "actor_rollout_ref.actor.profiler.enable": False,
                              "trainer.save_freq": 5})
    assert D.check_pins(cfg) == []


# ---------------------------------------------------------------------------------------------
# the phase is profiled by the process that owns it
# ---------------------------------------------------------------------------------------------


def test_rollout_continuous_explicit_is_error(tmp_path):
    cfg = make_cfg(tmp_path, {"global_profiler.tool": "torch"},
                   words=["actor_rollout_ref.rollout.profiler.enable=True"])
    f = [x for x in D.check_phase_owners(cfg) if x.code == "phase-rollout-continuous"]
    assert f and f[0].severity == "error"
    assert f[0].fix == "actor_rollout_ref.rollout.profiler.tool_config.torch.discrete=True"


def test_rollout_inherited_continuous_is_only_a_note(tmp_path):
    cfg = make_cfg(tmp_path, {"global_profiler.tool": "torch"})
    assert [x.severity for x in D.check_phase_owners(cfg) if x.code == "phase-rollout-continuous"] == ["info"]


def test_rollout_discrete_torch_is_fine(tmp_path):
    cfg = make_cfg(tmp_path, {"global_profiler.tool": "torch"},
                   words=["actor_rollout_ref.rollout.profiler.enable=True",
                          "actor_rollout_ref.rollout.profiler.tool_config.torch.discrete=True"])
    assert D.check_phase_owners(cfg) == []
    assert "rollout" in D.enabled_roles(cfg)


def test_rollout_with_nsys_tool(tmp_path):
    # a separate rollout server (hybrid_engine=False: standalone replicas) profiles torch/npu only
    cfg = make_cfg(tmp_path, {"actor_rollout_ref.hybrid_engine": False},
                   words=["actor_rollout_ref.rollout.profiler.enable=True"])
    assert [x.severity for x in D.check_phase_owners(cfg) if x.code == "phase-rollout-tool"] == ["error"]
    # so does the fully-async trainer's rollouter (its config has `async_training`)
    cfg = make_cfg(tmp_path, {"async_training": {"trigger_parameter_sync_step": 4}},
                   words=["actor_rollout_ref.rollout.profiler.enable=True"])
    assert [x.severity for x in D.check_phase_owners(cfg) if x.code == "phase-rollout-tool"] == ["error"]
    cfg = make_cfg(tmp_path, {"actor_rollout_ref.actor.profiler.enable": False})
    assert "phase-rollout-tool" not in codes(D.check_phase_owners(cfg))


def test_rollout_in_the_hybrid_worker_is_captured_by_its_nsys(tmp_path):
    """Hybrid engine (verl's default, RolloutMode.HYBRID): generation runs in the actor_rollout_ref
    worker, whose nsys capture holds it; no "generation is not profiled" error."""
    cfg = make_cfg(tmp_path, words=["actor_rollout_ref.rollout.profiler.enable=True"])
    found = D.check_phase_owners(cfg)
    assert "phase-rollout-tool" not in codes(found)
    assert codes(found, "info").count("phase-rollout-hybrid") == 1
    # ... only while the worker's capture is on: nsys follows the actor's profiler there
    cfg = make_cfg(tmp_path, {"actor_rollout_ref.actor.profiler.enable": False},
                   words=["actor_rollout_ref.rollout.profiler.enable=True"])
    f = [x for x in D.check_phase_owners(cfg) if x.code == "phase-rollout-tool"]
    assert f and f[0].severity == "error" and f[0].fix == "actor_rollout_ref.actor.profiler.enable=True"


def test_ref_colocated_follows_actor(tmp_path):
    cfg = make_cfg(tmp_path, {"actor_rollout_ref.actor.profiler.enable": False,
                              "actor_rollout_ref.ref.profiler.enable": True})
    f = [x for x in D.check_phase_owners(cfg) if x.code == "phase-ref-colocated"]
    assert f and f[0].severity == "error" and f[0].fix == "actor_rollout_ref.actor.profiler.enable=True"
    # LoRA puts the ref inside the actor even without the hybrid engine
    cfg = make_cfg(tmp_path, {"actor_rollout_ref.hybrid_engine": False, "actor_rollout_ref.model.lora_rank": 8,
                              "actor_rollout_ref.ref.profiler.enable": True})
    assert [x.severity for x in D.check_phase_owners(cfg) if x.code == "phase-ref-colocated"] == ["warning"]


def test_ref_separate_uses_its_own_profiler(tmp_path):
    cfg = make_cfg(tmp_path, {"actor_rollout_ref.hybrid_engine": False,
                              "actor_rollout_ref.ref.profiler.enable": True})
    found = D.check_phase_owners(cfg)
    assert "phase-ref-colocated" not in codes(found)
    assert "ref" in D.enabled_roles(cfg)
    cfg = make_cfg(tmp_path, {"actor_rollout_ref.hybrid_engine": False})
    assert codes(D.check_phase_owners(cfg), "info").count("phase-ref-separate") == 1


def test_ref_profiler_without_reference_policy(tmp_path):
    cfg = make_cfg(tmp_path, {"actor_rollout_ref.actor.use_kl_loss": False,
                              "actor_rollout_ref.ref.profiler.enable": True})
    assert "phase-ref-unused" in codes(D.check_phase_owners(cfg))
    cfg = make_cfg(tmp_path, {"actor_rollout_ref.actor.use_kl_loss": False})
    assert "phase-ref-unused" not in codes(D.check_phase_owners(cfg))


def test_reward_model_profiler_placement(tmp_path):
    cfg = make_cfg(tmp_path, {"reward.reward_model.enable": True, "reward.reward_model.profiler.enable": True})
    f = [x for x in D.check_phase_owners(cfg) if x.code == "phase-reward-misplaced"]
    assert f and "reward.reward_model.rollout.profiler.enable" in f[0].fix
    good = {"reward.reward_model.enable": True,
            "reward.reward_model.rollout.profiler": {"enable": True, "tool": "torch",
                                                      "tool_config": {"torch": {"discrete": True}}}}
    cfg = make_cfg(tmp_path, good)
    assert not [x for x in D.check_phase_owners(cfg) if x.code.startswith("phase-reward")]
    assert "reward_model" in D.enabled_roles(cfg)


def test_reward_model_needs_discrete_and_enabled_model(tmp_path):
    cfg = make_cfg(tmp_path, {"reward.reward_model.rollout.profiler": {"enable": True, "tool": "torch"}})
    found = codes(D.check_phase_owners(cfg))
    assert "phase-reward-disabled" in found and "phase-reward-continuous" in found


def test_wanted_phase_must_be_enabled_on_its_owner(tmp_path):
    cfg = make_cfg(tmp_path, {"global_profiler.tool": "torch"}, phases=("generation", "ref"))
    found = D.check_phase_owners(cfg)
    # generation: enabled (inherited) but continuous -> error, not a second "wanted" finding
    assert [x.severity for x in found if x.code == "phase-rollout-continuous"] == ["error"]
    assert "phase-wanted" not in codes(found)  # ref is colocated and the actor profiler is on
    cfg = make_cfg(tmp_path, {"actor_rollout_ref.actor.profiler.enable": False}, phases=("actor",))
    f = [x for x in D.check_phase_owners(cfg) if x.code == "phase-wanted"]
    assert f and f[0].fix == "actor_rollout_ref.actor.profiler.enable=True"


def test_nothing_profiled(tmp_path):
    cfg = make_cfg(tmp_path, {"actor_rollout_ref.actor.profiler.enable": False})
    assert "phase-nothing-profiled" in codes(D.check_phase_owners(cfg), "error")
    assert "phase-nothing-profiled" not in codes(D.check_phase_owners(make_cfg(tmp_path)))


# ---------------------------------------------------------------------------------------------
# overrides
# ---------------------------------------------------------------------------------------------


def test_plus_on_existing_key_fails(tmp_path):
    cfg = make_cfg(tmp_path, words=["+trainer.save_freq=-1"])
    f = [x for x in D.check_overrides(cfg) if x.code == "override-plus-existing"]
    assert f and f[0].severity == "error" and f[0].fix == "trainer.save_freq=-1"
    assert "An item is already at 'trainer.save_freq'" in f[0].message


def test_plain_set_and_plus_on_new_key_are_fine(tmp_path):
    cfg = make_cfg(tmp_path, words=["trainer.save_freq=-1", "+trainer.new_knob=1",
                                    "++global_profiler.global_tool_config.nsys.worker_nsight_options.kill=none"])
    assert D.check_overrides(cfg) == []


def test_set_on_missing_key_and_delete_missing(tmp_path):
    cfg = make_cfg(tmp_path, words=["trainer.nope=1", "~trainer.also_nope", "model_engine=megatron"])
    found = D.check_overrides(cfg)
    assert [(x.code, x.severity, x.fix) for x in found if x.code == "override-missing-key"] == [
        ("override-missing-key", "error", "+trainer.nope=1")]
    assert "override-delete-missing" in codes(found)
    assert not [x for x in found if x.key == "model_engine"]  # a config-group selection, not a key


def test_duplicates_report_the_winner(tmp_path):
    cfg = make_cfg(tmp_path, words=["trainer.test_freq=5", "trainer.test_freq=-1"])
    f = [x for x in D.check_overrides(cfg) if x.code == "override-duplicate"]
    assert f and f[0].severity == "warning" and "last one wins: trainer.test_freq=-1" in f[0].message
    assert cfg.get("trainer.test_freq") == -1
    cfg = make_cfg(tmp_path, words=["trainer.test_freq=-1"])
    assert not [x for x in D.check_overrides(cfg) if x.code == "override-duplicate"]


# ---------------------------------------------------------------------------------------------
# nsys
# ---------------------------------------------------------------------------------------------

CTRL = "global_profiler.global_tool_config.nsys.controller_nsight_options"
WORK = "global_profiler.global_tool_config.nsys.worker_nsight_options"


def test_controller_capture_unsupported_by_main_diffusion_v1(tmp_path):
    ch = {f"{CTRL}.capture-range": "cudaProfilerApi"}
    cfg = make_cfg(tmp_path, ch, entrypoint="verl_omni.trainer.main_diffusion_v1")
    f = D.check_nsys_entrypoint(cfg)
    assert codes(f, "error") == ["nsys-controller-capture"] and "main_diffusion" in f[0].fix
    assert D.check_nsys_entrypoint(make_cfg(tmp_path, ch, entrypoint="verl_omni.trainer.main_diffusion")) == []
    assert codes(D.check_nsys_entrypoint(make_cfg(tmp_path, ch)), "info") == ["nsys-controller-capture"]
    assert D.check_nsys_entrypoint(make_cfg(tmp_path, entrypoint="verl_omni.trainer.main_diffusion_v1")) == []


def test_entrypoint_from_launch_words(tmp_path):
    cfg = make_cfg(tmp_path, {f"{CTRL}.capture-range": "cudaProfilerApi"},
                   words=["python3", "-m", "verl_omni.trainer.main_diffusion_v1", "trainer.save_freq=-1"])
    assert cfg.entrypoint == "verl_omni.trainer.main_diffusion_v1"
    assert codes(D.check_nsys_entrypoint(cfg), "error") == ["nsys-controller-capture"]


def test_capture_range_end_matches_ranges(tmp_path):
    assert D.check_capture_range_end(make_cfg(tmp_path)) == []  # 2 steps, repeat-shutdown:2


@pytest.mark.parametrize(
    "changes,severity",
    [
        ({f"{WORK}.capture-range-end": None}, "warning"),  # verl default repeat-shutdown:12 > 2
        ({f"{WORK}.capture-range-end": "repeat-shutdown:5"}, "warning"),
        ({f"{WORK}.capture-range-end": "repeat-shutdown:1"}, "error"),
        ({f"{WORK}.capture-range-end": "stop-shutdown"}, "error"),
        ({"global_profiler.profile_continuous_steps": True}, "warning"),  # [1,2] is one range
    ],
)
def test_capture_range_end_fires(tmp_path, changes, severity):
    found = D.check_capture_range_end(make_cfg(tmp_path, changes))
    assert [x.severity for x in found] == [severity], found


def test_capture_range_end_discrete_is_not_counted(tmp_path):
    cfg = make_cfg(tmp_path, {"global_profiler.global_tool_config.nsys.discrete": True,
                              f"{WORK}.capture-range-end": None})
    assert D.check_capture_range_end(cfg) == []


def test_startup_step(tmp_path):
    cfg = make_cfg(tmp_path, {"global_profiler.steps": [1], "trainer.total_training_steps": 1})
    f = D.check_startup_step(cfg)
    # a note, not a warning: steps [1] is the lightest footprint, and collect says it summarizes step 1
    assert codes(f, "info") == ["nsys-startup-step"]
    assert f[0].fix == "global_profiler.steps=[1,2,3] trainer.total_training_steps=3"
    assert D.check_startup_step(make_cfg(tmp_path)) == []
    assert D.check_startup_step(make_cfg(tmp_path, {"global_profiler.steps": [1, 3]})) == []
    assert D.check_startup_step(make_cfg(tmp_path, {"global_profiler.steps": [1],
                                                    "global_profiler.global_tool_config.nsys.discrete": True})) == []
    assert D.check_startup_step(make_cfg(tmp_path, {"global_profiler.steps": [1],
                                                    "global_profiler.tool": "torch"})) == []


def test_discard_environment(tmp_path):
    assert D.check_discard_environment(make_cfg(tmp_path)) == []
    assert D.check_discard_environment(make_cfg(tmp_path, nsys_supports_discard_env=True)) == []
    unsupported = D.check_discard_environment(make_cfg(tmp_path, nsys_supports_discard_env=False))
    assert codes(unsupported, "warning") == ["nsys-environment"] and "does not support" in unsupported[0].message
    unset = D.check_discard_environment(make_cfg(tmp_path, {f"{WORK}.discard-environment": _DEL}))
    assert codes(unset, "warning") == ["nsys-environment"]
    assert unset[0].fix == f"++{WORK}.discard-environment=true"
    assert D.check_discard_environment(make_cfg(tmp_path, {"global_profiler.tool": "torch",
                                                           f"{WORK}.discard-environment": _DEL})) == []


def test_nsys_probe_reads_help_text(tmp_path):
    import shutil
    import subprocess

    def fake(name: str, help_text: str) -> str:
        exe = tmp_path / name
        exe.write_text(f"#!/bin/sh\n[ \"$1 $2\" = 'profile --help' ] && printf '%s\\n' '{help_text}'\nexit 0\n")
        exe.chmod(0o755)
        return str(exe)

    assert D.nsys_supports_discard_environment(fake("new", "  --discard-environment=<true|false>")) is True
    assert D.nsys_supports_discard_environment(fake("old", "  --trace=<api>  --sample=<cpu>")) is False
    assert D.nsys_supports_discard_environment("/nonexistent/nsys") is None
    real = shutil.which("nsys")
    if real:      # the installed nsys: the probe agrees with its own help text
        text = subprocess.run([real, "profile", "--help"], capture_output=True, text=True, timeout=60)
        assert D.nsys_supports_discard_environment(None) is ("discard-environment" in text.stdout + text.stderr)


# ---------------------------------------------------------------------------------------------
# after a run
# ---------------------------------------------------------------------------------------------


def _touch(path, data: bytes = b"x", mtime: float | None = None) -> None:
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "wb") as f:
        f.write(data)
    if mtime is not None:
        os.utime(path, (mtime, mtime))


def make_run(tmp_path, changes=None, files=()) -> str:
    run = tmp_path / "run"
    (run / ".hydra").mkdir(parents=True)
    data = yaml.safe_load(BASE_YAML)
    for k, v in (changes or {}).items():
        _set(data, k, v)
    (run / ".hydra" / "config.yaml").write_text(yaml.safe_dump(data))
    (run / ".hydra" / "overrides.yaml").write_text(yaml.safe_dump(["trainer.test_freq=5", "trainer.test_freq=-1"]))
    (run / ".hydra" / "hydra.yaml").write_text(yaml.safe_dump({"hydra": {"job": {"name": "main_ppo"}}}))
    for rel, payload, mtime in files:
        _touch(str(run / rel), payload, mtime)
    return str(run)


def test_after_run_qdstrm(tmp_path):
    run = make_run(tmp_path, files=[("nsight/worker_process_11.qdstrm", b"raw", None),
                                    ("nsight/worker_process_12.qdstrm", b"raw", None),
                                    ("nsight/worker_process_12.nsys-rep", b"rep", None)])
    found = D.after_run_checks(D.scan_run_folder(run), D.load_run_folder(run).config)
    f = [x for x in found if x.code == "after-qdstrm"]
    assert f and f[0].severity == "error" and "worker_process_11.qdstrm" in f[0].message
    assert "worker_process_12" not in f[0].message  # finalized next to it
    run2 = make_run(tmp_path / "b", files=[("nsight/worker_process_13.nsys-rep", b"rep", None)])
    assert "after-qdstrm" not in codes(D.after_run_checks(D.scan_run_folder(run2), None))


def test_after_run_empty_report(tmp_path):
    run = make_run(tmp_path, files=[("nsight/worker_process_1.nsys-rep", b"", None),
                                    ("nsight/worker_process_2.nsys-rep", b"rep", None)])
    found = D.after_run_checks(D.scan_run_folder(run), None)
    f = [x for x in found if x.code == "after-empty-report"]
    assert f and "worker_process_1.nsys-rep" in f[0].message and "worker_process_2" not in f[0].message
    assert D.after_run_checks([{"kind": "nsys_report", "rel": "a.nsys-rep", "size": 10, "mtime": 1.0,
                                "role": None}], None) == []


def test_after_run_no_reports_and_silent_roles(tmp_path):
    torch_cfg = {"global_profiler.tool": "torch",
                 "actor_rollout_ref.rollout.profiler.enable": True,
                 "actor_rollout_ref.rollout.profiler.tool_config.torch.discrete": True}
    run = make_run(tmp_path, torch_cfg)
    folder = D.load_run_folder(run)
    assert "after-no-reports" in codes(D.after_run_checks(folder.artifacts, folder.config), "error")

    run = make_run(tmp_path / "b", torch_cfg, files=[
        ("profile/actor_rollout_ref_actor_update_step1_rank0-of-2_pid7_20240101.json.gz", b"t", None)])
    folder = D.load_run_folder(run)
    found = D.after_run_checks(folder.artifacts, folder.config)
    assert [(x.code, x.key) for x in found] == [("after-role-silent", "actor_rollout_ref.rollout.profiler.enable")]

    run = make_run(tmp_path / "c", torch_cfg, files=[
        ("profile/actor_rollout_ref_actor_update_step1_rank0_pid7_1.json.gz", b"t", None),
        ("profile/rollout-replica0_trace.rank0.json.gz", b"t", None)])
    folder = D.load_run_folder(run)
    assert D.after_run_checks(folder.artifacts, folder.config) == []


def test_after_run_role_check_skips_unnamed_nsys_reports(tmp_path):
    run = make_run(tmp_path, files=[("nsight/worker_process_5.nsys-rep", b"rep", None)])
    folder = D.load_run_folder(run)
    assert D.after_run_checks(folder.artifacts, folder.config) == []


def test_after_run_stale_reports(tmp_path):
    now = time.time()
    run = make_run(tmp_path, files=[("nsight/worker_process_1.nsys-rep", b"rep", now - 7200),
                                    ("nsight/worker_process_2.nsys-rep", b"rep", None)])
    found = D.after_run_checks(D.scan_run_folder(run), None)
    f = [x for x in found if x.code == "after-stale-report"]
    assert f and "worker_process_1" in f[0].message and "worker_process_2" not in f[0].message
    arts = [
        {"kind": "nsys_report", "rel": "ray/session_2024-01-01_10-00-00_000001_1/logs/nsight/a.nsys-rep",
         "size": 5, "mtime": now, "role": None},
        {"kind": "nsys_report", "rel": "ray/session_2024-02-01_10-00-00_000001_1/logs/nsight/b.nsys-rep",
         "size": 5, "mtime": now, "role": None},
    ]
    f = [x for x in D.after_run_checks(arts, None) if x.code == "after-stale-report"]
    assert f and "a.nsys-rep" in f[0].message and "b.nsys-rep" not in f[0].message
    run2 = make_run(tmp_path / "fresh", files=[("nsight/worker_process_3.nsys-rep", b"rep", None)])
    assert D.after_run_checks(D.scan_run_folder(run2), None) == []


def test_scan_run_folder_kinds(tmp_path):
    run = make_run(tmp_path, files=[("p/ref_compute_step1_rank0.json.gz", b"t", None),
                                    ("p/report.sqlite", b"s", None), ("p/notes.txt", b"n", None),
                                    ("p/memory_snapshot_rank0.pickle", b"m", None)])
    kinds = {a["rel"]: (a["kind"], a["role"]) for a in D.scan_run_folder(run)}
    assert kinds[".hydra/config.yaml"] == ("hydra_config", None)
    assert kinds["p/ref_compute_step1_rank0.json.gz"] == ("torch_trace", "ref")
    assert kinds["p/report.sqlite"][0] == "nsys_sqlite"
    assert kinds["p/memory_snapshot_rank0.pickle"][0] == "memory_snapshot"
    assert "p/notes.txt" not in kinds


# ---------------------------------------------------------------------------------------------
# CLI
# ---------------------------------------------------------------------------------------------


def test_cli_clean_config_exits_zero(tmp_path):
    res = invoke(write_config(tmp_path))
    assert res.exit_code == 0, res.output
    assert "0 errors" in res.stdout


def test_cli_table_and_exit_one_on_errors(tmp_path):
    res = invoke(write_config(tmp_path, {"trainer.resume_mode": "auto"}))
    assert res.exit_code == 1
    assert "pin-resume-mode" in res.stdout and "trainer.resume_mode=disable" in res.stdout


def test_cli_json_with_config_option_and_overrides(tmp_path):
    cfg = write_config(tmp_path)
    res = invoke("--json", "--config", cfg, "--", "+trainer.save_freq=-1", "trainer.test_freq=5",
                 "trainer.test_freq=-1")
    assert res.exit_code == 1, res.output
    out = json.loads(res.stdout)
    by_code = {f["code"]: f for f in out["findings"]}
    assert by_code["override-plus-existing"]["fix"] == "trainer.save_freq=-1"
    assert by_code["override-duplicate"]["key"] == "trainer.test_freq"
    assert out["counts"]["error"] >= 1 and out["inputs"]["config"] == cfg


def test_cli_overrides_only_without_defaults(tmp_path):
    res = invoke("--json", "--no-verl-defaults", "--", "python3", "-m", "verl_omni.trainer.main_diffusion_v1",
                 "global_profiler.tool=nsys", "global_profiler.steps=[1,2]",
                 "actor_rollout_ref.actor.profiler.enable=True", "trainer.total_training_steps=2",
                 "trainer.save_freq=-1", "trainer.test_freq=-1", "trainer.resume_mode=disable",
                 f"++{CTRL}.capture-range=cudaProfilerApi", f"++{CTRL}.capture-range-end=repeat-shutdown:2")
    out = json.loads(res.stdout)
    assert res.exit_code == 1
    assert out["inputs"]["entrypoint"] == "verl_omni.trainer.main_diffusion_v1"
    assert [f["code"] for f in out["findings"] if f["severity"] == "error"] == ["nsys-controller-capture"]


@pytest.mark.skipif(D.verl_reference_path() is None, reason="verl is not installed")
def test_cli_overrides_checked_against_installed_verl():
    res = invoke("--json", "--", "trainer.total_training_steps=1", "+trainer.save_freq=-1",
                 "trainer.resume_mode=disable", "global_profiler.tool=torch", "global_profiler.steps=[1]",
                 "actor_rollout_ref.actor.profiler.enable=True")
    out = json.loads(res.stdout)
    assert res.exit_code == 1
    assert "override-plus-existing" in [f["code"] for f in out["findings"]]
    assert out["inputs"]["verl_config"]["config"] == "ppo_trainer"
    assert out["inputs"]["verl_config"]["via"] == ("hydra" if D.hydra_version() else "keytree")
    res = invoke("--json", "--", "trainer.total_training_steps=1", "trainer.save_freq=-1", "trainer.test_freq=-1",
                 "trainer.resume_mode=disable", "global_profiler.tool=torch", "global_profiler.steps=[1]",
                 "actor_rollout_ref.actor.profiler.enable=True")
    assert res.exit_code == 0, res.stdout


def test_cli_run_folder(tmp_path):
    run = make_run(tmp_path, files=[("nsight/worker_process_9.qdstrm", b"raw", None)])
    res = invoke("--json", run)
    out = json.loads(res.stdout)
    found = {f["code"] for f in out["findings"]}
    assert res.exit_code == 1
    assert {"after-qdstrm", "override-duplicate"} <= found  # duplicates from .hydra/overrides.yaml
    assert out["inputs"]["entrypoint"] == "main_ppo"
    clean = make_run(tmp_path / "ok", files=[("nsight/worker_process_9.nsys-rep", b"rep", None)])
    (tmp_path / "ok" / "run" / ".hydra" / "overrides.yaml").write_text("[]\n")
    res = invoke(clean)
    assert res.exit_code == 0, res.stdout


def test_cli_override_list_yaml(tmp_path):
    path = tmp_path / "overrides.yaml"
    path.write_text(yaml.safe_dump(["trainer.save_freq=5", "global_profiler.steps=[1]"]))
    res = invoke("--json", "--no-verl-defaults", str(path))
    out = json.loads(res.stdout)
    assert out["inputs"]["override_file"] == str(path)
    assert "pin-save-freq" in {f["code"] for f in out["findings"] if f["severity"] == "error"}


def test_cli_bad_inputs_say_one_line_on_stderr(tmp_path):
    res = invoke(str(tmp_path / "missing.yaml"))
    assert res.exit_code == 2 and "no such file or folder" in res.stderr and res.stdout == ""
    bad = tmp_path / "bad.yaml"
    bad.write_text("a: [1,\n")
    res = invoke(str(bad))
    assert res.exit_code == 2 and "not valid YAML" in res.stderr
    res = invoke()
    assert res.exit_code == 2 and "nothing to check" in res.stderr


def test_shipped_sample_passes_the_doctor():
    """`verlprof doctor samples/tiny_run` agrees with what collect makes of the same sample (it
    summarizes generate_sequences from the workers' nsys captures): no error, exit 0."""
    sample = Path(__file__).resolve().parents[1] / "samples" / "tiny_run"
    res = invoke(str(sample))
    assert res.exit_code == 0, res.output
    assert "0 errors," in res.output and "phase-rollout-hybrid" in res.output


# ---------------------------------------------------------------------------------------------
# verl's newest profiler keys (issue 31)
# ---------------------------------------------------------------------------------------------


def test_newest_profiler_keys_are_explained(tmp_path):
    cfg = make_cfg(tmp_path, {
        "actor_rollout_ref.actor.profiler.relocate_results": True,
        "actor_rollout_ref.actor.profiler.finish_hook_cmd": "tar czf /tmp/t.tgz $VERL_PROFILE_DIR",
    })
    found = {f.code: f for f in D.check_profiler_keys(cfg)}
    assert found["profiler-relocate"].severity == "info"
    assert "rollout-replica<R>[-globalrank<G>]_<name>" in found["profiler-relocate"].message
    assert found["profiler-finish-hook"].severity == "warning"
    assert "rollout-token-window" not in found and "torch-schedule" not in found


def test_torch_schedule_and_token_window(tmp_path):
    cfg = make_cfg(tmp_path, {
        "global_profiler.tool": "torch",
        "actor_rollout_ref.actor.profiler.tool_config.torch.schedule": {"wait": 1, "warmup": 0, "active": 2,
                                                                         "repeat": 1},
        "actor_rollout_ref.rollout.profiler.tool_config.torch.profile_token_start": 8,
        "actor_rollout_ref.rollout.profiler.tool_config.torch.profile_token_end": 24,
    })
    found = {f.code: f for f in D.check_profiler_keys(cfg)}
    assert "wait 1, warmup 0, active 2, repeat 1" in found["torch-schedule"].message
    assert "response tokens 8 to 24 only" in found["rollout-token-window"].message
    # none of them when the keys are absent (older releases) or unset
    assert D.check_profiler_keys(make_cfg(tmp_path)) == []
