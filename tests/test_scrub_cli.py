"""`verlprof scrub` end to end: folders, single files, report, resume, refused raw reports."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

from typer.testing import CliRunner
from inprocess import run_cli
from testdata import fixtures_dir
from verlprof.pipeline.cli import app

FIXTURES = fixtures_dir()
RAY = FIXTURES / "h200-nsys-2025.3" / "ray-continuous"
WHOLE = FIXTURES / "h200-nsys-2025.3" / "whole" / "whole_1873.sqlite"
runner = CliRunner()


def test_scrub_folder_report_resume_and_refusal(tmp_path: Path) -> None:
    src = tmp_path / "in"
    shutil.copytree(RAY, src)
    (src / "worker.nsys-rep").write_bytes(b"raw report bytes HF_TOKEN=hf_RawReportTok0123456789abcdefghij")
    (src / "notes.txt").write_text("not an artifact\n")
    out, work = tmp_path / "out", tmp_path / "work"
    args = ["scrub", str(src), "-o", str(out), "--work", str(work), "--no-local-env"]
    res = runner.invoke(app, args)
    assert res.exit_code == 3, res.output          # the raw report was refused, the rest written
    assert "refused" in res.output and "worker.nsys-rep" in res.output
    assert not (out / "worker.nsys-rep").exists() and not (out / "notes.txt").exists()
    outs = sorted(p.name for p in out.glob("*.sqlite"))
    assert outs == sorted(p.name for p in RAY.glob("*.sqlite"))
    rep = json.loads((out / "scrub_report.json").read_text())
    by_status = {a["rel"]: a["status"] for a in rep["artifacts"]}
    assert by_status["worker.nsys-rep"] == "refused"
    assert all(by_status[n] == "done" for n in outs)
    # one GPU per export, replaced where it is kept; the report also counts it where scrub drops it
    # (environment rows, unreferenced strings: what check of the raw export finds, issue 33)
    assert rep["by_location"]["TARGET_INFO_GPU.uuid"]["gpu_uuid"] == 3 and rep["totals"]["gpu_uuid"] >= 3
    assert rep["skipped"] == ["notes.txt"]
    assert "f31e45c5" not in (out / "scrub_report.json").read_text()
    chk = runner.invoke(app, ["check", str(out), "--no-local-env"])
    assert chk.exit_code == 0, chk.output
    before = {p.name: p.stat().st_mtime_ns for p in out.glob("*.sqlite")}
    (src / "worker.nsys-rep").unlink()
    res2 = runner.invoke(app, args)                  # resume: nothing is redone
    assert res2.exit_code == 0, res2.output
    assert res2.output.count("cached") == 3
    assert before == {p.name: p.stat().st_mtime_ns for p in out.glob("*.sqlite")}


def test_scrub_single_file_and_bad_input_one_line(tmp_path: Path) -> None:
    out = tmp_path / "clean.sqlite"
    res = runner.invoke(app, ["scrub", str(WHOLE), "-o", str(out), "--work", str(tmp_path / "w"), "--no-local-env"])
    assert res.exit_code == 0, res.output
    assert out.is_file() and (tmp_path / "clean.sqlite.scrub_report.json").is_file()
    assert b"hf_kQ7ZpLm2XvB9tR4sWc8YnD1eUfA6gHjK3o" not in out.read_bytes()
    bad = tmp_path / "bad.sqlite"
    bad.write_bytes(b"not sqlite at all")
    p = run_cli("scrub", bad, "-o", tmp_path / "o.sqlite", "--work", tmp_path / "w", "--no-local-env")
    assert p.returncode == 4                        # nothing could be scrubbed
    assert "bad.sqlite" in p.stderr and not (tmp_path / "o.sqlite").exists()
    assert "Traceback" not in p.stderr
