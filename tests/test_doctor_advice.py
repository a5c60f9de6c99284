"""doctor's advice is usable as printed (issue 20): it fits an 80-column terminal with every fix whole
on its own line; its recommended steps agree with the step collect summarizes; and a fix appended to
a launch script's "$@" does not itself raise doctor's warnings.

Real inputs: a launch script of verl's own examples (tests/data/doctor/), checked against the key
tree shipped for verl 0.9.1 (`--verl-release`, so the answers do not depend on what is installed),
and a real one-step nsys export of the H200 fixtures for collect.
"""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pandas as pd
from testdata import data_path
from typer.testing import CliRunner
from verlprof.pipeline.cli import app

SCRIPT = str(data_path("doctor/run_qwen3_8b_fsdp.sh"))
DOCTOR = ["doctor", "--verl-release", "verl-0.9.1", "--nsys", "none"]
PROFILE = ["global_profiler.tool=nsys", "global_profiler.steps=[1]"]


def _doctor(*args: str, columns: int = 80) -> subprocess.CompletedProcess[str]:
    """doctor as a user runs it, in a terminal of `columns` columns."""
    return subprocess.run([sys.executable, "-m", "verlprof.pipeline.cli", *DOCTOR, *args],
                          capture_output=True, text=True, timeout=300,
                          env={"COLUMNS": str(columns), "PATH": "/usr/bin:/bin", "NO_COLOR": "1",
                               **{k: v for k, v in __import__("os").environ.items() if k == "PYTHONPATH"}})


def _findings(*args: str) -> list[dict]:
    out = _doctor("--json", *args)
    assert out.returncode in (0, 1), out.stderr
    return json.loads(out.stdout)["findings"]


def test_doctor_fits_80_columns_and_prints_every_fix_whole() -> None:
    findings = _findings(SCRIPT, "--", *PROFILE)
    assert {f["severity"] for f in findings} >= {"error", "warning", "info"}
    out = _doctor(SCRIPT, "--", *PROFILE)
    lines = out.stdout.splitlines()
    fixes = [f["fix"] for f in findings if f["fix"]]
    assert fixes
    fix_lines = set()
    for fix in fixes:
        whole = [i for i, ln in enumerate(lines) if ln.strip() == fix]
        if whole:                        # the fix, on one line of its own
            fix_lines.update(whole)
            continue
        for word in fix.split():          # too long for 80 columns: one whole override word a line
            at = [i for i, ln in enumerate(lines) if ln.strip() == word]
            assert at, (fix, word)
            fix_lines.update(at)
    too_wide = [ln for i, ln in enumerate(lines[1:], 1) if len(ln) > 80 and i not in fix_lines]
    assert too_wide == []
    # a fix wider than the terminal is one override word (a 92-character nsys option key), never a cut key
    assert all(len(lines[i].strip().split()) == 1 for i in fix_lines if len(lines[i]) > 80)


def test_recommended_steps_agree_with_collect() -> None:
    """Nothing profiled: doctor recommends steps [1,2,3] with total_training_steps=3 (collect's step 2),
    and names [1] as the lightest footprint; with [1], the pins follow that choice."""
    found = _findings("--", "python3", "-m", "verl.trainer.main_ppo", "global_profiler.tool=nsys",
                      "actor_rollout_ref.actor.profiler.enable=True")
    by = {f["code"]: f for f in found}
    assert by["pin-profile-steps"]["fix"] == "global_profiler.steps=[1,2,3] trainer.total_training_steps=3"
    assert "collect summarizes the steady-state step 2" in by["pin-profile-steps"]["message"]
    assert by["pin-total-steps"]["fix"] == "trainer.total_training_steps=3"
    one = {f["code"]: f for f in _findings("--", "python3", "-m", "verl.trainer.main_ppo", *PROFILE,
                                            "actor_rollout_ref.actor.profiler.enable=True")}
    assert one["nsys-startup-step"]["severity"] == "info"
    assert one["nsys-startup-step"]["fix"] == "global_profiler.steps=[1,2,3] trainer.total_training_steps=3"
    assert one["pin-total-steps"]["fix"] == "trainer.total_training_steps=1"


def _override_fixes(findings: list[dict], severities: tuple[str, ...]) -> list[str]:
    return [w for f in findings if f["severity"] in severities and f["fix"]
            and all("=" in x for x in f["fix"].split()) for w in f["fix"].split()]


def test_a_fix_appended_to_the_script_raises_no_warning() -> None:
    """Append doctor's fixes after the script (its "$@"): the script's own trainer.save_freq=20 and
    test_freq=5 are replaced on purpose, so no "set 2 times" warning, and nothing is left above a
    note; the same with the steady-state alternative doctor notes for steps=[1]."""
    first = _findings(SCRIPT, "--", *PROFILE)
    fixes = _override_fixes(first, ("error", "warning"))
    assert "trainer.save_freq=-1" in fixes and "trainer.test_freq=-1" in fixes
    second = _findings(SCRIPT, "--", *PROFILE, *fixes)
    assert [f for f in second if f["severity"] != "info"] == []
    dup = [f for f in second if f["code"] == "override-duplicate" and f["key"] == "trainer.save_freq"]
    assert len(dup) == 1 and "trainer.save_freq=20" in dup[0]["message"] and dup[0]["fix"] == ""
    steady = [f["fix"] for f in second if f["code"] == "nsys-startup-step"][0].split()
    third = _findings(SCRIPT, "--", *PROFILE, *fixes, *steady)
    assert [f for f in third if f["severity"] != "info"] == []
    assert not any(f["code"] == "nsys-startup-step" for f in third)


def test_collect_summarizes_a_lone_step_1_as_a_warm_up_step_on_purpose(tmp_path: Path) -> None:
    """steps=[1] (doctor's lightest footprint): collect says it summarizes the warm-up step 1 on
    purpose, and warns about nothing."""
    run = tmp_path / "run"
    run.mkdir()
    (run / "worker_process_1983.1.sqlite").write_bytes(
        data_path("h200-nsys-2025.3/ray-continuous/worker_process_1983.1.sqlite").read_bytes())
    out = tmp_path / "out"
    res = CliRunner().invoke(app, ["collect", str(run), "-o", str(out), "--work", str(tmp_path / "w"), "-j", "1"],
                             env={"COLUMNS": "200"})
    assert res.exit_code == 0, res.output
    window = json.loads((out / "manifest.json").read_text())["window"]
    assert window["reason"].startswith("step 1, a warm-up step, on purpose: the only profiled step")
    assert window["warnings"] == [] and "warning" not in res.output
    steps = pd.read_parquet(out / "summaries" / "steps.parquet")
    assert set(steps.loc[steps["chosen"], "step"]) == {1}
