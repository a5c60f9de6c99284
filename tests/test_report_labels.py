"""No text of report.html is clipped at the right edge of its chart (issue 34: the note after the
longest step bar, `223.03 ms · GPU 40.90 ms · unattributed GPU 2.87 ms (0.000 ms after
inheritance)`, was cut at a fixed 330 px).

How: headless Chromium lays out a real bundle's report (a collect of an H200 nsys export whose step
has unattributed GPU time, so its note is long) and a `summarize --html` compare page of two real
bundles; a measuring script (added to a copy of each page; the pages have none) reads, through
`--dump-dom`, every SVG text's right edge and its SVG's right edge. A screenshot of each page is
also taken (VERLPROF_SCREENSHOTS=DIR keeps them).
"""
from __future__ import annotations

import html
import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest
from typer.testing import CliRunner
from testdata import data_dir
from verlprof.pipeline.cli import app

CHROMIUM = os.environ.get("VERLPROF_CHROMIUM") or shutil.which("chromium") or shutil.which("chromium-browser")
pytestmark = pytest.mark.skipif(not CHROMIUM, reason="chromium is not installed (CI: bash .ci/install_chromium.sh)")

_MEASURE = """<script>
const out = [];
document.querySelectorAll('svg').forEach((svg, i) => {
  const r = svg.getBoundingClientRect();
  svg.querySelectorAll('text').forEach(t => {
    const b = t.getBoundingClientRect();
    if (b.width > 0) out.push({svg: i, cls: svg.getAttribute('class') || '', text: t.textContent,
                               left: b.left, right: b.right, width: b.width, svg_right: r.right});
  });
});
const pre = document.createElement('pre'); pre.id = 'measure'; pre.textContent = JSON.stringify(out);
document.body.appendChild(pre);
</script>"""


def _chromium(page: Path, out: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    out.mkdir(parents=True, exist_ok=True)
    cmd = [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
           "--no-first-run", "--disable-component-update", "--disable-sync", "--disable-dev-shm-usage",
           "--hide-scrollbars", "--force-device-scale-factor=1", "--host-resolver-rules=MAP * ~NOTFOUND",
           f"--user-data-dir={out / 'profile'}", "--window-size=1400,900", *extra, page.as_uri()]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=90, check=False)


def measure(page: Path, out: Path) -> list[dict]:
    """Every SVG text of `page` as Chromium lays it out (see the module docstring)."""
    probe = page.with_name(page.stem + ".measure.html")
    probe.write_text(page.read_text().replace("</body>", _MEASURE + "</body>", 1))
    res = _chromium(probe, out, "--dump-dom")
    m = re.search(r'<pre id="measure">(.*?)</pre>', res.stdout, re.DOTALL)
    assert m, res.stderr[-2000:]
    return json.loads(html.unescape(m.group(1)))


def screenshot(page: Path, out: Path) -> Path:
    res = _chromium(page, out, f"--screenshot={out / 'shot.png'}")
    assert res.returncode == 0 and (out / "shot.png").is_file(), res.stderr[-2000:]
    keep = os.environ.get("VERLPROF_SCREENSHOTS")
    if keep:
        shutil.copyfile(out / "shot.png", Path(keep) / f"labels-{page.parent.name}.png")
    return out / "shot.png"


def _collect(rel: str, tmp: Path) -> Path:
    shutil.copytree(data_dir(rel), tmp / "run" / Path(rel).name, ignore=shutil.ignore_patterns("*.md", "*.py"))
    res = CliRunner().invoke(app, ["collect", str(tmp / "run"), "-o", str(tmp / "out"), "--work", str(tmp / "work"),
                                   "--jobs", "1", "--html"])
    assert res.exit_code == 0, res.output
    return tmp / "out"


@pytest.fixture(scope="module")
def pages(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    h200 = _collect("h200-nsys-2025.3/whole", tmp_path_factory.mktemp("h200"))
    gloo = _collect("gloo_ranks", tmp_path_factory.mktemp("gloo"))
    cmp_dir = tmp_path_factory.mktemp("cmp") / "cmp"
    res = CliRunner().invoke(app, ["summarize", str(gloo), str(h200), "-o", str(cmp_dir), "--html"])
    assert res.exit_code == 0, res.output
    return {"bundle": h200 / "report.html", "gloo": gloo / "report.html", "compare": cmp_dir / "report.html"}


def _clipped(texts: list[dict]) -> list[dict]:
    return [t for t in texts if t["right"] > t["svg_right"] + 0.5]


def test_bundle_report_text_after_the_longest_bar_is_whole(pages: dict[str, Path], tmp_path: Path) -> None:
    texts = measure(pages["bundle"], tmp_path / "m")
    assert not _clipped(texts), _clipped(texts)
    notes = [t for t in texts if t["cls"] == "stepbars" and "unattributed GPU" in t["text"]]
    assert notes, [t["text"] for t in texts if t["cls"] == "stepbars"]
    # not vacuous: the note is wider than the 330 px the chart used to leave after its plot
    assert max(t["width"] for t in notes) > 330, notes
    assert screenshot(pages["bundle"], tmp_path / "s").stat().st_size > 10_000


def test_every_report_text_is_inside_its_chart(pages: dict[str, Path], tmp_path: Path) -> None:
    for name in ("gloo", "compare"):
        texts = measure(pages[name], tmp_path / name)
        assert len(texts) > 20, (name, len(texts))
        assert not _clipped(texts), (name, _clipped(texts))
        screenshot(pages[name], tmp_path / f"s-{name}")
