"""Benchmark `summarize` over many bundles: inline, local process pool, Ray; fresh and cached.

Why: the issue asks what Ray costs on one machine compared with the local pool, per run. Bundles
are built from the real H200 fixture (`whole_1873.sqlite`): its step-2 NVTX ranges and kernels,
replicated over `--ranks` ranks with per-run random stage timings, like collect writes them.

    python bench/bench_batch.py                    # 50 bundles, 8 ranks each
    python bench/bench_batch.py --runs 200 --no-ray

Prints one table: executor, wall time, time per run and overhead per run against inline.
Ray is started privately for this script (`RayExecutor("local")`); its start-up time is shown on
its own line and not counted in the summarize time.
"""
from __future__ import annotations

import argparse
import json
import random
import shutil
import sqlite3
import sys
import tempfile
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from verlprof.pipeline import batch
from verlprof.pipeline.executors import InlineExecutor, ProcessPoolExecutorBackend
from verlprof.stages.core.phases import canonical_stage
from verlprof.stages.schema import arrow_schema

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))
from testdata import data_path  # noqa: E402  (the repository's own test data, .xz decompressed once)

FIXTURE = data_path("h200-nsys-2025.3/whole/whole_1873.sqlite")


def fixture_step(step: int = 2) -> tuple[list[dict], list[tuple[str, list[int]]]]:
    """(NVTX ranges of one step with parent/depth, [(kernel name, durations)]) from the fixture."""
    con = sqlite3.connect(f"file:{FIXTURE}?mode=ro", uri=True)
    ranges = con.execute(
        "SELECT e.start, e.end, COALESCE(e.text, s.value), e.globalTid FROM NVTX_EVENTS e LEFT JOIN StringIds s "
        "ON s.id = e.textId WHERE e.eventType IN (59, 60) AND e.end IS NOT NULL ORDER BY e.start").fetchall()
    s0, s1, _, tid = [r for r in ranges if r[2] == "step"][step - 1]
    kern = con.execute("SELECT s.value, k.end - k.start FROM CUPTI_ACTIVITY_KIND_KERNEL k JOIN StringIds s "
                       "ON s.id = k.demangledName WHERE k.start >= ? AND k.start < ?", (s0, s1)).fetchall()
    con.close()
    phases, stack = [], []
    for start, end, name, t in ranges:
        if t != tid or start < s0 or end > s1:
            continue
        while stack and stack[-1][1] <= start:
            stack.pop()
        phases.append({"phase": name, "stage": canonical_stage(name), "parent": stack[-1][2] if stack else None,
                       "depth": len(stack), "start_ns": start, "wall_ns": end - start})
        stack.append((start, end, name))
    by: dict[str, list[int]] = {}
    for name, d in kern:
        by.setdefault(name, []).append(d)
    return phases, sorted(by.items())


def make_bundles(root: Path, runs: int, ranks: int, seed: int = 0) -> list[Path]:
    phases, kernels = fixture_step()
    rng = random.Random(seed)
    paths = []
    for i in range(runs):
        factor = {s: rng.uniform(0.7, 1.3) for s in {p["stage"] for p in phases}}
        prow, krow = [], []
        for rank in range(ranks):
            keys = {"source": f"worker_process_{1000 + rank}.1.sqlite", "source_kind": "nsys", "role": "actor",
                    "rank": rank, "pid": 1000 + rank, "step": 2}
            jitter = rng.uniform(0.98, 1.02)
            prow += [{**keys, **p, "wall_ns": int(p["wall_ns"] * factor[p["stage"]] * jitter)} for p in phases]
            for name, d in kernels:
                f = rng.uniform(0.9, 1.1)
                krow.append({**keys, "phase": "step", "stage": "step", "kernel": name, "kernel_short": name[:40],
                             "category": "other", "count": len(d), "total_ns": int(sum(d) * f),
                             "avg_ns": sum(d) * f / len(d), "min_ns": min(d), "max_ns": max(d),
                             "median_ns": float(sorted(d)[len(d) // 2])})
        b = root / f"run{i:03d}"
        (b / "summaries").mkdir(parents=True)
        for name, rows in (("phases", prow), ("kernels", krow), ("steps", [])):
            pq.write_table(pa.Table.from_pylist(rows, schema=arrow_schema(name)), b / "summaries" / f"{name}.parquet")
        (b / "manifest.json").write_text(json.dumps({
            "verlprof_version": "bench", "created": "2026-12-01T00:00:00+00:00",
            "config": {"tool": "nsys", "profiled_steps": [1, 2, 3], "world_size": ranks, "model_path": f"/m/model{i}"},
            "window": {"step": 2}, "artifacts": []}))
        paths.append(b)
    return paths


def timed(label: str, executor, inputs: list[Path], out: Path, work: Path) -> tuple[str, float, int]:
    t0 = time.perf_counter()
    res = batch.summarize_runs(inputs, out, executor=executor, work_dir=work)
    dt = time.perf_counter() - t0
    bad = [r for r in res.runs if r.status == "skipped"]
    if bad:
        sys.exit(f"{label}: {len(bad)} runs skipped: {bad[0].detail}")
    return label, dt, len(res.runs)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--runs", type=int, default=50)
    ap.add_argument("--ranks", type=int, default=8)
    ap.add_argument("--jobs", type=int, default=None, help="process pool size (default: CPU count)")
    ap.add_argument("--no-ray", action="store_true")
    args = ap.parse_args()

    tmp = Path(tempfile.mkdtemp(prefix="verlprof-bench-batch-"))
    try:
        t0 = time.perf_counter()
        inputs = make_bundles(tmp / "in", args.runs, args.ranks)
        size = sum(p.stat().st_size for b in inputs for p in b.rglob("*") if p.is_file())
        print(f"{args.runs} bundles x {args.ranks} ranks, {size / 1e6:.1f} MB of summaries, built in "
              f"{time.perf_counter() - t0:.1f}s")
        rows = [timed("inline", InlineExecutor(), inputs, tmp / "o-inline", tmp / "w-inline")]
        pool = ProcessPoolExecutorBackend(args.jobs)
        rows.append(timed(f"process pool ({pool.jobs})", pool, inputs, tmp / "o-pool", tmp / "w-pool"))
        rows.append(timed("process pool, rerun (cached)", pool, inputs, tmp / "o-pool", tmp / "w-pool"))
        if not args.no_ray:
            from verlprof.pipeline.ray_executor import RayExecutor

            ex = RayExecutor("local", init_kwargs={"object_store_memory": 200 * 1024 ** 2})
            t1 = time.perf_counter()
            ex._ensure()
            start = time.perf_counter() - t1
            rows.append(timed("ray (local, first call)", ex, inputs, tmp / "o-ray", tmp / "w-ray"))
            shutil.rmtree(tmp / "w-ray")
            rows.append(timed("ray (local, warm workers)", ex, inputs, tmp / "o-ray", tmp / "w-ray"))
            ex.close()
        base = rows[0][1] / rows[0][2]
        print(f"\n{'executor':<30} {'wall s':>8} {'ms/run':>8} {'overhead ms/run vs inline':>26}")
        for label, dt, n in rows:
            print(f"{label:<30} {dt:>8.2f} {1000 * dt / n:>8.1f} {1000 * (dt / n - base):>+26.1f}")
        if not args.no_ray:
            print(f"{'(ray start-up, not counted)':<30} {start:>8.2f}")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
