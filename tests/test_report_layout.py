"""Issue 42: every report reads at 800 and at 1,600 px, in real headless Chromium.

The reports of both shipped samples (`collect --html`), of a 1,024-rank bundle (the GPU sample's
ranks replicated, bench/replicate_ranks.py, with its window traces so the timeline draws GPU
lanes) and the comparison page of the CPU sample's steps 2 and 3 (`summarize --html`: its chart
clipped its right-most label, `143.68 (+44.0%`) are laid out by /usr/bin/chromium at each width;
the page's own layout, read back by tests/layout_probe.py, must show: no page-wide horizontal
scroll, no box that scrolls sideways, no text run clipped by the box that holds it (an SVG, an
ellipsised cell) or by the window, no two text runs overlapping, and on a run report the
headline inside the first screen. A control page with a planted clipped label, an overlap and a
too-wide block must be caught, so the checks cannot pass vacuously. Screenshots of every page and
width are kept: under pytest's tmp dir, or in $VERLPROF_LAYOUT_SHOTS when set.
"""
from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner
from verlprof.pipeline.cli import app
from verlprof.pipeline.report.run_page import render_bundle_report

from layout_probe import measure

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))
CHROMIUM = os.environ.get("VERLPROF_CHROMIUM") or shutil.which("chromium") or shutil.which("chromium-browser")
pytestmark = pytest.mark.skipif(CHROMIUM is None, reason="needs chromium")
WIDTHS = (800, 1600)
HEIGHT = 900
runner = CliRunner()


def _collect(src: Path, out: Path, *extra: str) -> Path:
    res = runner.invoke(app, ["collect", str(src), "-o", str(out), "--work", str(out.parent / "work"), *extra])
    assert res.exit_code == 0, res.output[-3000:]
    return out


@pytest.fixture(scope="module")
def pages(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    from replicate_ranks import replicate_bundle

    root = tmp_path_factory.mktemp("layout")
    tiny = _collect(ROOT / "samples" / "tiny_run", root / "tiny_run", "--html")
    tiny3 = _collect(ROOT / "samples" / "tiny_run", root / "tiny_run_step3", "--step", "3")
    gpu = _collect(ROOT / "samples" / "gpu_run", root / "gpu_run", "--html")
    big = replicate_bundle(gpu, root / "ranks1024", 1024, traces=True)
    (big / "report.html").write_text(render_bundle_report(big))
    res = runner.invoke(app, ["summarize", str(tiny), str(tiny3), "-o", str(root / "compare"), "--work",
                              str(root / "work"), "--html"])
    assert res.exit_code == 0, res.output[-3000:]
    return {"tiny_run": tiny / "report.html", "gpu_run": gpu / "report.html", "ranks1024": big / "report.html",
            "compare": root / "compare" / "report.html"}


@pytest.fixture(scope="module")
def shots(tmp_path_factory: pytest.TempPathFactory) -> Path:
    given = os.environ.get("VERLPROF_LAYOUT_SHOTS")
    out = Path(given) if given else tmp_path_factory.mktemp("layout_shots")
    out.mkdir(parents=True, exist_ok=True)
    return out


@pytest.mark.parametrize("width", WIDTHS)
@pytest.mark.parametrize("name", ["tiny_run", "gpu_run", "ranks1024", "compare"])
def test_page_fits_without_clipping_or_overlap(pages, shots: Path, name: str, width: int) -> None:
    page = pages[name]
    named = shots / f"{name}.html"
    shutil.copyfile(page, named)   # the screenshot takes the page's name; its links are not followed
    got = measure(CHROMIUM, named, shots / "probe", width, HEIGHT)
    assert got["runs"] > 50, got   # the page was laid out and read
    assert got["W"] == width
    assert got["scrollW"] <= width, f"{name} at {width}: page scrolls sideways ({got['scrollW']} px)"
    assert got["sideways"] == [], got["sideways"]
    assert got["clipped"] == [], got["clipped"]
    assert got["overlaps"] == [], got["overlaps"]
    if name != "compare":
        top, bottom = got["headline"][1], got["headline"][3]
        assert 0 <= top and bottom <= got["H"], f"headline not on the first screen: {got['headline']}"
    assert got["screenshot"] and Path(got["screenshot"]).stat().st_size > 10_000
    shutil.copyfile(got["screenshot"], shots / f"{name}-{width}.png")


def test_the_probe_catches_what_it_looks_for(pages, tmp_path: Path) -> None:
    """A control: the same page with a label drawn past its SVG's edge, two labels on one spot
    and a block wider than the window; each must be reported."""
    planted = ('<svg width="200" height="40" viewBox="0 0 200 40"><text x="150" y="20">143.68 (+44.0%)</text>'
               '<text x="10" y="20">overlapping A</text><text x="12" y="22">overlapping B</text></svg>'
               '<div style="width:1200px">too wide</div>')
    page = tmp_path / "control.html"
    page.write_text(pages["tiny_run"].read_text().replace("</body>", planted + "</body>", 1))
    got = measure(CHROMIUM, page, tmp_path / "probe", 800, HEIGHT)
    assert any("143.68" in c for c in got["clipped"]), got["clipped"]
    assert any("overlapping A" in o and "overlapping B" in o for o in got["overlaps"]), got["overlaps"]
    assert got["scrollW"] > 800
