"""Benchmark: verlprof's torch-trace parse + summarize against HolisticTraceAnalysis's load.

Why: issue 21's targets are >= 10x faster than HTA's default `TraceAnalysis(trace_dir=...)` load of
the same chrome trace, with <= 1/10 of its peak memory (issue 9's were 5x and 1/5). Each tool runs in a fresh child
process; its time is measured inside the child around the work itself (imports excluded), its peak
memory is the child's `ru_maxrss` from `os.wait4` (whole process, imports included).

    python bench/make_big_trace.py            # once: bench/data/big_trace.json.gz (>= 400 MB JSON)
    python bench/bench_torch.py [--trace FILE] [--repeat N] [--hta-ijson] [--skip-hta]

HTA: `pip install --no-deps HolisticTraceAnalysis` plus its light dependencies (plotly, pydot,
ijson, psutil, networkx), so that it cannot pull another torch.
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
DEFAULT_TRACE = REPO / "bench" / "data" / "big_trace.json.gz"

VERLPROF_PARSE = """
import json, sys, time
from verlprof.stages.readers.chrome_trace import read_chrome_trace
t = time.perf_counter()
d = read_chrome_trace(sys.argv[1])
print(json.dumps({"seconds": time.perf_counter() - t, "events": d.n_events, "kept_gpu": d.n_gpu}))
"""

VERLPROF_SUMMARIZE = """
import json, sys, time
from pathlib import Path
from verlprof.stages.summarize.torch_profile import summarize_torch_trace
from verlprof.stages.window.types import SourceIdentity
from verlprof.stages.summarize.types import SummarizeOptions
t = time.perf_counter()
rows = summarize_torch_trace(sys.argv[1], SourceIdentity(source=Path(sys.argv[1]).name, source_kind="torch"),
                             SummarizeOptions())
print(json.dumps({"seconds": time.perf_counter() - t, "phases": len(rows["phases"]),
                  "kernels": len(rows["kernels"])}))
"""

HTA_LOAD = """
import json, sys, time, logging
logging.disable(logging.CRITICAL)
from hta.trace_analysis import TraceAnalysis
if sys.argv[2] != "default":
    from hta.configs.parser_config import ParserBackend, ParserConfig
    cfg = ParserConfig.get_default_cfg()
    cfg.set_parser_backend(ParserBackend(sys.argv[2]))
    ParserConfig.set_default_cfg(cfg)
t = time.perf_counter()
a = TraceAnalysis(trace_dir=sys.argv[1])
n = sum(len(df) for df in a.t.traces.values())
print(json.dumps({"seconds": time.perf_counter() - t, "events": n}))
"""


def run_child(code: str, *args: str) -> dict:
    """Run `code` in a fresh interpreter, reaped with os.wait4 to read its own ru_maxrss; return
    the child's JSON line plus its peak RSS (MB) and wall time."""
    import time

    t0 = time.perf_counter()
    with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
        proc = subprocess.Popen([sys.executable, "-c", code, *args], stdout=out, stderr=err, cwd=REPO)
        _, status, usage = os.wait4(proc.pid, 0)
        proc.returncode = os.waitstatus_to_exitcode(status)
        wall = time.perf_counter() - t0
        out.seek(0)
        err.seek(0)
        text, etext = out.read(), err.read()
    if proc.returncode != 0:
        raise SystemExit(f"child failed ({proc.returncode}): {etext.strip()[-2000:]}")
    res = json.loads([ln for ln in text.splitlines() if ln.startswith("{")][-1])
    res["wall"] = wall
    res["rss_mb"] = usage.ru_maxrss / 1024   # Linux: KiB
    return res


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--trace", type=Path, default=DEFAULT_TRACE)
    ap.add_argument("--repeat", type=int, default=1, help="runs per tool (best time, max memory)")
    ap.add_argument("--skip-hta", action="store_true")
    ap.add_argument("--hta-ijson", action="store_true", help="also time HTA's ijson_batch_and_compress backend")
    a = ap.parse_args()
    trace = a.trace.resolve()
    if not trace.is_file():
        raise SystemExit(f"{trace} is missing: run `python bench/make_big_trace.py` first")
    size = trace.stat().st_size
    print(f"trace: {trace.name}, {size / 1e6:.0f} MB on disk; machine: {os.cpu_count()} cores; "
          f"load average {os.getloadavg()[0]:.2f}")

    def best(code: str, *args: str) -> dict:
        runs = [run_child(code, *args) for _ in range(a.repeat)]
        out = min(runs, key=lambda r: r["seconds"])
        out["rss_mb"] = max(r["rss_mb"] for r in runs)
        return out

    results: list[tuple[str, dict]] = [
        ("verlprof parse (read_chrome_trace)", best(VERLPROF_PARSE, str(trace))),
        ("verlprof parse + summarize", best(VERLPROF_SUMMARIZE, str(trace))),
    ]
    if not a.skip_hta:
        with tempfile.TemporaryDirectory() as d:
            (Path(d) / trace.name).symlink_to(trace)
            results.append(("HTA TraceAnalysis (default json)", best(HTA_LOAD, d, "default")))
            if a.hta_ijson:
                results.append(("HTA TraceAnalysis (ijson_batch_and_compress)",
                                best(HTA_LOAD, d, "ijson_batch_and_compress")))
    print()
    print(f"{'tool':<46} {'time s':>8} {'wall s':>8} {'peak RSS MB':>12}")
    for name, r in results:
        print(f"{name:<46} {r['seconds']:>8.2f} {r['wall']:>8.2f} {r['rss_mb']:>12.0f}")
    hta = dict(results).get("HTA TraceAnalysis (default json)")
    ours = dict(results)["verlprof parse + summarize"]
    if hta:
        print()
        print(f"speed-up vs HTA default load: {hta['seconds'] / ours['seconds']:.1f}x (target >= 10x); "
              f"memory: {ours['rss_mb'] / hta['rss_mb']:.3f} of HTA's peak (target <= 0.1)")


if __name__ == "__main__":
    main()
