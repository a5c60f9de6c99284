"""Every trace its step (issue 40): traces that name no step are numbered as their process's series.

verl's trainer starts and stops the rollout engines' profiler once per profiled step
(`RayPPOTrainer.fit`: `llm_server_manager.start_profile()` / `stop_profile()` around
`generate_sequences`, reaching the async servers' `start_profile` / `stop_profile`), so each
engine GPU writes one trace per profiled step with no step in its name.
Here: real torch CPU traces (tests/verl_writers.py, made once per session), 3 profiled steps,
2 replicas x TP 2, laid out where verl 0.9.1's own functions put them (`rollout_trace_dir`,
`build_vllm_profiler_args`, `build_sglang_profiler_args`, `relocate_rollout_traces`, called after
each step as the servers' `stop_profile` does), under each engine's names. The expected steps and
counts come from the raw traces (which step each holds, how many `execute_model` ranges it has),
never from what verlprof computed.
"""
from __future__ import annotations

import hashlib
import json
import lzma
import shutil
import sqlite3
from pathlib import Path

import pytest
from testdata import data_path
from verl_writers import (REPLICAS, STAGES, STEPS, TP, RawTrace, annotation_counts, op_counts, place,
                          profile_engine_steps, profile_stage_calls)
from verlprof.pipeline.stage_runs import summarize_sources
from verlprof.stages.gather import gather
from verlprof.stages.scrub.provenance import REVIEW_NAME, read_review_map, reveal
from verlprof.stages.summarize import SummarizeOptions
from verlprof.stages.window.identity import identity_from_artifact
from verlprof.stages.window.choice import run_window
from verlprof.stages.window.steps import identity_from_path, nsys_source_steps


@pytest.fixture(scope="session")
def engine_traces(tmp_path_factory) -> list[RawTrace]:
    """12 real traces: steps 1-3 x replicas 0-1 x tp 0-1, step s holding 2 + s iterations."""
    return profile_engine_steps(tmp_path_factory.mktemp("engine-traces"))


@pytest.fixture(scope="session")
def token_window_traces(tmp_path_factory) -> list[RawTrace]:
    """The same, each holding the 3 iterations a token window of 4..7 profiles (vLLM's
    `delay_iterations` 4, `max_iterations` 3, from `build_vllm_profiler_args`)."""
    return profile_engine_steps(tmp_path_factory.mktemp("token-window-traces"), iterations=3)


@pytest.fixture(scope="session")
def stage_calls(tmp_path_factory) -> tuple[Path, dict[Path, int]]:
    """verl 0.8.0 discrete mode: 3 steps x 3 stage calls x 2 ranks, by its own get_torch_profiler."""
    save = tmp_path_factory.mktemp("verl08") / "profile"
    return save, profile_stage_calls(save)


def _config(profiled: tuple[int, ...] | None, token_window: bool = False) -> str:
    steps = f"  steps: {list(profiled)}\n" if profiled else ""
    window = "          profile_token_start: 4\n          profile_token_end: 7\n" if token_window else ""
    return (f"global_profiler:\n  tool: torch\n{steps}  save_path: profile\n"
            "actor_rollout_ref:\n  rollout:\n    tensor_model_parallel_size: 2\n    data_parallel_size: 1\n"
            "    pipeline_model_parallel_size: 1\n    profiler:\n      enable: true\n      tool: torch\n"
            "      all_ranks: true\n      tool_config:\n        torch:\n          discrete: true\n" + window)


def _write_config(root: Path, text: str) -> None:
    hydra = root / "outputs" / ".hydra"
    hydra.mkdir(parents=True)
    (hydra / "config.yaml").write_text(text)


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _lay_out(engine: str, traces: list[RawTrace], root: Path, relocate: bool, token_window: bool) -> None:
    """Put the raw traces where verl and the engine put them, step after step."""
    from verl.utils.profiler.config import (ProfilerConfig, TorchProfilerToolConfig, build_sglang_profiler_args,
                                            build_vllm_profiler_args, relocate_rollout_traces)

    cfg = ProfilerConfig(tool="torch", enable=True, all_ranks=True, save_path=str(root / "profile"),
                         relocate_results=relocate)
    tool = TorchProfilerToolConfig(contents=["cpu"], discrete=True,
                                   profile_token_start=4 if token_window else None,
                                   profile_token_end=7 if token_window else None)
    for step in STEPS:
        for t in (t for t in traces if t.step == step):
            if engine == "sglang":
                folder = Path(build_sglang_profiler_args(cfg, tool, t.replica)["output_dir"])
                # SGLang's profile_id is str(time.time()) at each start; made to run backwards
                # here: the order comes from the traces' content, never from a name
                name = f"{1764660000 + 100 * (len(STEPS) - step)}.{10 + t.replica}-TP-{t.tp}.trace.json.gz"
            else:
                args = json.loads(build_vllm_profiler_args(cfg, tool, t.replica, legacy_env=False)["profiler_config"])
                if token_window:
                    assert (args["delay_iterations"], args["max_iterations"]) == (4, 3)
                folder = Path(args["torch_profiler_dir"])
                # tensorboard_trace_handler: <worker_name>.<time_ns>.pt.trace.json.gz; vLLM's worker
                # name carries -rank-<tp>; older vLLM passed none: torch's default <hostname>_<pid>
                worker = (f"3f9a2c-rank-{t.tp}" if engine == "vllm"
                          else f"gpu-node-{t.replica}_{4100 + 10 * t.replica + t.tp}")
                name = f"{worker}.{1764660000000000000 + 10**9 * step}.pt.trace.json.gz"
            place(t.path, folder / name)
        if relocate:   # the servers' stop_profile relocates after every profiled step
            for replica in REPLICAS:
                moved = relocate_rollout_traces(cfg, replica, world_size=TP)
                assert len(moved) == TP
                if engine != "host_pid":   # the tp rank is in the name: verl names the global rank
                    assert all(Path(m).name.startswith(f"rollout-replica{replica}-globalrank") for m in moved)


def _summarize(root: Path):
    res = gather([root], with_hashes=False)
    arts = [a for a in res.artifacts if a.kind.value == "torch_trace"]
    return arts, summarize_sources([(a.path, identity_from_artifact(a)) for a in arts], SummarizeOptions())


def _check(traces: list[RawTrace], arts, res, profiled: tuple[int, ...] | None, engine: str) -> None:
    want = list(profiled or STEPS)
    raw_of = {_digest(t.path): t for t in traces}
    held = {a.rel: raw_of[_digest(a.path)] for a in arts}
    assert len(held) == len(traces) == 12
    # every trace is the step it holds, whatever its name says
    for src in res.sources:
        assert [(s.step, s.boundary) for s in src.steps] == [(want[held[src.ident.source].step - 1], "trace_order")]
    assert res.choice.step == want[1]
    assert "each process's traces in start order are its profiled steps" in res.choice.reason
    assert (f"global_profiler.steps[k-1] of the run's config ({want})" if profiled
            else "the k-th is step k") in res.choice.reason
    # the chosen step's rows: exactly the step-2 traces, each with that one trace's counts
    rows = [r for r in res.rows["phases"] if r["path"] == "execute_model"]
    assert sorted(r["source"] for r in rows) == sorted(rel for rel, t in held.items() if t.step == 2)
    for r in rows:
        raw = held[r["source"]]
        assert r["step"] == want[1] and r["role"] == "rollout"
        assert r["instances"] == annotation_counts(raw.path)["execute_model"] == 4
    if engine != "host_pid":   # the tp rank in the name: replica x tp + tp rank, as verl numbers them
        assert {(r["rank"], (held[r["source"]].replica, held[r["source"]].tp)) for r in rows} == {
            (rep * TP + tp, (rep, tp)) for rep in REPLICAS for tp in range(TP)}
    steps = res.rows["steps"]
    assert sorted({s["step"] for s in steps}) == want and {s["boundary"] for s in steps} == {"trace_order"}


@pytest.mark.parametrize("engine", ["vllm", "sglang", "host_pid"])
@pytest.mark.parametrize("relocate", [False, True], ids=["as-written", "relocated"])
def test_rollout_engine_traces_are_their_steps(engine, relocate, engine_traces, tmp_path):
    """Steps [1, 2, 3], step 2 chosen, its counts one step's (not three steps' summed)."""
    _lay_out(engine, engine_traces, tmp_path, relocate, token_window=False)
    _write_config(tmp_path, _config((1, 2, 3)))
    arts, res = _summarize(tmp_path)
    _check(engine_traces, arts, res, (1, 2, 3), engine)


@pytest.mark.parametrize("engine,relocate", [("vllm", False), ("sglang", True), ("host_pid", False)])
def test_config_profiled_steps_number_the_series(engine, relocate, engine_traces, tmp_path):
    """`global_profiler.steps=[5, 10, 15]`: the traces are steps 5, 10 and 15, and 10 is chosen
    (step 2 was not profiled: the second profiled step, the first after the warm-up one)."""
    _lay_out(engine, engine_traces, tmp_path, relocate, token_window=False)
    _write_config(tmp_path, _config((5, 10, 15)))
    arts, res = _summarize(tmp_path)
    _check(engine_traces, arts, res, (5, 10, 15), engine)


def test_without_profiled_steps_in_the_config_the_kth_is_step_k(engine_traces, tmp_path):
    _lay_out("sglang", engine_traces, tmp_path, False, token_window=False)
    _write_config(tmp_path, _config(None))
    arts, res = _summarize(tmp_path)
    _check(engine_traces, arts, res, None, "sglang")


@pytest.mark.parametrize("engine", ["vllm", "sglang"])
def test_token_window_captures_are_their_steps(engine, token_window_traces, tmp_path):
    """A token window of 3 iterations: the chosen step holds 3 `execute_model` per rank, not 9."""
    _lay_out(engine, token_window_traces, tmp_path, False, token_window=True)
    _write_config(tmp_path, _config((1, 2, 3), token_window=True))
    arts, res = _summarize(tmp_path)
    rows = [r for r in res.rows["phases"] if r["path"] == "execute_model"]
    assert res.choice.step == 2 and "response tokens 4 to 7 only" in res.choice.reason
    assert sorted(r["rank"] for r in rows) == [0, 1, 2, 3] and {r["instances"] for r in rows} == {3}
    assert sorted({s.step for src in res.sources for s in src.steps}) == [1, 2, 3]


def test_overlapping_traces_of_one_process_are_no_series(engine_traces, tmp_path):
    """Two copies of one process's trace (same content, same time) are not two steps of it."""
    t = next(t for t in engine_traces if t.step == 1)
    folder = tmp_path / "profile" / "agent_loop_rollout_replica_0"
    place(t.path, folder / "1764660000.1-TP-0.trace.json.gz")
    place(t.path, folder / "1764660100.1-TP-0.trace.json.gz")
    _arts, res = _summarize(tmp_path)
    assert {(s.step, s.boundary) for src in res.sources for s in src.steps} == {(1, "whole_file")}


# ----------------------------------------------------------------------------------------------
# verl 0.8: one file per stage call
# ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize("profiled", [None, (5, 10, 15)])
def test_verl_08_stage_call_files_group_into_steps(profiled, stage_calls, tmp_path):
    """`<save_path>/<stage>/prof_rank-<R>_<pid>_<ts>.json.gz`, several files per step: a process's
    files in start order, a new step where a stage runs again; each file is the step it was
    written in, the chosen step's rows are that step's calls, one per stage and rank."""
    save, written = stage_calls
    shutil.copytree(save, tmp_path / "profile")
    if profiled:
        _write_config(tmp_path, "global_profiler:\n  tool: torch\n  steps: [5, 10, 15]\n  save_path: profile\n")
    arts, res = _summarize(tmp_path)
    assert {a.naming for a in arts} == {"torch_verl_old"} and len(arts) == len(written) == 18
    want = list(profiled or STEPS)
    step_of = {a.rel: written[next(p for p in written if p.name == Path(a.rel).name)] for a in arts}
    for src in res.sources:
        assert [s.step for s in src.steps] == [want[step_of[src.ident.source] - 1]]
    assert res.choice.step == want[1]
    rows = [r for r in res.rows["phases"] if r["path"] in STAGES]
    assert sorted((r["path"], r["rank"]) for r in rows) == sorted((s, k) for s in STAGES for k in (0, 1))
    assert {r["source"] for r in rows} == {rel for rel, s in step_of.items() if s == 2}
    assert {r["instances"] for r in rows} == {3}   # step 2's calls: 1 + 2 iterations each
    assert {(r["path"], r["role"]) for r in rows} == {
        ("ref_compute_log_prob", "ref"), ("actor_compute_log_prob", "actor"), ("actor_update", "actor")}


# ----------------------------------------------------------------------------------------------
# fully-async: the versions it trained
# ----------------------------------------------------------------------------------------------


def test_fully_async_tail_resync_is_not_a_version(tmp_path):
    """tests/data/fully-async: 6 steps, a sync after every second (versions 1-3), then fit()'s
    tail `_fit_update_weights()` re-sending version 3. Three versions, the last ending at the
    third sync; the fourth sync is said to be a re-sync."""
    path = tmp_path / "fully_async_resync_23054.sqlite"
    with lzma.open(data_path("fully-async/fully_async_resync_23054.sqlite.xz")) as f, open(path, "wb") as g:
        shutil.copyfileobj(f, g)
    with sqlite3.connect(f"file:{path}?mode=ro", uri=True) as con:
        (t0,) = con.execute("SELECT utcEpochNs FROM TARGET_INFO_SESSION_START_TIME").fetchone()
        ends = [t0 + e for (e,) in con.execute(
            "SELECT e.\"end\" FROM NVTX_EVENTS e LEFT JOIN StringIds s ON s.id = e.textId "
            "WHERE coalesce(e.text, s.value) = 'timing_s/param_sync' ORDER BY e.start")]
        n_steps = con.execute("SELECT count(*) FROM NVTX_EVENTS e LEFT JOIN StringIds s ON s.id = e.textId "
                              "WHERE coalesce(e.text, s.value) = 'step'").fetchone()[0]
    assert len(ends) == 4 and n_steps == 6
    resolved, choice = run_window([nsys_source_steps(path, identity_from_path(path))])
    spans = sorted(resolved[0].steps, key=lambda s: s.step)
    assert [(s.step, s.boundary) for s in spans] == [(1, "param_sync"), (2, "param_sync"), (3, "param_sync")]
    assert [s.end_ns for s in spans] == ends[:3]
    assert choice.step == 2 and "re-sends version 3, not a new version" in choice.reason


# ----------------------------------------------------------------------------------------------
# verl 0.9.1: a schedule over update mini-batches
# ----------------------------------------------------------------------------------------------


@pytest.mark.filterwarnings("ignore:Warning. Profiler clears events at the end of each cycle")
def test_verl_09_schedule_windows_are_parts_of_their_step(tmp_path):
    """verl 0.9.1's `get_torch_profiler(schedule=..., name_mini_batch_window=True)` (as
    `DistProfiler.annotate(scheduled=True)` calls it for the update stage), driven by one
    `prof.step()` per mini-batch: warmup 1, active 2, repeat 2 over 6 mini-batches writes two files
    per step, `..._mb1-2` and `..._mb4-5`. Both are parts of their `step<N>`; the schedule's
    `ProfilerStep#` labels are off, so no mini-batch is taken for a step."""
    import torch
    from verl.utils.profiler.torch_profile import get_torch_profiler

    save = tmp_path / "profile"
    for step in STEPS:
        prof = get_torch_profiler(contents=["cpu"], save_path=str(save), role="actor_update",
                                  save_file_prefix="actor_rollout_ref", rank=0, profile_step=step,
                                  schedule={"wait": 0, "warmup": 1, "active": 2, "repeat": 2},
                                  name_mini_batch_window=True)
        prof.start()
        for _mb in range(6):
            with torch.profiler.record_function("update_mini_batch"):
                x = torch.randn(16, 16)
                (x @ x).sum()
            prof.step()
        prof.stop()
    arts, res = _summarize(save)
    names = sorted(Path(a.rel).name.rsplit("_", 1)[1] for a in arts)
    assert names == ["mb1-2.json.gz"] * 3 + ["mb4-5.json.gz"] * 3
    assert sorted((a.step, a.role, a.scope) for a in arts) == sorted(
        (s, "actor_rollout_ref", "actor-update") for s in STEPS for _ in range(2))
    assert {(s.step, s.boundary) for src in res.sources for s in src.steps} == {
        (s, "file_name") for s in STEPS}
    assert res.choice.step == 2
    rows = [r for r in res.rows["phases"] if r["step"] == 2]
    step2 = {a.rel for a in arts if a.step == 2}
    assert {r["source"] for r in rows} == step2
    for rel in step2:   # each window: its own two mini-batches, as the raw file holds them
        raw = annotation_counts(next(a.path for a in arts if a.rel == rel))
        assert not any(n.startswith("ProfilerStep#") for n in raw)
        assert [r["instances"] for r in rows if r["source"] == rel and r["path"] == "update_mini_batch"] == [
            raw["update_mini_batch"]] == [2]


# ----------------------------------------------------------------------------------------------
# verl's out-of-memory snapshots
# ----------------------------------------------------------------------------------------------


def _oom_run(tmp_path: Path) -> tuple[Path, str]:
    """verl's OOM observer (`TorchMemoryProfiler._attach_oom_observer`) dumps
    `oom_<%Y%m%d-%H%M%S-%f>/torch_memory_oom_rank<R>_pid<P>.pickle` (verl/utils/memory_utils.py
    `dump_memory_snapshot(tag="torch_memory_oom", sub_dir=...)`, the name reproduced by hand): a
    real H200 snapshot placed there, beside the run's three real torch traces. Returns the folder
    and what must be said of the snapshot (its segments, summed here from the pickle)."""
    import pickle

    from testdata import DATA, data_path

    snap_path = data_path("h200-torch-2.11/step2/torch_memory_rank0_pid804.pickle")
    rel = "oom_20261202-085630-123456/torch_memory_oom_rank0_pid804.pickle"
    root = tmp_path / "profile"
    (root / rel).parent.mkdir(parents=True)
    shutil.copyfile(snap_path, root / rel)
    for trace in sorted((DATA / "h200-torch-2.11").glob("*.json.gz")):
        shutil.copyfile(trace, root / trace.name)
    with open(snap_path, "rb") as f:
        segs = pickle.load(f)["segments"]
    alloc = sum(s["allocated_size"] for s in segs) / 2**30
    reserved = sum(s["total_size"] for s in segs) / 2**30
    return root, (f"out of memory: {rel} is the memory at a failure, not a profiled step "
                  f"(cuda:0 {alloc:.2f} GiB allocated of {reserved:.2f} GiB reserved)")


def test_oom_snapshot_is_the_memory_at_the_failure(tmp_path):
    """An OOM snapshot numbers no step; the window line says what it is."""
    root, said = _oom_run(tmp_path)
    res = gather([root], with_hashes=False)
    items = [(a.path, identity_from_artifact(a)) for a in res.artifacts]
    assert [i.scope for _p, i in items if i.source_kind == "memory"] == ["oom"]
    out = summarize_sources(items, SummarizeOptions())
    mem = next(src for src in out.sources if src.ident.source_kind == "memory")
    assert mem.steps == () and out.choice.step == 2
    assert sorted({s.step for src in out.sources for s in src.steps}) == [1, 2, 3]
    assert said in out.choice.reason
    assert not [r for r in out.rows["phases"] if r["source_kind"] == "memory"]


def test_collect_says_the_oom_snapshot_and_puts_it_in_no_step(tmp_path):
    """collect attaches a step's snapshot to its phases; an OOM snapshot is skipped with what it
    holds as its reason, and no row of step 2 carries its memory."""
    import pandas as pd
    from typer.testing import CliRunner
    from verlprof.pipeline.cli import app

    root, said = _oom_run(tmp_path)
    out = tmp_path / "bundle"
    res = CliRunner().invoke(app, ["collect", str(root), "-o", str(out), "--work", str(tmp_path / "work"),
                                   "--jobs", "1"], env={"COLUMNS": "200"})
    assert res.exit_code == 0, res.output
    arts = {a["rel"]: a for a in json.loads((out / "manifest.json").read_text())["artifacts"]}
    oom = arts["oom_20261202-085630-123456/torch_memory_oom_rank0_pid804.pickle"]
    assert (oom["status"], oom["reason"]) == ("skipped", said)
    phases = pd.read_parquet(out / "summaries" / "phases.parquet")
    assert set(phases["source_kind"]) == {"torch"} and phases["mem_peak_bytes"].isna().all()


def test_collect_publishes_the_series_steps(engine_traces, tmp_path):
    """`verlprof collect` of relocated SGLang traces with `global_profiler.steps=[5, 10, 15]`: the
    bundle's steps are 5, 10 and 15 by trace order, step 10's rows are the step-2 traces' (one
    step's `execute_model` each), and the manifest's window line says which rule numbered them."""
    import pandas as pd
    from typer.testing import CliRunner
    from verlprof.pipeline.cli import app

    run = tmp_path / "run"
    _lay_out("sglang", engine_traces, run, True, token_window=False)
    _write_config(run, _config((5, 10, 15)))
    out = tmp_path / "bundle"
    res = CliRunner().invoke(app, ["collect", str(run), "-o", str(out), "--work", str(tmp_path / "work"),
                                   "--jobs", "1"], env={"COLUMNS": "200"})
    assert res.exit_code == 0, res.output
    steps = pd.read_parquet(out / "summaries" / "steps.parquet")
    assert sorted(set(steps["step"])) == [5, 10, 15] and set(steps["boundary"]) == {"trace_order"}
    assert len(steps) == 12 and set(steps.loc[steps["chosen"], "step"]) == {10}
    phases = pd.read_parquet(out / "summaries" / "phases.parquet")
    # `execute_model` is the range name this test's workload chose (tests/verl_writers.py), which no
    # public source writes: published as a pseudonym (issue 39), read back through WORK's review list
    names = read_review_map(tmp_path / "work" / REVIEW_NAME)
    assert "execute_model" not in set(phases["path"])
    mine = phases[phases["path"].map(lambda p: reveal(p, names)) == "execute_model"]
    assert sorted(mine["rank"]) == [0, 1, 2, 3] and set(mine["step"]) == {10} and set(mine["instances"]) == {4}
    window = json.loads((out / "manifest.json").read_text())["window"]
    assert window["step"] == 10 and "global_profiler.steps[k-1] of the run's config ([5, 10, 15])" in window["reason"]
    # the published window traces: the four step-2 traces, each with one step's ops (8 aten::mm,
    # where a rank's three traces hold 24)
    published = sorted(p for p in (out / "traces").glob("*.trace.json.gz") if p.name != "all_ranks.trace.json.gz")
    raw = {t.path: op_counts(t.path)["aten::mm"] for t in engine_traces}
    assert len(published) == 4 and all("1764660100" in p.name for p in published)   # step 2's SGLang ids
    assert {op_counts(p)["aten::mm"] for p in published} == {raw[t.path] for t in engine_traces if t.step == 2} == {8}


def test_verl_07_scheduled_profiler_steps_are_mini_batches(tmp_path):
    """verl 0.7's `Profiler` (`verl/utils/profiler/profile.py`) runs a `torch.profiler.schedule`
    that `MegatronPPOActor.update_policy` steps once per mini-batch, and `_trace_handler` saves
    `[<prefix>_]prof_rank-<R>.json.gz` into save_path (the name reproduced by hand; the class needs
    torch.distributed). Its `ProfilerStep#N` ranges are mini-batches: the file is one step, not 4."""
    import torch

    save = tmp_path / "profile"
    save.mkdir()
    sched = torch.profiler.schedule(wait=0, warmup=1, active=4, repeat=1)
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU], schedule=sched,
                                on_trace_ready=lambda p: p.export_chrome_trace(str(save / "actor_prof_rank-0.json.gz"))
                                ) as prof:
        for _mb in range(5):
            with torch.profiler.record_function("update_mini_batch"):
                x = torch.randn(16, 16)
                (x @ x).sum()
            prof.step()
    raw = annotation_counts(save / "actor_prof_rank-0.json.gz")
    assert sum(n.startswith("ProfilerStep#") for n in raw) == 4   # torch labels every mini-batch
    arts, res = _summarize(save)
    assert [(a.naming, a.rank) for a in arts] == [("torch_verl_phase", 0)]
    assert [(s.step, s.boundary) for src in res.sources for s in src.steps] == [(1, "whole_file")]
    rows = [r for r in res.rows["phases"] if r["path"].endswith("update_mini_batch")]
    assert sum(r["instances"] for r in rows) == raw["update_mini_batch"] == 4
