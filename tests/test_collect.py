"""`verlprof collect` end to end: the shipped sample, real nsys reports, the cache, bad inputs."""
from __future__ import annotations

import json
import re
import shutil
import socket
from pathlib import Path

import pytest
from typer.testing import CliRunner
from inprocess import run_cli
from testdata import fixtures_dir
from verlprof.pipeline.cli import app
from verlprof.stages.core.hashing import sha256_file

REPO = Path(__file__).resolve().parents[1]
SAMPLE = REPO / "samples" / "tiny_run"
FIXTURES = fixtures_dir()
runner = CliRunner()


def _collect(*args: str, work: Path) -> tuple[int, str]:
    res = runner.invoke(app, ["collect", *args, "--work", str(work), "--jobs", "2"], env={"COLUMNS": "200"})
    return res.exit_code, res.output


def _tree_state(root: Path) -> dict[str, tuple[str, float]]:
    return {str(p.relative_to(root)): (sha256_file(p), p.stat().st_mtime)
            for p in sorted(root.rglob("*")) if p.is_file()}


def _manifest(out: Path) -> dict:
    return json.loads((out / "manifest.json").read_text())


def _export_statuses(manifest: dict) -> list[str]:
    return [s["status"] for a in manifest["artifacts"] for s in a["stages"] if s["stage"] == "export"]


def test_collect_sample_finds_every_artifact_and_reuses_exports(tmp_path: Path) -> None:
    before = _tree_state(SAMPLE)
    code, out = _collect(str(SAMPLE), "-o", str(tmp_path / "b1"), work=tmp_path / "work")
    assert code == 0, out
    m = _manifest(tmp_path / "b1")
    kinds = sorted(a["kind"] for a in m["artifacts"])
    reports = sorted(SAMPLE.rglob("*.nsys-rep"))
    traces = sorted(SAMPLE.rglob("*.json.gz"))
    assert kinds.count("nsys_report") == len(reports) > 0
    assert kinds.count("torch_trace") == len(traces) > 0
    assert kinds.count("hydra_config") == 1
    # the beside SQLite is used instead of exporting: no nsys needed for the sample
    assert sorted(_export_statuses(m)) == ["beside"] * len(reports)
    assert _tree_state(SAMPLE) == before, "collect modified its input"


def test_manifest_has_no_absolute_paths_or_host_names(tmp_path: Path) -> None:
    src = tmp_path / "run"
    shutil.copytree(SAMPLE, src)
    code, out = _collect(str(src), "-o", str(tmp_path / "b"), work=tmp_path / "work")
    assert code == 0, out
    text = (tmp_path / "b" / "manifest.json").read_text()
    assert str(tmp_path) not in text and str(REPO) not in text
    # as a whole token: a short host name (`vm`) may be spelt inside a salted pseudonym (`name-zyzqvmtk`)
    assert not re.search(rf"(?<![A-Za-z0-9]){re.escape(socket.gethostname())}(?![A-Za-z0-9])", text)
    assert all(not a["rel"].startswith("/") for a in _manifest(tmp_path / "b")["artifacts"])


@pytest.mark.nsys
def test_collect_exports_real_reports_in_parallel_then_exports_nothing(
        nsys_reports: list[Path], tmp_path: Path) -> None:
    nsight = tmp_path / "ray" / "session_latest" / "logs" / "nsight"
    nsight.mkdir(parents=True)
    for i, rep in enumerate(nsys_reports):
        shutil.copy2(rep, nsight / f"worker_process_{1000 + i}.nsys-rep")
    work = tmp_path / "work"
    code, out = _collect(str(nsight), "-o", str(tmp_path / "b1"), work=work)
    assert code == 0, out
    assert sorted(_export_statuses(_manifest(tmp_path / "b1"))) == ["exported"] * 3
    exports = sorted((work / "exports").glob("*.sqlite"))
    assert len(exports) == 3
    # a second collect (even into another OUT) exports nothing and says so
    code, out = _collect(str(nsight), "-o", str(tmp_path / "b2"), work=work)
    assert code == 0, out
    assert sorted(_export_statuses(_manifest(tmp_path / "b2"))) == ["cached"] * 3
    assert "Exported nothing" in out
    # raw exports (which hold the environment) never land in OUT
    assert not list((tmp_path / "b2").rglob("worker_process_*.sqlite")) or \
        all("traces" in p.parts for p in (tmp_path / "b2").rglob("*.sqlite"))


@pytest.mark.nsys
def test_bad_inputs_are_reported_not_fatal(nsys_reports: list[Path], nsys_qdstrm: Path, tmp_path: Path) -> None:
    run = tmp_path / "run"
    run.mkdir()
    good = run / "worker_process_11.nsys-rep"
    shutil.copy2(nsys_reports[0], good)
    data = nsys_reports[1].read_bytes()
    (run / "worker_process_12.nsys-rep").write_bytes(data[: len(data) // 3])     # truncated
    (run / "worker_process_13.nsys-rep").write_bytes(b"")                         # empty
    (run / "worker_process_14.sqlite").write_bytes(b"")                           # zero-byte SQLite
    shutil.copy2(nsys_qdstrm, run / "worker_process_15.qdstrm")                  # unfinished
    before = _tree_state(run)
    out_dir = tmp_path / "b"
    code, out = _collect(str(run), "-o", str(out_dir), work=tmp_path / "work")
    assert code == 3, out                      # bundle written, some artifacts failed
    m = _manifest(out_dir)
    assert not m["status"]["complete"]
    failed = {f["rel"] for f in m["status"]["failed_artifacts"]}
    assert {"worker_process_12.nsys-rep", "worker_process_13.nsys-rep"} <= failed
    assert "worker_process_11.nsys-rep" not in failed
    status = {a["rel"]: [s for s in a["stages"] if s["stage"] == "export"] for a in m["artifacts"]}
    assert status["worker_process_11.nsys-rep"][0]["status"] == "exported"
    for bad in ("worker_process_12.nsys-rep", "worker_process_13.nsys-rep"):
        s = status[bad][0]
        assert s["status"] in ("failed", "skipped") and s["detail"] and "\n" not in s["detail"]
        art = next(a for a in m["artifacts"] if a["rel"] == bad)
        assert art["status"] == "failed" and art["reason"] == s["detail"]
    qd = status["worker_process_15.qdstrm"][0]
    from verlprof.stages.export import find_nsys

    if find_nsys().qdstrm_importer is not None:      # imported, then exported like a report
        assert qd["status"] == "exported", qd
        assert "worker_process_15.qdstrm" not in failed
    else:                                            # skipped, saying which importer is missing
        assert qd["status"] == "skipped" and "QdstrmImporter" in qd["detail"], qd
    zero = status.get("worker_process_14.sqlite")
    assert zero is None or zero[0]["status"] in ("failed", "skipped")
    assert _tree_state(run) == before
    leftovers = [p for p in (tmp_path / "work").rglob("*") if ".tmp-" in p.name]
    assert leftovers == []
    assert not [p for p in tmp_path.iterdir() if ".tmp-" in p.name]


def test_single_bad_file_is_a_one_line_error(tmp_path: Path) -> None:
    bad = tmp_path / "notes.txt"
    bad.write_text("hello")
    res = run_cli("collect", bad, "-o", tmp_path / "b", "--work", tmp_path / "w")   # as the console script
    assert res.returncode != 0
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and "notes.txt" in lines[0] and "Traceback" not in res.stderr
    assert not (tmp_path / "b").exists()


def test_refuses_to_overwrite_a_folder_that_is_not_a_bundle(tmp_path: Path) -> None:
    out_dir = tmp_path / "precious"
    out_dir.mkdir()
    (out_dir / "thesis.tex").write_text("x")
    res = runner.invoke(app, ["collect", str(SAMPLE), "-o", str(out_dir), "--work", str(tmp_path / "w")])
    assert res.exit_code != 0
    assert (out_dir / "thesis.tex").read_text() == "x"


def test_collect_prints_after_run_doctor_findings(tmp_path: Path) -> None:
    run = tmp_path / "run"
    shutil.copytree(SAMPLE, run)
    (run / "ray_logs" / "nsight" / "worker_process_999.nsys-rep").write_bytes(b"")   # never finalized
    code, out = _collect(str(run), "-o", str(tmp_path / "b"), work=tmp_path / "work")
    assert code == 3, out                      # the empty report failed; the rest is in the bundle
    assert "after-empty-report" in out and "worker_process_999" in out


def test_roles_and_ranks_of_ray_worker_reports_come_from_inside_them(collect_once) -> None:
    truth = json.loads((SAMPLE / "sample_manifest.json").read_text())
    res = collect_once(SAMPLE)
    assert res.code == 0, res.stdout + res.stderr
    by_pid = {a["pid"]: a for a in _manifest(res.out)["artifacts"] if a["kind"] == "nsys_report"}
    assert by_pid[truth["controller"]["pid"]]["role"] == "trainer"
    for w in truth["workers"]:
        got = by_pid[w["pid"]]
        assert (got["role"], got["rank"], got["world_size"]) == (w["role"], w["rank"], w["world_size"])
