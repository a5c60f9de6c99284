"""The node side of `collect --ray` without a cluster: which folders a node collects from and what
its gather sends back (a listing of artifacts, with hashes; no file content).

These run the function a pinned Ray task runs (`gather_node`) in this process, so its behaviour
is pinned down in milliseconds; tests/test_ray.py runs the whole collect on a real cluster.
"""
from __future__ import annotations

import shutil
import sys
from pathlib import Path

import pytest
from verlprof.pipeline import cluster

sys.path.insert(0, str(Path(__file__).parent))
from testdata import data_path  # noqa: E402

STEP1 = "h200-nsys-2025.3/ray-continuous/worker_process_1983.1.sqlite"


def test_node_sources_are_its_nsight_dir_save_path_and_existing_sources(tmp_path: Path,
                                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    nsight, save = tmp_path / "nsight", tmp_path / "save"
    nsight.mkdir()
    save.mkdir()
    monkeypatch.setenv(cluster.NSIGHT_ENV, str(nsight))
    got = cluster.node_sources([str(tmp_path / "not-on-this-node"), str(save)], str(save))
    assert got == [nsight, save]


def test_gather_node_lists_what_the_node_holds(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    nsight = tmp_path / "nsight"
    nsight.mkdir()
    monkeypatch.setenv(cluster.NSIGHT_ENV, str(nsight))
    opts = cluster.GatherNodeOptions(salt="s", exclude=())
    assert cluster.gather_node([], opts).artifacts == []
    shutil.copy(data_path(STEP1), nsight)
    got = cluster.gather_node([], opts)
    assert [a.rel for a in got.artifacts] == ["worker_process_1983.1.sqlite"]
    assert got.artifacts[0].sha256 and got.artifacts[0].pid == 1983


def test_merge_keeps_a_name_found_on_two_nodes_apart(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    nsight = tmp_path / "nsight"
    nsight.mkdir()
    shutil.copy(data_path(STEP1), nsight)
    monkeypatch.setenv(cluster.NSIGHT_ENV, str(nsight))
    got = cluster.gather_node([], cluster.GatherNodeOptions(salt="s"))
    rows = [cluster.NodeRow("x", "ok", 1), cluster.NodeRow("y", "ok", 1), cluster.NodeRow("z", "dead")]
    merged = cluster.merge_gathers([("node-1", got), ("node-2", got)], rows, "s")
    rels = [a.rel for a in merged.gathered.artifacts]
    assert len(set(rels)) == 2 and all(r.endswith("/worker_process_1983.1.sqlite") for r in rels)
    assert sorted(merged.node_of.values()) == ["node-1", "node-2"]
    assert [r.status for r in merged.nodes] == ["ok", "ok", "dead"]
