"""A new input format is one folder: tests/toy_format/ (a plain CSV of ranges) registered with one
`register` call and collected end to end, with no other file of the project touched.

What it proves, on the real collect (CLI, in this process, workers forked from it): gather finds
the CSVs by the format's naming and header check, pass 1 reads their steps and the window picks
step 2 across both ranks, summarize writes phases rows made by the one summarizer from the
format's event model, the rows go through the run's one scrubber (a public verl name kept, a
planted token never published), and the bundle passes `verlprof check`. The same folder,
installed as a package under the `verlprof.formats` entry point group, is found by a fresh
process with no call at all.
"""
from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Iterator

import pyarrow.parquet as pq
import pytest
from typer.testing import CliRunner

from verlprof.pipeline.cli import app
from verlprof.stages import formats

TOY = Path(__file__).with_name("toy_format")
SECRET = "hf_ToyF0rmatTok3nNotReal0123456789abcd"
runner = CliRunner()


@pytest.fixture
def toy() -> Iterator[object]:
    """The toy folder, imported and registered for this test only (then taken away again)."""
    spec = importlib.util.spec_from_file_location("toy_format", TOY / "__init__.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules["toy_format"] = module   # picklable items: workers forked from here find it
    spec.loader.exec_module(module)
    formats.register(module.FORMAT)
    try:
        yield module
    finally:
        formats.unregister(module.FORMAT.kind)
        sys.modules.pop("toy_format", None)


def _write_run(root: Path) -> None:
    """Two ranks, steps 1-3 of 100 ms each; phases a public verl name, a user's and a secret."""
    root.mkdir(parents=True)
    t0 = 1_764_000_000_000_000_000
    for rank in (0, 1):
        lines = ["name,start_ns,end_ns,rank,step"]
        for step in (1, 2, 3):
            s = t0 + (step - 1) * 100_000_000
            slow = 10_000_000 * rank * (step == 2)   # rank 1 is slower in step 2
            lines += [f"step,{s},{s + 90_000_000 + slow},{rank},{step}",
                      f"generate_sequences,{s + 1_000_000},{s + 40_000_000},{rank},{step}",
                      f"update_actor,{s + 41_000_000},{s + 80_000_000 + slow},{rank},{step}",
                      f"alice_tuning_{SECRET},{s + 81_000_000},{s + 85_000_000},{rank},{step}"]
        (root / f"actor_rank{rank}.ranges.csv").write_text("\n".join(lines) + "\n", encoding="utf-8")


@pytest.mark.parametrize("jobs", ["1", "2"])
def test_a_toy_format_in_one_folder_is_collected_end_to_end(toy: object, tmp_path: Path, jobs: str) -> None:
    run, out = tmp_path / "run", tmp_path / "out"
    _write_run(run)
    res = runner.invoke(app, ["collect", str(run), "-o", str(out), "--work", str(tmp_path / "work"),
                              "--jobs", jobs])
    assert res.exit_code == 0, res.output

    manifest = (out / "manifest.json").read_text(encoding="utf-8")
    assert manifest.count('"kind": "toy_ranges"') == 2          # gather: both CSVs, by the toy's naming
    phases = pq.read_table(out / "summaries" / "phases.parquet").to_pylist()
    assert {r["step"] for r in phases} == {2}                     # the window: step 2, as verl's default
    assert {r["rank"] for r in phases} == {0, 1}
    assert {r["source_kind"] for r in phases} == {"toy"}
    by = {(r["rank"], r["phase"]): r for r in phases}
    # the one summarizer over the format's event model: wall time of each phase in step 2
    assert by[(0, "update_actor")]["wall_ns"] == 39_000_000
    assert by[(1, "update_actor")]["wall_ns"] == 49_000_000
    assert by[(0, "generate_sequences")]["wall_ns"] == 39_000_000
    # the same provenance rule as every format: a name verl writes is kept, the planted token
    # is published nowhere in the bundle
    everything = b"".join(p.read_bytes() for p in out.rglob("*") if p.is_file())
    assert SECRET.encode() not in everything
    names = {r["phase"] for r in phases if r["rank"] == 0}
    assert {"step", "update_actor", "generate_sequences"} < names and len(names) == 4
    assert f"alice_tuning_{SECRET}" not in names                 # the third phase is there, scrubbed

    check = runner.invoke(app, ["check", str(out)])   # the bundle re-scanned alone: nothing flagged
    assert check.exit_code == 0, check.output


def test_a_file_of_the_toy_format_with_a_bad_header_is_named(toy: object, tmp_path: Path) -> None:
    """The format's header check: a CSV named like the format but holding something else fails
    in one line naming the file (given alone), as any built-in format's file does."""
    bad = tmp_path / "actor_rank0.ranges.csv"
    bad.write_text("not,the,header\n", encoding="utf-8")
    res = runner.invoke(app, ["collect", str(bad), "-o", str(tmp_path / "out"), "--work", str(tmp_path / "work")])
    assert res.exit_code != 0
    assert str(res.exception).endswith("actor_rank0.ranges.csv: toy_ranges: not a ranges CSV (bad header)")
    assert not (tmp_path / "out" / "manifest.json").exists()


def test_the_toy_format_is_gone_once_unregistered(tmp_path: Path) -> None:
    """Without the registration the same CSVs are no input at all: nothing else knows the format."""
    assert "toy" not in formats.kinds()
    _write_run(tmp_path / "run")
    res = runner.invoke(app, ["collect", str(tmp_path / "run"), "-o", str(tmp_path / "out"),
                              "--work", str(tmp_path / "work")])
    assert res.exit_code != 0 and "no profiler artifacts found" in str(res.exception)


def test_nothing_outside_the_toy_folder_knows_it() -> None:
    """"Without touching any other file", checked: no module of the project names the toy format,
    its kind or its file kind; the folder and one `register` call are all there is."""
    root = Path(__file__).resolve().parents[1]
    sources = [p for top in ("stages", "pipeline") for p in (root / top).rglob("*.py")]
    assert len(sources) > 100
    for p in sources:   # (docstrings may point at this test by its file name; no code names the format)
        text = p.read_text(encoding="utf-8")
        assert "toy_ranges" not in text and "ToyRanges" not in text and '"toy"' not in text, p


def test_a_plugin_package_is_found_by_its_entry_point(tmp_path: Path) -> None:
    """The same folder installed as a package that publishes its format under the
    `verlprof.formats` entry point group: a fresh `verlprof collect` (its workers too) finds it
    with no `register` call at all."""
    site = tmp_path / "site"
    shutil.copytree(TOY, site / "toyplug", ignore=shutil.ignore_patterns("__pycache__"))
    info = site / "toyplug-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: toyplug\nVersion: 1.0\n", encoding="utf-8")
    (info / "entry_points.txt").write_text("[verlprof.formats]\ntoy = toyplug:FORMAT\n", encoding="utf-8")
    run, out = tmp_path / "run", tmp_path / "out"
    _write_run(run)
    env = {**os.environ, "PYTHONPATH": str(site)}
    done = subprocess.run([sys.executable, "-c", "from verlprof.pipeline.cli import main; main()", "collect",
                           str(run), "-o", str(out), "--work", str(tmp_path / "work"), "--jobs", "2"],
                          env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout + done.stderr
    phases = pq.read_table(out / "summaries" / "phases.parquet").to_pylist()
    assert {r["source_kind"] for r in phases} == {"toy"} and {r["step"] for r in phases} == {2}
