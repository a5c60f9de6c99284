"""Build large nsys SQLite exports by replicating the real H200 fixture's rows with time offsets.

Why: speed and memory targets are stated on 100 MB and >=1 GB exports, but the real fixture is
4 MB. Replicating its rows (kernels, CUDA API calls, copies, memsets, memory events, NVTX ranges)
shifted in time keeps every distribution real (kernel names, nesting, launch patterns) while the
size grows. With `--processes P` the copies are spread over P processes (one rank each, distinct
globalPid/globalTid, each with its own timeline), like a report of several ranks.

    python bench/make_big_sqlite.py --mb 100                 # bench/data/big_100mb_p1.sqlite
    python bench/make_big_sqlite.py --mb 1024 --processes 4  # bench/data/big_1024mb_p4.sqlite

The output is written to a temp name and renamed (a crash leaves no half-built file). Existing
outputs are reused unless --force.
"""
from __future__ import annotations

import argparse
import os
import shutil
import sqlite3
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))
from testdata import data_path  # noqa: E402  (the repository's own test data, .xz decompressed once)

FIXTURE = data_path("h200-nsys-2025.3/whole/whole_1873.sqlite")
DATA = ROOT / "bench" / "data"

# Tables whose rows are replicated: name -> (time columns, correlation column or None, pid column, tid columns)
_TIME_TABLES = {
    "CUPTI_ACTIVITY_KIND_KERNEL": (("start", "end"), "correlationId", "globalPid", ()),
    "CUPTI_ACTIVITY_KIND_RUNTIME": (("start", "end"), "correlationId", None, ("globalTid",)),
    "CUPTI_ACTIVITY_KIND_DRIVER": (("start", "end"), "correlationId", None, ("globalTid",)),
    "CUPTI_ACTIVITY_KIND_MEMCPY": (("start", "end"), "correlationId", "globalPid", ()),
    "CUPTI_ACTIVITY_KIND_MEMSET": (("start", "end"), "correlationId", "globalPid", ()),
    "CUPTI_ACTIVITY_KIND_SYNCHRONIZATION": (("start", "end"), "correlationId", "globalPid", ()),
    "CUDA_GPU_MEMORY_USAGE_EVENTS": (("start",), "correlationId", "globalPid", ()),
    "NVTX_EVENTS": (("start", "end"), None, None, ("globalTid", "endGlobalTid")),
}
_PID_SHIFT = 1 << 24  # globalPid/globalTid carry the pid in bits 24..47


def _columns(con: sqlite3.Connection, table: str) -> list[str]:
    return [r[1] for r in con.execute(f"PRAGMA table_info([{table}])")]


def _tables(con: sqlite3.Connection) -> set[str]:
    return {r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type='table'")}


def build(out: Path, target_mb: float, processes: int = 1, src: Path = FIXTURE) -> Path:
    """Replicate `src` into `out` until it is about `target_mb` MB; return `out`."""
    tmp = out.with_name(f".{out.name}.tmp-{os.getpid()}")
    shutil.copyfile(src, tmp)
    os.chmod(tmp, 0o644)
    try:
        con = sqlite3.connect(tmp)
        con.execute("PRAGMA journal_mode=OFF")
        con.execute("PRAGMA synchronous=OFF")
        con.execute("PRAGMA cache_size=-200000")
        tables = [t for t in _TIME_TABLES if t in _tables(con)]
        counts = {t: con.execute(f"SELECT count(*) FROM [{t}]").fetchone()[0] for t in tables}
        lo, hi = con.execute(
            "SELECT min(start), max(coalesce(end, start)) FROM NVTX_EVENTS WHERE start > 0").fetchone()
        k_lo, k_hi = con.execute("SELECT min(start), max(end) FROM CUPTI_ACTIVITY_KIND_RUNTIME").fetchone()
        lo, hi = min(lo, k_lo), max(hi, k_hi)
        span = int((hi - lo) * 1.01) + 1_000_000
        max_corr = max(con.execute(f"SELECT max(correlationId) FROM [{t}]").fetchone()[0] or 0
                       for t in tables if _TIME_TABLES[t][1]) + 1
        src_bytes = src.stat().st_size
        copies = max(1, round(target_mb * 1e6 / src_bytes))
        per_proc = max(1, copies // processes)
        t0 = time.perf_counter()
        done = 0
        for p in range(processes):
            for k in range(per_proc):
                if p == 0 and k == 0:
                    continue  # the original rows themselves
                for t in tables:
                    times, corr, pid_col, tid_cols = _TIME_TABLES[t]
                    cols = _columns(con, t)
                    sel = []
                    for c in cols:
                        if c in times:
                            sel.append(f"[{c}] + {k * span}")
                        elif c == corr:
                            sel.append(f"[{c}] + {k * max_corr}")
                        elif c == pid_col or c in tid_cols:
                            sel.append(f"[{c}] + {p * _PID_SHIFT}")
                        else:
                            sel.append(f"[{c}]")
                    # NVTX domain-create markers have a negative/unique start: copy them once per process.
                    where = f"rowid <= {counts[t]}"
                    if t == "NVTX_EVENTS" and k > 0:
                        where += " AND eventType != 75"
                    con.execute(f"INSERT INTO [{t}] ({', '.join(f'[{c}]' for c in cols)}) "
                                f"SELECT {', '.join(sel)} FROM [{t}] WHERE {where}")
                done += 1
            if p > 0:
                con.execute("INSERT INTO PROCESSES (globalPid, pid, name) SELECT globalPid + ?, pid + ?, name "
                            "FROM PROCESSES WHERE pid = 1873", (p * _PID_SHIFT, p))
            con.commit()
            print(f"  process {p + 1}/{processes}: {done + 1} copies, {time.perf_counter() - t0:.0f}s",
                  file=sys.stderr)
        con.commit()
        con.close()
        os.replace(tmp, out)
    finally:
        tmp.unlink(missing_ok=True)
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--mb", type=float, default=100, help="target size in MB (default 100)")
    ap.add_argument("--processes", type=int, default=1, help="spread copies over this many processes")
    ap.add_argument("--out", type=Path, default=None, help="output file (default bench/data/big_<mb>mb_p<P>.sqlite)")
    ap.add_argument("--force", action="store_true", help="rebuild even if the output exists")
    args = ap.parse_args(argv)
    out = args.out or DATA / f"big_{int(args.mb)}mb_p{args.processes}.sqlite"
    out.parent.mkdir(parents=True, exist_ok=True)
    if out.exists() and not args.force:
        print(f"{out} exists ({out.stat().st_size / 1e6:.0f} MB); --force rebuilds it")
        return 0
    t0 = time.perf_counter()
    build(out, args.mb, args.processes)
    print(f"{out}: {out.stat().st_size / 1e6:.0f} MB in {time.perf_counter() - t0:.1f}s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
