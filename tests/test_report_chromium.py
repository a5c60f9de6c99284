"""The `collect --html` page of a real bundle: its trace links resolve, and headless Chromium draws
its charts without a single request leaving the page.

How "nothing left the page" is checked: Chromium runs with `--log-net-log`, which records every
URL request of the network stack (file:// reads do not go through it), and with
`--host-resolver-rules="MAP * ~NOTFOUND"`, so no name resolves and nothing really leaves this
machine, whatever the page or the browser tries. Chromium itself still starts background requests
(component updater, time, sign-in) despite the --disable-* flags; those carry the initiator
"not an origin" and a non-file network isolation key. A request made *by the page* carries the
page's origin: initiator "null" (the opaque origin of a file:// page) and a network isolation key
"file://...". The test keeps only those. So that a change in Chromium's log format cannot make the
check pass vacuously, a control copy of the same page with planted external references (an <img>,
a CSS url(), an SVG <image>) must show exactly those URLs.

How "the charts drew" is checked: the screenshot (PNG, decoded below with zlib only) must hold, in
each stage colour, at least the pixel area that the page's SVG rectangles of that colour ask for.

How "the bars add up" and "the boxes sit at their start times" are checked (issue 13): a copy of the
page gets a measuring script (the page itself has none) and Chromium's `--dump-dom` returns what the
browser laid out: each process bar's left and right edge, each timeline phase box's left edge, and
the tick lines with their labels. The pixel scale comes from those ticks; the expected lengths and
start times come from the bundle's own phases.parquet and steps.parquet, computed here. Both the
real 2-rank sample and a 16-process bundle made from it (ranks replicated with shifted times) are
measured. With VERLPROF_SCREENSHOTS=DIR the screenshots are also copied there (docs/img).
"""
from __future__ import annotations

import html
import json
import math
import os
import re
import shutil
import struct
import subprocess
import xml.etree.ElementTree as ET
import zlib
from pathlib import Path
from urllib.parse import unquote

import numpy as np
import pandas as pd
import pytest
from verlprof.pipeline.report import render_bundle_report
from verlprof.pipeline.report_html import STAGE_COLORS

REPO = Path(__file__).resolve().parents[1]
SAMPLE = REPO / "samples" / "tiny_run"
CHROMIUM = os.environ.get("VERLPROF_CHROMIUM") or shutil.which("chromium") or shutil.which("chromium-browser")
WINDOW = (1400, 1000)
PLANTED = ("http://probe-img.invalid/x.png", "https://probe-css.invalid/bg.png", "http://probe-svg.invalid/a.png")


@pytest.fixture(scope="module")
def bundle(collect_once) -> Path:
    """A real bundle with its report: `verlprof collect samples/tiny_run --html` (read only)."""
    res = collect_once(SAMPLE, "--html")
    assert res.code == 0, res.stdout + res.stderr
    return res.out


def _hrefs(page: str) -> list[str]:
    return re.findall(r'href="([^"]*)"', page)


def _chart(page: str) -> ET.Element:
    """The stage chart (first inline SVG chart), parsed as XML."""
    return ET.fromstring(re.search(r'<svg role="img".*?</svg>', page, re.DOTALL).group(0))


def test_every_trace_is_linked_and_every_link_resolves(bundle: Path) -> None:
    page = (bundle / "report.html").read_text()
    manifest = json.loads((bundle / "manifest.json").read_text())
    traces = {t["source"]: t["outputs"] for t in manifest["traces"]}
    assert traces, "collect wrote no window trace"
    links = _hrefs(page)
    files = [h for h in links if not h.startswith("#")]
    for h in links:
        if h.startswith("#"):
            assert f'id="{h[1:]}"' in page, h
    for h in files:
        assert ":" not in h and not h.startswith("/") and ".." not in h.split("/"), h
        target = (bundle / unquote(h)).resolve()
        assert target.is_file() and target.is_relative_to((bundle / "traces").resolve()), h
    # Every trace file of the manifest is reachable from the page.
    # (and the merged trace of all ranks, issue 23)
    expected = {rel for outs in traces.values() for rel in outs.values()}
    if manifest.get("merged_trace"):
        expected.add(manifest["merged_trace"])
    assert {unquote(h) for h in files} == expected
    # Each process bar links to the Chrome trace of the source its phase rows came from.
    phases = pd.read_parquet(bundle / "summaries" / "phases.parquet")
    chart = _chart(page)
    anchors = list(chart.iter("a"))
    assert len(anchors) == len(_processes(phases))
    for a in anchors:
        label = a.find("text").text
        rects = list(a.iter("rect"))
        assert rects, label
        # Labels name a process by "<role> rank <r> [<kind>]" or "... pid <p> [<kind>]".
        m = re.search(r"(pid|rank) (\d+) \[(\w+)\]", label)
        assert m, label
        rows = phases[(phases[m.group(1)] == int(m.group(2))) & (phases["source_kind"] == m.group(3))]
        expected = {traces[s]["chrome"] for s in rows["source"].unique() if s in traces}
        assert unquote(a.get("href")) in expected, label


def _run_chromium(page: Path, out: Path) -> subprocess.Popen:
    """Start headless Chromium on `page`: screenshot to out/shot.png, net log to out/net.json."""
    out.mkdir(parents=True, exist_ok=True)
    cmd = [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
           "--no-first-run", "--disable-component-update", "--disable-sync", "--disable-dev-shm-usage",
           "--hide-scrollbars", "--force-device-scale-factor=1",
           "--host-resolver-rules=MAP * ~NOTFOUND",
           f"--user-data-dir={out / 'profile'}", f"--log-net-log={out / 'net.json'}",
           f"--screenshot={out / 'shot.png'}", f"--window-size={WINDOW[0]},{WINDOW[1]}", page.as_uri()]
    return subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)


def _finish(proc: subprocess.Popen, out: Path) -> None:
    try:
        _, err = proc.communicate(timeout=60)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.communicate()
        pytest.fail("chromium did not finish within 60 s")
    assert proc.returncode == 0 and (out / "shot.png").is_file(), err[-2000:]


def page_requests(net_log: Path) -> list[str]:
    """URLs the page itself asked the network for (see the module docstring)."""
    log = json.loads(net_log.read_text())
    start_job = log["constants"]["logEventTypes"]["URL_REQUEST_START_JOB"]
    urls = []
    for ev in log["events"]:
        p = ev.get("params") or {}
        if ev["type"] != start_job or "url" not in p:
            continue
        initiator, nik = str(p.get("initiator", "")), str(p.get("network_isolation_key", ""))
        if initiator == "null" or initiator.startswith("file:") or nik.startswith("file:"):
            urls.append(p["url"])
    return urls


def read_png(path: Path) -> np.ndarray:
    """Decode an 8-bit, non-interlaced RGB/RGBA PNG (what Chromium writes) to an HxWx3 array."""
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n", path
    pos, idat, hdr = 8, [], None
    while pos < len(data):
        (n,), typ = struct.unpack(">I", data[pos:pos + 4]), data[pos + 4:pos + 8]
        body = data[pos + 8:pos + 8 + n]
        pos += 12 + n
        if typ == b"IHDR":
            hdr = struct.unpack(">IIBBBBB", body)
        elif typ == b"IDAT":
            idat.append(body)
        elif typ == b"IEND":
            break
    w, h, depth, ctype, _, _, interlace = hdr
    assert depth == 8 and ctype in (2, 6) and interlace == 0, hdr
    bpp = 3 if ctype == 2 else 4
    stride = w * bpp
    raw = zlib.decompress(b"".join(idat))
    lo = int.from_bytes(b"\x7f" * stride, "little")
    hi = int.from_bytes(b"\x80" * stride, "little")
    prev, rows = bytearray(stride), []
    for y in range(h):
        f, line = raw[y * (stride + 1)], bytearray(raw[y * (stride + 1) + 1:(y + 1) * (stride + 1)])
        if f == 1:      # Sub
            for i in range(bpp, stride):
                line[i] = (line[i] + line[i - bpp]) & 255
        elif f == 2:    # Up: bytewise add without carries, on one big integer
            a, b = int.from_bytes(line, "little"), int.from_bytes(prev, "little")
            line = bytearray((((a & lo) + (b & lo)) ^ ((a ^ b) & hi)).to_bytes(stride, "little"))
        elif f == 3:    # Average
            for i in range(stride):
                line[i] = (line[i] + ((line[i - bpp] if i >= bpp else 0) + prev[i]) // 2) & 255
        elif f == 4:    # Paeth
            for i in range(stride):
                a = line[i - bpp] if i >= bpp else 0
                b, c = prev[i], (prev[i - bpp] if i >= bpp else 0)
                pa, pb, pc = abs(b - c), abs(a - c), abs(a + b - 2 * c)
                line[i] = (line[i] + (a if pa <= pb and pa <= pc else b if pb <= pc else c)) & 255
        rows.append(bytes(line))
        prev = line
    return np.frombuffer(b"".join(rows), np.uint8).reshape(h, w, bpp)[:, :, :3]


def _png(w: int, h: int, pixels: bytes, filters: list[int]) -> bytes:
    """A PNG with the given filter type per row (encoder for the reader's own check)."""
    out, prev = bytearray(), bytes(w * 3)
    for y in range(h):
        row = pixels[y * w * 3:(y + 1) * w * 3]
        f = filters[y % len(filters)]
        enc = bytearray()
        for i, x in enumerate(row):
            a = row[i - 3] if i >= 3 else 0
            b, c = prev[i], (prev[i - 3] if i >= 3 else 0)
            p = a + b - c
            pr = a if abs(p - a) <= abs(p - b) and abs(p - a) <= abs(p - c) else b if abs(p - b) <= abs(p - c) else c
            enc.append((x - (0, a, b, (a + b) // 2, pr)[f]) & 255)
        out += bytes([f]) + enc
        prev = row

    def chunk(t: bytes, d: bytes) -> bytes:
        return struct.pack(">I", len(d)) + t + d + struct.pack(">I", zlib.crc32(t + d))
    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", w, h, 8, 2, 0, 0, 0))
            + chunk(b"IDAT", zlib.compress(bytes(out))) + chunk(b"IEND", b""))


def test_png_reader_decodes_every_filter(tmp_path: Path) -> None:
    rng = np.random.default_rng(7)
    pix = rng.integers(0, 256, size=(9, 13, 3), dtype=np.uint8)
    (tmp_path / "t.png").write_bytes(_png(13, 9, pix.tobytes(), [0, 1, 2, 3, 4]))
    assert np.array_equal(read_png(tmp_path / "t.png"), pix)


def _rgb(hexcolor: str) -> np.ndarray:
    return np.array([int(hexcolor[i:i + 2], 16) for i in (1, 3, 5)], np.uint8)


@pytest.mark.skipif(not CHROMIUM, reason="chromium is not installed (CI: bash .ci/install_chromium.sh)")
def test_report_draws_offline_in_headless_chromium(bundle: Path, tmp_path: Path) -> None:
    report = bundle / "report.html"
    page = report.read_text()
    control = tmp_path / "control.html"
    img, css, svg = PLANTED
    control.write_text(page.replace("</style>", f"body{{background-image:url({css})}}</style>", 1)
                       .replace("<body>", f'<body><img src="{img}" width="4" height="4">'
                                f'<svg width="4" height="4"><image href="{svg}" width="4" height="4"/></svg>', 1))
    runs = {"report": (report, tmp_path / "report"), "control": (control, tmp_path / "control")}
    procs = {k: _run_chromium(p, out) for k, (p, out) in runs.items()}
    for k, proc in procs.items():
        _finish(proc, runs[k][1])

    # The detector sees every planted request of the control page, so its silence on the report counts.
    assert sorted(page_requests(tmp_path / "control" / "net.json")) == sorted(PLANTED)
    assert page_requests(tmp_path / "report" / "net.json") == []

    shot = read_png(tmp_path / "report" / "shot.png")
    assert shot.shape[:2] == (WINDOW[1], WINDOW[0])
    chart = _chart(page)
    fills = {r.get("fill") for r in chart.iter("rect")}
    assert {STAGE_COLORS["generation"], STAGE_COLORS["actor_update"]} <= fills
    drawn = chart_drawn(shot, chart)
    assert drawn >= 8, drawn


def chart_drawn(shot: np.ndarray, chart: ET.Element) -> int:
    """Find the chart in the screenshot and check every bar segment is painted where the SVG puts
    it, in its colour; return how many segments were checked.

    The chart's origin on the page is found from its largest segment (a run of exactly its colour
    with its width and height; legend swatches are smaller); every segment wider than 6 px must
    then have >= 98 % of its inside (2 px in from each edge, so anti-aliasing does not matter)
    in exactly its colour."""
    rects = [(float(r.get("x")), float(r.get("y")), float(r.get("width")), float(r.get("height")), r.get("fill"))
             for r in chart.iter("rect")]
    big = [r for r in rects if r[2] > 6 and r[3] > 6]
    assert big, "the chart has no segment to look for"
    rx, ry, rw, rh, rfill = max(big, key=lambda r: r[2] * r[3])
    mask = (shot == _rgb(rfill)).all(axis=2)
    corners = np.argwhere(mask & ~np.roll(mask, 1, axis=0) & ~np.roll(mask, 1, axis=1))
    for top, left in corners:
        ox, oy = int(left) - math.ceil(rx), int(top) - math.ceil(ry)
        if not mask[top:top + int(rh) - 2, left:left + int(rw) - 2].all():
            continue
        ok = 0
        for x, y, w, h, fill in big:
            x0, y0 = math.ceil(ox + x) + 2, math.ceil(oy + y) + 2
            x1, y1 = math.floor(ox + x + w) - 2, math.floor(oy + y + h) - 2
            if y0 < 0 or x0 < 0 or y1 > shot.shape[0] or x1 > shot.shape[1]:
                break
            inside = shot[y0:y1, x0:x1]
            if (inside == _rgb(fill)).all(axis=2).mean() < 0.98:
                break
            ok += 1
        else:
            return ok
    raise AssertionError(f"no place in the screenshot shows the chart's {len(big)} segments "
                         f"({len(corners)} candidate corners of {rfill})")


# ----------------------------------------------------------------------------------------------
# Issue 13: bars as long as the step, one timeline lane per process, boxes at their start times
# ----------------------------------------------------------------------------------------------

_MEASURE = """<script>
const box = e => e.getBoundingClientRect();
const ticks = svg => [...svg.querySelectorAll('g.tick')].map(t => [t.querySelector('text').textContent,
                                                                  box(t.querySelector('line')).left]);
const bars = document.querySelector('svg.stepbars'), tl = document.querySelector('svg.timeline');
const out = {bar_ticks: ticks(bars), tl_ticks: ticks(tl), bars: [], lanes: []};
for (const g of bars.querySelectorAll('g.proc')) {
  const r = [...g.querySelectorAll('g.wall rect')].map(box);
  out.bars.push([g.dataset.proc, Math.min(...r.map(b => b.left)), Math.max(...r.map(b => b.right))]);
}
for (const g of tl.querySelectorAll('g.lane')) {
  const a = g.querySelector('a');
  out.lanes.push([g.dataset.proc, a ? a.getAttribute('href') : null,
                  [...g.querySelectorAll('rect.ph')].map(r => [r.dataset.phase, box(r).left, box(r).width])]);
}
const pre = document.createElement('pre'); pre.id = 'measure'; pre.textContent = JSON.stringify(out);
document.body.appendChild(pre);
</script>"""


def _processes(phases: pd.DataFrame) -> dict[tuple, pd.DataFrame]:
    """(role, rank, pid) -> the rows the page draws for it: nsys rows where the process has any."""
    out = {}
    for key, grp in phases.groupby(["role", "rank", "pid"], dropna=False):
        kinds = set(grp["source_kind"])
        out[key] = grp[grp["source_kind"] == ("nsys" if "nsys" in kinds else min(kinds))]
    return out


def _step_window(rows: pd.DataFrame, steps: pd.DataFrame) -> tuple[int, int]:
    """A process's step: its own `step` range, else the steps table's chosen step of its sources."""
    step = rows[rows["stage"] == "step"]
    if len(step):
        return int(step["start_ns"].iloc[0]), int(step["start_ns"].iloc[0] + step["wall_ns"].iloc[0])
    mine = steps[steps["chosen"] & steps["source"].isin(rows["source"]) & (steps["pid"] == rows["pid"].iloc[0])]
    return int(mine["start_ns"].min()), int((mine["start_ns"] + mine["wall_ns"]).max())


def _top_level(rows: pd.DataFrame) -> pd.DataFrame:
    step = rows[rows["stage"] == "step"]
    if len(step):
        return rows[rows["parent"] == step["phase"].iloc[0]]
    return rows[(rows["depth"] == 0) & (rows["phase"] != "(unattributed)")]


def _label(key: tuple, kind: str) -> str:
    role, rank, pid = key
    return f"{role} rank {int(rank)} [{kind}]" if not pd.isna(rank) else f"{role} pid {int(pid)} [{kind}]"


def _scale(ticks: list) -> tuple[float, float]:
    """(x of 0 ms, px per ms) from the rendered tick lines and their labels."""
    vals = [(float(t.replace(",", "")), x) for t, x in ticks]
    assert vals[0][0] == 0 and len(vals) >= 3
    (_, x0), (v1, x1) = vals[0], vals[-1]
    return x0, (x1 - x0) / v1


def _measure(page: Path, out: Path) -> dict:
    """Lay the page out in headless Chromium and return what the measuring script read."""
    out.mkdir(parents=True, exist_ok=True)
    probe = out / "measure.html"
    probe.write_text(page.read_text().replace("</body>", _MEASURE + "</body>", 1))
    cmd = [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
           "--no-first-run", "--disable-component-update", "--disable-sync", "--disable-dev-shm-usage",
           "--force-device-scale-factor=1", "--host-resolver-rules=MAP * ~NOTFOUND",
           f"--user-data-dir={out / 'profile'}", f"--window-size={WINDOW[0]},{WINDOW[1]}", "--dump-dom", probe.as_uri()]
    res = subprocess.run(cmd, capture_output=True, text=True, timeout=60, check=False)
    m = re.search(r'<pre id="measure">(.*?)</pre>', res.stdout, re.DOTALL)
    assert m, res.stderr[-2000:]
    return json.loads(html.unescape(m.group(1)))


def synthetic_bundle(src: Path, dst: Path, n: int = 16) -> Path:
    """A bundle of `n` actor ranks made from the real 2-rank sample: each rank is a copy of rank
    (r % 2)'s nsys rows, steps and window traces under a new pid, shifted by 0.4 ms per rank
    (rank 11 by 6 ms more: a straggler). Rendering only; the numbers are the sample's own."""
    shutil.copytree(src, dst)
    phases = pd.read_parquet(dst / "summaries" / "phases.parquet")
    steps = pd.read_parquet(dst / "summaries" / "steps.parquet")
    manifest = json.loads((dst / "manifest.json").read_text())
    traces = {t["source"]: t for t in manifest["traces"]}
    actors = phases[(phases["source_kind"] == "nsys") & phases["rank"].notna()]
    base = {int(r): s for r, s in actors.groupby("rank")["source"].first().items()}
    assert set(base) == {0, 1}
    new_ph, new_st, new_tr = [], [], []
    for rank in range(n):
        src_name = base[rank % 2]
        old_pid = int(actors[actors["source"] == src_name]["pid"].iloc[0])
        pid, shift = 20000 + rank, rank * 400_000 + (6_000_000 if rank == 11 else 0)
        source = src_name.replace(f"worker_process_{old_pid}", f"worker_process_{pid}")
        for df, acc in ((actors, new_ph), (steps[steps["source"] == src_name], new_st)):
            part = df[df["source"] == src_name]
            acc.append(part.assign(rank=rank, pid=pid, source=source, start_ns=part["start_ns"] + shift))
        outputs = {}
        for kind, rel in traces[src_name]["outputs"].items():
            outputs[kind] = rel.replace(f"worker_process_{old_pid}", f"worker_process_{pid}")
            shutil.copyfile(dst / rel, dst / outputs[kind])
        new_tr.append({**traces[src_name], "source": source, "outputs": outputs})
    pd.concat(new_ph, ignore_index=True).to_parquet(dst / "summaries" / "phases.parquet")
    pd.concat(new_st, ignore_index=True).to_parquet(dst / "summaries" / "steps.parquet")
    manifest["traces"] = new_tr
    (dst / "manifest.json").write_text(json.dumps(manifest))
    (dst / "report.html").write_text(render_bundle_report(dst))
    return dst


@pytest.fixture(scope="module")
def bundle16(bundle: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return synthetic_bundle(bundle, tmp_path_factory.mktemp("report16") / "b")


@pytest.mark.skipif(not CHROMIUM, reason="chromium is not installed (CI: bash .ci/install_chromium.sh)")
@pytest.mark.parametrize("which", ["sample", "sixteen"])
def test_rendered_bars_and_timeline_match_the_summaries(which: str, bundle: Path, bundle16: Path,
                                                        tmp_path: Path) -> None:
    b = bundle if which == "sample" else bundle16
    phases = pd.read_parquet(b / "summaries" / "phases.parquet")
    steps = pd.read_parquet(b / "summaries" / "steps.parquet")
    procs = _processes(phases)
    assert len(procs) == (3 if which == "sample" else 16)
    got = _measure(b / "report.html", tmp_path / "m")

    # Every process's bar is as long as its step wall, within 1 px, and starts at 0 ms.
    x0, scale = _scale(got["bar_ticks"])
    bars = {label: (left, right) for label, left, right in got["bars"]}
    assert len(bars) == len(procs)
    for key, rows in procs.items():
        start, end = _step_window(rows, steps)
        left, right = bars[_label(key, rows["source_kind"].iloc[0])]
        assert abs(left - x0) <= 1
        assert abs((right - left) - (end - start) / 1e6 * scale) <= 1, (key, right - left, (end - start) / 1e6)

    # One lane per process; each top-level phase box sits at its start time (0 ms = the earliest
    # step or phase start of the drawn rows), within 1 px; each lane opens its process's trace.
    t0 = min(min(_step_window(r, steps)[0] for r in procs.values()),
             min(int(r["start_ns"].min()) for r in procs.values()))
    x0, scale = _scale(got["tl_ticks"])
    lanes = {label: (href, boxes) for label, href, boxes in got["lanes"]}
    assert len(got["lanes"]) == len(lanes) == len(procs)
    manifest = json.loads((b / "manifest.json").read_text())
    chrome_of = {t["source"]: t["outputs"]["chrome"] for t in manifest["traces"]}
    checked = 0
    for key, rows in procs.items():
        href, boxes = lanes[_label(key, rows["source_kind"].iloc[0])]
        assert unquote(href) in {chrome_of[s] for s in rows["source"].unique() if s in chrome_of}
        top = _top_level(rows)
        assert sorted(p for p, _, _ in boxes) == sorted(top["phase"])
        at = {p: (left, width) for p, left, width in boxes}
        for r in top.itertuples():
            left, width = at[r.phase]
            assert abs(left - (x0 + (r.start_ns - t0) / 1e6 * scale)) <= 1, (key, r.phase)
            assert abs(width - r.wall_ns / 1e6 * scale) <= 1, (key, r.phase)
            checked += 1
    assert checked >= len(procs) * 4


@pytest.mark.skipif(not CHROMIUM, reason="chromium is not installed (CI: bash .ci/install_chromium.sh)")
def test_screenshots_of_the_sample_and_sixteen_processes(bundle: Path, bundle16: Path, tmp_path: Path) -> None:
    """Both pages draw offline and stay small; VERLPROF_SCREENSHOTS=DIR keeps the pictures."""
    shots = {}
    for name, b, size in (("report-sample", bundle, (1400, 1050)), ("report-16-processes", bundle16, (1400, 1750))):
        page = (b / "report.html").read_text()
        assert len(page.encode()) < 2_000_000
        outside = [u for u in re.findall(r'(?:href|src)="([^"]*)"', page) if ":" in u]
        assert outside == []
        out = tmp_path / name
        out.mkdir()
        cmd = [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
               "--no-first-run", "--disable-component-update", "--hide-scrollbars", "--force-device-scale-factor=1",
               "--host-resolver-rules=MAP * ~NOTFOUND", f"--user-data-dir={out / 'profile'}",
               f"--screenshot={out / 'shot.png'}", f"--window-size={size[0]},{size[1]}", (b / "report.html").as_uri()]
        subprocess.run(cmd, capture_output=True, timeout=60, check=True)
        shot = read_png(out / "shot.png")
        assert shot.shape[:2] == (size[1], size[0])
        # The actor_update boxes of every lane are painted (the stage's colour fills a real area).
        assert (shot == _rgb(STAGE_COLORS["actor_update"])).all(axis=2).sum() > 2000
        shots[name] = out / "shot.png"
    keep = os.environ.get("VERLPROF_SCREENSHOTS")
    if keep:
        Path(keep).mkdir(parents=True, exist_ok=True)
        for name, path in shots.items():
            shutil.copyfile(path, Path(keep) / f"{name}.png")
