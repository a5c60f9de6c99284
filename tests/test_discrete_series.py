"""A discrete nsys series (verl's discrete mode: one report per stage call) found from the reports
themselves, and a role's step as the span of its calls.

Data: tests/data/discrete-cpu (12 real nsys 2022.4 reports of samples/make_gpu_run.py --discrete,
3 steps x 4 stage calls of one process). Expected values come from the exports' own rows (SQL
here): session start + NVTX start/end, never from figures the code under test computed.
"""
from __future__ import annotations

import shutil
import sqlite3
from pathlib import Path

import pandas as pd
from testdata import data_dir, fixtures_dir
from typer.testing import CliRunner
from verlprof.pipeline.cli import app
from verlprof.pipeline.stage_runs import summarize_sources
from verlprof.stages.gather import gather
from verlprof.stages.summarize import SummarizeOptions
from verlprof.stages.window.steps import identity_from_artifact

DISCRETE = data_dir("discrete-cpu")
STAGES = ("generate_sequences", "actor_compute_log_prob", "ref_compute_log_prob", "actor_update")
runner = CliRunner()
ROLE_OF = {"generate_sequences": "rollout", "actor_compute_log_prob": "actor",
           "ref_compute_log_prob": "ref", "actor_update": "actor"}


def _calls(path: Path) -> list[tuple[str, int, int]]:
    """(stage, absolute start, absolute end) of the verl stage ranges of one export."""
    with sqlite3.connect(f"file:{path}?mode=ro", uri=True) as con:
        (t0,) = con.execute("SELECT utcEpochNs FROM TARGET_INFO_SESSION_START_TIME").fetchone()
        rows = con.execute("SELECT coalesce(e.text, s.value), e.start, e.\"end\" FROM NVTX_EVENTS e "
                           "LEFT JOIN StringIds s ON s.id = e.textId WHERE e.\"end\" IS NOT NULL").fetchall()
    return [(t, t0 + a, t0 + b) for t, a, b in rows if t in STAGES]


def _expected_steps() -> dict[int, dict[str, tuple[int, int]]]:
    """Step -> role -> (first call's start, last call's end), from the files in session order."""
    calls = sorted(c for p in DISCRETE.glob("*.sqlite") for c in [(c[1], c[2], c[0]) for c in _calls(p)])
    steps: dict[int, dict[str, tuple[int, int]]] = {}
    step, seen = 0, set()
    for start, end, stage in calls:
        if stage in seen or step == 0:
            step, seen = step + 1, set()
        seen.add(stage)
        lo, hi = steps.setdefault(step, {}).get(ROLE_OF[stage], (start, end))
        steps[step][ROLE_OF[stage]] = (min(lo, start), max(hi, end))
    return steps


def _renamed(tmp_path: Path, stem: str) -> Path:
    """The same 12 reports as a user renamed them while gathering (`capture_0042.<k>.sqlite`)."""
    out = tmp_path / stem
    out.mkdir()
    for p in DISCRETE.glob("*.sqlite"):
        k = p.name.split(".")[1]
        shutil.copy(p, out / f"{stem}.{k}.sqlite")
    return out


def _summarize(folder: Path):
    res = gather([folder], with_hashes=False, find_config=False)
    items = [(a.path, identity_from_artifact(a)) for a in res.artifacts]
    return summarize_sources(items, SummarizeOptions())


def _steps_by_capture(res) -> list[tuple[str, int, int, int, str]]:
    """(capture k, step, start, end, boundary) of every step span, whatever the file is called."""
    out = []
    for src in res.sources:
        k = src.ident.source.split(".")[-2]
        out.extend((k, s.step, s.start_ns, s.end_ns, s.boundary) for s in src.steps)
    return sorted(out)


def test_discrete_series_from_content_whatever_the_names(tmp_path):
    verl = _summarize(DISCRETE)
    renamed = _summarize(_renamed(tmp_path, "capture_0042"))
    assert _steps_by_capture(verl) == _steps_by_capture(renamed)
    assert verl.choice.step == renamed.choice.step == 2
    assert verl.choice.reason == renamed.choice.reason
    # the same rows, but for the file names
    def rows(res):
        return sorted(tuple(sorted((k, v) for k, v in r.items() if k != "source")) for r in res.rows["phases"])
    assert rows(verl) == rows(renamed)
    # three steps, numbered by repeated stage calls of the one process
    assert sorted({s for _k, s, *_ in _steps_by_capture(verl)}) == [1, 2, 3]
    assert {b for *_x, b in _steps_by_capture(verl)} == {"discrete"}


def test_a_roles_step_is_the_span_of_its_calls():
    res = _summarize(DISCRETE)
    expected = _expected_steps()
    for src in res.sources:
        calls = _calls(Path(src.path))
        assert len(calls) == 1, src.ident.source
        stage, start, end = calls[0]
        (span,) = src.steps
        assert (span.start_ns, span.end_ns) == expected[span.step][ROLE_OF[stage]]
        assert span.start_ns <= start and end <= span.end_ns
    # the actor's step runs from its log-prob call to the end of its update, across two files
    actor = expected[2]["actor"]
    walls = {s.wall_ns for src in res.sources for s in src.steps if s.step == 2}
    assert actor[1] - actor[0] in walls


def _collect(src: Path, out: Path, work: Path) -> "pd.DataFrame":
    res = runner.invoke(app, ["collect", str(src), "-o", str(out), "--work", str(work), "--jobs", "1"],
                        env={"COLUMNS": "200"})
    assert res.exit_code == 0, res.output
    return pd.read_parquet(out / "summaries" / "phases.parquet")


def _owned(df: "pd.DataFrame", work: Path) -> "pd.DataFrame":
    """`df` with every pseudonym replaced by the owner's original: each WORK salts its own
    pseudonyms of a range name no public source writes (issue 39), so two collects are compared
    by the names their owner reads back from WORK's review list."""
    from verlprof.stages.scrub.provenance import REVIEW_NAME, read_review_map, reveal

    names = read_review_map(work / REVIEW_NAME)
    assert names, "a pseudonym was expected among the rows (the workload's own range names)"
    out = df.copy()
    for col in out.columns:
        if pd.api.types.is_string_dtype(out[col]) or isinstance(out[col].dtype, pd.CategoricalDtype):
            out[col] = out[col].astype(object).map(lambda v: reveal(v, names) if isinstance(v, str) else v)
    return out


def test_collect_of_renamed_series_gives_the_same_rows_and_role_steps(tmp_path):
    """collect identifies each report (its role from its stage range) and knows no name hint for
    `capture_0042.<k>`: the rows are those of verl's names, each role's step is the span of its
    calls in step 2, and its stages never sum past it."""
    from verlprof.pipeline.compare import process_stage_totals

    verl = _owned(_collect(DISCRETE, tmp_path / "o1", tmp_path / "w1"), tmp_path / "w1")
    renamed = _owned(_collect(_renamed(tmp_path, "capture_0042"), tmp_path / "o2", tmp_path / "w2"), tmp_path / "w2")
    cols = [c for c in verl.columns if c != "source"]
    key = ["phase", "role", "start_ns"]
    pd.testing.assert_frame_equal(verl[cols].sort_values(key).reset_index(drop=True),
                                  renamed[cols].sort_values(key).reset_index(drop=True))
    per = process_stage_totals(renamed)
    exp = _expected_steps()[2]
    for role, (lo, hi) in exp.items():
        mine = per[per["role"] == role]
        step = int(mine.loc[mine["stage"] == "step", "wall_ns"].iloc[0])
        stages = int(mine.loc[~mine["stage"].isin(["step", "other"]), "wall_ns"].sum())
        assert step >= hi - lo, role
        assert stages <= step, role
        raw = renamed[(renamed["role"] == role) & (renamed["depth"] == 0)]
        assert int(raw["wall_ns"].sum()) <= step, role   # unclipped ranges fit too
    actor = per[per["role"] == "actor"].set_index("stage")["wall_ns"]
    assert actor["other"] > 0   # the waiting between its log-prob call and its update


def test_capture_order_is_the_session_order(tmp_path):
    """Names that disagree with the reports' own order never decide it."""
    out = tmp_path / "x"
    out.mkdir()
    files = sorted(DISCRETE.glob("*.sqlite"), key=lambda p: int(p.name.split(".")[1]))
    for i, p in enumerate(files):
        shutil.copy(p, out / f"cap.{len(files) - i}.sqlite")
    res, ref = _summarize(out), _summarize(DISCRETE)
    spans = sorted((s.step, s.start_ns, s.end_ns) for src in res.sources for s in src.steps)
    assert spans == sorted((s.step, s.start_ns, s.end_ns) for src in ref.sources for s in src.steps)


def test_continuous_series_without_its_first_report_keeps_its_numbers(tmp_path):
    """One report per step (continuous mode), the first one not gathered, files renamed: the
    names' numbers agree with the session order, so the steps stay 2 and 3."""
    ray = fixtures_dir() / "h200-nsys-2025.3" / "ray-continuous"
    out = tmp_path / "y"
    out.mkdir()
    for k in (2, 3):
        shutil.copy(ray / f"worker_process_1983.{k}.sqlite", out / f"node_a.{k}.sqlite")
    res = _summarize(out)
    assert sorted(s.step for src in res.sources for s in src.steps) == [2, 3]
    assert {s.boundary for src in res.sources for s in src.steps} == {"capture_range"}
