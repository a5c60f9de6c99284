"""Lookup cost of the public-names corpus (stages/scrub/public_names.py) on real capture names.

    .venv/bin/python bench/bench_public_names.py [--repeat 5]

Why: scrub and check judge every distinct string of a run against the corpus (hundreds of
thousands in a range-heavy export), so the per-string cost is what this prints: load time, then
microseconds a lookup for strings that are exact corpus entries, template instances (numbers,
torch's wrappers), and strings that are not public (the slowest path: every bucket is tried). The
names are every NVTX range and Kineto name of tests/data (tests/test_public_names.py reads them the
same way), plus each one with a person's name appended, as misses.
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))

from verlprof.stages.scrub.public_names import CORPUS_FILE, PublicNames  # noqa: E402


def capture_names() -> list[str]:
    import test_public_names as t
    import scrub_corpus
    names: set[str] = set()
    for p in scrub_corpus.sqlite_files():
        names |= t._nsys_names(p)
    for p in t._trace_files():
        names |= t._kineto_names(p)
    return sorted(names)


def per_lookup_us(corpus: PublicNames, names: list[str], repeat: int) -> float:
    best = float("inf")
    for _ in range(repeat):
        t0 = time.perf_counter()
        for n in names:
            corpus.is_public(n)
        best = min(best, time.perf_counter() - t0)
    return best / max(len(names), 1) * 1e6


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--repeat", type=int, default=5)
    args = ap.parse_args()
    t0 = time.perf_counter()
    corpus = PublicNames(CORPUS_FILE)
    corpus.is_public("x")
    load = time.perf_counter() - t0
    names = capture_names()
    exact = [n for n in names if n in corpus._exact]
    templated = [n for n in names if n not in corpus._exact and corpus.is_public(n)]
    misses = [n for n in names if not corpus.is_public(n)] + [n + " alice" for n in names[:5000]]
    print(f"corpus {CORPUS_FILE.name}: {CORPUS_FILE.stat().st_size:,} bytes, {corpus.strings:,} strings, "
          f"{corpus.templates:,} templates, loaded in {load * 1e3:.0f} ms")
    print(f"{'strings':<28}{'count':>9}{'us/lookup':>12}")
    for label, group in (("exact entries", exact), ("template instances", templated), ("not public", misses),
                         ("all capture names", names)):
        print(f"{label:<28}{len(group):>9,}{per_lookup_us(corpus, group, args.repeat):>12.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
