"""Benchmark: window traces (issue 7) on big inputs: time and peak memory per step.

Why: windows are cut from whole-run exports of GBs and torch traces of hundreds of MB. The work must
stream (memory flat in the input size) and take seconds. Each measurement runs in a fresh child
process; time is measured inside it around the work, peak memory is the child's `ru_maxrss`.

    python bench/make_big_sqlite.py --mb 100       # once (see that script for bigger ones)
    python bench/make_big_trace.py                 # once: bench/data/big_trace.json.gz
    python bench/bench_traces.py [--sqlite FILE ...] [--trace FILE]

The window is the second NVTX `step` range of each export, and the middle third of the torch trace.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
DATA = REPO / "bench" / "data"

NSYS_CHILD = """
import json, sqlite3, sys, time
from pathlib import Path
from verlprof.stages.traces.jobs import nsys_sqlite_to_chrome, window_nsys_sqlite
src, out = Path(sys.argv[1]), Path(sys.argv[2])
con = sqlite3.connect(f"file:{src}?mode=ro&immutable=1", uri=True)
epoch = con.execute("SELECT utcEpochNs FROM TARGET_INFO_SESSION_START_TIME").fetchone()[0]
s, e = con.execute("SELECT n.start, n.end FROM NVTX_EVENTS n LEFT JOIN StringIds t ON t.id = n.textId "
                   "WHERE coalesce(n.text, t.value) = 'step' ORDER BY n.start LIMIT 1 OFFSET 1").fetchone()
con.close()
t0 = time.perf_counter()
w = window_nsys_sqlite(src, out / "w.sqlite", epoch + s, epoch + e)
t1 = time.perf_counter()
c = nsys_sqlite_to_chrome(out / "w.sqlite", out / "w.trace.json.gz")
t2 = time.perf_counter()
print(json.dumps({"window_s": t1 - t0, "chrome_s": t2 - t1, "window_mb": w.size / 1e6,
                  "chrome_mb": c.size / 1e6, "kernels": w.kernels, "events": c.total}))
"""

TORCH_CHILD = """
import json, sys, time
from pathlib import Path
from verlprof.stages.traces.torch_window import window_chrome_trace
src, out = Path(sys.argv[1]), Path(sys.argv[2])
lo, hi = float(sys.argv[3]), float(sys.argv[4])
t0 = time.perf_counter()
c = window_chrome_trace(src, out / "w.json.gz", lo, hi)
t1 = time.perf_counter()
print(json.dumps({"window_s": t1 - t0, "chrome_mb": c.size / 1e6, "events": c.events,
                  "dropped": c.dropped}))
"""


def run_child_rss(code: str, *args: str) -> tuple[dict, float]:
    """Run `code` in a fresh interpreter; return its JSON line and its peak RSS in MB."""
    proc = subprocess.Popen([sys.executable, "-c", code, *args], stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    out = proc.stdout.read()
    _pid, status, usage = os.wait4(proc.pid, 0)
    if status:
        sys.exit(f"child failed (status {status})")
    return json.loads(out.strip().splitlines()[-1]), usage.ru_maxrss / 1024


def trace_span(path: Path) -> tuple[float, float]:
    """Middle third of a trace's time span (one streaming pass of the one chrome-trace reader)."""
    import orjson
    from verlprof.stages.readers.chrome_trace import ChromeTraceStream

    lo, hi = float("inf"), float("-inf")
    for batch in ChromeTraceStream(path):
        for ev in batch.events if batch.tolerant else orjson.loads(b"[" + batch.raw + b"]"):
            ts = ev.get("ts") if isinstance(ev, dict) else None
            if isinstance(ts, (int, float)):
                lo, hi = min(lo, ts), max(hi, ts)
    third = (hi - lo) / 3
    return lo + third, lo + 2 * third


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sqlite", nargs="*", type=Path,
                    default=sorted(DATA.glob("big_*mb_p*.sqlite"), key=lambda p: p.stat().st_size)[:2])
    ap.add_argument("--trace", type=Path, default=DATA / "big_trace.json.gz")
    args = ap.parse_args()
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for src in args.sqlite:
            res, rss = run_child_rss(NSYS_CHILD, str(src), tmp)
            rows.append((src.name, f"{src.stat().st_size / 1e6:.0f} MB", f"{res['window_s'] + res['chrome_s']:.2f} s",
                         f"{rss:.0f} MB", f"{res['window_mb']:.1f} + {res['chrome_mb']:.1f} MB",
                         f"sqlite {res['window_s']:.2f} s, chrome {res['chrome_s']:.2f} s, {res['kernels']} kernels"))
        if args.trace.exists():
            lo, hi = trace_span(args.trace)
            res, rss = run_child_rss(TORCH_CHILD, str(args.trace), tmp, str(lo), str(hi))
            rows.append((args.trace.name, f"{args.trace.stat().st_size / 1e6:.0f} MB gz", f"{res['window_s']:.2f} s",
                         f"{rss:.0f} MB", f"{res['chrome_mb']:.1f} MB",
                         f"{res['events']} events kept, {res['dropped']} dropped"))
    head = ("input", "size", "time", "peak RSS", "output", "detail")
    widths = [max(len(str(r[i])) for r in rows + [head]) for i in range(len(head))]
    for r in [head] + rows:
        print("  ".join(str(c).ljust(w) for c, w in zip(r, widths)))


if __name__ == "__main__":
    main()
