"""Benchmark: verlprof window + summarize vs NVIDIA's `nsys stats` on replicated real exports.

What is timed (each in a fresh subprocess, page cache warmed first, peak RSS from the child):
- verlprof: window (step discovery + choice) and summarize (projection of every NVTX range onto
  the GPU, whole-report kernel summary, the chosen step's phases and top kernels).
- nsys stats -r gpukernsum,nvtxsum,nvtxgpuproj (the same questions asked of NVIDIA's tool), at
  100 MB; at 1 GB nsys stats -r gpukernsum alone (its projection does not finish in 10 minutes).
- the floor: one full SQL scan of the kernel and runtime tables.

    python bench/make_big_sqlite.py --mb 100 && python bench/make_big_sqlite.py --mb 1100
    python bench/bench_nsys.py                      # all sizes found under bench/data
    python bench/bench_nsys.py --only 100 --no-nsys # quick: verlprof and the floor only

Targets (issue 4): >= 20x faster than the 3-report nsys stats at 100 MB; at 1 GB <= 3x
`gpukernsum` alone; peak memory < 1 GB.
"""
from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "bench" / "data"

_VERLPROF = r"""
import json, resource, sys, time
t0 = time.perf_counter()
from verlprof.stages.summarize import steps_rows
from verlprof.stages.summarize.nsys import projection_rows, scan_nsys, totals_rows
from verlprof.stages.readers.nsys_sqlite import NsysExport
from verlprof.stages.summarize.types import SummarizeOptions
from verlprof.stages.window.choice import run_window, window_spans
from verlprof.stages.window.steps import identity_from_path, nsys_source_steps
path = sys.argv[1]
ident = identity_from_path(path)
resolved, choice = run_window([nsys_source_steps(path, ident)], 2)
scan = scan_nsys(path, ident, SummarizeOptions(), window_spans(resolved[0], choice.step), kernel_totals=True)
proj = projection_rows(scan.ranges, scan.projection)
with NsysExport.open(path) as db:
    totals = totals_rows(db, scan.projection)
steps = steps_rows(resolved, choice)
dt = time.perf_counter() - t0
print(json.dumps({"seconds": dt, "rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
                  "phases": len(scan.rows["phases"]), "ranges": len(proj), "kernels": len(totals),
                  "steps": len(steps)}))
"""

_FLOOR = r"""
import json, resource, sqlite3, sys, time
t0 = time.perf_counter()
con = sqlite3.connect(f"file:{sys.argv[1]}?mode=ro&immutable=1", uri=True)
for t in ("CUPTI_ACTIVITY_KIND_KERNEL", "CUPTI_ACTIVITY_KIND_RUNTIME"):
    con.execute(f"SELECT count(*), max(start), max(end), max(correlationId) FROM {t}").fetchone()
print(json.dumps({"seconds": time.perf_counter() - t0,
                  "rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}))
"""


def _warm(path: Path) -> None:
    with open(path, "rb") as f:
        while f.read(1 << 24):
            pass


def _child(code: str, path: Path, timeout: float) -> dict:
    out = subprocess.run([sys.executable, "-c", code, str(path)], capture_output=True, text=True, timeout=timeout)
    if out.returncode != 0:
        raise RuntimeError(out.stderr[-2000:])
    return json.loads(out.stdout.strip().splitlines()[-1])


def _nsys_stats(path: Path, reports: str, timeout: float) -> dict:
    exe = shutil.which("nsys")
    if not exe:
        return {"seconds": None, "rss_mb": None, "note": "nsys not installed"}
    with tempfile.TemporaryDirectory() as tmp:
        # nsys stats may add tables to the file it reads: give it a private copy (not timed).
        db = Path(tmp) / path.name
        shutil.copyfile(path, db)
        _warm(db)
        cmd = ["/usr/bin/time", "-f", "%M", exe, "stats", "-q", "-r", reports, "--format", "csv",
               "-o", str(Path(tmp) / "out"), str(db)]
        t0 = time.perf_counter()
        try:
            out = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
        except subprocess.TimeoutExpired:
            return {"seconds": None, "rss_mb": None, "note": f"did not finish in {timeout:.0f}s"}
        dt = time.perf_counter() - t0
        try:
            rss = int(out.stderr.strip().splitlines()[-1]) / 1024
        except (ValueError, IndexError):
            rss = None
        return {"seconds": dt, "rss_mb": rss, "note": "" if out.returncode == 0 else f"exit {out.returncode}"}


def _fmt(v: float | None, spec: str) -> str:
    return "-" if v is None else format(v, spec)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--only", type=int, action="append", help="sizes in MB to run (default: all in bench/data)")
    ap.add_argument("--no-nsys", action="store_true", help="skip nsys stats (slow)")
    ap.add_argument("--timeout", type=float, default=600, help="seconds per nsys stats run (default 600)")
    args = ap.parse_args(argv)
    files = sorted(DATA.glob("big_*mb_p*.sqlite"), key=lambda p: (p.stat().st_size, p.name))
    if args.only:
        files = [f for f in files if int(f.name.split("_")[1][:-2]) in args.only]
    if not files:
        print("no inputs: run bench/make_big_sqlite.py --mb 100 (and --mb 1100) first", file=sys.stderr)
        return 1
    rows = []
    for f in files:
        mb = f.stat().st_size / 1e6
        _warm(f)
        ours = _child(_VERLPROF, f, 3600)
        floor = _child(_FLOOR, f, 3600)
        big = mb > 500
        ref_reports = "gpukernsum" if big else "gpukernsum,nvtxsum,nvtxgpuproj"
        ref = {"seconds": None, "rss_mb": None, "note": "skipped"} if args.no_nsys else _nsys_stats(f, ref_reports, args.timeout)
        ratio = ref["seconds"] / ours["seconds"] if ref["seconds"] else None
        rows.append((f.name, mb, ours, floor, ref_reports, ref, ratio))
        print(f"{f.name}: verlprof {ours['seconds']:.2f}s {ours['rss_mb']:.0f} MB "
              f"({ours['ranges']} ranges projected, {ours['kernels']} kernel names, {ours['phases']} phase rows); "
              f"floor {floor['seconds']:.2f}s; nsys stats -r {ref_reports}: {_fmt(ref['seconds'], '.2f')}s "
              f"{ref.get('note', '')}", file=sys.stderr, flush=True)
    print()
    print(f"{'input':<22} {'MB':>6} {'verlprof s':>10} {'peak MB':>8} {'floor s':>8} {'x floor':>8} "
          f"{'nsys stats reports':<30} {'nsys s':>8} {'nsys MB':>8} {'nsys/verlprof':>13}")
    for name, mb, ours, floor, reps, ref, ratio in rows:
        print(f"{name:<22} {mb:>6.0f} {ours['seconds']:>10.2f} {ours['rss_mb']:>8.0f} {floor['seconds']:>8.2f} "
              f"{ours['seconds'] / floor['seconds']:>8.1f} {reps:<30} {_fmt(ref['seconds'], '.2f'):>8} "
              f"{_fmt(ref['rss_mb'], '.0f'):>8} {_fmt(ratio, '.1f') + ('x' if ratio else ''):>13} {ref.get('note', '')}")
    print()
    print("targets: 100 MB: nsys/verlprof >= 20x (3 reports); 1 GB: verlprof <= 3x gpukernsum alone "
          "(nsys/verlprof >= 0.33x); peak < 1024 MB")
    return 0


if __name__ == "__main__":
    sys.exit(main())
