"""Ray: the executor, `summarize --ray` and `collect --ray` against a REAL local Ray cluster.

One cluster per test session (`ray.cluster_utils.Cluster`, 3 nodes of 1 CPU on this machine, small
object stores, no dashboard). Every node holds its own reports: each raylet gets its own
$VERLPROF_NSIGHT_DIR (node-specific env, inherited by its workers) into which the real H200 fixture
exports are copied, so a task only finds files when it really runs on that node.
"""
from __future__ import annotations

import gzip
import hashlib
import importlib.util
import io
import json
import logging
import shutil
import sqlite3
import sys
import tarfile
import tempfile
from pathlib import Path
from types import SimpleNamespace

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from testdata import fixtures_dir
from verlprof.pipeline import batch, cluster
from verlprof.pipeline.executors import InlineExecutor, run_all
from verlprof.stages.core.errors import BadInputError, ToolMissingError
from verlprof.stages.core.phases import canonical_stage
from verlprof.stages.schema import arrow_schema

ray = pytest.importorskip("ray")
from ray import cloudpickle  # noqa: E402
from ray.cluster_utils import Cluster  # noqa: E402

pytestmark = [pytest.mark.ray, pytest.mark.slow]   # one ~10 s cluster start per session

FIXTURES = fixtures_dir()
NSYS = FIXTURES / "h200-nsys-2025.3"
SECRETS = [b"hf_kQ7ZpLm2XvB9tR4sWc8YnD1eUfA6gHjK3o", b"5f0c3e9a1b7d24e8c6a90f1b3d5e7a9c2b4d6f80",
           b"wJalrXUtnFEMI/K7MDENG/bPxRfiCYzEXAMPLEKEY", b"s3cr3t-Pa55!", b"hf_CmdLineTok3n0123456789abcdefghijkl",
           b"/tmp/home/alice"]
MB = 1024 ** 2

# Functions of this module travel to Ray workers by value (the module itself is not importable there).
cloudpickle.register_pickle_by_value(sys.modules[__name__])


def _load_batch_helpers():
    spec = importlib.util.spec_from_file_location("verlprof_test_batch_helpers", Path(__file__).with_name("test_batch.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.fixture(scope="session")
def ray_cluster(tmp_path_factory: pytest.TempPathFactory):
    """head (node_a: the whole-run export), node_b (two capture-range exports), node_c (empty),
    node_d (only an .nsys-rep and no usable nsys)."""
    base = tmp_path_factory.mktemp("ray_nodes")
    folders = {n: base / n for n in ("node_a", "node_b", "node_c", "node_d")}
    for f in folders.values():
        f.mkdir()
    shutil.copy(NSYS / "whole" / "whole_1873.sqlite", folders["node_a"])
    for k in (1, 2):
        shutil.copy(NSYS / "ray-continuous" / f"worker_process_1983.{k}.sqlite", folders["node_b"])
    (folders["node_d"] / "worker_process_77.nsys-rep").write_bytes(b"not really a report\n" * 10)

    def args(name: str, **extra: object) -> dict:
        env = {cluster.NSIGHT_ENV: str(folders[name]), **extra.pop("env", {})}
        return dict(num_cpus=1, resources={name: 1}, object_store_memory=80 * MB, env_vars=env, **extra)

    c = Cluster(initialize_head=True, head_node_args=args("node_a", include_dashboard=False))
    for name in ("node_b", "node_c"):
        c.add_node(**args(name))
    c.add_node(**args("node_d", env={"VERLPROF_NSYS": str(base / "no-nsys-here" / "nsys")}))
    c.wait_for_nodes()
    ray.init(address=c.address, logging_level=logging.WARNING, log_to_driver=False)
    try:
        yield SimpleNamespace(cluster=c, folders=folders, address=c.address)
    finally:
        ray.shutdown()
        c.shutdown()


# ----------------------------------------------------------------------------------------------
# A simple, real per-node function: read the node's SQLite exports, summarise their NVTX ranges
# and kernels into a small bundle (only names and numbers travel; the exports stay on the node).
# ----------------------------------------------------------------------------------------------


def nvtx_bundle(sources: list[str], options: object) -> bytes:
    files = sorted({p for s in sources for p in Path(s).rglob("*.sqlite")}, key=lambda p: p.name)
    phases, kernels, artifacts = [], [], []
    for path in files:
        con = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
        try:
            ranges = con.execute(
                "SELECT e.start, e.end, COALESCE(e.text, s.value) FROM NVTX_EVENTS e LEFT JOIN StringIds s "
                "ON s.id = e.textId WHERE e.eventType IN (59, 60) AND e.end IS NOT NULL ORDER BY e.start").fetchall()
            kern = con.execute("SELECT s.value, COUNT(*), SUM(k.end - k.start) FROM CUPTI_ACTIVITY_KIND_KERNEL k "
                               "JOIN StringIds s ON s.id = k.shortName GROUP BY s.value ORDER BY 3 DESC LIMIT 5").fetchall()
        finally:
            con.close()
        for start, end, name in ranges:
            phases.append({"source": path.name, "source_kind": "nsys", "role": "actor", "step": 1, "phase": name,
                           "stage": canonical_stage(name), "start_ns": start, "wall_ns": end - start})
        for name, n, total in kern:
            kernels.append({"source": path.name, "source_kind": "nsys", "step": 1, "kernel": name,
                            "kernel_short": name[:30], "count": n, "total_ns": total})
        artifacts.append({"kind": "nsys_sqlite", "rel": path.name, "size": path.stat().st_size,
                          "sha256": hashlib.sha256(path.read_bytes()).hexdigest()})
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp)
        (out / "summaries").mkdir()
        for name, rows in (("phases", phases), ("kernels", kernels)):
            pq.write_table(pa.Table.from_pylist(rows, schema=arrow_schema(name)), out / "summaries" / f"{name}.parquet")
        (out / "manifest.json").write_text(json.dumps({"verlprof_version": "test", "artifacts": artifacts,
                                                       "window": {"step": 1}}, sort_keys=True))
        return cluster.tar_folder(out)


def refuses_without_nsys(sources: list[str], options: object) -> bytes:
    reports = [p for s in sources for p in Path(s).glob("*.nsys-rep")]
    if reports and not [p for s in sources for p in Path(s).glob("*.sqlite")]:
        raise ToolMissingError("nsys", "not found on this node")
    return nvtx_bundle(sources, options)


def unpacked(data: bytes) -> dict[str, bytes]:
    with tarfile.open(fileobj=io.BytesIO(data), mode="r:gz") as tar:
        return {m.name: tar.extractfile(m).read() for m in tar.getmembers()}


def assert_no_secret(data: bytes) -> None:
    blobs = [data, gzip.decompress(data), *unpacked(data).values()]
    for blob in blobs:
        for s in SECRETS:
            assert s not in blob, f"planted secret {s[:6]!r}... travelled back"


def where_am_i(x: int, options: object) -> tuple[int, str]:
    import time

    time.sleep(0.3)
    if x == 5:
        raise BadInputError(f"/data/in{x}.sqlite", "truncated\nfile")
    return x * x, ray.get_runtime_context().get_node_id()


# ----------------------------------------------------------------------------------------------
# The executor
# ----------------------------------------------------------------------------------------------


def test_ray_executor_spreads_work_keeps_order_and_reports_errors(ray_cluster) -> None:
    from verlprof.pipeline.ray_executor import RayExecutor

    ex = RayExecutor(ray_cluster.address, max_in_flight=4)
    results = run_all(ex, where_am_i, list(range(8)))
    assert [r.index for r in results] == list(range(8))
    assert [r.value[0] if r.value else None for r in results] == [0, 1, 4, 9, 16, None, 36, 49]
    assert results[5].error == "/data/in5.sqlite: truncated file"
    assert len({r.value[1] for r in results if r.value}) >= 2     # really ran on several nodes
    ex.close()   # the driver's own connection is left alone
    assert ray.is_initialized()


def test_summarize_over_ray_equals_the_local_path(ray_cluster, tmp_path: Path) -> None:
    from verlprof.pipeline.ray_executor import RayExecutor

    tb = _load_batch_helpers()
    paths = tb.make_runs(tmp_path / "in", tb.fixture_rows())
    broken = shutil.copytree(paths["slow_gen"], tmp_path / "in" / "broken")
    (broken / "manifest.json").write_text("{")
    inputs = [*paths.values(), broken]
    local = batch.summarize_runs(inputs, tmp_path / "local", executor=InlineExecutor(), work_dir=tmp_path / "wl")
    remote = batch.summarize_runs(inputs, tmp_path / "ray", executor=RayExecutor(ray_cluster.address),
                                  work_dir=tmp_path / "wr", html=True)
    assert [(r.run, r.status, r.detail) for r in remote.runs] == [(r.run, r.status, r.detail) for r in local.runs]
    assert remote.runs[-1].status == "skipped" and "manifest.json" in remote.runs[-1].detail
    for name in ("runs", "phases", "kernels", "compare", "kernel_compare"):
        assert pq.read_table(tmp_path / "ray" / f"{name}.parquet").equals(pq.read_table(tmp_path / "local" / f"{name}.parquet"))
    assert (tmp_path / "ray" / "report.html").stat().st_size > 1000


# ----------------------------------------------------------------------------------------------
# collect --ray
# ----------------------------------------------------------------------------------------------


def test_collect_on_nodes_gathers_every_node_and_matches_local(ray_cluster, tmp_path: Path) -> None:
    results = cluster.collect_on_nodes(ray_cluster.address, [], {}, refuses_without_nsys, salt="s1")
    by_status: dict[str, list] = {}
    for r in results:
        by_status.setdefault(r.status, []).append(r)
    assert len(by_status["ok"]) == 2 and len(by_status["nothing"]) == 1 and len(by_status["no-nsys"]) == 1
    assert "nsys" in by_status["no-nsys"][0].detail

    folders = ray_cluster.folders
    local = {nvtx_bundle([str(folders[n])], {}) for n in ("node_a", "node_b")}
    assert {r.bundle for r in by_status["ok"]} == local           # byte-identical to the local path
    # The raw exports on the nodes do hold the planted secrets; nothing that came back does.
    assert SECRETS[0] in (folders["node_a"] / "whole_1873.sqlite").read_bytes()
    for r in by_status["ok"]:
        assert_no_secret(r.bundle)

    manifest = cluster.merge_node_bundles(results, tmp_path / "bundle")
    want = {p.name for n in ("node_a", "node_b") for p in folders[n].glob("*.sqlite")}
    assert {a["rel"].split("/", 1)[1] for a in manifest["artifacts"]} == want
    assert {a["node"] for a in manifest["artifacts"]} == {r.node for r in by_status["ok"]}
    assert all(a["rel"].startswith(a["node"] + "/") for a in manifest["artifacts"])
    assert sorted(n["status"] for n in manifest["cluster"]["nodes"]) == ["no-nsys", "nothing", "ok", "ok"]
    merged = pq.read_table(tmp_path / "bundle" / "summaries" / "phases.parquet")
    per_node = sum(pq.read_table(io.BytesIO(unpacked(b)["summaries/phases.parquet"])).num_rows for b in local)
    assert merged.num_rows == per_node and merged.schema.equals(arrow_schema("phases"))
    # The merged bundle is itself summarizable.
    res = batch.summarize_runs([tmp_path / "bundle"], tmp_path / "sum", executor=InlineExecutor(), work_dir=tmp_path / "w")
    assert res.runs[0].status == "done"


def test_default_node_collect_runs_the_real_collect_on_each_node(ray_cluster, tmp_path: Path) -> None:
    opts = {"jobs": 1, "work_dir": str(tmp_path / "node-work")}
    results = cluster.collect_on_nodes(ray_cluster.address, [], opts, salt="s2")
    status = sorted(r.status for r in results if r.status != "dead")
    assert status == ["no-nsys", "nothing", "ok", "ok"], [(r.status, r.detail) for r in results]
    rels = set()
    for r in results:
        if r.status == "ok":
            assert_no_secret(r.bundle)
            man = json.loads(unpacked(r.bundle)["manifest.json"])
            rels |= {a["rel"] for a in man["artifacts"]}
    assert rels == {p.name for n in ("node_a", "node_b") for p in ray_cluster.folders[n].glob("*.sqlite")}


def test_dead_node_is_reported_not_fatal(ray_cluster) -> None:
    extra = ray_cluster.cluster.add_node(num_cpus=1, object_store_memory=80 * MB,
                                         env_vars={cluster.NSIGHT_ENV: str(ray_cluster.folders["node_c"])})
    ray_cluster.cluster.wait_for_nodes()
    ray_cluster.cluster.remove_node(extra)
    results = cluster.collect_on_nodes(ray_cluster.address, [], {}, refuses_without_nsys, salt="s3")
    assert any(r.status == "dead" for r in results)
    assert sum(r.status == "ok" for r in results) == 2


def dies_on_three(x: int, options: object) -> int:
    if x == 3:
        import os

        os._exit(1)     # the worker process dies: no Python exception to catch
    return x


def test_a_lost_worker_is_that_items_error_not_a_crash(ray_cluster) -> None:
    from verlprof.pipeline.ray_executor import RayExecutor

    results = run_all(RayExecutor(ray_cluster.address, max_retries=0), dies_on_three, [1, 2, 3, 4])
    assert [r.value for r in results] == [1, 2, None, 4]
    assert results[2].error.startswith("ray task failed: WorkerCrashedError") and "\n" not in results[2].error
