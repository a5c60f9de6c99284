"""`verlprof summarize`: many runs side by side, deltas against a baseline, resume, bad bundles.

The bundles are built from the real H200 fixture (`whole_1873.sqlite`): its step-2 NVTX ranges
become phase rows and its step-2 kernels kernel rows, exactly as collect would summarize them,
then each run scales some stages/kernels by a known factor. Expected values are recomputed here
from the fixture rows, so nothing is hard-coded.
"""
from __future__ import annotations

import json
import shutil
import sqlite3
from pathlib import Path

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner
from testdata import fixtures_dir
from verlprof.pipeline import batch, compare
from verlprof.pipeline.cli import app
from verlprof.pipeline.executors import InlineExecutor, ProcessPoolExecutorBackend
from verlprof.stages.core.errors import VerlprofError
from verlprof.stages.core.phases import canonical_stage
from verlprof.stages.schema import arrow_schema

FIXTURES = fixtures_dir()
WHOLE = FIXTURES / "h200-nsys-2025.3" / "whole" / "whole_1873.sqlite"


# ----------------------------------------------------------------------------------------------
# Bundles from the real fixture
# ----------------------------------------------------------------------------------------------


def fixture_rows(sqlite: Path = WHOLE, step: int = 2) -> tuple[list[dict], list[dict]]:
    """Phase rows (NVTX push/pop ranges of one step, with parent/depth) and kernel rows of that step."""
    con = sqlite3.connect(f"file:{sqlite}?mode=ro", uri=True)
    try:
        ranges = con.execute(
            "SELECT e.start, e.end, COALESCE(e.text, s.value), e.globalTid FROM NVTX_EVENTS e "
            "LEFT JOIN StringIds s ON s.id = e.textId WHERE e.eventType IN (59, 60) AND e.end IS NOT NULL "
            "ORDER BY e.start").fetchall()
        steps = [r for r in ranges if r[2] == "step"]
        s0, s1, _, tid = steps[step - 1]
        kern = con.execute(
            "SELECT k.start, k.end, s.value FROM CUPTI_ACTIVITY_KIND_KERNEL k "
            "JOIN StringIds s ON s.id = k.shortName WHERE k.start >= ? AND k.start < ?", (s0, s1)).fetchall()
    finally:
        con.close()
    mine = [r for r in ranges if r[3] == tid and s0 <= r[0] and r[1] <= s1]
    phases, stack = [], []
    for start, end, name, _ in mine:
        while stack and stack[-1][1] <= start:
            stack.pop()
        inside = [k for k in kern if start <= k[0] < end]
        phases.append({
            "source": "whole_1873.sqlite", "source_kind": "nsys", "role": "actor", "rank": 0, "pid": 1873,
            "step": step, "phase": name, "stage": canonical_stage(name), "parent": stack[-1][2] if stack else None,
            "depth": len(stack), "start_ns": start, "wall_ns": end - start,
            "kernel_ns": sum(k[1] - k[0] for k in inside), "kernel_count": len(inside),
        })
        stack.append((start, end, name))
    by_name: dict[str, list[int]] = {}
    for ks, ke, name in kern:
        by_name.setdefault(name, []).append(ke - ks)
    kernels = [{
        "source": "whole_1873.sqlite", "source_kind": "nsys", "role": "actor", "rank": 0, "pid": 1873,
        "step": step, "phase": "step", "stage": "step", "kernel": name, "kernel_short": name[:40],
        "category": "other", "count": len(d), "total_ns": sum(d), "avg_ns": sum(d) / len(d),
        "min_ns": min(d), "max_ns": max(d), "median_ns": float(sorted(d)[len(d) // 2]),
    } for name, d in by_name.items()]
    return phases, kernels


@pytest.fixture(scope="module")
def base_rows() -> tuple[list[dict], list[dict]]:
    return fixture_rows()


def scaled(rows: list[dict], stage_factor: dict[str, float], rank: int = 0, rank_factor: float = 1.0) -> list[dict]:
    """Copy of phase rows of one rank with whole stages (and their nested ranges) scaled."""
    out = []
    for r in rows:
        f = rank_factor
        for name in _ancestry(rows, r):
            f *= stage_factor.get(canonical_stage(name), 1.0) if name != "step" else 1.0
        out.append({**r, "rank": rank, "pid": 1873 + rank, "wall_ns": int(round(r["wall_ns"] * f))})
    # The step grows by what its direct children grew (its own gaps scale with the rank only).
    for new, old in zip(out, rows):
        if old["phase"] == "step":
            grown = sum(n["wall_ns"] - int(round(o["wall_ns"] * rank_factor))
                        for n, o in zip(out, rows) if o["parent"] == "step")
            new["wall_ns"] = int(round(old["wall_ns"] * rank_factor)) + grown
    _lay_out(rows, out, rank_factor)
    return out


def _lay_out(old: list[dict], new: list[dict], rank_factor: float) -> None:
    """Move the scaled ranges so they still nest and follow each other as in the capture: a range
    starts where its previous sibling ended plus the old gap between them (scaled by the rank)."""
    kids: dict[int | None, list[int]] = {}
    stack: list[int] = []
    for i in sorted(range(len(old)), key=lambda i: old[i]["start_ns"]):
        while stack and old[stack[-1]]["start_ns"] + old[stack[-1]]["wall_ns"] <= old[i]["start_ns"]:
            stack.pop()
        kids.setdefault(stack[-1] if stack else None, []).append(i)
        stack.append(i)

    def place(parent: int | None) -> None:
        o_at = old[parent]["start_ns"] if parent is not None else None
        n_at = new[parent]["start_ns"] if parent is not None else None
        for i in kids.get(parent, []):
            if o_at is None:
                o_at = n_at = old[i]["start_ns"]
            n_at += int(round((old[i]["start_ns"] - o_at) * rank_factor))
            new[i]["start_ns"] = n_at
            place(i)
            o_at, n_at = old[i]["start_ns"] + old[i]["wall_ns"], n_at + new[i]["wall_ns"]

    place(None)


def _ancestry(rows: list[dict], row: dict) -> list[str]:
    """The names of a row and its ancestors, deduplicated by stage (so a factor applies once)."""
    parent_of = {r["phase"]: r["parent"] for r in rows}
    names, stages, cur = [], set(), row["phase"]
    while cur is not None:
        st = canonical_stage(cur)
        if st not in stages:
            names.append(cur)
            stages.add(st)
        cur = parent_of.get(cur)
    return names


def write_bundle(folder: Path, phases: list[dict], kernels: list[dict], *, model: str = "/models/Qwen2.5-0.5B",
                 tool: str = "nsys", manifest_extra: dict | None = None) -> Path:
    summaries = folder / "summaries"
    summaries.mkdir(parents=True)
    for name, rows in (("phases", phases), ("kernels", kernels), ("steps", [])):
        schema = arrow_schema(name)
        table = pa.Table.from_pylist(rows, schema=schema) if rows else schema.empty_table()
        pq.write_table(table, summaries / f"{name}.parquet")
    manifest = {
        "verlprof_version": "0.1.0", "created": "2026-12-01T10:00:00+00:00",
        "config": {"tool": tool, "profiled_steps": [1, 2, 3], "roles": ["actor"], "world_size": 2,
                   "model_path": model, "verl_version": "0.9.1"},
        "window": {"step": 2, "reason": "steady state"},
        "artifacts": [{"kind": "nsys_sqlite", "rel": "whole_1873.sqlite", "role": "actor", "rank": 0,
                       "pid": 1873, "host": "a1b2c3", "step": None}],
        **(manifest_extra or {}),
    }
    (folder / "manifest.json").write_text(json.dumps(manifest))
    return folder


#: run -> (stage factors, kernel factor of the heaviest kernel)
RUNS = {
    "base": ({}, 1.0),
    "slow_gen": ({"generation": 1.5}, 1.0),
    "fast_update": ({"actor_update": 0.8, "reward": 2.0}, 3.0),
}


def make_runs(root: Path, base_rows: tuple[list[dict], list[dict]]) -> dict[str, Path]:
    """Three bundles, two ranks each (rank 1 is 10% slower), with known stage/kernel factors."""
    phases, kernels = base_rows
    heavy = max(kernels, key=lambda k: k["total_ns"])["kernel"]
    paths = {}
    for run, (factors, kf) in RUNS.items():
        rows = scaled(phases, factors, rank=0) + scaled(phases, factors, rank=1, rank_factor=1.1)
        ks = [{**k, "total_ns": int(k["total_ns"] * (kf if k["kernel"] == heavy else 1.0))} for k in kernels]
        paths[run] = write_bundle(root / run, rows, ks, model=f"/models/{run}-7B")
    return paths


def expected_stage(rows: list[dict], stage: str, factors: dict[str, float]) -> int:
    """Independent expectation: the outermost range of `stage`, scaled, on the slower rank 1."""
    outer = [r for r in rows if r["stage"] == stage and (r["parent"] is None or canonical_stage(r["parent"]) != stage)]
    f = 1.1 * (factors.get(stage, 1.0) if stage != "step" else 1.0)
    return sum(int(round(r["wall_ns"] * f)) for r in outer)


# ----------------------------------------------------------------------------------------------
# Tests
# ----------------------------------------------------------------------------------------------


def test_three_runs_give_the_right_deltas(tmp_path: Path, base_rows) -> None:
    paths = make_runs(tmp_path / "in", base_rows)
    res = batch.summarize_runs(list(paths.values()), tmp_path / "out", executor=InlineExecutor(),
                               work_dir=tmp_path / "work")
    assert [r.status for r in res.runs] == ["done"] * 3 and res.baseline == "base"
    cmp = pd.read_parquet(tmp_path / "out" / "compare.parquet")
    wall = cmp[(cmp.metric == "wall_ns") & (cmp.role == "actor")]
    phases = base_rows[0]
    for stage in ("generation", "reward", "old_log_prob", "ref_log_prob", "advantage", "actor_update"):
        base = expected_stage(phases, stage, {})
        for run, (factors, _) in RUNS.items():
            row = wall[(wall.stage == stage) & (wall.run == run)].iloc[0]
            want = expected_stage(phases, stage, factors)
            assert abs(row.value_ns - want) <= 2, (stage, run)
            assert row.baseline_ns == pytest.approx(base, abs=2)
            assert row.delta_ns == row.value_ns - row.baseline_ns
            assert row.delta_rel == pytest.approx((want - base) / base, rel=1e-6, abs=1e-6)
    gen = wall[(wall.stage == "generation") & (wall.run == "slow_gen")].iloc[0]
    assert gen.delta_rel == pytest.approx(0.5, abs=1e-6)
    # The step holds everything: its growth is the sum of its children's growth.
    step = wall[(wall.stage == "step") & (wall.run == "slow_gen")].iloc[0]
    assert step.delta_ns == pytest.approx(gen.delta_ns, rel=0.01)

    runs = pd.read_parquet(tmp_path / "out" / "runs.parquet")
    assert list(runs.run) == list(RUNS) and list(runs.model) == ["base-7B", "slow_gen-7B", "fast_update-7B"]
    assert set(runs.world_size) == {2} and list(runs.tool) == ["nsys"] * 3 and list(runs.window_step) == [2] * 3
    assert list(runs.roles.iloc[0]) == ["actor"] and list(runs.profiled_steps.iloc[0]) == [1, 2, 3]
    assert runs.bundle_hash.nunique() == 3
    stacked = pq.read_table(tmp_path / "out" / "phases.parquet")
    assert stacked.column_names[0] == "run" and stacked.num_rows == 3 * 2 * len(phases)
    assert stacked.schema.field("wall_ns").type == pa.int64()

    kc = pd.read_parquet(tmp_path / "out" / "kernel_compare.parquet")
    heavy = max(base_rows[1], key=lambda k: k["total_ns"])
    top = kc[kc.run == "fast_update"].iloc[0]
    assert top.kernel == heavy["kernel"] and top.delta_ns == pytest.approx(2 * heavy["total_ns"], abs=2)
    assert kc[kc.run == "slow_gen"].empty   # unchanged kernels are not "changes"


def test_missing_and_corrupt_bundles_are_skipped(tmp_path: Path, base_rows) -> None:
    paths = make_runs(tmp_path / "in", base_rows)
    broken = shutil.copytree(paths["slow_gen"], tmp_path / "in" / "broken")
    data = (broken / "summaries" / "phases.parquet").read_bytes()
    (broken / "summaries" / "phases.parquet").write_bytes(data[: len(data) // 2])
    inputs = [paths["base"], tmp_path / "in" / "nope", broken, paths["fast_update"]]
    res = batch.summarize_runs(inputs, tmp_path / "out", executor=InlineExecutor(), work_dir=tmp_path / "work")
    st = {r.run: r for r in res.runs}
    assert [r.status for r in res.runs] == ["done", "skipped", "skipped", "done"]
    assert "nope: does not exist" in st["nope"].detail
    assert "phases.parquet" in st["broken"].detail and "Parquet" in st["broken"].detail
    assert all("\n" not in r.detail for r in res.runs)
    runs = pd.read_parquet(tmp_path / "out" / "runs.parquet")
    assert list(runs.run) == ["base", "fast_update"]
    assert set(pd.read_parquet(tmp_path / "out" / "compare.parquet").run) == {"base", "fast_update"}


def _corrupt(bundle: Path, how: str) -> str:
    """Damage one bundle; return a word the one-line error must contain."""
    s = bundle / "summaries"
    if how == "manifest_not_json":
        (bundle / "manifest.json").write_text("{not json")
        return "manifest.json"
    if how == "manifest_is_list":
        (bundle / "manifest.json").write_text("[1, 2]")
        return "manifest.json"
    if how == "empty_parquet":
        (s / "kernels.parquet").write_bytes(b"")
        return "kernels.parquet"
    if how == "not_parquet":
        (s / "phases.parquet").write_bytes(b"SQLite format 3\x00" + b"\x00" * 100)
        return "phases.parquet"
    if how == "no_phases":
        (s / "phases.parquet").unlink()
        return "phases.parquet"
    if how == "wrong_column_type":
        pq.write_table(pa.table({"phase": ["gen"], "wall_ns": ["slow"]}), s / "phases.parquet")
        return "wall_ns"
    if how == "missing_column":
        pq.write_table(pa.table({"phase": ["gen"], "gpu_busy_ns": [1]}), s / "phases.parquet")
        return "missing column(s) wall_ns"
    if how == "zero_phase_rows":
        pq.write_table(arrow_schema("phases").empty_table(), s / "phases.parquet")
        return "no phase rows"
    if how == "summaries_without_manifest":
        (bundle / "manifest.json").unlink()
        return "no manifest.json"
    if how == "a_file":
        shutil.rmtree(bundle)
        bundle.write_bytes(b"PK\x03\x04")
        return "not a folder"
    raise AssertionError(how)


CORRUPTIONS = ["manifest_not_json", "manifest_is_list", "empty_parquet", "not_parquet", "no_phases",
               "wrong_column_type", "missing_column", "zero_phase_rows", "summaries_without_manifest", "a_file"]


@pytest.mark.parametrize("how", CORRUPTIONS)
def test_each_kind_of_bad_bundle_gives_one_line_naming_the_file(tmp_path: Path, base_rows, how: str) -> None:
    good = write_bundle(tmp_path / "good", base_rows[0], base_rows[1])
    bad = shutil.copytree(good, tmp_path / "bad")
    word = _corrupt(bad, how)
    res = batch.summarize_runs([good, bad], tmp_path / "out", executor=InlineExecutor(), work_dir=tmp_path / "w")
    assert [r.status for r in res.runs] == ["done", "skipped"]
    detail = res.runs[1].detail
    assert word in detail and str(tmp_path / "bad") in detail and "\n" not in detail
    assert not [p for p in (tmp_path / "out").iterdir() if ".tmp-" in p.name]


def test_rerun_reuses_complete_results_and_redoes_changed_ones(tmp_path: Path, base_rows) -> None:
    paths = make_runs(tmp_path / "in", base_rows)
    inputs = list(paths.values())
    first = batch.summarize_runs(inputs, tmp_path / "out", executor=InlineExecutor(), work_dir=tmp_path / "work")
    before = pd.read_parquet(tmp_path / "out" / "compare.parquet")

    class Refuses:
        name = "refuses"

        def map_unordered(self, fn, items, options):
            raise AssertionError(f"nothing should run, got {len(items)} items")

    again = batch.summarize_runs(inputs, tmp_path / "out", executor=Refuses(), work_dir=tmp_path / "work")
    assert [r.status for r in again.runs] == ["cached"] * 3
    pd.testing.assert_frame_equal(before, pd.read_parquet(tmp_path / "out" / "compare.parquet"))
    assert [r.status for r in first.runs] == ["done"] * 3

    # A changed bundle has another content hash: only it is redone.
    shutil.rmtree(paths["slow_gen"])
    rows = scaled(base_rows[0], {"generation": 3.0}) + scaled(base_rows[0], {"generation": 3.0}, 1, 1.1)
    write_bundle(paths["slow_gen"], rows, base_rows[1], model="/models/slow_gen-7B")
    third = batch.summarize_runs(inputs, tmp_path / "out", executor=InlineExecutor(), work_dir=tmp_path / "work")
    assert [r.status for r in third.runs] == ["cached", "done", "cached"]
    cmp = pd.read_parquet(tmp_path / "out" / "compare.parquet")
    gen = cmp[(cmp.metric == "wall_ns") & (cmp.stage == "generation") & (cmp.run == "slow_gen")].iloc[0]
    assert gen.delta_rel == pytest.approx(2.0, abs=1e-6)

    # A cached result whose files vanished (crash, cleanup) is redone, not trusted.
    for p in (tmp_path / "work" / "summarize").glob("*/phases.arrow"):
        p.unlink()
    fourth = batch.summarize_runs(inputs, tmp_path / "out", executor=InlineExecutor(), work_dir=tmp_path / "work")
    assert [r.status for r in fourth.runs] == ["done"] * 3


def test_process_pool_gives_the_same_outputs_as_inline(tmp_path: Path, base_rows) -> None:
    paths = make_runs(tmp_path / "in", base_rows)
    batch.summarize_runs(list(paths.values()), tmp_path / "a", executor=InlineExecutor(), work_dir=tmp_path / "wa")
    batch.summarize_runs(list(paths.values()), tmp_path / "b", executor=ProcessPoolExecutorBackend(2),
                         work_dir=tmp_path / "wb")
    for name in ("runs", "phases", "kernels", "compare", "kernel_compare"):
        assert pq.read_table(tmp_path / "a" / f"{name}.parquet").equals(pq.read_table(tmp_path / "b" / f"{name}.parquet")), name


def test_baseline_choice(tmp_path: Path, base_rows) -> None:
    paths = make_runs(tmp_path / "in", base_rows)
    res = batch.summarize_runs(list(paths.values()), tmp_path / "out", baseline="slow_gen",
                               executor=InlineExecutor(), work_dir=tmp_path / "w")
    gen = res.compare[(res.compare.metric == "wall_ns") & (res.compare.stage == "generation")]
    by_run = dict(zip(gen.run, gen.delta_rel))
    assert by_run["slow_gen"] == 0 and by_run["base"] == pytest.approx(1 / 1.5 - 1, abs=1e-6)
    assert batch.summarize_runs(list(paths.values()), tmp_path / "o2", baseline="3", executor=InlineExecutor(),
                                work_dir=tmp_path / "w").baseline == "fast_update"
    with pytest.raises(VerlprofError, match="--baseline 'nope' is not among"):
        batch.summarize_runs(list(paths.values()), tmp_path / "o3", baseline="nope", executor=InlineExecutor(),
                             work_dir=tmp_path / "w")


def test_run_ids_stay_unique_and_readable() -> None:
    assert batch.run_ids(["a/out", "b/out", "c/x"]) == ["a/out", "b/out", "x"]
    assert batch.run_ids(["r1", "r1/"]) == ["r1", "r1-2"]


def test_nested_unknown_ranges_are_not_counted_twice() -> None:
    rows = [
        {"phase": "step", "parent": None, "wall_ns": 100, "role": "actor", "rank": 0, "step": 2, "source_kind": "nsys"},
        {"phase": "update_actor", "parent": "step", "wall_ns": 60, "role": "actor", "rank": 0, "step": 2, "source_kind": "nsys"},
        {"phase": "actor_update", "parent": "update_actor", "wall_ns": 59, "role": "actor", "rank": 0, "step": 2, "source_kind": "nsys"},
        {"phase": "forward", "parent": "actor_update", "wall_ns": 30, "role": "actor", "rank": 0, "step": 2, "source_kind": "nsys"},
        {"phase": "my_hook", "parent": "step", "wall_ns": 7, "role": "actor", "rank": 0, "step": 2, "source_kind": "nsys"},
        # the same process seen by a torch trace: ignored when nsys rows exist
        {"phase": "update_actor", "parent": None, "wall_ns": 999, "role": "actor", "rank": 0, "step": 2, "source_kind": "torch"},
    ]
    for r in rows:
        r["stage"] = canonical_stage(r["phase"])
    t = compare.stage_totals(rows).set_index("stage")
    # other = the step minus the attributed stages (my_hook is not a stage of its own)
    assert t.loc["actor_update", "wall_ns"] == 60 and t.loc["other", "wall_ns"] == 40 and t.loc["step", "wall_ns"] == 100
    assert set(t["source_kind"]) == {"nsys"}


def test_cli_summarize_table_html_and_exit_codes(tmp_path: Path, base_rows) -> None:
    paths = make_runs(tmp_path / "in", base_rows)
    runner = CliRunner()
    (tmp_path / "missing").mkdir()                   # there, but holds nothing to summarize
    args = ["summarize", *map(str, paths.values()), str(tmp_path / "missing"), "-o", str(tmp_path / "out"),
            "--html", "-j", "1", "--work", str(tmp_path / "w")]
    res = runner.invoke(app, args, env={"COLUMNS": "200"})
    assert res.exit_code == 3, res.output            # outputs written, one input skipped
    assert "generation" in res.output and "+50.0%" in res.output and "skipped" in res.output
    assert "4 runs: 3 summarized, 0 incomplete, 1 skipped: missing" in res.output
    page = (tmp_path / "out" / "report.html").read_text()
    assert "<svg" in page and "slow_gen" in page and "http" not in page and "<script" not in page
    bad = runner.invoke(app, ["summarize", str(tmp_path / "missing"), "-o", str(tmp_path / "o2"),
                              "--work", str(tmp_path / "w")])
    assert bad.exit_code != 0 and isinstance(bad.exception, VerlprofError) and bad.exception.exit_code == 4
    assert "the input could not be summarized" in str(bad.exception)
    gone = runner.invoke(app, ["summarize", str(tmp_path / "nope"), "-o", str(tmp_path / "o3"),
                               "--work", str(tmp_path / "w")])
    assert isinstance(gone.exception, VerlprofError) and gone.exception.exit_code == 2   # as `collect /nope`
    assert str(gone.exception) == f"{tmp_path / 'nope'}: no such file or folder"
    assert not (tmp_path / "o3").exists()


def test_raw_run_folder_is_collected_first(tmp_path: Path, base_rows) -> None:
    raw = tmp_path / "raw_run"
    raw.mkdir()
    shutil.copy(FIXTURES / "h200-nsys-2025.3" / "ray-continuous" / "worker_process_1983.2.sqlite", raw)
    good = write_bundle(tmp_path / "good", base_rows[0], base_rows[1])
    res = batch.summarize_runs([good, raw], tmp_path / "out", executor=InlineExecutor(), work_dir=tmp_path / "w")
    collected = list((tmp_path / "w" / "summarize" / "collected").glob("*/manifest.json"))
    assert len(collected) == 1                       # collect ran, into the work dir (never into OUT)
    arts = json.loads(collected[0].read_text())["artifacts"]
    assert [a["rel"] for a in arts] == ["worker_process_1983.2.sqlite"]
    assert raw.is_dir() and sorted(p.name for p in raw.iterdir()) == ["worker_process_1983.2.sqlite"]  # untouched
    run = res.runs[1]
    if run.status == "skipped":                      # collect's summaries are still being written
        assert run.detail.startswith(f"{raw}: collected, but") and "\n" not in run.detail
    else:
        assert pd.read_parquet(tmp_path / "out" / "runs.parquet").run.tolist() == ["good", "raw_run"]


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(cut=st.floats(0, 1), flips=st.lists(st.tuples(st.floats(0, 1), st.integers(0, 255)), max_size=4),
       target=st.sampled_from(["summaries/phases.parquet", "summaries/kernels.parquet", "manifest.json"]))
def test_fuzzed_bundles_never_crash_the_batch(base_rows, cut: float, flips, target: str) -> None:
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        good = write_bundle(root / "good", base_rows[0][:8], base_rows[1][:5])
        bad = shutil.copytree(good, root / "bad")
        data = bytearray((bad / target).read_bytes())
        for pos, val in flips:
            if data:
                data[int(pos * (len(data) - 1))] = val
        (bad / target).write_bytes(bytes(data[: max(0, int(len(data) * cut))]) if cut < 1 else bytes(data))
        res = batch.summarize_runs([good, bad], root / "out", executor=InlineExecutor(), work_dir=root / "w")
        assert res.runs[0].status == "done"
        r = res.runs[1]
        assert r.status in ("done", "skipped")
        if r.status == "skipped":
            assert "\n" not in r.detail and str(bad) in r.detail


_json = st.recursive(st.none() | st.booleans() | st.integers() | st.text(max_size=8),
                     lambda c: st.lists(c, max_size=3) | st.dictionaries(st.text(max_size=8), c, max_size=3), max_leaves=12)


@settings(max_examples=60, deadline=None)
@given(manifest=st.dictionaries(st.sampled_from(["config", "artifacts", "window", "created", "verlprof_version"]),
                                _json | st.fixed_dictionaries({}, optional={
                                    "roles": _json, "profiled_steps": _json, "world_size": _json,
                                    "model_path": _json, "tool": _json, "trainer": _json})))
def test_run_metadata_tolerates_any_manifest_shape(manifest) -> None:
    empty = arrow_schema("phases").empty_table()
    meta = batch.run_metadata(manifest, empty, empty)
    row = pa.Table.from_pylist([{"run": "r", "input": "i", "bundle_hash": "h", **meta}],
                               schema=batch.RUNS_SCHEMA).to_pylist()[0]
    # every runs.parquet column is filled, and what the manifest does say comes through as said
    assert set(batch.RUNS_SCHEMA.names) - {"run", "input", "bundle_hash"} <= set(meta)
    assert row["phase_rows"] == 0 and row["kernel_rows"] == 0
    arts = manifest.get("artifacts")
    assert row["artifacts"] == (sum(isinstance(a, dict) for a in arts) if isinstance(arts, list) else 0)
    failed = sum(isinstance(a, dict) and a.get("status") == "failed" for a in arts) if isinstance(arts, list) else 0
    assert row["failed_artifacts"] == failed == len(meta["failed"])
    created = manifest.get("created")
    if isinstance(created, str) and created:
        assert row["date"] == created
    window = manifest.get("window")
    if isinstance(window, dict) and isinstance(window.get("step"), int) and not isinstance(window.get("step"), bool) \
            and abs(window["step"]) < 2**31:
        assert row["window_step"] == window["step"]
    if not isinstance(manifest.get("config"), dict) or not manifest.get("config"):
        assert row["config_hash"] is None and row["tool"] is None
