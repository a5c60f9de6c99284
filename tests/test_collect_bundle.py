"""The share bundle `collect` publishes: summaries, window traces, no secrets, packable."""
from __future__ import annotations

import gzip
import json
import shutil
import tarfile
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from typer.testing import CliRunner
from testdata import fixtures_dir
from verlprof.pipeline.cli import app

REPO = Path(__file__).resolve().parents[1]
FIXTURES = fixtures_dir()
PLANTED = [
    "hf_kQ7ZpLm2XvB9tR4sWc8YnD1eUfA6gHjK3o", "5f0c3e9a1b7d24e8c6a90f1b3d5e7a9c2b4d6f80",
    "wJalrXUtnFEMI/K7MDENG/bPxRfiCYzEXAMPLEKEY", "s3cr3t-Pa55!", "hf_CmdLineTok3n0123456789abcdefghijkl",
    "/tmp/home/alice", "alice",
]
SAMPLE_PLANTED = ["hf_SampLe0FakeTokenNotReal1234567890ab", "0123456789abcdef0123456789abcdef01234567",
                  "sample-Pa55-not-real"]
runner = CliRunner()


def _all_bytes(root: Path) -> bytes:
    """Every byte under root, with gzip members and tar archives opened (what a reader would see)."""
    chunks = []
    for p in sorted(root.rglob("*")):
        if not p.is_file():
            continue
        data = p.read_bytes()
        chunks.append(data)
        if data[:2] == b"\x1f\x8b":
            chunks.append(gzip.decompress(data))
    return b"\n".join(chunks)


@pytest.fixture(scope="module")
def fixture_bundle(tmp_path_factory: pytest.TempPathFactory) -> Path:
    tmp = tmp_path_factory.mktemp("bundle")
    run = tmp / "run"
    shutil.copytree(FIXTURES / "h200-nsys-2025.3" / "ray-continuous", run / "nsight")
    shutil.copytree(FIXTURES / "h200-torch-2.11", run / "profile")
    res = runner.invoke(app, ["collect", str(run), "-o", str(tmp / "out"), "--work", str(tmp / "work"),
                              "--html", "--pack", "--jobs", "2"])
    assert res.exit_code == 0, res.output
    return tmp / "out"


def test_step_2_of_the_capture_range_reports_is_chosen(fixture_bundle: Path) -> None:
    manifest = json.loads((fixture_bundle / "manifest.json").read_text())
    assert manifest["window"]["step"] == 2
    phases = pq.read_table(fixture_bundle / "summaries" / "phases.parquet").to_pylist()
    nsys_sources = {r["source"] for r in phases if r["source_kind"] == "nsys"}
    assert nsys_sources == {"nsight/worker_process_1983.2.sqlite"}
    assert {r["step"] for r in phases} == {2}
    steps = pq.read_table(fixture_bundle / "summaries" / "steps.parquet").to_pylist()
    chosen = {(r["source"], r["step"]) for r in steps if r["chosen"]}
    assert ("nsight/worker_process_1983.2.sqlite", 2) in chosen


def test_bundle_phase_walls_equal_the_reports_nvtx_ranges(fixture_bundle: Path) -> None:
    import sqlite3

    src = sqlite3.connect(f"file:{FIXTURES / 'h200-nsys-2025.3/ray-continuous/worker_process_1983.2.sqlite'}?mode=ro",
                          uri=True)
    nvtx = {}
    for text, dur in src.execute("SELECT COALESCE(n.text, s.value), n.end - n.start FROM NVTX_EVENTS n "
                                 "LEFT JOIN StringIds s ON s.id = n.textId WHERE n.end IS NOT NULL"):
        nvtx.setdefault(text, 0)
        nvtx[text] += dur
    phases = [r for r in pq.read_table(fixture_bundle / "summaries" / "phases.parquet").to_pylist()
              if r["source_kind"] == "nsys" and r["phase"] in nvtx]
    assert phases, "no nsys phases in the bundle"
    for r in phases:
        assert r["wall_ns"] == nvtx[r["phase"]], r["phase"]


def test_bundle_holds_none_of_the_planted_secrets(fixture_bundle: Path) -> None:
    blob = _all_bytes(fixture_bundle) + (fixture_bundle.parent / "out.tar.gz").read_bytes()
    with tarfile.open(fixture_bundle.parent / "out.tar.gz") as tar:
        for m in tar.getmembers():
            if m.isfile():
                blob += tar.extractfile(m).read()
    for secret in PLANTED:
        assert secret.encode() not in blob, "planted value leaked into the bundle"
    res = runner.invoke(app, ["check", str(fixture_bundle), str(fixture_bundle.parent / "out.tar.gz"),
                              "--no-local-env"])
    assert res.exit_code == 0, res.output


def test_bundle_has_traces_report_and_no_raw_exports(fixture_bundle: Path) -> None:
    names = {p.name for p in fixture_bundle.rglob("*")}
    assert "report.html" in names and "scrub_report.json" in names
    assert any(n.endswith(".trace.json.gz") for n in names)
    assert not any(n.endswith((".nsys-rep", ".qdstrm")) for n in names)
    html = (fixture_bundle / "report.html").read_text()
    assert "<svg" in html and "http://" not in html.replace("http://www.w3.org", "")


def test_second_collect_reuses_exports_and_scrubs_only_what_is_published(tmp_path: Path) -> None:
    """Issue 11: no whole-file scrubbed copy is made (only the windows and summaries that are
    published are scrubbed), and a second collect redoes no export; both bundles are equal."""
    run = tmp_path / "run"
    shutil.copytree(FIXTURES / "h200-nsys-2025.3" / "ray-continuous", run)
    args = ["collect", str(run), "--work", str(tmp_path / "work"), "--jobs", "1"]
    assert runner.invoke(app, [*args, "-o", str(tmp_path / "a")]).exit_code == 0
    assert runner.invoke(app, [*args, "-o", str(tmp_path / "b")]).exit_code == 0
    assert not (tmp_path / "work" / "scrubbed").exists()
    assert not list((tmp_path / "work" / "windows").glob("*")), "raw windows are removed once scrubbed"
    report = json.loads((tmp_path / "b" / "scrub_report.json").read_text())
    scrubbed = {a["rel"] for a in report["artifacts"]}
    assert "summaries" in scrubbed and any(r.endswith(".sqlite") for r in scrubbed)
    sizes = [a["bytes_in"] for a in report["artifacts"] if a["kind"] == "nsys_sqlite"]
    inputs = [p.stat().st_size for p in run.glob("*.sqlite")]
    assert sizes and max(sizes) < min(inputs), "only windows are scrubbed, never a whole export"
    a = pq.read_table(tmp_path / "a" / "summaries" / "phases.parquet").to_pylist()
    b = pq.read_table(tmp_path / "b" / "summaries" / "phases.parquet").to_pylist()
    assert a == b


def test_sample_bundle_is_clean(collect_once) -> None:
    res = collect_once(REPO / "samples" / "tiny_run")
    assert res.code == 0, res.stdout + res.stderr
    blob = _all_bytes(res.out)
    for secret in SAMPLE_PLANTED:
        assert secret.encode() not in blob
    stages = {r["stage"] for r in pq.read_table(res.out / "summaries" / "phases.parquet").to_pylist()}
    assert {"generation", "reward", "old_log_prob", "ref_log_prob", "advantage", "actor_update"} <= stages
