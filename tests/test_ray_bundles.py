"""The node side of `collect --ray` without a cluster: folders, statuses, archives, merging.

These run the same functions a Ray task runs (`run_on_node`, `collect_node_bundle`), in this
process, so their behaviour is pinned down in milliseconds; tests/test_ray.py runs them on a real
multi-node cluster.
"""
from __future__ import annotations

import io
import json
import os
import shutil
import tarfile
import time
from pathlib import Path

import pytest
from testdata import fixtures_dir
from verlprof.pipeline import cluster
from verlprof.stages.core.errors import BadInputError, ToolMissingError

FIXTURES = fixtures_dir()
STEP1 = FIXTURES / "h200-nsys-2025.3" / "ray-continuous" / "worker_process_1983.1.sqlite"


def files_of(data: bytes) -> dict[str, bytes]:
    with tarfile.open(fileobj=io.BytesIO(data), mode="r:gz") as tar:
        return {m.name: tar.extractfile(m).read() for m in tar.getmembers()}


def list_names(sources: list[str], options: object) -> bytes:
    """A trivial node_fn: a bundle whose manifest lists the files found."""
    import tempfile

    names = sorted(p.name for s in sources for p in Path(s).rglob("*") if p.is_file())
    with tempfile.TemporaryDirectory() as tmp:
        (Path(tmp) / "manifest.json").write_text(json.dumps({"artifacts": [{"rel": n} for n in names]}))
        return cluster.tar_folder(tmp)


def boom(sources: list[str], options: object) -> bytes:
    raise RuntimeError("exploded\nwith a second line")


def test_tar_folder_is_deterministic_and_skips_links(tmp_path: Path) -> None:
    a = tmp_path / "a"
    (a / "summaries").mkdir(parents=True)
    (a / "manifest.json").write_text("{}")
    (a / "summaries" / "phases.parquet").write_bytes(b"x" * 1000)
    first = cluster.tar_folder(a)
    b = shutil.copytree(a, tmp_path / "b")
    os.utime(b / "manifest.json", (time.time() - 1000, time.time() - 1000))
    (b / "link").symlink_to(STEP1)
    assert cluster.tar_folder(b) == first
    assert set(files_of(first)) == {"manifest.json", "summaries/phases.parquet"}


def test_extract_refuses_bad_archives(tmp_path: Path) -> None:
    evil = io.BytesIO()
    with tarfile.open(fileobj=evil, mode="w:gz") as tar:
        info = tarfile.TarInfo("../escape.txt")
        info.size = 3
        tar.addfile(info, io.BytesIO(b"bad"))
    link = io.BytesIO()
    with tarfile.open(fileobj=link, mode="w:gz") as tar:
        info = tarfile.TarInfo("manifest.json")
        info.type, info.linkname = tarfile.SYMTYPE, "/etc/passwd"
        tar.addfile(info)
    good = cluster.tar_folder(tmp_path)  # empty but valid
    for data in (b"", b"\x1f\x8b\x08garbage", good[: len(good) // 2], evil.getvalue(), link.getvalue()):
        with pytest.raises(BadInputError):
            cluster.extract_bundle(data, tmp_path / "x")
    assert not (tmp_path / "escape.txt").exists()


def test_run_on_node_statuses(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    nsight = tmp_path / "nsight"
    nsight.mkdir()
    monkeypatch.setenv(cluster.NSIGHT_ENV, str(nsight))
    assert cluster.run_on_node(list_names, [], {})["status"] == "nothing"
    (nsight / "worker_process_1.nsys-rep").write_bytes(b"r")
    save = tmp_path / "save"
    save.mkdir()
    (save / "trace.json.gz").write_bytes(b"t")
    ok = cluster.run_on_node(list_names, [str(tmp_path / "not-here")], {"save_path": str(save)})
    assert ok["status"] == "ok" and ok["files"] == 2
    assert json.loads(files_of(ok["bundle"])["manifest.json"])["artifacts"] == [
        {"rel": "trace.json.gz"}, {"rel": "worker_process_1.nsys-rep"}]
    failed = cluster.run_on_node(boom, [], {})
    assert failed["status"] == "failed" and failed["detail"] == "RuntimeError: exploded" and "bundle" not in failed


def test_default_node_fn_collects_locally_and_says_when_nsys_is_missing(tmp_path: Path,
                                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    src = tmp_path / "nsight"
    src.mkdir()
    shutil.copy(STEP1, src)
    data = cluster.collect_node_bundle([str(src)], {"jobs": 1, "work_dir": str(tmp_path / "work")})
    man = json.loads(files_of(data)["manifest.json"])
    assert [a["rel"] for a in man["artifacts"]] == [STEP1.name]
    assert b"hf_kQ7ZpLm2XvB9tR4sWc8YnD1eUfA6gHjK3o" not in b"".join(files_of(data).values())
    only_reports = tmp_path / "reports"
    only_reports.mkdir()
    (only_reports / "worker_process_9.nsys-rep").write_bytes(b"r")
    monkeypatch.setenv("VERLPROF_NSYS", str(tmp_path / "missing" / "nsys"))
    monkeypatch.setenv(cluster.NSIGHT_ENV, str(only_reports))
    res = cluster.run_on_node(cluster.collect_node_bundle, [], {"work_dir": str(tmp_path / "work")})
    assert res["status"] == "no-nsys" and "nsys" in res["detail"]
    with pytest.raises(ToolMissingError):
        cluster.collect_node_bundle([str(only_reports)], {"work_dir": str(tmp_path / "work")})


def test_merge_is_atomic_and_marks_nodes(tmp_path: Path) -> None:
    a, b = tmp_path / "a", tmp_path / "b"
    a.mkdir()
    b.mkdir()
    (a / "x.sqlite").write_bytes(b"1")
    (b / "x.sqlite").write_bytes(b"2")
    results = [cluster.NodeResult("n1", "ok", bundle=list_names([str(a)], {}), files=1),
               cluster.NodeResult("n2", "ok", bundle=list_names([str(b)], {}), files=1),
               cluster.NodeResult("n3", "dead", "node is not alive")]
    man = cluster.merge_node_bundles(results, tmp_path / "out")
    assert [(x["rel"], x["node"]) for x in man["artifacts"]] == [("n1/x.sqlite", "n1"), ("n2/x.sqlite", "n2")]
    assert [n["status"] for n in man["cluster"]["nodes"]] == ["ok", "ok", "dead"]
    assert "detail" not in json.dumps(man["cluster"])            # free text stays in the terminal
    assert (tmp_path / "out" / "nodes" / "n1" / "manifest.json").is_file()
    bad = [*results, cluster.NodeResult("n4", "ok", bundle=b"\x1f\x8bnope", files=1)]
    with pytest.raises(BadInputError, match="n4"):
        cluster.merge_node_bundles(bad, tmp_path / "out2")
    assert not (tmp_path / "out2").exists() and not list(tmp_path.glob(".out2.tmp-*"))
