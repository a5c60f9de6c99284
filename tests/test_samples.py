"""Checks on the shipped sample run, ``samples/tiny_run`` (made by ``samples/make_sample.py``).

These read files only: no nsys, Ray or verl is needed. The last test regenerates the sample into a
temp dir and is opt-in (``VERLPROF_MAKE_SAMPLE=1``): it needs root, nsys, Ray and verl, and ~2 min.
"""

from __future__ import annotations

import gzip
import json
import os
import re
import shutil
import sqlite3
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parent.parent
SAMPLE = ROOT / "samples" / "tiny_run"

FAKE_SECRETS = {
    "HF_TOKEN": "hf_SampLe0FakeTokenNotReal1234567890ab",
    "WANDB_API_KEY": "0123456789abcdef0123456789abcdef01234567",
    "MY_SERVICE_PASSWORD": "sample-Pa55-not-real",
}
CONTROLLER_RANGES = {"start_profile", "step", "gen", "reward", "old_log_prob", "ref", "adv", "update_actor", "stop_profile"}
STEP_CHILDREN = ["gen", "reward", "old_log_prob", "ref", "adv", "update_actor"]
WORKER_RANGES = {"generate_sequences", "actor_compute_log_prob", "ref_compute_log_prob", "actor_update"}
TRACE_NAME = re.compile(r"^actor-rollout-ref_train_step(\d+)_rank(\d+)-of-(\d+)_pid(\d+)_(\d{17})\.json\.gz$")
REPORT_NAME = re.compile(r"^worker_process_(\d+)\.nsys-rep$")


@pytest.fixture(scope="module")
def manifest() -> dict:
    return json.loads((SAMPLE / "sample_manifest.json").read_text())


def reports() -> list[Path]:
    return sorted((SAMPLE / "ray_logs" / "nsight").glob("*.nsys-rep"))


def nvtx_ranges(db: Path) -> list[tuple[str, int, int]]:
    """(name, start, end) of the NVTX start/end ranges, in start order."""
    con = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    try:
        rows = con.execute(
            "SELECT COALESCE(e.text, s.value), e.start, e.end FROM NVTX_EVENTS e "
            "LEFT JOIN StringIds s ON s.id = e.textId WHERE e.end IS NOT NULL ORDER BY e.start"
        ).fetchall()
    finally:
        con.close()
    return rows


def all_text(db: Path) -> str:
    """Every text value of the export, read in Python: nsys 2022.4 keeps the environment in one
    NUL-separated value, and SQLite's LIKE/instr stop at the first NUL."""
    con = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    try:
        parts = []
        for (table,) in con.execute("SELECT name FROM sqlite_master WHERE type='table'"):
            for row in con.execute(f'SELECT * FROM "{table}"'):
                parts.extend(v for v in row if isinstance(v, str))
    finally:
        con.close()
    return "\n".join(parts)


def pid_of(report: Path) -> int:
    m = REPORT_NAME.match(report.name)
    assert m, report.name
    return int(m.group(1))


def test_layout(manifest):
    assert SAMPLE.is_dir()
    hydra = list(SAMPLE.glob("outputs/*/*/.hydra/config.yaml"))
    assert len(hydra) == 1
    assert (hydra[0].parent / "overrides.yaml").is_file()
    reps = reports()
    assert len(reps) == 1 + len(manifest["workers"]) == 3
    assert {pid_of(r) for r in reps} == {manifest["controller"]["pid"]} | {w["pid"] for w in manifest["workers"]}
    traces = list((SAMPLE / "outputs" / "profile").glob("*.json.gz"))
    assert len(traces) == manifest["steps"] * len(manifest["workers"]) == 6
    # Ray's stdout/stderr logs of each profiled process
    for pid in map(pid_of, reps):
        assert list((SAMPLE / "ray_logs").glob(f"worker-*-{pid}.out")), pid


def test_sample_is_small():
    total = sum(p.stat().st_size for p in SAMPLE.rglob("*") if p.is_file())
    assert total < 6 * 1024 * 1024, total


@pytest.mark.parametrize("report", reports(), ids=lambda p: p.name)
def test_every_report_has_a_sqlite_export(report):
    db = report.with_suffix(".sqlite")
    assert db.is_file(), f"no export beside {report.name}"
    con = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    try:
        tables = {name for (name,) in con.execute("SELECT name FROM sqlite_master WHERE type='table'")}
        assert {"StringIds", "NVTX_EVENTS", "TARGET_INFO_SYSTEM_ENV", "ProcessStreams"} <= tables
        meta = dict(con.execute("SELECT name, value FROM EXPORT_META_DATA").fetchall())
        assert meta["EXPORT_PRODUCT_VERSION"].startswith("2022.4")
        assert con.execute("SELECT count(*) FROM StringIds").fetchone()[0] > 0
    finally:
        con.close()


def test_controller_ranges(manifest):
    db = SAMPLE / "ray_logs" / "nsight" / f"worker_process_{manifest['controller']['pid']}.sqlite"
    ranges = nvtx_ranges(db)
    names = [n for n, _, _ in ranges]
    assert set(names) == CONTROLLER_RANGES
    for name in CONTROLLER_RANGES:
        assert names.count(name) == manifest["steps"], name
    steps = [(s, e) for n, s, e in ranges if n == "step"]
    for child in STEP_CHILDREN:
        spans = [(s, e) for n, s, e in ranges if n == child]
        for (ss, se), (cs, ce) in zip(steps, spans):
            assert ss <= cs <= ce <= se, f"{child} is not inside its step"
        # the children come in verl's order inside each step
    for i, (ss, se) in enumerate(steps):
        inside = [n for n, s, e in ranges if ss <= s and e <= se and n != "step"]
        assert inside == STEP_CHILDREN, (i, inside)


def test_step_one_is_the_slow_one(manifest):
    db = SAMPLE / "ray_logs" / "nsight" / f"worker_process_{manifest['controller']['pid']}.sqlite"
    durations = [e - s for n, s, e in nvtx_ranges(db) if n == "step"]
    assert len(durations) == 3
    assert durations[0] > 1.5 * max(durations[1:]), durations


def test_worker_ranges(manifest):
    for w in manifest["workers"]:
        db = SAMPLE / "ray_logs" / "nsight" / f"worker_process_{w['pid']}.sqlite"
        names = [n for n, _, _ in nvtx_ranges(db)]
        assert set(names) == WORKER_RANGES, w
        for name in WORKER_RANGES:
            assert names.count(name) == manifest["steps"], (w, name)


def test_fake_secrets_are_in_the_raw_exports():
    """The sample is a scrub test input: the raw exports must hold the planted secrets."""
    for report in reports():
        text = all_text(report.with_suffix(".sqlite"))
        for key, value in FAKE_SECRETS.items():
            assert f"{key}={value}" in text, (report.name, key)


def test_fake_secrets_elsewhere_in_the_sample(manifest):
    rank0 = next(w for w in manifest["workers"] if w["rank"] == 0)
    out = next((SAMPLE / "ray_logs").glob(f"worker-*-{rank0['pid']}.out")).read_text()
    assert FAKE_SECRETS["WANDB_API_KEY"] in out  # printed to stdout by the worker
    config = next(SAMPLE.glob("outputs/*/*/.hydra/config.yaml")).read_text()
    for value in FAKE_SECRETS.values():
        assert value in config  # ray_kwargs.ray_init.runtime_env.env_vars


def test_torch_traces(manifest):
    worker_pids = {w["pid"]: w["rank"] for w in manifest["workers"]}
    seen = set()
    for path in sorted((SAMPLE / "outputs" / "profile").glob("*.json.gz")):
        m = TRACE_NAME.match(path.name)
        assert m, path.name
        step, rank, world, pid = (int(g) for g in m.groups()[:4])
        assert world == 2 and worker_pids[pid] == rank
        seen.add((step, rank))
        with gzip.open(path, "rt") as f:
            trace = json.load(f)
        events = trace["traceEvents"]
        assert isinstance(events, list) and events
        stages = {e["name"] for e in events if e.get("cat") == "user_annotation"}
        assert WORKER_RANGES <= stages, (path.name, stages)
        assert trace["distributedInfo"]["rank"] == rank
    assert seen == {(s, r) for s in (1, 2, 3) for r in (0, 1)}


def test_hydra_config():
    path = next(SAMPLE.glob("outputs/*/*/.hydra/config.yaml"))
    cfg = yaml.safe_load(path.read_text())
    gp = cfg["global_profiler"]
    assert gp["tool"] == "nsys"
    assert gp["steps"] == [1, 2, 3]
    assert gp["save_path"] == "outputs/profile"
    nsys = gp["global_tool_config"]["nsys"]
    assert nsys["discrete"] is False
    for key in ("controller_nsight_options", "worker_nsight_options"):
        assert nsys[key]["trace"] == "nvtx,osrt"
        assert nsys[key]["sample"] == "none"
    arr = cfg["actor_rollout_ref"]
    for role in ("actor", "ref", "rollout"):
        assert arr[role]["profiler"]["enable"] is True, role
        assert arr[role]["profiler"]["tool"].startswith("${oc.select:global_profiler.tool")  # kept unresolved
    assert cfg["trainer"]["total_training_steps"] == 3
    assert cfg["trainer"]["n_gpus_per_node"] == 2
    overrides = yaml.safe_load((path.parent / "overrides.yaml").read_text())
    assert "global_profiler.tool=nsys" in overrides


@pytest.mark.slow
@pytest.mark.nsys
@pytest.mark.ray
@pytest.mark.skipif(os.environ.get("VERLPROF_MAKE_SAMPLE") != "1" and os.environ.get("CI") != "true",
                    reason="regenerates the sample (~2-3 min): runs on CI (CI=true) or with VERLPROF_MAKE_SAMPLE=1")
def test_make_sample_regenerates(tmp_path):
    if shutil.which("nsys") is None:
        pytest.skip("nsys not installed")
    pytest.importorskip("ray")
    pytest.importorskip("verl.utils.profiler")
    out = tmp_path / "tiny_run"
    ray_tmp = tempfile.mkdtemp(prefix="vpsray", dir="/tmp")  # Ray's socket paths must stay short
    subprocess.run(
        [
            sys.executable,
            str(ROOT / "samples" / "make_sample.py"),
            "--out",
            str(out),
            "--work",
            str(tmp_path / "work"),
            "--ray-temp-dir",
            ray_tmp,
        ],
        check=True,
        timeout=1800,
    )
    shutil.rmtree(ray_tmp, ignore_errors=True)
    made = json.loads((out / "sample_manifest.json").read_text())
    assert len(list((out / "ray_logs" / "nsight").glob("*.sqlite"))) == 3
    assert len(list((out / "outputs" / "profile").glob("*.json.gz"))) == 3 * len(made["workers"])
    # the regenerated run collects like the shipped one: the same roles, ranks and phases
    import pyarrow.parquet as pq

    def phases(src: Path, name: str) -> set:
        res = subprocess.run([sys.executable, "-m", "verlprof.pipeline.cli", "collect", str(src), "-o",
                              str(tmp_path / name), "--work", str(tmp_path / "cwork")],
                             capture_output=True, text=True, timeout=600)
        assert res.returncode == 0, res.stdout[-2000:] + res.stderr[-2000:]
        rows = pq.read_table(tmp_path / name / "summaries" / "phases.parquet").to_pylist()
        return {(r["source_kind"], r["role"], r["rank"], r["path"]) for r in rows}

    assert phases(out, "regenerated") == phases(SAMPLE, "shipped")
