"""Window: step boundaries of every kind on real exports, and the choice of the steady-state step.

Expected steps come from the exports' own NVTX rows (read with SQL here), never from numbers we
computed with the code under test.
"""
from __future__ import annotations

import shutil
import sqlite3
import statistics
import subprocess
from pathlib import Path

import pandas as pd
import pytest
from testdata import fixtures_dir
from verlprof.pipeline.stage_runs import summarize_sources
from verlprof.stages.core.errors import VerlprofError
from verlprof.stages.window.choice import choose_window, run_window, window_spans
from verlprof.stages.window.steps import identity_from_path, nsys_source_steps
from verlprof.stages.window.types import SourceIdentity

FIXTURES = fixtures_dir()
NSYS = FIXTURES / "h200-nsys-2025.3"
WHOLE = NSYS / "whole" / "whole_1873.sqlite"
RAY = NSYS / "ray-continuous"



def _ro(path: Path) -> sqlite3.Connection:
    return sqlite3.connect(f"file:{path}?mode=ro", uri=True)


def _ranges(path: Path) -> pd.DataFrame:
    with _ro(path) as con:
        t0 = con.execute("SELECT utcEpochNs FROM TARGET_INFO_SESSION_START_TIME").fetchone()[0]
        df = pd.read_sql("SELECT e.rowid AS rid, e.start, e.end, s.value AS name FROM NVTX_EVENTS e "
                         "JOIN StringIds s ON s.id = e.textId WHERE e.eventType = 60 ORDER BY e.start", con)
    df["abs_start"], df["abs_end"] = df["start"] + t0, df["end"] + t0
    return df


def _copy(src: Path, dst: Path) -> Path:
    shutil.copyfile(src, dst)
    dst.chmod(0o644)
    return dst


def _steps(path: Path, ident: SourceIdentity | None = None):
    return nsys_source_steps(path, ident or identity_from_path(path))


def test_nvtx_step_ranges_are_the_steps():
    nv = _ranges(WHOLE)
    step_rows = nv[nv["name"] == "step"]
    resolved, choice = run_window([_steps(WHOLE)])
    spans = resolved[0].steps
    assert [s.step for s in spans] == [1, 2, 3]
    assert [(s.start_ns, s.end_ns) for s in spans] == list(zip(step_rows["abs_start"], step_rows["abs_end"]))
    assert {s.boundary for s in spans} == {"nvtx_step"}
    assert choice.step == 2 and "default" in choice.reason and not choice.warnings


def test_step_choice_auto_explicit_and_missing():
    nv = _ranges(WHOLE)
    walls = (nv[nv["name"] == "step"]["end"] - nv[nv["name"] == "step"]["start"]).tolist()
    later = walls[1:]
    want = 2 + later.index(statistics.median_low(later))
    src = _steps(WHOLE)
    assert run_window([src], "auto")[1].step == want
    assert run_window([src], 3)[1].step == 3
    with pytest.raises(VerlprofError, match="step 9 was not profiled"):
        run_window([src], 9)


def test_capture_range_files_number_steps_by_k():
    files = sorted(RAY.glob("*.sqlite"))
    resolved, choice = run_window([_steps(p) for p in files])
    assert [[s.step for s in r.steps] for r in resolved] == [[1], [2], [3]]
    assert choice.step == 2
    (span,) = [s for r in resolved for s in window_spans(r, 2)]
    assert span.source == "worker_process_1983.2.sqlite" and span.boundary == "capture_range"
    nv = _ranges(files[1])
    step = nv[nv["name"] == "step"].iloc[0]
    assert (span.start_ns, span.end_ns) == (step["abs_start"], step["abs_end"])
    # each capture range has its own time base: absolute starts follow the order of k
    starts = [r.steps[0].start_ns for r in resolved]
    assert starts == sorted(starts)


def test_config_known_profiled_steps_map_capture_ranges():
    files = sorted(RAY.glob("*.sqlite"))
    srcs = []
    for p in files:
        ident = identity_from_path(p)
        srcs.append(_steps(p, SourceIdentity(ident.source, capture_range=ident.capture_range, profiled_steps=(5, 10, 15))))
    resolved, choice = run_window(srcs)
    assert [r.steps[0].step for r in resolved] == [5, 10, 15]
    assert choice.step in (10, 15) and "step 2 was not profiled" in choice.reason
    with pytest.raises(VerlprofError):
        choose_window(resolved, 2 + 1)


def test_single_step_warns():
    _, choice = run_window([_steps(RAY / "worker_process_1983.2.sqlite")])
    assert choice.step == 2
    assert any("only one step" in w for w in choice.warnings)


def test_checkpoint_range_in_step_is_flagged(tmp_path):
    db = _copy(WHOLE, tmp_path / "ckpt.sqlite")
    nv = _ranges(WHOLE)
    adv2 = nv[nv["name"] == "adv"].iloc[1]
    with sqlite3.connect(db) as con:
        sid = con.execute("SELECT max(id) + 1 FROM StringIds").fetchone()[0]
        con.execute("INSERT INTO StringIds (id, value) VALUES (?, 'save_checkpoint')", (sid,))
        con.execute("INSERT INTO NVTX_EVENTS (start, end, eventType, globalTid, textId, domainId) "
                    "SELECT ?, ?, 60, globalTid, ?, 0 FROM NVTX_EVENTS WHERE rowid = ?",
                    (int(adv2["start"]) + 10, int(adv2["end"]) - 10, sid, int(adv2["rid"])))
    resolved, choice = run_window([_steps(db)])
    assert choice.step == 2
    assert any("save_checkpoint" in w for w in choice.warnings)
    assert [s.flags for s in resolved[0].steps] == [(), ("save_checkpoint",), ()]


def _without_step_ranges(src: Path, dst: Path) -> Path:
    db = _copy(src, dst)
    with sqlite3.connect(db) as con:
        con.execute("DELETE FROM NVTX_EVENTS WHERE textId IN (SELECT id FROM StringIds WHERE value = 'step')")
    return db


def _top_stage_ranges(nv: pd.DataFrame) -> pd.DataFrame:
    steps = nv[nv["name"] == "step"]
    top = []
    for r in nv.itertuples():
        if r.name == "step":
            continue
        parents = nv[(nv["start"] <= r.start) & (nv["end"] >= r.end) & (nv["rid"] != r.rid) & (nv["name"] != "step")]
        if parents.empty:
            k = int(((steps["start"] <= r.start) & (steps["end"] >= r.end)).values.argmax()) + 1
            top.append((r.rid, r.start, r.end, r.abs_start, r.abs_end, r.name, k))
    return pd.DataFrame(top, columns=["rid", "start", "end", "abs_start", "abs_end", "name", "step"])


def test_continuous_window_without_step_ranges_splits_by_stage_sequence(tmp_path):
    db = _without_step_ranges(WHOLE, tmp_path / "worker_77.sqlite")
    top = _top_stage_ranges(_ranges(WHOLE))
    resolved, choice = run_window([_steps(db)])
    spans = resolved[0].steps
    assert [s.step for s in spans] == [1, 2, 3] and {s.boundary for s in spans} == {"stage_sequence"}
    for s in spans:
        mine = top[top["step"] == s.step]
        assert (s.start_ns, s.end_ns) == (mine["abs_start"].min(), mine["abs_end"].max())


def test_worker_without_step_ranges_aligns_on_controller(tmp_path):
    worker = _without_step_ranges(WHOLE, tmp_path / "worker_77.sqlite")
    resolved, choice = run_window([_steps(WHOLE), _steps(worker)])
    top = _top_stage_ranges(_ranges(WHOLE))
    wsteps = resolved[1].steps
    assert [s.step for s in wsteps] == [1, 2, 3] and {s.boundary for s in wsteps} == {"aligned"}
    for s in wsteps:
        mine = top[top["step"] == s.step]
        assert (s.start_ns, s.end_ns) == (mine["abs_start"].min(), mine["abs_end"].max())
    res = summarize_sources([(WHOLE, identity_from_path(WHOLE)), (worker, identity_from_path(worker))])
    by_source = pd.DataFrame(res.rows["phases"]).groupby("source")["phase"].apply(set)
    assert by_source["worker_77.sqlite"] == by_source["whole_1873.sqlite"] - {"step"}


def test_discrete_files_are_grouped_into_steps(tmp_path):
    """One file per stage call (verl's discrete mode): grouped into steps by repeating stage."""
    nv = _ranges(WHOLE)
    top = _top_stage_ranges(nv)
    files = []
    for k, r in enumerate(top.sort_values("start").itertuples(), start=1):
        db = _copy(WHOLE, tmp_path / f"worker_process_42.{k}.sqlite")
        with sqlite3.connect(db) as con:  # keep only this call's ranges (and what nests in it)
            con.execute("DELETE FROM NVTX_EVENTS WHERE eventType = 60 AND NOT (start >= ? AND end <= ?)",
                        (r.start, r.end))
        files.append((db, r.step))
    resolved, choice = run_window([_steps(p) for p, _ in files])
    assert [src.steps[0].step for src in resolved] == [step for _, step in files]
    assert {src.steps[0].boundary for src in resolved} == {"discrete"}
    assert choice.step == 2


@pytest.mark.nsys
def test_cpu_only_nsys_2022_export(nsys_exe, nsys_reports, tmp_path):
    """nsys 2022.4 export of a CPU program: NVTX only, no CUDA tables -> steps and zero GPU columns."""
    rep = _copy(nsys_reports[2], tmp_path / "cpu.nsys-rep")
    out = tmp_path / "cpu.sqlite"
    subprocess.run([str(nsys_exe), "export", "--type", "sqlite", "-o", str(out), str(rep)],
                   check=True, capture_output=True, timeout=120)
    with _ro(out) as con:
        nv = pd.read_sql("SELECT e.start, e.end, s.value AS name FROM NVTX_EVENTS e JOIN StringIds s "
                         "ON s.id = e.textId WHERE e.eventType IN (59, 60) ORDER BY e.start", con)
    res = summarize_sources([(out, identity_from_path(out))])
    steps = nv[nv["name"] == "step"]
    assert [r["wall_ns"] for r in res.rows["steps"]] == (steps["end"] - steps["start"]).tolist()
    ph = pd.DataFrame(res.rows["phases"])
    s2 = steps.iloc[1]
    inside = nv[(nv["start"] >= s2["start"]) & (nv["start"] <= s2["end"])]
    assert sorted(ph["phase"]) == sorted(inside["name"])
    assert (ph[["gpu_busy_ns", "kernel_count", "api_ns"]] == 0).all().all()


def test_identity_from_path():
    a = identity_from_path("/x/worker_process_1983.2.sqlite")
    assert (a.source, a.capture_range, a.pid) == ("worker_process_1983.2.sqlite", 2, 1983)
    b = identity_from_path("whole_1873.sqlite")
    assert (b.capture_range, b.pid) == (None, 1873)


def test_window_command(tmp_path):
    from typer.testing import CliRunner
    from verlprof.pipeline.cli import app

    runner = CliRunner()
    res = runner.invoke(app, ["window", str(RAY), "--phases", "-o", str(tmp_path / "s")])
    assert res.exit_code == 0, res.output
    assert "step 2" in res.output and "generate_sequences" in res.output
    # -o writes through collect: a checked bundle whose summaries hold the Parquet files
    assert {"kernels.parquet", "phases.parquet", "steps.parquet"} <= {p.name for p in (tmp_path / "s" / "summaries").iterdir()}
    assert (tmp_path / "s" / "manifest.json").is_file() and not (tmp_path / "s" / "traces").exists()
    bad = runner.invoke(app, ["window", str(WHOLE), "--step", "zero"])
    assert bad.exit_code != 0


SAMPLE = Path(__file__).resolve().parents[1] / "samples" / "tiny_run" / "ray_logs" / "nsight"


def test_cpu_sample_controller_and_workers_align():
    """The CPU sample (nsys 2022.4, NVTX only): the controller's step ranges set the steps, the
    workers' stage ranges are placed by absolute time, phases equal their NVTX ranges."""
    files = sorted(SAMPLE.glob("*.sqlite"))
    res = summarize_sources([(p, identity_from_path(p)) for p in files])
    assert res.choice.step == 2 and not res.errors
    nv = {p.name: _ranges_any(p) for p in files}
    ctrl = next(n for n, df in nv.items() if (df["name"] == "step").any())
    s2 = nv[ctrl][nv[ctrl]["name"] == "step"].iloc[1]
    ph = pd.DataFrame(res.rows["phases"])
    assert (ph[["gpu_busy_ns", "kernel_count"]] == 0).all().all()
    for name, df in nv.items():
        mid = (df["abs_start"] + df["abs_end"]) // 2
        want = df[(mid >= s2["abs_start"]) & (mid <= s2["abs_end"])]
        got = ph[ph["source"] == name]
        assert sorted(got["phase"]) == sorted(want["name"]), name
        for row in want.itertuples():
            assert got[got["phase"] == row.name]["wall_ns"].sum() == (want[want["name"] == row.name]["end"]
                                                                     - want[want["name"] == row.name]["start"]).sum()


def _ranges_any(path: Path) -> pd.DataFrame:
    """Push/pop and start/end ranges of the default domain, with absolute times."""
    with _ro(path) as con:
        t0 = con.execute("SELECT utcEpochNs FROM TARGET_INFO_SESSION_START_TIME").fetchone()[0]
        df = pd.read_sql("SELECT e.start, e.end, coalesce(e.text, s.value) AS name FROM NVTX_EVENTS e "
                         "LEFT JOIN StringIds s ON s.id = e.textId WHERE e.eventType IN (59, 60) "
                         "AND e.domainId = 0 ORDER BY e.start", con)
    df["abs_start"], df["abs_end"] = df["start"] + t0, df["end"] + t0
    return df


def test_the_window_line_of_hundreds_of_steps_stays_one_short_line() -> None:
    """A capture of hundreds of steps (the 1 GB benchmark export holds 783) is explained in one line
    that names the first and last steps and how many lie between, not all of them."""
    from verlprof.stages.window.choice import choose_window
    from verlprof.stages.window.steps import SourceSteps
    from verlprof.stages.window.types import SourceIdentity, StepSpan

    ident = SourceIdentity(source="r.sqlite", source_kind="nsys")
    spans = [StepSpan(k, k * 10**9, k * 10**9 + (4 if k % 3 == 1 else 2) * 10**8, "nvtx_step", "r.sqlite")
             for k in range(1, 784)]
    choice = choose_window([SourceSteps.from_spans(ident, spans)])
    assert choice.step == 2
    assert len(choice.reason) < 200, choice.reason
    assert "1: 400 ms" in choice.reason and "783: 200 ms" in choice.reason and "775 more" in choice.reason


# ---------------------------------------------------------------------------------------------
# --step-range inside capture-range reports (issue 31)
# ---------------------------------------------------------------------------------------------


def test_step_range_applies_inside_capture_range_reports():
    """The ranges --step-range matches are the steps, numbered across the series."""
    files = sorted(RAY.glob("*.sqlite"), key=lambda p: int(p.name.split(".")[1]))
    srcs = [nsys_source_steps(p, identity_from_path(p), step_range="^update_actor$") for p in files]
    resolved, choice = run_window(srcs)
    want = [tuple(r) for p in files for r in
            _ranges(p).query("name == 'update_actor'")[["abs_start", "abs_end"]].itertuples(index=False)]
    got = sorted((s.step, s.start_ns, s.end_ns, s.boundary, s.label) for src in resolved for s in src.steps)
    assert [(a, b) for _k, a, b, *_x in got] == sorted(want)
    assert [k for k, *_x in got] == [1, 2, 3]
    assert {(b, lab) for *_x, b, lab in got} == {("step_range", "update_actor")}
    assert choice.step == 2 and "marked by update_actor" in choice.reason


def test_step_range_that_matches_nothing_is_said_in_the_window_line():
    files = sorted(RAY.glob("*.sqlite"))
    srcs = [nsys_source_steps(p, identity_from_path(p), step_range="no_such_range") for p in files]
    _resolved, choice = run_window(srcs)
    assert f"--step-range 'no_such_range' matched no range in {len(files)} of {len(files)} sources" in choice.reason


# ---------------------------------------------------------------------------------------------
# fully-async training: steps by parameter version (issue 31)
# ---------------------------------------------------------------------------------------------


def test_fully_async_steps_are_parameter_versions():
    """verl's fully-async trainer: a step ends at each weight sync (`timing_s/param_sync`) and is
    numbered by the parameter version; its `step` ranges (2 per version here) are parts of it."""
    from testdata import data_path

    path = data_path("fully-async/fully_async_trainer_13021.sqlite")
    nv = _ranges_any(path)
    syncs = nv[nv["name"] == "timing_s/param_sync"].sort_values("abs_start")
    steps = nv[nv["name"] == "step"].sort_values("abs_start")
    resolved, choice = run_window([_steps(path)])
    spans = sorted(resolved[0].steps, key=lambda s: s.step)
    assert [s.step for s in spans] == [1, 2, 3] and {s.boundary for s in spans} == {"param_sync"}
    assert [s.end_ns for s in spans] == list(syncs["abs_end"])
    # version k starts with the first training step after sync k-1: steps 1, 3, 5
    assert [s.start_ns for s in spans] == list(steps["abs_start"].iloc[[0, 2, 4]])
    assert choice.step == 2 and "parameter version 2" in choice.reason
