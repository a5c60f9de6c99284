"""nsys summaries against NVIDIA's own numbers on the real H200 fixture.

Every expected value comes from NVIDIA's tools (golden CSV/Parquet made by nsys 2025.3, or
`nsys stats` run here) or straight from the export's tables: nothing is a number we computed.
"""
from __future__ import annotations

import csv
import shutil
import sqlite3
import subprocess
from pathlib import Path

import pandas as pd
import pyarrow.parquet as pq
import pytest
from testdata import fixtures_dir
from verlprof.pipeline.stage_runs import summarize_sources
from verlprof.stages.schema import SCHEMAS, arrow_schema
from verlprof.stages.summarize.kernel_category import CATEGORIES
from nsys_summaries import kernel_summary, project_ranges, summarize_nsys
from verlprof.stages.summarize import render_phase_table, write_summaries
from verlprof.stages.summarize.types import SummarizeOptions
from verlprof.stages.window.steps import identity_from_path

FIXTURES = fixtures_dir()
NSYS = FIXTURES / "h200-nsys-2025.3"
WHOLE = NSYS / "whole" / "whole_1873.sqlite"
GOLDEN = NSYS / "whole" / "golden"
RAY = NSYS / "ray-continuous"



def _nvtx(path: Path) -> pd.DataFrame:
    """Start/end NVTX ranges of an export, straight from SQL."""
    with sqlite3.connect(f"file:{path}?mode=ro", uri=True) as con:
        return pd.read_sql(
            "SELECT e.start, e.end, s.value AS name FROM NVTX_EVENTS e JOIN StringIds s ON s.id = e.textId "
            "WHERE e.eventType = 60 ORDER BY e.start", con)


@pytest.fixture(scope="module")
def whole_rows():
    return summarize_nsys(WHOLE)


def test_kernel_totals_equal_nsys_stats_gpukernsum():
    ours = {r["name"]: r for r in kernel_summary(WHOLE)}
    with open(GOLDEN / "nsys-stats_cuda_gpu_kern_sum.csv", newline="") as f:
        golden = list(csv.DictReader(f))
    assert len(golden) == len(ours)
    for g in golden:
        o = ours[g["Name"]]
        assert o["count"] == int(g["Instances"])
        assert o["total_ns"] == int(g["Total Time (ns)"])
        assert o["min_ns"] == int(g["Min (ns)"]) and o["max_ns"] == int(g["Max (ns)"])
        assert o["median_ns"] == pytest.approx(float(g["Med (ns)"]))
        assert o["avg_ns"] == pytest.approx(float(g["Avg (ns)"]), abs=0.06)


def test_kernel_totals_by_short_name_equal_nsys_recipe():
    ours = {r["name"]: r for r in kernel_summary(WHOLE, by="short")}
    golden = pd.read_parquet(GOLDEN / "nsys-recipe_cuda_gpu_kern_sum" / "all_stats.parquet")
    assert set(golden.index) == set(ours)
    for name, g in golden.iterrows():
        assert (ours[name]["count"], ours[name]["total_ns"]) == (g["Count"], g["Sum"])
        assert (ours[name]["min_ns"], ours[name]["max_ns"]) == (g["Min"], g["Max"])


def test_projection_equals_nsys_recipe_nvtx_gpu_proj_sum():
    ours = pd.DataFrame(project_ranges(WHOLE))
    ours["dur"] = ours["projected_duration_ns"]
    golden = pd.read_parquet(GOLDEN / "nsys-recipe_nvtx_gpu_proj_sum" / "all_stats.parquet")
    agg = ours.groupby("name").agg(count=("dur", "size"), mn=("dur", "min"), mx=("dur", "max"),
                                   sm=("dur", "sum"), cpu=("orig_duration_ns", "sum"))
    assert set(agg.index) == set(golden.index)
    for name, g in golden.iterrows():
        a = agg.loc[name]
        assert (a["count"], a["mn"], a["mx"], a["sm"]) == (g["Count"], g["Min"], g["Max"], g["Sum"])
        assert a["cpu"] == pytest.approx(g["Sum of NVTX Ranges on CPU"], rel=1e-12)


@pytest.mark.nsys
def test_projection_equals_local_nsys_stats_nvtxgpuproj(tmp_path):
    exe = shutil.which("nsys")
    if not exe:
        pytest.skip("nsys is not installed")
    db = tmp_path / "whole.sqlite"
    shutil.copyfile(WHOLE, db)
    db.chmod(0o644)
    subprocess.run([exe, "stats", "--report", "nvtxgpuproj", "--format", "csv", "-o", str(tmp_path / "proj"), str(db)],
                   check=True, capture_output=True, timeout=120)
    golden = pd.read_csv(tmp_path / "proj_nvtxgpuproj.csv")
    assert len(golden) > 0
    ours = pd.DataFrame(project_ranges(WHOLE)).set_index(["name", "orig_start_ns"])
    assert len(ours) == len(golden)
    for g in golden.itertuples(index=False):
        o = ours.loc[(g.Name, g._3)]  # Orig Start (ns)
        assert o["projected_start_ns"] == g._1
        assert o["projected_duration_ns"] == g._2
        assert o["orig_duration_ns"] == g._4
        assert o["num_gpu_ops"] == g.NumGPUOps
        assert o["pid"] == g.PID and o["tid"] == g.TID


def test_step2_phase_walls_equal_nvtx_ranges(whole_rows):
    nv = _nvtx(WHOLE)
    steps = nv[nv["name"] == "step"].reset_index(drop=True)
    s2 = steps.iloc[1]
    inside = nv[(nv["start"] >= s2["start"]) & (nv["start"] <= s2["end"])]
    phases = pd.DataFrame(whole_rows["phases"])
    named = phases[phases["phase"] != "(unattributed)"]
    assert set(named["step"]) == {2}
    assert sorted(named["phase"]) == sorted(inside["name"])
    for row in inside.itertuples():
        got = named[named["phase"] == row.name]
        assert int(got["wall_ns"].iloc[0]) == row.end - row.start


def test_phase_numbers_are_consistent(whole_rows):
    ph = pd.DataFrame(whole_rows["phases"]).set_index("phase")
    k = pd.DataFrame(whole_rows["kernels"])
    # kernels rows (innermost phase) add up to the phase's kernel totals; leaves have no children
    for leaf in ("generate_sequences", "actor_compute_log_prob", "ref_compute_log_prob", "actor_update", "reward"):
        part = k[k["phase"] == leaf]
        assert part["count"].sum() == ph.loc[leaf, "kernel_count"]
        assert part["total_ns"].sum() == ph.loc[leaf, "kernel_ns"]
    named = k[k["phase"] != "(unattributed)"]
    assert named["count"].sum() == ph.loc["step", "kernel_count"]
    for name, row in ph.iterrows():
        assert 0 <= row["gpu_busy_ns"] <= row["kernel_ns"] + row["memcpy_ns"] + row["memset_ns"]
        assert row["exposed_comm_ns"] <= row["comm_ns"]
        if name != "(unattributed)":
            assert row["mem_peak_bytes"] > 0
            assert row["idle_ns"] == max(0, row["wall_ns"] - row["gpu_busy_ns"])
    assert ph.loc["gen", "gpu_busy_ns"] >= ph.loc["generate_sequences", "gpu_busy_ns"]


def test_step2_kernel_counts_equal_projection_counts(whole_rows):
    """nvtxgpuproj's NumGPUOps of each step-2 range = kernels + memcpys + memsets we attributed."""
    proj = pd.DataFrame(project_ranges(WHOLE))
    nv = _nvtx(WHOLE)
    s2 = nv[nv["name"] == "step"].iloc[1]
    proj = proj[(proj["orig_start_ns"] >= s2["start"]) & (proj["orig_start_ns"] <= s2["end"])]
    ph = pd.DataFrame(whole_rows["phases"]).set_index("phase")
    with sqlite3.connect(f"file:{WHOLE}?mode=ro", uri=True) as con:
        for row in proj.itertuples():
            lo, hi = row.orig_start_ns, row.orig_start_ns + row.orig_duration_ns
            copies = con.execute(
                "SELECT count(*) FROM (SELECT correlationId FROM CUPTI_ACTIVITY_KIND_MEMCPY UNION ALL "
                "SELECT correlationId FROM CUPTI_ACTIVITY_KIND_MEMSET) o JOIN CUPTI_ACTIVITY_KIND_RUNTIME r "
                "USING (correlationId) WHERE r.start >= ? AND r.end <= ? AND r.globalTid = 281506400438097",
                (lo, hi)).fetchone()[0]
            assert ph.loc[row.name, "kernel_count"] + copies == row.num_gpu_ops


def test_ray_continuous_chooses_capture_range_2():
    files = sorted(RAY.glob("*.sqlite"))
    res = summarize_sources([(p, identity_from_path(p)) for p in files])
    assert res.choice.step == 2 and not res.errors
    chosen = [r for r in res.rows["steps"] if r["chosen"]]
    assert [r["source"] for r in chosen] == ["worker_process_1983.2.sqlite"]
    assert {r["source"] for r in res.rows["phases"]} == {"worker_process_1983.2.sqlite"}
    nv = _nvtx(RAY / "worker_process_1983.2.sqlite")
    ph = pd.DataFrame(res.rows["phases"])
    named = ph[ph["phase"] != "(unattributed)"].set_index("phase")
    assert sorted(named.index) == sorted(nv["name"])
    for row in nv.itertuples():
        assert named.loc[row.name, "wall_ns"] == row.end - row.start
    # absolute time: the file's own session start + its relative NVTX start
    with sqlite3.connect(f"file:{RAY / 'worker_process_1983.2.sqlite'}?mode=ro", uri=True) as con:
        t0 = con.execute("SELECT utcEpochNs FROM TARGET_INFO_SESSION_START_TIME").fetchone()[0]
    step_row = nv[nv["name"] == "step"].iloc[0]
    assert named.loc["step", "start_ns"] == t0 + step_row["start"]


def test_parallel_pool_gives_the_same_rows():
    from verlprof.pipeline.executors import ProcessPoolExecutorBackend

    items = [(p, identity_from_path(p)) for p in sorted(RAY.glob("*.sqlite"))] + [(WHOLE, identity_from_path(WHOLE))]
    inline = summarize_sources(items)
    pooled = summarize_sources(items, executor=ProcessPoolExecutorBackend(2))
    key = lambda r: (r["source"], r["phase"])  # noqa: E731
    assert sorted(inline.rows["phases"], key=key) == sorted(pooled.rows["phases"], key=key)
    assert len(inline.rows["steps"]) == 6


def test_write_summaries_parquet_schema_and_metadata(whole_rows, tmp_path):
    meta = {"verlprof.version": "test", "verlprof.inputs": '{"whole_1873.sqlite": "abc"}'}
    paths = write_summaries(whole_rows, tmp_path / "summaries", meta)
    assert set(paths) == set(SCHEMAS)
    for name, p in paths.items():
        t = pq.read_table(p)
        assert t.schema.equals(arrow_schema(name, meta), check_metadata=False)
        kv = {k.decode(): v.decode() for k, v in t.schema.metadata.items()}
        assert kv["verlprof.inputs"] == meta["verlprof.inputs"] and kv["verlprof.schema"] == name
        assert t.num_rows == len(whole_rows.get(name, []))  # ranks: cross-rank rows come from collect
    assert not [p for p in (tmp_path / "summaries").iterdir() if ".tmp-" in p.name]


def test_top_kernels_and_other_row_add_up():
    rows = summarize_nsys(WHOLE, options=SummarizeOptions(top=3))["kernels"]
    k = pd.DataFrame(rows)
    full = pd.DataFrame(summarize_nsys(WHOLE)["kernels"])
    for phase, part in k.groupby("phase"):
        assert (part["kernel"] != "other").sum() <= 3
        assert part["total_ns"].sum() == full[full["phase"] == phase]["total_ns"].sum()
        assert part["count"].sum() == full[full["phase"] == phase]["count"].sum()
    assert set(k["category"]) <= set(CATEGORIES)


def test_inputs_are_not_modified(tmp_path):
    db = tmp_path / "w.sqlite"
    shutil.copyfile(WHOLE, db)
    db.chmod(0o444)
    before = (db.read_bytes(), db.stat().st_mtime_ns)
    summarize_nsys(db)
    project_ranges(db)
    assert (db.read_bytes(), db.stat().st_mtime_ns) == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["w.sqlite"]  # no journal, no index file


def test_cpu_only_export_has_zero_gpu_columns(tmp_path):
    """An export without CUDA tables (CPU-only NVTX) summarizes with zero GPU numbers."""
    db = tmp_path / "cpu.sqlite"
    shutil.copyfile(WHOLE, db)
    db.chmod(0o644)
    with sqlite3.connect(db) as con:
        for (t,) in con.execute("SELECT name FROM sqlite_master WHERE type='table' AND "
                                "(name LIKE 'CUPTI%' OR name LIKE 'CUDA%')").fetchall():
            con.execute(f"DROP TABLE {t}")
    rows = summarize_nsys(db)
    ph = pd.DataFrame(rows["phases"])
    assert len(ph) == len(pd.DataFrame(summarize_nsys(WHOLE)["phases"])) - 1  # no unattributed row
    assert (ph[["gpu_busy_ns", "kernel_ns", "kernel_count", "memcpy_ns", "api_ns"]] == 0).all().all()
    assert ph["mem_peak_bytes"].isna().all()
    assert rows["kernels"] == []


def test_render_phase_table_lists_phases(whole_rows):
    import io

    from rich.console import Console

    buf = io.StringIO()
    render_phase_table(whole_rows["phases"], Console(file=buf, width=160))
    text = buf.getvalue()
    for name in ("generate_sequences", "actor_update", "(unattributed)"):
        assert name in text


def test_call_map_packed_and_wide_layouts_agree():
    """The packed (key|range in one int64) and the two-array fallback give the same lookups."""
    import numpy as np
    from verlprof.stages.summarize.projection import CallMap

    rng = np.random.default_rng(7)
    keys = rng.choice(1 << 34, size=5000, replace=False).astype(np.int64)
    ranges = rng.integers(0, 900, size=5000).astype(np.int64)
    probe = np.concatenate([keys[::3], rng.integers(0, 1 << 34, size=500)])
    expect = dict(zip(keys.tolist(), ranges.tolist()))
    for n_ranges in (900, 1 << 40):  # the second forces the two-array layout
        m = CallMap(n_ranges, 3)
        assert m.packed_ok == (n_ranges == 900)
        half = keys.size // 2
        m.add(keys[half:], ranges[half:])
        m.add(keys[:half], ranges[:half])
        m.finish()
        pos, found = m.find(probe)
        assert found.tolist() == [k in expect for k in probe.tolist()]
        assert m.range_at(pos[found]).tolist() == [expect[k] for k in probe[found].tolist()]


def test_several_processes_in_one_export(tmp_path, whole_rows):
    """The fixture replicated into a second process (bench/make_big_sqlite.py): every process
    gets its own phases, equal to the single-process numbers."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("make_big", Path(__file__).resolve().parents[1] / "bench" / "make_big_sqlite.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    db = mod.build(tmp_path / "two.sqlite", target_mb=2 * WHOLE.stat().st_size / 1e6, processes=2, src=WHOLE)
    rows = summarize_nsys(db)
    ph = pd.DataFrame(rows["phases"])
    assert sorted(ph["pid"].unique()) == [1873, 1874]
    drop = ["source", "pid", "start_ns", "rank", "rank_source"]
    base = pd.DataFrame(whole_rows["phases"]).drop(columns=drop).reset_index(drop=True)
    for pid in (1873, 1874):
        mine = ph[ph["pid"] == pid].drop(columns=drop).reset_index(drop=True)
        pd.testing.assert_frame_equal(mine, base, check_dtype=False)
    # both copies ran on CUDA device 0: the device cannot tell their ranks apart, and says so
    assert set(ph["rank_source"]) == {"unknown: processes share CUDA device 0"} and ph["rank"].isna().all()
    steps = pd.DataFrame(rows["steps"])
    assert sorted(steps.groupby("pid")["step"].apply(list).tolist()) == [[1, 2, 3], [1, 2, 3]]


def test_identity_from_artifact():
    from verlprof.stages.core.model import Artifact, ArtifactKind
    from verlprof.stages.window.steps import identity_from_artifact

    a = Artifact(ArtifactKind.NSYS_SQLITE, WHOLE, "run/actor_w.3.sqlite", 1, role="actor", rank=1, pid=9,
                 capture_range=3, steps=(4, 6))
    ident = identity_from_artifact(a)
    assert (ident.source, ident.role, ident.rank, ident.pid, ident.capture_range) == ("run/actor_w.3.sqlite", "actor", 1, 9, 3)
    assert ident.step_range == (4, 6) and ident.profiled_steps == (4, 5, 6) and ident.source_kind == "nsys"
