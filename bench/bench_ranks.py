"""Benchmark 1,024- and 10,240-rank bundles through `summarize --html` and the bundle report (issues 23, 32).

Why: the views across ranks (ranks.parquet, the terminal by role, the report's Ranks section, the
timeline) must stay fast and small at 1,000 ranks. The bundle is made from a real one by
replicating its ranks (`bench/replicate_ranks.py`; by default the real 2-rank H200 gloo capture
tests/data/gpu_captures/n2-gloo-same-gpu, collected first, with its window traces so the report
draws GPU lanes). Targets: each of `summarize --html` and the report under 60 s on 2 cores,
report.html under 10 MB (issue 32: 64.9 MB at 10,240 ranks before, one timeline lane per rank;
past 48 processes the report draws the culprits, the slowest and a distribution, the rest in a
collapsed table).

    python bench/bench_ranks.py                 # 1,024 and 10,240 ranks
    python bench/bench_ranks.py --ranks 4096 --bundle OUT_OF_COLLECT
"""
from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))
sys.path.insert(0, str(ROOT / "tests"))

from replicate_ranks import replicate_bundle  # noqa: E402


def _cli(*args: str) -> tuple[float, str]:
    t0 = time.perf_counter()
    res = subprocess.run([sys.executable, "-m", "verlprof.pipeline.cli", *args], capture_output=True, text=True)
    if res.returncode not in (0, 3):
        raise SystemExit(f"verlprof {' '.join(args)} failed:\n{res.stdout[-2000:]}\n{res.stderr[-2000:]}")
    return time.perf_counter() - t0, res.stdout


def _one(src: Path, tmp: Path, work: Path, n: int) -> None:
    import os

    t0 = time.perf_counter()
    big = replicate_bundle(src, tmp / f"r{n}", n, traces=True)
    print(f"replicate to {n:,} ranks: {time.perf_counter() - t0:.1f} s   (load average {os.getloadavg()[0]:.1f})")
    secs_sum, out = _cli("summarize", str(big), "-o", str(tmp / f"cmp{n}"), "--work", str(work), "--html", "--fresh")
    t0 = time.perf_counter()
    from verlprof.pipeline.report.run_page import render_bundle_report

    page = render_bundle_report(big)
    secs_rep = time.perf_counter() - t0
    (tmp / f"report{n}.html").write_text(page)
    import pyarrow.parquet as pq

    rows = pq.read_metadata(big / "summaries" / "phases.parquet").num_rows
    rrows = pq.read_metadata(big / "summaries" / "ranks.parquet").num_rows
    size_cmp = (tmp / f"cmp{n}" / "report.html").stat().st_size
    print(f"ranks: {n:,}, phases rows: {rows:,}, ranks.parquet rows: {rrows:,}")
    print(f"summarize --html (fresh, 1 run): {secs_sum:6.1f} s   target < 60 s   compare report.html {size_cmp / 1e6:.2f} MB")
    print(f"bundle report (render_bundle_report): {secs_rep:6.1f} s   target < 60 s   report.html "
          f"{len(page.encode()) / 1e6:.2f} MB   target < 10 MB   (load average {os.getloadavg()[0]:.1f})")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ranks", type=int, nargs="+", default=[1024, 10240])
    ap.add_argument("--bundle", type=Path, help="a collect bundle to replicate (default: collect n2-gloo-same-gpu)")
    ap.add_argument("--work", type=Path, default=None)
    a = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="bench_ranks_"))
    work = a.work or tmp / "work"
    src = a.bundle
    if src is None:
        from testdata import data_dir

        src = tmp / "n2"
        secs, _ = _cli("collect", str(data_dir("gpu_captures/n2-gloo-same-gpu")), "-o", str(src), "--work", str(work))
        print(f"collect of the real 2-rank capture: {secs:.1f} s")
    for n in a.ranks:
        _one(src, tmp, work, n)
    print(f"outputs under {tmp}")


if __name__ == "__main__":
    main()
