"""Lay a report out in real headless Chromium and read its layout back (issue 42).

Why a helper: the run report and the comparison page must read at any window from 800 to 2,000
px, and only the browser knows where its text lands. A copy of the page gets a measuring script
(the page itself has none) and Chromium's `--dump-dom` returns what the script read from the laid-
out page: the viewport, the page's scroll width, the headline's box, every text run that is
clipped (drawn past the edge of a box that hides overflow: an SVG, an `overflow: hidden` or
ellipsised cell), every box that scrolls sideways, and every pair of text runs that overlap.
`--screenshot` of the same page at the same width is kept as the test's artifact.

Text runs: each non-blank text node's client rects (a Range over it), so a wrapped cell counts
line by line and an SVG `<text>` by its glyphs' box. Closed `<details>` and hidden elements have
no rects and are skipped.
"""
from __future__ import annotations

import html
import json
import re
import subprocess
from pathlib import Path

MEASURE = r"""
<script>
(function () {
  const W = window.innerWidth, H = window.innerHeight, TOL = 1.5;
  const out = {W: W, H: H, scrollW: document.documentElement.scrollWidth, clipped: [], overlaps: [],
               sideways: [], runs: 0};
  const hl = document.getElementById('headline');
  if (hl) { const r = hl.getBoundingClientRect(); out.headline = [r.left, r.top, r.right, r.bottom]; }
  function label(el) {
    const t = (el.textContent || '').trim().slice(0, 60);
    return el.tagName.toLowerCase() + (el.className && el.className.baseVal === undefined && el.className ? '.' + el.className : '') + ': ' + t;
  }
  function clipsOverflow(el) {
    if (el.tagName.toLowerCase() === 'svg') {
      const o = getComputedStyle(el).overflow; return o !== 'visible';
    }
    const s = getComputedStyle(el);
    return s.overflowX !== 'visible' || s.textOverflow === 'ellipsis';
  }
  // boxes that scroll sideways (their content wider than they are)
  for (const el of document.querySelectorAll('body *')) {
    const s = getComputedStyle(el);
    if ((s.overflowX === 'auto' || s.overflowX === 'scroll') && el.scrollWidth > el.clientWidth + 1) {
      out.sideways.push(label(el) + ' (' + el.scrollWidth + ' > ' + el.clientWidth + ')');
    }
  }
  const runs = [];
  const walker = document.createTreeWalker(document.body, NodeFilter.SHOW_TEXT);
  while (walker.nextNode()) {
    const node = walker.currentNode;
    if (!node.nodeValue.trim()) continue;
    const el = node.parentElement;
    if (!el || el.closest('script,style,title,pre#measure')) continue;
    const shut = el.closest('details:not([open])');
    if (shut && !el.closest('summary')) continue;   // folded away: not drawn
    const range = document.createRange();
    range.selectNodeContents(node);
    const rects = Array.from(range.getClientRects()).filter(r => r.width > 0.5 && r.height > 0.5);
    if (!rects.length) continue;
    // ellipsised: the element itself is narrower than its text
    const st = getComputedStyle(el);
    if (st.textOverflow === 'ellipsis' && el.scrollWidth > el.clientWidth + 1) {
      out.clipped.push(label(el) + ' (ellipsis)');
    }
    for (const r of rects) {
      runs.push({r: r, el: el, text: node.nodeValue.trim().slice(0, 40)});
      for (let a = el; a && a !== document.body; a = a.parentElement) {
        if (a === el && a.tagName.toLowerCase() !== 'svg') continue;
        if (!clipsOverflow(a)) continue;
        const b = a.getBoundingClientRect();
        const s = getComputedStyle(a);
        const scrolls = s.overflowX === 'auto' || s.overflowX === 'scroll';
        if (scrolls) break;   // reachable by scrolling: counted in `sideways`
        if (r.left < b.left - TOL || r.right > b.right + TOL || (a.tagName.toLowerCase() === 'svg' &&
            (r.top < b.top - TOL || r.bottom > b.bottom + TOL))) {
          out.clipped.push(label(el) + ' [' + Math.round(r.left) + '..' + Math.round(r.right) + ' in ' +
                           Math.round(b.left) + '..' + Math.round(b.right) + ']');
          break;
        }
      }
      if (r.right > W + TOL) out.clipped.push(label(el) + ' (past the window: ' + Math.round(r.right) + ' > ' + W + ')');
    }
  }
  out.runs = runs.length;
  // overlaps: a grid of 40 px cells keeps this linear
  const grid = new Map();
  runs.forEach((x, i) => {
    for (let gx = Math.floor(x.r.left / 40); gx <= Math.floor(x.r.right / 40); gx++)
      for (let gy = Math.floor((x.r.top + window.scrollY) / 40); gy <= Math.floor((x.r.bottom + window.scrollY) / 40); gy++) {
        const k = gx + ',' + gy; if (!grid.has(k)) grid.set(k, []); grid.get(k).push(i);
      }
  });
  const seen = new Set();
  for (const ids of grid.values()) {
    for (let p = 0; p < ids.length; p++) for (let q = p + 1; q < ids.length; q++) {
      const i = ids[p], j = ids[q], key = i < j ? i + ':' + j : j + ':' + i;
      if (seen.has(key)) continue; seen.add(key);
      const a = runs[i], b = runs[j];
      if (a.el === b.el || a.el.contains(b.el) || b.el.contains(a.el)) continue;
      const w = Math.min(a.r.right, b.r.right) - Math.max(a.r.left, b.r.left);
      const h = Math.min(a.r.bottom, b.r.bottom) - Math.max(a.r.top, b.r.top);
      if (w > 2 && h > 2) out.overlaps.push(a.text + ' | ' + b.text);
    }
  }
  const pre = document.createElement('pre'); pre.id = 'measure'; pre.textContent = JSON.stringify(out);
  document.body.appendChild(pre);
})();
</script>
"""


def _chromium_cmd(chromium: str, profile: Path, width: int, height: int) -> list[str]:
    return [chromium, "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
            "--no-first-run", "--disable-component-update", "--disable-sync", "--disable-dev-shm-usage",
            "--hide-scrollbars", "--force-device-scale-factor=1", "--host-resolver-rules=MAP * ~NOTFOUND",
            f"--user-data-dir={profile}", f"--window-size={width},{height}"]


def measure(chromium: str, page: Path, out: Path, width: int, height: int = 900) -> dict:
    """The layout of `page` at `width` x `height` (see the module docstring); a screenshot of the
    same page at the same size is written to out/<page stem>-<width>.png."""
    out.mkdir(parents=True, exist_ok=True)
    probe = out / f"{page.stem}-{width}.measure.html"
    probe.write_text(page.read_text().replace("</body>", MEASURE + "</body>", 1))
    # the probe sits beside the page's own folder only for relative links; it reads nothing
    res = subprocess.run([*_chromium_cmd(chromium, out / "profile", width, height), "--dump-dom", probe.as_uri()],
                         capture_output=True, text=True, timeout=120, check=False)
    m = re.search(r'<pre id="measure">(.*?)</pre>', res.stdout, re.DOTALL)
    if not m:
        raise AssertionError(f"no measurement from chromium: {res.stderr[-2000:]}")
    shot = out / f"{page.stem}-{width}.png"
    subprocess.run([*_chromium_cmd(chromium, out / "profile", width, height), f"--screenshot={shot}", page.as_uri()],
                   capture_output=True, text=True, timeout=120, check=False)
    got = json.loads(html.unescape(m.group(1)))
    got["screenshot"] = str(shot) if shot.is_file() else None
    return got
