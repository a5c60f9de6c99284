"""`verlprof doctor` against verl's real config tree (issue 12).

With the installed verl (0.9.1, the version CI installs) and Hydra, overrides are composed by Hydra
itself; the shipped key trees of other releases (0.5.0, 0.7.1, verl-omni v0.2.0) are used through
``--verl-release`` or when the entrypoint's package is absent. The recipes in tests/data/doctor/ are
verl's own example scripts, copied verbatim below a header naming their commit. No mocks: every
error is what Hydra raises (compared against ``hydra.compose`` directly where it runs here).
"""
from __future__ import annotations

import json
import os
import shutil

import pytest
import typer
from typer.testing import CliRunner
from verlprof.pipeline.commands import doctor_cmd
from verlprof.stages import doctor as D

HERE = os.path.dirname(os.path.abspath(__file__))
RECIPES = os.path.join(HERE, "data", "doctor")
QWEN3_FSDP = os.path.join(RECIPES, "run_qwen3_8b_fsdp.sh")  # examples/ppo_trainer, verl v0.9.0
QWEN2_MEGATRON = os.path.join(RECIPES, "run_qwen2-7b_math_megatron_fsdp.sh")  # examples/grpo_trainer, v0.9.0

VERL = D.entry_config(None)
HAVE_HYDRA_VERL = bool(D.hydra_version() and VERL.config_dir)
needs_verl = pytest.mark.skipif(not HAVE_HYDRA_VERL, reason="verl + hydra-core not installed (.ci/install_extras.sh)")


def _app() -> typer.Typer:
    app = typer.Typer()

    @app.callback()
    def _root() -> None:
        pass

    doctor_cmd.register(app)
    return app


def doctor(*args: str) -> tuple[int, dict]:
    res = CliRunner().invoke(_app(), ["doctor", "--nsys", "none", "--json", *args])
    assert res.exception is None or isinstance(res.exception, SystemExit), res.output
    return res.exit_code, json.loads(res.stdout)


def errors(out: dict) -> dict[str, dict]:
    """code -> finding, for the error-level findings (one per code in these tests)."""
    return {f["code"]: f for f in out["findings"] if f["severity"] == "error"}


BAD = [
    "+global_profiler.save_path=./x",  # the issue's line: the key exists in verl's composed config
    "trainer.total_epoch=3",  # typo of total_epochs
    "global_profiler.no_such_key=1",  # a key verl does not have
    "data.train_files=a.parquet,b.parquet",  # a list without brackets: Hydra reads a sweep
    "~trainer.no_such_key",
    "model_engine=nosuch",
    "actor_rollout_ref.actor.megatron.tensor_model_parallel_size=2",  # only with model_engine=megatron
    "trainer.total_epochs",  # no '='
    "data.val_files=~/data/test.parquet",  # Hydra's grammar has no unquoted ~
]


# ---------------------------------------------------------------------------------------------
# the installed verl, composed by Hydra
# ---------------------------------------------------------------------------------------------


@needs_verl
def test_issue_line_plus_on_existing_key_is_reported_with_hydras_message():
    code, out = doctor("--", "python3", "-m", "verl.trainer.main_ppo", "+global_profiler.save_path=./x")
    assert code == 1
    f = errors(out)["override-plus-existing"]
    assert "Could not append to config. An item is already at 'global_profiler.save_path'" in f["message"]
    assert f["fix"] == "global_profiler.save_path=./x" and f["key"] == "global_profiler.save_path"
    assert out["inputs"]["verl_config"] == {"via": "hydra", "release": f"verl {D.installed_version('verl')} (installed)",
                                            "config": "ppo_trainer", "from": "installed package"}


@needs_verl
def test_every_bad_override_is_reported_in_one_run():
    code, out = doctor("--", *BAD)
    assert code == 1
    by_word = {f["message"].split("`")[1]: f for f in out["findings"] if f["severity"] == "error"}
    assert set(by_word) == set(BAD)
    kinds = {w: f["code"] for w, f in by_word.items()}
    assert kinds == {
        "+global_profiler.save_path=./x": "override-plus-existing",
        "trainer.total_epoch=3": "override-missing-key",
        "global_profiler.no_such_key=1": "override-missing-key",
        "data.train_files=a.parquet,b.parquet": "override-list-form",
        "~trainer.no_such_key": "override-delete-missing",
        "model_engine=nosuch": "override-group-option",
        "actor_rollout_ref.actor.megatron.tensor_model_parallel_size=2": "override-missing-key",
        "trainer.total_epochs": "override-parse",
        "data.val_files=~/data/test.parquet": "override-parse",
    }
    assert by_word["trainer.total_epoch=3"]["fix"].startswith("did you mean trainer.total_epochs? trainer.total_epochs=3")
    assert by_word["global_profiler.no_such_key=1"]["fix"] == "+global_profiler.no_such_key=1"  # nothing close
    assert by_word["data.train_files=a.parquet,b.parquet"]["fix"].startswith("data.train_files=[a.parquet,b.parquet]")
    assert by_word["actor_rollout_ref.actor.megatron.tensor_model_parallel_size=2"]["fix"].startswith(
        "model_engine=megatron ")
    assert "Available options in 'model_engine'" in by_word["model_engine=nosuch"]["message"]
    assert by_word["data.val_files=~/data/test.parquet"]["fix"].startswith("data.val_files='~/data/test.parquet'")


@needs_verl
def test_messages_are_the_ones_hydra_compose_raises():
    """Each word alone through hydra.compose: the doctor's message is Hydra's exception text."""
    from hydra import compose, initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra
    from hydra.errors import HydraException

    comp = D.compose_overrides(VERL.config_dir, VERL.config_name, BAD, "verl (installed)")
    ours = {p.word: p.message for p in comp.problems}
    GlobalHydra.instance().clear()
    with initialize_config_dir(config_dir=VERL.config_dir, version_base=None):
        for word in BAD:
            with pytest.raises(HydraException) as exc:
                compose(config_name=VERL.config_name, overrides=[word])
            first = str(exc.value).strip().splitlines()[0].strip()
            assert ours[word].split(" | ")[0] == first, word
    GlobalHydra.instance().clear()


@needs_verl
def test_fixed_overrides_compose_and_feed_the_profile_checks():
    fixed = ["global_profiler.save_path=./x", "trainer.total_epochs=3", "data.train_files=[a.parquet,b.parquet]",
             "model_engine=megatron", "actor_rollout_ref.actor.megatron.tensor_model_parallel_size=2",
             "global_profiler.tool=nsys", "global_profiler.steps=[1,2]", "trainer.total_training_steps=2",
             "trainer.save_freq=-1", "trainer.test_freq=-1", "trainer.resume_mode=disable",
             "actor_rollout_ref.actor.profiler.enable=True"]
    _, out = doctor("--", *fixed)
    assert not [f for f in out["findings"] if f["code"].startswith("override-")], out["findings"]
    # the base is verl's composed config, so the nsys checks see verl's own defaults
    assert "nsys-capture-range-end" in {f["code"] for f in out["findings"]}
    lc = D.check_launch(fixed)
    assert lc.composition.choices["model_engine"] == "megatron"
    assert lc.composition.base["global_profiler"]["tool"] is None  # before the value overrides


@needs_verl
def test_quoted_list_on_a_list_key():
    _, out = doctor("--", 'trainer.logger="[console,wandb]"', "trainer.logger2=x")
    f = errors(out)["override-list-quoted"]
    assert f["fix"] == "trainer.logger=[console,wandb]"
    assert "override-missing-key" in errors(out)


@needs_verl
def test_keytree_replay_agrees_with_hydra_on_the_installed_release():
    """The offline replay of Hydra's rules gives the same verdicts as Hydra on the same release."""
    words = BAD[:-3] + ["+trainer.brand_new=1", "++global_profiler.save_path=y", "~trainer.total_epochs",
                        "trainer.logger=[console]", "+trainer.logger=[a]", "global_profiler={tool: nsys}",
                        "+actor_rollout_ref.actor.profiler.tool_config.nsys.discrete=True",
                        "actor_rollout_ref.model.lora.rank=8"]
    hydra = D.compose_overrides(VERL.config_dir, VERL.config_name, words, "installed")
    tree = D.load_keytree(D.release_for("verl", D.installed_version("verl")))
    replay = D.apply_to_tree(tree, "ppo_trainer", words)
    assert {(p.word, p.kind) for p in replay.problems} == {(p.word, p.kind) for p in hydra.problems}
    assert {p.word: p.message for p in replay.problems} == {p.word: p.message for p in hydra.problems}


# ---------------------------------------------------------------------------------------------
# shipped key trees of other releases
# ---------------------------------------------------------------------------------------------


def test_shipped_releases_cover_several_verl_versions():
    rel = D.shipped_releases()
    assert {"verl-0.5.0", "verl-0.7.1", "verl-0.9.1", "verl-omni-v0.2.0"} <= set(rel)
    assert D.release_for("verl", "0.8.3") == "verl-0.8.0" and D.release_for("verl", "0.9.1") == "verl-0.9.1"
    assert D.release_for("verl", "0.4.0") == "verl-0.9.1"  # older than any tree: the newest


@pytest.mark.parametrize("release", ["verl-0.5.0", "verl-0.7.1"])
def test_other_release_reports_the_same_mistakes_and_names_itself(release):
    version = release.split("-", 1)[1]
    code, out = doctor("--verl-release", release, "--", "python3", "-m", "verl.trainer.main_ppo",
                       "+trainer.total_epochs=3", "trainer.total_epoch=3", "data.train_files=a,b",
                       "~trainer.no_such_key")
    assert code == 1
    assert out["inputs"]["verl_config"] == {"via": "keytree", "release": f"verl {version} (shipped key tree {release})",
                                            "config": "ppo_trainer", "from": f"keytrees/{release}.json.gz"}
    errs = errors(out)
    assert {"override-plus-existing", "override-missing-key", "override-list-form", "override-delete-missing"} <= set(errs)
    assert all(f"verl {version} (shipped key tree {release})" in f["message"] for f in errs.values())
    assert errs["override-missing-key"]["fix"].startswith("did you mean trainer.total_epochs?")
    note = next(f for f in out["findings"] if f["code"] == "verl-config")
    assert release in note["message"] and note["severity"] == "info"


def test_profiler_keys_moved_between_releases():
    """verl 0.5.0 profiled with trainer.profile_steps; 0.6+ with global_profiler.steps."""
    new, old = "global_profiler.steps=[1]", "trainer.profile_steps=[1]"
    _, out = doctor("--verl-release", "verl-0.5.0", "--", new, old)
    assert [f["key"] for f in out["findings"] if f["code"] == "override-missing-key"] == ["global_profiler.steps"]
    _, out = doctor("--verl-release", "verl-0.9.1", "--", new, old)
    missing = [f for f in out["findings"] if f["code"] == "override-missing-key"]
    assert [f["key"] for f in missing] == ["trainer.profile_steps"]
    _, out = doctor("--verl-release", "verl-0.8.0", "--", "model_engine=megatron",
                       "actor_rollout_ref.actor.megatron.tensor_model_parallel_size=2")
    assert not errors(out), out["findings"]
    _, out = doctor("--verl-release", "verl-0.7.1", "--", "model_engine=megatron")  # 0.7 ran megatron
    assert "'model_engine': | dp | torchtitan | veomni" in errors(out)["override-group-option"]["message"]
    _, out = doctor("--verl-release", "verl-0.5.0", "--", "model_engine=megatron")
    assert "override-missing-key" in errors(out)  # no model_engine group before 0.7


def test_unknown_release_is_an_error_listing_the_shipped_ones():
    code, out = doctor("--verl-release", "verl-9.9", "--", "trainer.total_epochs=1")
    assert code == 1 and "verl-0.9.1" in errors(out)["verl-config"]["fix"]


def test_verl_omni_diffusion_entrypoints_without_verl_omni_installed():
    if D.entry_config("verl_omni.trainer.main_diffusion").module_file is not None:
        pytest.skip("verl-omni is installed here: this test is about its absence")
    for ep in ("verl_omni.trainer.main_diffusion", "verl_omni.trainer.main_diffusion_v1"):
        lc = D.check_launch(["+global_profiler.save_path=x", "trainer.total_epochs=1"], ep)
        comp = lc.composition
        assert comp.via == "keytree" and comp.config_name == "diffusion_trainer"
        assert comp.release.startswith("verl-omni ") and "verl-omni-v0.2.0" in comp.release
        assert [p.kind for p in comp.problems] == ["append-existing"]
    ctrl = "global_profiler.global_tool_config.nsys.controller_nsight_options"
    _, out = doctor("--", "python3", "-m", "verl_omni.trainer.main_diffusion_v1", "global_profiler.tool=nsys",
                       "global_profiler.steps=[1,2]", f"++{ctrl}.capture-range=cudaProfilerApi")
    assert out["inputs"]["entrypoint"] == "verl_omni.trainer.main_diffusion_v1"
    assert "nsys-controller-capture" in errors(out)
    assert out["inputs"]["verl_config"]["config"] == "diffusion_trainer"


# ---------------------------------------------------------------------------------------------
# launch scripts
# ---------------------------------------------------------------------------------------------


def test_real_recipes_pass_against_the_release_they_were_written_for():
    for script in (QWEN3_FSDP, QWEN2_MEGATRON):
        code, out = doctor("--verl-release", "verl-0.9.0", script)
        assert code == 0, [f for f in out["findings"] if f["severity"] == "error"]
        assert out["inputs"]["entrypoint"] == "verl.trainer.main_ppo"
    assert out["inputs"]["verl_config"]["config"] == "ppo_megatron_trainer"  # --config-name in the script


@needs_verl
def test_real_recipes_pass_against_installed_verl_and_extra_args_are_checked():
    code, out = doctor(QWEN3_FSDP)
    assert code == 0, [f for f in out["findings"] if f["severity"] == "error"]
    assert out["inputs"]["verl_config"]["via"] == "hydra" and out["inputs"]["launch_line"] == 125
    unknown = {f["key"]: f["message"] for f in out["findings"] if f["code"] == "script-unknown-var"}
    assert set(unknown) == {"data.train_files", "data.val_files", "trainer.experiment_name"}
    assert "$HOME" in unknown["data.train_files"] and "$(date" in unknown["trainer.experiment_name"]
    # what "$@" passes is checked too
    code, out = doctor(QWEN3_FSDP, "--", "+trainer.save_freq=-1")
    assert code == 1 and errors(out)["override-plus-existing"]["fix"] == "trainer.save_freq=-1"
    code, out = doctor(QWEN2_MEGATRON)
    assert code == 0, [f for f in out["findings"] if f["severity"] == "error"]


def test_script_reader_knows_bash_quoting_arrays_and_unknowns():
    text = r'''#!/bin/bash
set -x
NGPU=${NGPU:-8}
LR=1e-6
if [ -n "$FAST" ]; then
  STEPS=2
fi
DATA=(
    data.train_files="['$HOME/a.parquet', '/b.parquet']"   # a quoted list
    'trainer.logger=["console","wandb"]'
)
EXTRA="trainer.val_before_train=False trainer.test_freq=-1"
python3 -m verl.trainer.main_ppo --config-name ppo_trainer \
    "${DATA[@]}" \
    actor_rollout_ref.actor.optim.lr=$LR trainer.n_gpus_per_node=${NGPU} \
    trainer.total_training_steps=$STEPS trainer.experiment_name="run_$(date +%s)" \
    $EXTRA \
    "$@"
'''
    line = D.read_launch_text(text, "x.sh", args=["+a.b=1", "c d=2"])
    assert line.entrypoint == "verl.trainer.main_ppo" and line.config_name == "ppo_trainer" and line.line == 13
    words = [w.text for w in line.words]
    assert words == [
        "data.train_files=['${HOME}/a.parquet', '/b.parquet']",
        'trainer.logger=["console","wandb"]',
        "actor_rollout_ref.actor.optim.lr=1e-6",
        "trainer.n_gpus_per_node=8",
        "trainer.total_training_steps=${STEPS}",
        "trainer.experiment_name=run_${cmd}",
        "trainer.val_before_train=False", "trainer.test_freq=-1",  # unquoted: split
        "+a.b=1", "c d=2",  # "$@": one word each
    ]
    unknown = {w.text.split("=")[0]: w.unknown for w in line.words if w.unknown}
    assert unknown == {"data.train_files": ("$HOME",), "trainer.total_training_steps": ("$STEPS",),
                       "trainer.experiment_name": ("$(date +%s)",)}
    assert line.why["$STEPS"] == ("set inside if/case/loop",)


def test_script_without_a_trainer_and_unreadable_scripts(tmp_path):
    s = tmp_path / "prep.sh"
    s.write_text("#!/bin/bash\npython3 examples/data_preprocess/gsm8k.py --local_dir ~/data\n")
    res = CliRunner().invoke(_app(), ["doctor", "--nsys", "none", str(s)])
    assert res.exit_code == 2 and "runs no verl trainer" in res.stderr and str(s) in res.stderr
    s.write_text("#!/bin/bash\npython3 -m verl.trainer.main_ppo 'trainer.x=1\n")
    res = CliRunner().invoke(_app(), ["doctor", "--nsys", "none", str(s)])
    assert res.exit_code == 2 and "unterminated single quote" in res.stderr
    s.chmod(0o644)


def test_script_with_a_bad_override_fails_before_launch(tmp_path):
    script = tmp_path / "run.sh"
    shutil.copy(QWEN3_FSDP, script)
    text = script.read_text().replace("trainer.total_epochs=${TOTAL_EPOCHS}", "+trainer.total_epochs=${TOTAL_EPOCHS}")
    script.write_text(text.replace("data.truncation='error'", "data.truncaton='error'"))
    code, out = doctor("--verl-release", "verl-0.9.0", str(script))
    assert code == 1
    errs = errors(out)
    assert errs["override-plus-existing"]["key"] == "trainer.total_epochs"
    assert errs["override-missing-key"]["fix"].startswith("did you mean data.truncation?")


def test_without_hydra_the_installed_releases_tree_is_used():
    """A Python where `import hydra` fails (as where it is not installed): the shipped tree of the
    installed verl version (or the newest) stands in, and the output names it."""
    import subprocess
    import sys

    code = ("import sys; sys.modules['hydra'] = None; sys.argv = ['verlprof', 'doctor', '--nsys', 'none', '--json', "
            "'--', '+global_profiler.save_path=./x', 'trainer.total_epoch=3']\n"
            "from verlprof.pipeline.cli import main; main()")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=False)
    out = json.loads(proc.stdout)
    assert proc.returncode == 1, proc.stderr
    release = D.release_for("verl", D.installed_version("verl"))
    assert out["inputs"]["verl_config"]["via"] == "keytree"
    assert out["inputs"]["verl_config"]["from"] == f"keytrees/{release}.json.gz"
    assert {f["code"] for f in out["findings"] if f["severity"] == "error"} == {
        "override-plus-existing", "override-missing-key"}


def test_script_reader_redirections_tilde_and_branches():
    text = r'''#!/bin/bash
DATA=${DATA:-~/data}
OUT=~/ckpt
EXTRA=(trainer.nnodes=1)
if [ "$DEVICE" = npu ]; then
    EXTRA+=(+actor_rollout_ref.rollout.engine_kwargs.sglang.attention_backend=ascend)
else
    EXTRA+=(+actor_rollout_ref.rollout.engine_kwargs.sglang.attention_backend=flashinfer trainer.nnodes=2)
fi
python3 -m verl.trainer.main_ppo data.train_files=$DATA/train.parquet trainer.default_local_dir=$OUT \
    data.val_files="~/quoted" "${EXTRA[@]}" 2>&1 | tee logs/run.log
'''
    line = D.read_launch_text(text, "y.sh")
    words = [w.text for w in line.words]
    assert words == [
        "data.train_files=${DATA}/train.parquet",  # unknown: bash expands ~ in a ${X:-~/...} default
        "trainer.default_local_dir=${OUT}",  # and in an assignment: $HOME, not known here
        "data.val_files=~/quoted",  # an argument: bash leaves the ~, and Hydra then refuses it
        "trainer.nnodes=1",
        "+actor_rollout_ref.rollout.engine_kwargs.sglang.attention_backend=ascend",  # if-branch
        "trainer.nnodes=2",  # else-branch: its alternative +attention_backend is not stacked
    ]
    assert line.why["$DATA"] == ("$HOME",) and line.why["$OUT"] == ("$HOME",)
    lc = D.check_launch(words, line.entrypoint, release="verl-0.9.0")
    assert [p.word for p in lc.composition.problems] == ["data.val_files=~/quoted"]


def test_group_choice_without_a_shipped_variant_is_not_guessed():
    """sft_trainer's engine=automodel is not composed in the 0.9.0 tree: its keys are not judged."""
    words = ["engine=automodel", "engine.tp_size=1", "optim.lr=1e-5", "trainer.total_epoch=1"]
    lc = D.check_launch(words, "verl.trainer.sft_trainer", release="verl-0.9.0")
    assert lc.composition.config_name == "sft_trainer_engine"
    assert [(p.word, p.kind) for p in lc.composition.problems] == [("trainer.total_epoch=1", "missing-key")]
    partial = [f for f in lc.findings if f.code == "verl-config-partial"]
    assert partial and partial[0].key == "engine" and "engine=automodel" in partial[0].message


def test_unknown_script_values_are_not_judged_by_the_config_checks(tmp_path):
    """`trainer.total_training_steps=$STEPS` with STEPS set in an if: the pins check must not call it null."""
    script = tmp_path / "run.sh"
    script.write_text("#!/bin/bash\nif [ -n \"$FAST\" ]; then STEPS=2; fi\n"
                      "python3 -m verl.trainer.main_ppo global_profiler.tool=nsys global_profiler.steps=[1] \\\n"
                      "  trainer.total_training_steps=$STEPS trainer.save_freq=-1 trainer.test_freq=-1 \\\n"
                      "  trainer.resume_mode=disable actor_rollout_ref.actor.profiler.enable=True\n")
    _, out = doctor("--verl-release", "verl-0.9.1", str(script))
    by_code = {f["code"]: f for f in out["findings"]}
    assert by_code["script-unknown-var"]["key"] == "trainer.total_training_steps"
    assert "$STEPS (set inside an if/case/loop)" in by_code["script-unknown-var"]["message"]
    assert by_code["pin-total-steps"]["severity"] == "info"
    assert by_code["pin-total-steps"]["message"].startswith("(value unknown here: $STEPS)")
    # the same line with the value written out is judged as usual
    script.write_text(script.read_text().replace("$STEPS", "5"))
    _, out = doctor("--verl-release", "verl-0.9.1", str(script))
    assert {f["code"]: f for f in out["findings"]}["pin-total-steps"]["severity"] == "warning"
