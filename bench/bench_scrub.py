"""Benchmark the scrub stage: throughput (MB/s) and peak memory on a large SQLite export and a large
chrome trace. A script, not a timed test: it prints a table.

Inputs are built from the real H200 fixtures by the shared generators (rows / events replicated
with time offsets) into bench/data/ (git-ignored) and reused when present:

    python bench/bench_scrub.py                     # ~500 MB SQLite, ~400 MB (uncompressed) trace
    python bench/bench_scrub.py --sqlite-mb 100 --trace-mb 100

Each measurement runs in a fresh child process so `ru_maxrss` is that job's own peak. Columns:
identities = the cheap first pass (find_identities), scrub = writing the scrubbed copy, check = the
verifier on the output; MB/s = input MB (uncompressed for traces) / scrub seconds.
"""
from __future__ import annotations

import argparse
import gzip
import json
import os
import resource
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "bench" / "data"


def _child(kind: str, src: Path, out: Path) -> None:
    from verlprof.stages.scrub.tasks import ScrubTask, build_options, find_identities, scrub_artifact
    from verlprof.stages.scrub.policy import load_policy
    from verlprof.stages.scrub.check import check_paths

    pol = load_policy(use_local_environment=False)
    t0 = time.perf_counter()
    ids = find_identities(src, kind, pol)
    t1 = time.perf_counter()
    opts = build_options([ids], pol, salt="bench", include_local=False)
    res = scrub_artifact(ScrubTask(str(src), str(out), kind, src.name), opts)
    t2 = time.perf_counter()
    rss_scrub = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    findings = check_paths([out], pol, known=opts.pseudonyms)
    t3 = time.perf_counter()
    print(json.dumps({"identities_s": t1 - t0, "scrub_s": t2 - t1, "check_s": t3 - t2,
                      "rss_scrub_mb": rss_scrub,
                      "rss_peak_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
                      "out_mb": out.stat().st_size / 1e6, "findings": len(findings),
                      "replacements": res.total}))


def _uncompressed_mb(p: Path) -> float:
    if p.name.endswith(".gz"):
        n = 0
        with gzip.open(p, "rb") as f:
            while chunk := f.read(1 << 24):
                n += len(chunk)
        return n / 1e6
    return p.stat().st_size / 1e6


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sqlite-mb", type=float, default=500)
    ap.add_argument("--trace-mb", type=float, default=400)
    ap.add_argument("--child", nargs=3, metavar=("KIND", "SRC", "OUT"), help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.child:
        _child(args.child[0], Path(args.child[1]), Path(args.child[2]))
        return 0
    DATA.mkdir(parents=True, exist_ok=True)
    db = DATA / f"big_{int(args.sqlite_mb)}mb_p1.sqlite"
    if not db.exists():
        subprocess.run([sys.executable, str(ROOT / "bench" / "make_big_sqlite.py"), "--mb", str(args.sqlite_mb)], check=True)
    trace = DATA / f"big_trace_{int(args.trace_mb)}mb.json.gz"
    if not trace.exists():
        subprocess.run([sys.executable, str(ROOT / "bench" / "make_big_trace.py"), "--mb", str(args.trace_mb),
                        "--out", str(trace)], check=True)
    rows = []
    for kind, src, out in (("nsys_sqlite", db, DATA / "scrubbed_big.sqlite"),
                           ("torch_trace", trace, DATA / "scrubbed_big_trace.json.gz")):
        mb = _uncompressed_mb(src)
        p = subprocess.run([sys.executable, __file__, "--child", kind, str(src), str(out)],
                           capture_output=True, text=True, env=dict(os.environ))
        if p.returncode != 0:
            print(p.stderr[-3000:], file=sys.stderr)
            return 1
        r = json.loads(p.stdout.strip().splitlines()[-1])
        rows.append((kind, src.name, mb, r))
        out.unlink(missing_ok=True)
    hdr = f"{'input':<13} {'file':<28} {'MB in':>7} {'ident s':>8} {'scrub s':>8} {'MB/s':>6} {'check s':>8} {'MB out':>7} {'RSS scrub':>10} {'RSS peak':>9} {'find':>5}"
    print(hdr)
    print("-" * len(hdr))
    for kind, name, mb, r in rows:
        print(f"{kind:<13} {name[:28]:<28} {mb:>7.0f} {r['identities_s']:>8.1f} {r['scrub_s']:>8.1f} "
              f"{mb / r['scrub_s']:>6.1f} {r['check_s']:>8.1f} {r['out_mb']:>7.0f} {r['rss_scrub_mb']:>8.0f}MB "
              f"{r['rss_peak_mb']:>7.0f}MB {r['findings']:>5}")
    print(f"(machine: {os.cpu_count()} cores, shared with other jobs; one process per row)")
    _per_string()
    return 0


def _per_string() -> None:
    """Per-string cost of the rules on every kernel / range name of every real capture in
    tests/data (the false-positive corpus): first judgment, and a repeat (the per-run cache)."""
    sys.path.insert(0, str(ROOT / "tests"))
    from scrub_corpus import corpus
    from verlprof.stages.scrub.policy import load_policy
    from verlprof.stages.scrub.scrubber import Scrubber

    names = sorted(set().union(*corpus().values()))
    sc = Scrubber(load_policy(use_local_environment=False))
    t0 = time.perf_counter()
    changed = sum(sc.scrub(n, "bench") != n for n in names)
    t1 = time.perf_counter()
    for n in names:
        sc.scrub(n, "bench")
    t2 = time.perf_counter()
    short = [n for n in names if len(n) <= 40]
    sc2 = Scrubber(load_policy(use_local_environment=False))
    t3 = time.perf_counter()
    for n in short:
        sc2.scrub(n, "bench")
    t4 = time.perf_counter()
    print(f"per string: {len(names)} names, {changed} changed; first judgment {(t1 - t0) / len(names) * 1e6:.1f} us "
          f"(names <= 40 chars: {(t4 - t3) / max(1, len(short)) * 1e6:.1f} us, {len(short)} names), "
          f"repeat {(t2 - t1) / len(names) * 1e6:.2f} us")


if __name__ == "__main__":
    sys.exit(main())
