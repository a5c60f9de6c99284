"""Benchmark: `verlprof collect` end to end against `nsys stats` kernel summary, stage by stage.

What a user waits for is `collect` (gather/hash, export, identify, scrub, window + summarize, window
traces, check, publish), not summarize alone. This script times, in one run and on the same warm
page cache:
- `verlprof collect` of one replicated real export (100 MB, and 1 GB with --mb 1100), each stage's
  time taken from the progress events collect emits (a stage runs from its first event to the next
  stage's first), and the child's peak RSS;
- `nsys stats -r cuda_gpu_kern_sum` (`gpukernsum` on nsys older than 2023) of the same file, the
  one question a user would otherwise ask NVIDIA's tool;
- `--many N`: N such reports in one collect, once per `--many-jobs` value (default 1 and the
  cores), for the speed-up across cores and the peak memory: of collect's own process, of its
  largest worker (each worker reads one report at a time), and of all of them at once (the summed
  RSS of the process tree, sampled every 50 ms from /proc).

    python bench/make_big_sqlite.py --mb 100            # bench/data/big_100mb_p1.sqlite (made if missing)
    python bench/bench_collect.py                       # 100 MB
    python bench/bench_collect.py --mb 100 --mb 1100 --many 8
    python bench/bench_collect.py --mb 100 --many 64 --many-jobs 2     # 64 reports: memory stays flat
    python bench/bench_collect.py --many 8 --repeat 3                 # medians of 3 alternating runs

Targets (issue 24): N reports on C cores >= 0.8 x min(N, C) faster than --jobs 1; 64 reports of
100 MB with peak RSS < 1 GB; 1 GB collect <= 2x `nsys stats` kernel sum alone, in the same run.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import bench_cores  # noqa: E402 - this folder is on sys.path when the script runs

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "bench" / "data"

# The start of every child script that times run_collect: imports and a progress sink.
CHILD_PRELUDE = r"""
import json, resource, sys, time
from pathlib import Path
T_IMPORT, T_EPOCH = time.perf_counter(), time.time()
from verlprof.pipeline.collect import CollectOptions, run_collect
T_IMPORTED = time.perf_counter()

class StageClock:
    '''A progress sink that notes when each stage first reports (collect's stages report in order).'''
    def __init__(self):
        self.starts = []
    def add_task(self, name, **kw):
        self.starts.append((name, time.perf_counter()))
        return len(self.starts) - 1
    def update(self, *a, **kw):
        pass
    def advance(self, *a, **kw):
        pass
"""

# Runs in a child process so its peak RSS is collect's alone.
_COLLECT = CHILD_PRELUDE + r"""
srcs, out, work, jobs = [Path(p) for p in sys.argv[1].split(",")], Path(sys.argv[2]), Path(sys.argv[3]), int(sys.argv[4])
clock = StageClock()
prof = None
if len(sys.argv) > 5:   # --profile: the driver's own time (a pool's wait shows as lock acquire)
    import cProfile
    prof = cProfile.Profile()
    prof.enable()
t0 = time.perf_counter()
res = run_collect(CollectOptions(sources=srcs, out=out, work_dir=work, jobs=jobs), progress=clock)
t1 = time.perf_counter()
if prof is not None:
    prof.disable()
    prof.dump_stats(sys.argv[5])
    import pstats   # the driver's own work: its main thread's time outside lock waits (pool, threads)
    st = pstats.Stats(sys.argv[5])
    waits = sum(v[2] for k, v in st.stats.items() if k[2] == "<method 'acquire' of '_thread.lock' objects>")
    driver_busy = st.total_tt - waits
else:
    driver_busy = None
# collect's own imports count: collect.py imports every stage up front, where a collect before
# issue 30 imported each stage inside the run (so both ways of importing are timed alike)
stages = {"imports": T_IMPORTED - T_IMPORT}
marks = clock.starts + [("end", t1)]
first = marks[0][1] if marks else t1
stages["setup"] = first - t0
for (name, t), (_n, t_next) in zip(marks, marks[1:]):
    stages[name] = stages.get(name, 0.0) + (t_next - t)
print(json.dumps({"seconds": t1 - T_IMPORT, "t_epoch": T_EPOCH, "stages": stages, "exit": res.exit_code, "driver_busy": driver_busy,
                  "rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
                  "worker_rss_mb": resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024}))
"""


def _nsys() -> str | None:
    return os.environ.get("VERLPROF_NSYS") or shutil.which("nsys")


def _kernsum_report(nsys: str) -> str:
    """`cuda_gpu_kern_sum` on nsys 2023+, `gpukernsum` before (probed from --help-reports)."""
    out = subprocess.run([nsys, "stats", "--help-reports"], capture_output=True, text=True).stdout
    return "cuda_gpu_kern_sum" if "cuda_gpu_kern_sum" in out else "gpukernsum"


def _warm(paths: list[Path]) -> None:
    for p in paths:
        with open(p, "rb") as f:
            while f.read(1 << 24):
                pass


def run_collect(srcs: list[Path], jobs: int, tmp: Path, profile: Path | None = None,
                timeline: bool = False) -> dict:
    out, work = tmp / f"out_{len(srcs)}_{jobs}", tmp / f"work_{len(srcs)}_{jobs}"
    shutil.rmtree(out, ignore_errors=True)
    shutil.rmtree(work, ignore_errors=True)
    env = dict(os.environ)
    log = tmp / f"jobs_{len(srcs)}_{jobs}.log"
    log.unlink(missing_ok=True)
    if timeline:
        env["VERLPROF_JOB_LOG"] = str(log)
    proc = subprocess.Popen([sys.executable, "-c", _COLLECT, ",".join(map(str, srcs)), str(out), str(work), str(jobs),
                             *([str(profile / f"driver_{len(srcs)}_{jobs}.prof")] if profile else [])],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    total_mb, workers = _sample_tree(proc)
    stdout, stderr = proc.communicate()
    if proc.returncode != 0:
        raise SystemExit(f"collect failed:\n{stderr[-3000:]}")
    res = json.loads(stdout.strip().splitlines()[-1])
    res["total_rss_mb"], res["workers"] = total_mb, workers
    res["timeline"], res["pass_walls"] = _timeline(log, res["t_epoch"], len(srcs), jobs) \
        if timeline and log.exists() else ([], None)
    return res


def _timeline(log: Path, t0: float, inputs: int, jobs: int) -> tuple[list[str], float]:
    """Per job function (pipeline/work.py's JOB_LOG): how many ran, their summed and longest
    seconds, and when the first started and the last ended (seconds after collect's imports
    began): a pass whose span exceeds sum/workers waited on a straggler or on the driver.
    Also the least wall the per-input passes need with these jobs' own seconds: each pass at
    least its longest job and its summed seconds over the workers (no engine does better with
    the same jobs; what is left of a run's seconds is serial work and waits)."""
    by_fn: dict[str, list[tuple[float, float]]] = {}
    pids = set()
    for line in log.read_text().splitlines():
        pid, fn, start, end = line.split()
        pids.add(pid)
        by_fn.setdefault(fn.rsplit(".", 1)[-1], []).append((float(start) - t0, float(end) - t0))
    walls = sum(max(max(e - s for s, e in spans), sum(e - s for s, e in spans) / jobs)
                for spans in by_fn.values() if len(spans) == inputs)
    out = []
    for fn, spans in sorted(by_fn.items(), key=lambda kv: min(s for s, _e in kv[1])):
        took = [e - s for s, e in spans]
        out.append(f"{fn[:26]:26} n={len(spans):<3} sum={sum(took):6.2f} max={max(took):5.2f} "
                   f"from {min(s for s, _e in spans):5.2f} to {max(e for _s, e in spans):5.2f}")
    return out + [f"({len(pids)} processes ran jobs)"], walls


def _tree_rss(root: int) -> dict[int, int]:
    """RSS (bytes) of `root` and every live descendant, from /proc (Linux)."""
    parent, rss = {}, {}
    page = os.sysconf("SC_PAGE_SIZE")
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        try:
            stat = (d / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        parent[int(d.name)] = int(stat[1])
        rss[int(d.name)] = int(stat[21]) * page
    out, todo = {}, [root]
    while todo:
        p = todo.pop()
        if p in rss:
            out[p] = rss[p]
        todo += [c for c, pp in parent.items() if pp == p and c not in out]
    return out


def _sample_tree(proc: subprocess.Popen) -> tuple[float, int]:
    """While `proc` runs: the peak of its whole process tree's summed RSS (collect and every worker
    at once) in MB, and how many worker processes it started."""
    peak, seen = 0, set()
    if not Path("/proc/self/stat").exists():
        proc.wait()
        return 0.0, 0
    while proc.poll() is None:
        tree = _tree_rss(proc.pid)
        peak = max(peak, sum(tree.values()))
        seen |= set(tree) - {proc.pid}
        time.sleep(0.05)
    return peak / 2**20, len(seen)


def run_nsys_kernsum(nsys: str, report: str, src: Path, tmp: Path) -> dict:
    """`nsys stats` in a child; peak RSS read with /usr/bin/time when present."""
    cmd = [nsys, "stats", "-q", "-r", report, "--format", "csv", "-o", str(tmp / "kernsum"), "--force-overwrite",
           "true", str(src)]
    timer = shutil.which("time") or ("/usr/bin/time" if Path("/usr/bin/time").exists() else None)
    rss = None
    t0 = time.perf_counter()
    if timer:
        proc = subprocess.run([timer, "-f", "%M", *cmd], capture_output=True, text=True)
        try:
            rss = int(proc.stderr.strip().splitlines()[-1]) / 1024
        except (ValueError, IndexError):
            rss = None
    else:
        proc = subprocess.run(cmd, capture_output=True, text=True)
    wall = time.perf_counter() - t0
    if proc.returncode != 0:
        return {"seconds": None, "rss_mb": rss, "error": proc.stderr.strip().splitlines()[-1:]}
    return {"seconds": wall, "rss_mb": rss}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--mb", type=int, action="append", help="export size(s) in MB (default 100)")
    ap.add_argument("--many", type=int, default=0, help="also collect this many copies of the 100 MB export at once")
    ap.add_argument("--jobs", type=int, default=os.cpu_count() or 2, help="collect --jobs (default: the cores, as a user gets)")
    ap.add_argument("--many-jobs", type=int, action="append",
                    help="--jobs values for the --many run (default: 1 and --jobs)")
    ap.add_argument("--tmp", type=Path, default=None, help="scratch folder (default: a temp dir)")
    ap.add_argument("--repeat", type=int, default=1,
                    help="--many: run every --jobs value this many times, alternating, and compare medians "
                         "(on a shared machine one run each is noise)")
    ap.add_argument("--profile", type=Path, default=None,
                    help="write a cProfile of collect's driver process per run into this folder (read with "
                         "pstats: time outside `acquire` is the driver's serial part; --many lines then print it "
                         "as 'driver busy')")
    ap.add_argument("--timeline", action="store_true",
                    help="--many: per job function, how many ran, their seconds and when the first started and "
                         "the last ended (pipeline/work.py's VERLPROF_JOB_LOG)")
    args = ap.parse_args()
    if args.profile:
        args.profile.mkdir(parents=True, exist_ok=True)
    sizes = args.mb or [100]
    nsys = _nsys()
    report = _kernsum_report(nsys) if nsys else None
    tmp = args.tmp or Path(tempfile.mkdtemp(prefix="verlprof-bench-collect-"))
    tmp.mkdir(parents=True, exist_ok=True)
    rows = []
    for mb in sizes:
        src = DATA / f"big_{mb}mb_p1.sqlite"
        if not src.exists():
            subprocess.run([sys.executable, str(ROOT / "bench" / "make_big_sqlite.py"), "--mb", str(mb)], check=True)
        _warm([src])
        col = run_collect([src], args.jobs, tmp, args.profile)
        ns = run_nsys_kernsum(nsys, report, src, tmp) if nsys else {"seconds": None, "rss_mb": None}
        rows.append((f"{src.name}", src.stat().st_size / 1e6, col, ns))
    print(f"{'input':24} {'MB':>6} {'collect s':>9} {'peak MB':>8} {'nsys s':>7} {'nsys MB':>8} {'ratio':>6}")
    print("-" * 76)
    for name, size, col, ns in rows:
        ratio = f"{col['seconds'] / ns['seconds']:.2f}x" if ns.get("seconds") else "-"
        nss = f"{ns['seconds']:.2f}" if ns.get("seconds") else "-"
        nsm = f"{ns['rss_mb']:.0f}" if ns.get("rss_mb") else "-"
        print(f"{name:24} {size:6.0f} {col['seconds']:9.2f} {col['rss_mb']:8.0f} {nss:>7} {nsm:>8} {ratio:>6}")
    print(f"(nsys stats -r {report}; ratio = collect / nsys stats; the machine has {os.cpu_count()} cores)")
    print()
    print("collect, seconds per stage:")
    names = []
    for _n, _s, col, _ns in rows:
        for k in col["stages"]:
            if k not in names:
                names.append(k)
    print(f"{'input':24} " + " ".join(f"{n[:9]:>9}" for n in names))
    for name, _s, col, _ns in rows:
        print(f"{name:24} " + " ".join(f"{col['stages'].get(n, 0.0):9.2f}" for n in names))
    if args.many:
        src = DATA / "big_100mb_p1.sqlite"
        copies = []
        for i in range(args.many):
            dst = tmp / "many" / f"rank{i}" / f"worker_process_{1000 + i}.sqlite"
            dst.parent.mkdir(parents=True, exist_ok=True)
            if not dst.exists():
                shutil.copyfile(src, dst)
            copies.append(dst)
        _warm(copies[:8])
        cores = os.cpu_count() or 1
        jobs = args.many_jobs or [1, args.jobs]
        runs: dict[int, list[tuple[float, dict]]] = {j: [] for j in jobs}
        widest = min(args.many, max(jobs), cores)
        ceiling = [bench_cores.ceilings(widest)] if widest > 1 else []
        for _ in range(max(1, args.repeat)):
            for j in jobs:
                load = os.getloadavg()[0]
                runs[j].append((load, run_collect(copies, j, tmp, args.profile, args.timeline)))
        ceiling += [bench_cores.ceilings(widest)] if widest > 1 else []
        print()
        if ceiling:
            # no program's speed-up exceeds what N copies of the same work get on this machine: an
            # all-core clock below the one-core turbo, shared caches and memory (bench_cores.py)
            print(f"this machine's ceiling for {widest} processes at once (bench_cores.py, before and after the "
                  "runs): " + "; ".join(f"{k} " + " and ".join(f"{c[k][2]:.2f}x" for c in ceiling) for k in ceiling[0]))
        print(f"{args.many} reports of 100 MB in one collect ({cores} cores; load average before each run in []):")

        def median(j: int) -> dict:   # of an even count, the slower middle run
            return sorted((col for _l, col in runs[j]), key=lambda c: c["seconds"])[len(runs[j]) // 2]

        base = median(1)["seconds"] if 1 in runs else None
        for j in jobs:
            col = median(j)
            speed = f"speed-up {base / col['seconds']:.2f}x (target >= {0.8 * min(args.many, j, cores):.2f}x)" \
                if base else ""
            each = " ".join(f"{c['seconds']:.1f}[{load:.1f}]" for load, c in runs[j])
            print(f"  --jobs {j:<3} {col['seconds']:7.1f} s  peak: collect {col['rss_mb']:.0f} MB, largest worker "
                  f"{col['worker_rss_mb']:.0f} MB, all processes at once {col['total_rss_mb']:.0f} MB "
                  f"({col['workers']} workers)  exit {col['exit']}  {speed}")
            if len(runs[j]) > 1:
                print(f"           median of {len(runs[j])}: {each}")
            busy = (f"  driver busy {col['driver_busy']:.2f} s (cProfile, main thread outside waits)"
                    if col.get("driver_busy") is not None else "")
            print("           " + " ".join(f"{k}={v:.2f}" for k, v in col["stages"].items()) + busy)
            for line in col.get("timeline", []):
                print("             " + line)
            if base and col.get("pass_walls"):
                print(f"             the per-input passes' jobs need {col['pass_walls']:.2f} s at --jobs {j}: with "
                      f"no serial work at all, at most {base / col['pass_walls']:.2f}x here")
    if not args.tmp:
        shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
