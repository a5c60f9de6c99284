"""Ray: the executor, `summarize --ray` and `collect --ray` against a REAL local Ray cluster.

One cluster per module (`ray.cluster_utils.Cluster`, 3 nodes of 1 CPU on this machine, each with its
own resources and small object store, no dashboard). Every node holds its own reports: each raylet
gets its own $VERLPROF_NSIGHT_DIR (node-specific env, inherited by its workers) into which real
H200 fixtures are copied, so a task only finds a file when it really runs on that node.

`collect --ray` must write the bundle a local collect of all the nodes' folders writes: the same
phases rows, status block and exit code (with a broken trace, with --strict, --html and
--step-range), and a node that dies mid-run leaves its artifacts failed (exit 3).
"""
from __future__ import annotations

import json
import logging
import re
import shutil
import sys
from pathlib import Path
from types import SimpleNamespace

import pyarrow.parquet as pq
import pytest
from typer.testing import CliRunner
from verlprof.pipeline import batch, cluster
from verlprof.pipeline.cli import app
from verlprof.pipeline.collect import CollectOptions, run_collect
from verlprof.pipeline.executors import InlineExecutor, run_all
from verlprof.pipeline.progress import NoProgress
from verlprof.stages.core.errors import BadInputError, RunFailedError
from verlprof.stages.scrub.provenance import reveal

sys.path.insert(0, str(Path(__file__).parent))
from testdata import data_dir, data_path, owner_names  # noqa: E402

ray = pytest.importorskip("ray")
from ray import cloudpickle  # noqa: E402
from ray.cluster_utils import Cluster  # noqa: E402

pytestmark = [pytest.mark.ray, pytest.mark.slow]   # one ~10 s cluster start per module

MB = 1024 ** 2
RAY_EXPORTS = [f"h200-nsys-2025.3/ray-continuous/worker_process_1983.{k}.sqlite" for k in (1, 2, 3)]
WHOLE = "h200-nsys-2025.3/whole/whole_1873.sqlite"
SECRETS = [b"hf_kQ7ZpLm2XvB9tR4sWc8YnD1eUfA6gHjK3o", b"wJalrXUtnFEMI/K7MDENG/bPxRfiCYzEXAMPLEKEY", b"s3cr3t-Pa55!"]
runner = CliRunner()

# Functions of this module travel to Ray workers by value (the module itself is not importable there).
cloudpickle.register_pickle_by_value(sys.modules[__name__])


def _load_batch_helpers():
    import importlib.util

    spec = importlib.util.spec_from_file_location("verlprof_test_batch_helpers", Path(__file__).with_name("test_batch.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.fixture(scope="module")
def ray_cluster(tmp_path_factory: pytest.TempPathFactory):
    """node_a: the capture-range exports of one worker; node_b: torch traces of steps 1-3 and a
    memory snapshot; node_c: the whole-run export. Each node its own folder and resource."""
    base = tmp_path_factory.mktemp("ray_nodes")
    folders = {n: base / n for n in ("node_a", "node_b", "node_c")}
    for f in folders.values():
        f.mkdir()
    for rel in RAY_EXPORTS:
        shutil.copy(data_path(rel), folders["node_a"])
    torch = data_dir("h200-torch-2.11")
    for p in sorted(torch.glob("*.json.gz")):
        shutil.copy(p, folders["node_b"])
    (folders["node_b"] / "step2").mkdir()
    shutil.copy(data_path("h200-torch-2.11/step2/torch_memory_rank0_pid804.pickle"), folders["node_b"] / "step2")
    shutil.copy(data_path(WHOLE), folders["node_c"])
    for f in folders.values():
        for p in f.rglob("*"):
            if p.is_file():
                p.chmod(0o644)

    def args(name: str, **extra: object) -> dict:
        env = {cluster.NSIGHT_ENV: str(folders[name])}
        return dict(num_cpus=1, resources={name: 1}, object_store_memory=80 * MB, env_vars=env, **extra)

    c = Cluster(initialize_head=True, head_node_args=args("node_a", include_dashboard=False))
    for name in ("node_b", "node_c"):
        c.add_node(**args(name))
    c.wait_for_nodes()
    ray.init(address=c.address, logging_level=logging.WARNING, log_to_driver=False)
    try:
        yield SimpleNamespace(cluster=c, folders=folders, address=c.address, base=base)
    finally:
        ray.shutdown()
        c.shutdown()


# ----------------------------------------------------------------------------------------------
# The executor
# ----------------------------------------------------------------------------------------------


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
# collect --ray: the same collect, each input read on its node
# ----------------------------------------------------------------------------------------------


def _collect(folders: list[Path] | None, out: Path, work: Path, address: str | None = None, **kw):
    """run_collect over `folders` here, or (address) over every node's own folder on Ray."""
    opts = CollectOptions(sources=list(folders or []), out=out, work_dir=work, jobs=2, ray=address, **kw)
    try:
        res = run_collect(opts, NoProgress())
        return res, res.exit_code
    except RunFailedError as err:
        return err.result, int(err.exit_code)


def _phases(out: Path) -> list[dict]:
    rows = pq.read_table(out / "summaries" / "phases.parquet").to_pylist()
    return sorted(rows, key=lambda r: json.dumps(r, sort_keys=True, default=str))


def _same_bundle(local: Path, remote: Path) -> None:
    assert _phases(remote) == _phases(local)
    lm, rm = (json.loads((p / "manifest.json").read_text()) for p in (local, remote))
    assert rm["status"] == lm["status"]

    def window(m: dict) -> dict:    # the nodes' sources come in node order, local ones in folder order
        return {**m["window"], "steps": sorted(m["window"]["steps"], key=lambda x: json.dumps(x, sort_keys=True))}

    assert window(rm) == window(lm)

    def same(a: dict) -> dict:    # export timings and the index of the SOURCE folder may differ
        return {**{k: v for k, v in a.items() if k != "source_index"},
                "stages": [{k: v for k, v in st.items() if k != "seconds"} for st in a["stages"]]}

    arts = [sorted((same(a) for a in m["artifacts"]), key=lambda a: a["rel"]) for m in (lm, rm)]
    assert arts[1] == arts[0]
    assert sorted(p.name for p in (remote / "traces").iterdir()) == sorted(p.name for p in (local / "traces").iterdir())
    blob = b"".join(p.read_bytes() for p in remote.rglob("*") if p.is_file())
    assert not any(s in blob for s in SECRETS)


def test_collect_on_ray_equals_a_local_collect_of_every_node(ray_cluster, tmp_path: Path) -> None:
    nodes = [ray_cluster.folders[n] for n in ("node_a", "node_b", "node_c")]
    local, code_local = _collect(nodes, tmp_path / "local", tmp_path / "work")
    res = runner.invoke(app, ["collect", "-o", str(tmp_path / "ray"), "--work", str(tmp_path / "work"),
                              "--ray-address", ray_cluster.address, "--html", "--jobs", "2"])
    assert code_local == 0 and res.exit_code == 0, res.output
    _same_bundle(tmp_path / "local", tmp_path / "ray")
    assert (tmp_path / "ray" / "report.html").stat().st_size > 1000
    man = json.loads((tmp_path / "ray" / "manifest.json").read_text())
    assert sorted(n["status"] for n in man["cluster"]["nodes"]) == ["ok", "ok", "ok"]
    assert man["executor"] == "ray" and "ray: 3 nodes: 3 with artifacts" in res.output
    # one window for the whole run: every node's sources are summarized at the same step
    assert {r["step"] for r in _phases(tmp_path / "ray") if r["step"] is not None} == {man["window"]["step"]}


def test_a_broken_trace_is_exit_3_on_ray_as_locally_and_strict_writes_nothing(ray_cluster, tmp_path: Path) -> None:
    good = next(ray_cluster.folders["node_b"].glob("*_step2_*.json.gz"))
    broken = ray_cluster.folders["node_c"] / good.name.replace("rank0-of-1", "rank1-of-2")
    broken.write_bytes(good.read_bytes()[:300_000])
    try:
        nodes = [ray_cluster.folders[n] for n in ("node_a", "node_b", "node_c")]
        _r, code_local = _collect(nodes, tmp_path / "local", tmp_path / "work")
        _r, code_ray = _collect(None, tmp_path / "ray", tmp_path / "work", ray_cluster.address)
        assert code_local == code_ray == 3
        _same_bundle(tmp_path / "local", tmp_path / "ray")
        failed = json.loads((tmp_path / "ray" / "manifest.json").read_text())["status"]["failed_artifacts"]
        assert [f["rel"] for f in failed] == [broken.name] and "truncated" in failed[0]["reason"]
        strict, code_strict = _collect(None, tmp_path / "strict", tmp_path / "work", ray_cluster.address, strict=True)
        assert code_strict == 3 and not strict.published and not (tmp_path / "strict").exists()
    finally:
        broken.unlink()


def test_step_range_and_step_choose_the_same_window_on_ray(ray_cluster, tmp_path: Path) -> None:
    nodes = [ray_cluster.folders[n] for n in ("node_a", "node_b", "node_c")]
    kw = dict(step=3, step_range=r"^(actor|ref)/")
    _r, code_local = _collect(nodes, tmp_path / "local", tmp_path / "work", **kw)
    _r, code_ray = _collect(None, tmp_path / "ray", tmp_path / "work", ray_cluster.address, **kw)
    assert code_ray == code_local
    _same_bundle(tmp_path / "local", tmp_path / "ray")


class KillNodeBeforeSummaries(NoProgress):
    """A progress display that removes one Ray node when pass 2 (summarize) begins: the node
    dies after its files were gathered, exported and identified, before they are summarized."""

    def __init__(self, c: Cluster, node: object) -> None:
        self.c, self.node = c, node

    def add_task(self, name: str, *args: object, **kwargs: object) -> int:
        if name == "summarize" and self.node is not None:
            self.c.remove_node(self.node)
            self.node = None
        return 0


def test_a_node_that_dies_mid_run_leaves_its_artifacts_failed_exit_3(ray_cluster, tmp_path: Path) -> None:
    doomed = tmp_path / "node_d"
    doomed.mkdir()
    shutil.copy(data_path(RAY_EXPORTS[1]), doomed / "worker_process_4242.2.sqlite")   # step 2: summarized
    node = ray_cluster.cluster.add_node(num_cpus=1, resources={"node_d": 1}, object_store_memory=80 * MB,
                                        env_vars={cluster.NSIGHT_ENV: str(doomed)})
    ray_cluster.cluster.wait_for_nodes()
    opts = CollectOptions(sources=[], out=tmp_path / "out", work_dir=tmp_path / "work", jobs=2,
                          ray=ray_cluster.address)
    res = run_collect(opts, KillNodeBeforeSummaries(ray_cluster.cluster, node))
    assert res.exit_code == 3, [(o.artifact, o.stage, o.status, o.detail) for o in res.outcomes if "4242" in o.artifact]
    failed = {s.rel: s for s in res.with_status("failed")}
    assert list(failed) == ["worker_process_4242.2.sqlite"], failed
    status = json.loads((tmp_path / "out" / "manifest.json").read_text())["status"]
    assert status["failed_artifacts"][0]["rel"] == "worker_process_4242.2.sqlite"
    assert status["summarized"] == 4      # step 2 of node_a, node_b (trace + memory) and node_c


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


def _rows_naming(output: str, names: list[str]) -> list[str]:
    """The terminal's row for each name and the reason line under it (the table of the run)."""
    lines = output.splitlines()
    out = []
    for i, line in enumerate(lines):
        if any(line.rstrip().endswith(n) for n in names):
            out += [" ".join(line.split()), " ".join(lines[i + 1].split())]
    return out


def test_corrupt_files_on_a_node_are_failed_artifacts_as_locally(ray_cluster, tmp_path: Path) -> None:
    """Issue 34: a node that holds only corrupt candidates (random bytes as a worker export, a
    `.json.gz` that is not gzip, a gzip of plain text). `collect --ray` lists each as a failed
    artifact with the reason a local collect of the same folders gives (same rows, same closing
    line, same manifest, exit 3); it once named them only in the closing line, exit 0."""
    from test_cluster_merge import make_bad  # noqa: PLC0415 - the issue's three files, one recipe

    bad = tmp_path / "node_e"
    expect = make_bad(bad)
    node = ray_cluster.cluster.add_node(num_cpus=1, resources={"node_e": 1}, object_store_memory=80 * MB,
                                        env_vars={cluster.NSIGHT_ENV: str(bad)})
    ray_cluster.cluster.wait_for_nodes()
    try:
        folders = [str(ray_cluster.folders[n]) for n in ("node_a", "node_b", "node_c")] + [str(bad)]
        common = ["--work", str(tmp_path / "work"), "--jobs", "2"]
        local = runner.invoke(app, ["collect", *folders, "-o", str(tmp_path / "local"), *common],
                              env={"COLUMNS": "200"})
        remote = runner.invoke(app, ["collect", "-o", str(tmp_path / "ray"), *common,
                                     "--ray-address", ray_cluster.address], env={"COLUMNS": "200"})
    finally:
        ray_cluster.cluster.remove_node(node)
    assert local.exit_code == 3, local.output
    assert remote.exit_code == 3, remote.output
    _same_bundle(tmp_path / "local", tmp_path / "ray")
    man = json.loads((tmp_path / "ray" / "manifest.json").read_text())
    # `notgzip.json.gz`, `words.json.gz`: file names a person chose, published as pseudonyms (issue
    # 39); nsys's `worker_process_<pid>` stays. The owner reads theirs back from WORK's review list.
    names = owner_names(tmp_path / "work")
    published = {f["rel"] for f in man["status"]["failed_artifacts"]}
    assert "worker_process_4242.sqlite" in published and all(
        re.fullmatch(r"name-[g-z]+\.json\.gz", r) for r in published - {"worker_process_4242.sqlite"}), published
    assert {reveal(f["rel"], names): f["reason"].split(": ", 1)[1] for f in man["status"]["failed_artifacts"]} == expect
    assert [n["status"] for n in man["cluster"]["nodes"]].count("ok") == 4    # node_e held 3 (failed) artifacts
    rows = _rows_naming(remote.output, list(expect))
    assert rows == _rows_naming(local.output, list(expect)) and len(rows) == 6
    for name, why in expect.items():
        assert any(r.startswith("failed") and r.endswith(name) for r in rows)
        assert any(r.endswith(f": {why}") for r in rows)

    def closing(text: str) -> str:
        return re.search(r"\d+ artifacts: [^;]*", " ".join(text.split())).group(0)

    assert closing(remote.output) == closing(local.output)
    assert ", 3 failed: " in closing(remote.output)
    assert "unreadable" not in remote.output      # failed artifacts, not a footnote of the closing line


def test_summarize_on_ray_names_a_raw_runs_corrupt_files_as_locally(ray_cluster, tmp_path: Path) -> None:
    """A raw run folder given to `summarize` is collected inside its task: on Ray as locally, its
    corrupt files are the run's failed artifacts, with their reasons (an incomplete run, exit 3)."""
    from test_cluster_merge import GOOD_TRACE, make_bad  # noqa: PLC0415
    from verlprof.pipeline.ray_executor import RayExecutor  # noqa: PLC0415

    raw = tmp_path / "in" / "raw"
    expect = make_bad(raw)
    shutil.copy(GOOD_TRACE, raw)
    local = batch.summarize_runs([raw], tmp_path / "local", executor=InlineExecutor(), work_dir=tmp_path / "wl")
    remote = batch.summarize_runs([raw], tmp_path / "ray", executor=RayExecutor(ray_cluster.address),
                                  work_dir=tmp_path / "wr")
    # each work dir salts its own pseudonyms of the file names a person chose (issue 39): the runs
    # are compared by the owner's names, read back from each work dir's review list
    mine_l, mine_r = owner_names(tmp_path / "wl"), owner_names(tmp_path / "wr")
    assert mine_l and mine_r
    seen = [(r.run, r.status, r.incomplete, sorted(reveal(f, mine_r) for f in r.failed)) for r in remote.runs]
    assert seen == [(r.run, r.status, r.incomplete, sorted(reveal(f, mine_l) for f in r.failed)) for r in local.runs]
    assert remote.exit_code == local.exit_code == 3
    failed = dict(reveal(f, mine_r).split(": ", 1) for f in remote.runs[0].failed)
    assert {rel: why.split(": ", 1)[1] for rel, why in failed.items()} == expect
