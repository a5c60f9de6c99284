"""Benchmark: what speed-up this machine itself allows N processes, before verlprof does anything.

Why: bench_collect's `--many N` target is 0.8 x min(N, cores) against `--jobs 1`. That presumes a
core is a core: N copies of the same CPU-bound work take as long at once as one alone. On shared
or hyperthreaded machines (two logical cores per physical one, an all-core clock below the
one-core turbo, memory bandwidth shared by N page-cache readers) they do not, and the ceiling of
any program's speed-up is lower. This script measures that ceiling, with the same process start
(fork) collect's pool uses, for two kinds of work:

- `python`: a pure-Python loop (the interpreter: string and dict work, as verlprof's Python parts);
- `sqlite`: full scans of the kernel and runtime tables of a 100 MB export from the page cache
  (bench/data/big_100mb_p1.sqlite, made by make_big_sqlite.py), as collect's summarize reads.

For each: the median seconds of one copy alone, of N copies at once, and the ceiling
N x t(1) / t(N): a perfectly parallel program on this machine gets no more than that.

    python bench/bench_cores.py              # N = the cores
    python bench/bench_cores.py --n 16 --n 8
"""
from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import sqlite3
import statistics
import time
from pathlib import Path

DATA = Path(__file__).resolve().parents[1] / "bench" / "data" / "big_100mb_p1.sqlite"


def python_work(_: int) -> float:
    """About half a second of interpreter work: dict and string operations, no I/O."""
    t = time.perf_counter()
    d: dict[str, int] = {}
    for i in range(1_500_000):
        k = f"k{i % 5000}"
        d[k] = d.get(k, 0) + i
    return time.perf_counter() - t


def sqlite_work(_: int, mmap: bool = False) -> float:
    """Full scans of the two largest tables of a 100 MB export, from the page cache (`mmap`:
    SQLite reads the file's pages where the page cache maps them instead of copying them)."""
    t = time.perf_counter()
    con = sqlite3.connect(f"file:{DATA}?mode=ro", uri=True)
    if mmap:
        con.execute(f"PRAGMA mmap_size={1 << 36}")
    for table in ("CUPTI_ACTIVITY_KIND_KERNEL", "CUPTI_ACTIVITY_KIND_RUNTIME"):
        con.execute(f"SELECT sum(\"end\" - start), count(*) FROM {table}").fetchall()
    con.close()
    return time.perf_counter() - t


def sqlite_mmap_work(_: int) -> float:
    return sqlite_work(_, mmap=True)


def at_once(fn, n: int, repeat: int) -> float:
    """Median over `repeat` rounds of the mean seconds of one copy when `n` run at once."""
    rounds = []
    ctx = mp.get_context("fork")
    with ctx.Pool(n) as pool:
        pool.map(fn, range(n))   # warm the workers (and the page cache)
        for _ in range(repeat):
            rounds.append(statistics.mean(pool.map(fn, range(n), chunksize=1)))
    return statistics.median(rounds)


def works() -> list[tuple[str, object]]:
    """The kinds of work measured: pure Python, and SQLite scans where the 100 MB export exists."""
    out: list[tuple[str, object]] = [("python", python_work)]
    if DATA.exists():
        out += [("sqlite", sqlite_work), ("sqlite+mmap", sqlite_mmap_work)]
    return out


def ceilings(n: int, repeat: int = 3, kinds: tuple[str, ...] = ("python", "sqlite")) -> dict[str, tuple[float, float, float]]:
    """Per kind of work: (seconds of one copy alone, of one copy among `n` at once, the ceiling
    n x alone / at once). bench_collect.py prints it beside its speed-up, measured in the same run."""
    out = {}
    for name, fn in works():
        if name in kinds:
            alone, many = at_once(fn, 1, repeat), at_once(fn, n, repeat)
            out[name] = (alone, many, n * alone / many)
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--n", type=int, action="append", help="processes at once (default: the cores)")
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    cores = os.cpu_count() or 1
    ns = args.n or [cores]
    print(f"cores: {cores}  (sqlite work: {DATA.name if DATA.exists() else 'skipped, no export'})")
    print(f"{'work':11} {'N':>3} {'1 alone s':>10} {'N at once s':>12} {'ceiling':>9}")
    for name, fn in works():
        alone = at_once(fn, 1, args.repeat)
        for n in ns:
            many = at_once(fn, n, args.repeat)
            print(f"{name:11} {n:3d} {alone:10.3f} {many:12.3f} {n * alone / many:8.2f}x")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
