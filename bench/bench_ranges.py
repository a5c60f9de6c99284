"""Benchmark: `verlprof collect` of range-heavy captures against `nsys stats -r nvtxsum,<kernel sum>`.

Why: `emit_nvtx` writes one NVTX range per aten op and many codebases annotate every layer, so a
capture can hold millions of ranges and few kernels (issue 25). Inputs:
- `fsdp2`: the public 2-GPU FSDP capture with `emit_nvtx` ranges (tests/data/captures/nsysai_h100_2gpu,
  2.3 MB SQLite, 16,782 NVTX events, 4,010 kernels);
- `720k`: a report recorded here by the local nsys with the python `nvtx` package: 720,000 ranges
  over 3 steps (per step one `step` range, the verl phases `gen` and `update_actor`, and nested
  `layer`/`op` ranges under them). Made once into bench/data/ (git-ignored); collect and `nsys
  stats` each get a fresh copy of the `.nsys-rep`, so the export is part of both times.

For each input, in one run on the same warm page cache: `nsys stats -r nvtxsum,gpukernsum`
(`nvtxsum,cuda_gpu_kern_sum` on nsys 2023+) wall time and peak RSS, `verlprof collect` wall time,
peak RSS (collect's own process and its largest child: pool workers, `nsys export`) and seconds per
collect stage (from collect's progress events, as bench_collect.py does), and the ratio.
`--profile` adds a cProfile of collect with `--jobs 1` (top functions by own time and cumulative).

    python bench/bench_ranges.py                      # both inputs
    python bench/bench_ranges.py --only 720k --profile

Targets (issue 25): collect <= 2x `nsys stats`; peak < 1 GB.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import sqlite3
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))

from bench_collect import CHILD_PRELUDE  # noqa: E402

DATA = ROOT / "bench" / "data"
RANGES_REP = DATA / "ranges_720k.nsys-rep"
RANGES_TOTAL = 720_000
STEPS = 3

# The profiled program: STEPS steps of RANGES_TOTAL / STEPS ranges each. Per step: `step`, the two
# phases, and under each phase `layer` ranges of 7 `op` ranges each (so 8 ranges per layer), with
# the remainder as single `op` ranges: a range tree like emit_nvtx's (op names repeat, as aten ops do).
_PROGRAM = r"""
import sys
import nvtx
total, steps = int(sys.argv[1]), int(sys.argv[2])
per_step = total // steps
push, pop = nvtx.push_range, nvtx.pop_range
OPS = [f"aten::op_{k}" for k in range(40)]
for s in range(steps):
    push("step")
    left = per_step - 3
    for phase, share in (("gen", left // 2), ("update_actor", left - left // 2)):
        push(phase)
        layers, rest = divmod(share, 8)
        for j in range(layers):
            push(f"layer_{j % 24}")
            for k in range(7):
                push(OPS[(j + k) % 40]); pop()
            pop()
        for k in range(rest):
            push(OPS[k]); pop()
        pop()
    pop()
"""
NSYS_PROFILE_FLAGS = ["--trace=nvtx,osrt", "--sample=none", "--cpuctxsw=none", "--force-overwrite=true"]

# Runs in a child process so its peak RSS is collect's alone (plus its children, reported apart).
_COLLECT = CHILD_PRELUDE + r"""
import verlprof.pipeline.cli  # noqa: F401 - what `verlprof collect` imports before it starts
started = time.time()
src, out, work, jobs, prof = Path(sys.argv[1]), Path(sys.argv[2]), Path(sys.argv[3]), int(sys.argv[4]), sys.argv[5]
clock = StageClock()
opts = CollectOptions(sources=[src], out=out, work_dir=work, jobs=jobs)
t0 = time.perf_counter()
if prof:
    import cProfile
    cProfile.run("run_collect(opts, progress=clock)", prof)
else:
    run_collect(opts, progress=clock)
t1 = time.perf_counter()
stages = {}
marks = clock.starts + [("end", t1)]
stages["setup"] = (marks[0][1] if marks else t1) - t0
for (name, t), (_n, t_next) in zip(marks, marks[1:]):
    stages[name] = stages.get(name, 0.0) + (t_next - t)
loaded = sorted(m for m in sys.modules if "." not in m and not m.startswith("_") or m.startswith("verlprof."))
print(json.dumps({"seconds": t1 - t0, "stages": stages, "started": started, "modules": loaded,
                  "rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
                  "child_rss_mb": resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024}))
"""


def _nsys() -> str:
    exe = os.environ.get("VERLPROF_NSYS") or shutil.which("nsys")
    if not exe:
        raise SystemExit("nsys not found (PATH or $VERLPROF_NSYS): this benchmark compares against it")
    return exe


def _reports(nsys: str) -> str:
    """`nvtxsum,cuda_gpu_kern_sum` on nsys 2023+, `nvtxsum,gpukernsum` before (from --help-reports)."""
    out = subprocess.run([nsys, "stats", "--help-reports"], capture_output=True, text=True).stdout
    return "nvtxsum," + ("cuda_gpu_kern_sum" if "cuda_gpu_kern_sum" in out else "gpukernsum")


def _fsdp_capture() -> Path:
    sys.path.insert(0, str(ROOT / "tests"))
    from testdata import data_path  # noqa: E402  (the repository's own test data, decompressed if .xz)

    return data_path("captures/nsysai_h100_2gpu/h100_2gpu_1s.sqlite")


def make_ranges_report(nsys: str) -> Path:
    """bench/data/ranges_720k.nsys-rep, recorded once by the local nsys (checked: 720,000 ranges)."""
    if RANGES_REP.exists():
        return RANGES_REP
    DATA.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="verlprof-ranges-", dir=DATA))
    try:
        prog = work / "ranges.py"
        prog.write_text(_PROGRAM)
        base = work / "ranges_720k"
        cmd = [nsys, "profile", *NSYS_PROFILE_FLAGS, "-o", str(base), sys.executable, str(prog),
               str(RANGES_TOTAL), str(STEPS)]
        env = {k: v for k, v in os.environ.items() if k in ("PATH", "HOME", "LANG", "PYTHONPATH")}
        t0 = time.perf_counter()
        proc = subprocess.run(cmd, cwd=work, capture_output=True, text=True, env=env)
        rep = base.with_name(base.name + ".nsys-rep")
        if proc.returncode != 0 or not rep.exists():
            raise SystemExit(f"nsys profile failed (exit {proc.returncode}): {proc.stdout[-2000:]}{proc.stderr[-2000:]}")
        n = _count_ranges(nsys, rep, work)
        if n != RANGES_TOTAL:
            raise SystemExit(f"{rep}: {n} NVTX ranges recorded, expected {RANGES_TOTAL}")
        os.replace(rep, RANGES_REP)
        print(f"recorded {RANGES_REP.name}: {n} ranges, {RANGES_REP.stat().st_size / 1e6:.1f} MB "
              f"in {time.perf_counter() - t0:.0f} s", flush=True)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return RANGES_REP


def _count_ranges(nsys: str, rep: Path, work: Path) -> int:
    out = work / "count.sqlite"
    subprocess.run([nsys, "export", "-t", "sqlite", "-o", str(out), "--force-overwrite", "true", str(rep)],
                   check=True, capture_output=True)
    con = sqlite3.connect(f"file:{out}?mode=ro", uri=True)
    try:
        return con.execute('SELECT count(*) FROM NVTX_EVENTS WHERE "end" IS NOT NULL').fetchone()[0]
    finally:
        con.close()


def _fresh_copy(src: Path, folder: Path) -> Path:
    """A copy of `src` alone in a new folder: no export of it lies beside it (so each tool exports)."""
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    dst = folder / src.name
    shutil.copyfile(src, dst)
    return dst


def run_nsys_stats(nsys: str, reports: str, src: Path, tmp: Path) -> dict:
    """`nsys stats` of a fresh copy in a child; peak RSS from /usr/bin/time when present."""
    copy = _fresh_copy(src, tmp / "nsys_in")
    cmd = [nsys, "stats", "-q", "-r", reports, "--format", "csv", "-o", str(tmp / "nsys_out"),
           "--force-overwrite", "true", str(copy)]
    timer = shutil.which("time") or ("/usr/bin/time" if Path("/usr/bin/time").exists() else None)
    rss = None
    t0 = time.perf_counter()
    proc = subprocess.run([timer, "-f", "%M", *cmd] if timer else cmd, capture_output=True, text=True)
    wall = time.perf_counter() - t0
    if timer:
        try:
            rss = int(proc.stderr.strip().splitlines()[-1]) / 1024
        except (ValueError, IndexError):
            rss = None
    if proc.returncode != 0:
        raise SystemExit(f"nsys stats failed on {src}: {proc.stderr[-2000:]}")
    return {"seconds": wall, "rss_mb": rss}


def run_collect(src: Path, jobs: int, tmp: Path, profile: Path | None = None) -> dict:
    copy = _fresh_copy(src, tmp / "collect_in")
    out, work = tmp / "collect_out", tmp / "collect_work"
    shutil.rmtree(out, ignore_errors=True)
    shutil.rmtree(work, ignore_errors=True)
    t0, w0 = time.time(), time.perf_counter()
    proc = subprocess.run([sys.executable, "-c", _COLLECT, str(copy), str(out), str(work), str(jobs),
                           str(profile or "")], capture_output=True, text=True)
    wall = time.perf_counter() - w0
    if proc.returncode != 0:
        raise SystemExit(f"collect failed on {src}:\n{proc.stderr[-3000:]}")
    got = json.loads(proc.stdout.strip().splitlines()[-1])
    got["process_seconds"] = wall                    # what a user waits: interpreter, imports, collect, exit
    got["startup_seconds"] = got["started"] - t0     # interpreter start + the CLI's imports
    return got


def import_floor(modules: list[str]) -> dict[str, float]:
    """Wall seconds of a bare interpreter, of importing the CLI, and of importing every module one
    collect loaded (its own and the libraries: numpy, pyarrow, pandas, ...): what any collect pays
    before it reads a byte (best of 3)."""
    def best(code: str) -> float:
        runs = []
        for _ in range(3):
            t = time.perf_counter()
            subprocess.run([sys.executable, "-c", code], check=True, capture_output=True)
            runs.append(time.perf_counter() - t)
        return min(runs)

    loads = "import importlib\nfor m in %r:\n    try:\n        importlib.import_module(m)\n    except Exception:\n        pass" % (
        [m for m in modules if m not in ("__main__",)],)
    return {"python": best("pass"), "cli": best("import verlprof.pipeline.cli"), "all": best(loads)}


def print_profile(path: Path, top: int) -> None:
    import pstats

    for key in ("tottime", "cumulative"):
        print(f"--- cProfile, --jobs 1, top {top} by {key} ---")
        pstats.Stats(str(path)).strip_dirs().sort_stats(key).print_stats(top)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--only", choices=("fsdp2", "720k"), action="append", help="run only this input")
    ap.add_argument("--jobs", type=int, default=os.cpu_count() or 2, help="collect --jobs (default: the cores)")
    ap.add_argument("--repeat", type=int, default=1, help="runs per tool; the fastest is reported")
    ap.add_argument("--profile", action="store_true", help="also cProfile one collect per input with --jobs 1")
    ap.add_argument("--top", type=int, default=30, help="functions shown per profile table")
    ap.add_argument("--tmp", type=Path, default=None, help="scratch folder (default: a temp dir)")
    args = ap.parse_args()
    nsys = _nsys()
    reports = _reports(nsys)
    names = args.only or ["fsdp2", "720k"]
    inputs = {"fsdp2": _fsdp_capture} if "fsdp2" in names else {}
    if "720k" in names:
        inputs["720k"] = lambda: make_ranges_report(nsys)
    tmp = args.tmp or Path(tempfile.mkdtemp(prefix="verlprof-bench-ranges-"))
    tmp.mkdir(parents=True, exist_ok=True)
    rows = []
    for name, make in inputs.items():
        src = make()
        runs_n = [run_nsys_stats(nsys, reports, src, tmp) for _ in range(args.repeat)]
        runs_c = [run_collect(src, args.jobs, tmp) for _ in range(args.repeat)]
        ns = min(runs_n, key=lambda r: r["seconds"])
        col = min(runs_c, key=lambda r: r["process_seconds"])
        rows.append((name, src, col, ns))
        if args.profile:
            prof = tmp / f"{name}.prof"
            run_collect(src, 1, tmp, prof)
            print(f"=== {name}: {src.name} ===")
            print_profile(prof, args.top)
    print(f"{'input':6} {'file':24} {'MB':>5} {'nsys s':>7} {'nsys MB':>8} {'collect s':>9} {'in-proc s':>9} "
          f"{'peak MB':>8} {'child MB':>8} {'ratio':>6} {'in-proc':>7}")
    print("-" * 109)
    for name, src, col, ns in rows:
        nsm = f"{ns['rss_mb']:.0f}" if ns.get("rss_mb") else "-"
        print(f"{name:6} {src.name[:24]:24} {src.stat().st_size / 1e6:5.1f} {ns['seconds']:7.2f} {nsm:>8} "
              f"{col['process_seconds']:9.2f} {col['seconds']:9.2f} {col['rss_mb']:8.0f} {col['child_rss_mb']:8.0f} "
              f"{col['process_seconds'] / ns['seconds']:5.2f}x {col['seconds'] / ns['seconds']:6.2f}x")
    print(f"(nsys stats -r {reports} --format csv, of a fresh copy, so a .nsys-rep's export is included in "
          f"both; collect --jobs {args.jobs}, `collect s` from the interpreter's start to its exit like "
          f"`nsys s`, `in-proc s` from run_collect's call to its return; best of {args.repeat}; "
          f"ratio = collect / nsys stats; {os.cpu_count()} cores; target <= 2x, peak < 1024 MB)")
    if rows:
        floor = import_floor(rows[0][2]["modules"])
        print(f"floor: python start {floor['python']:.2f} s; + the CLI's imports {floor['cli']:.2f} s; + every module "
              f"a collect loads {floor['all']:.2f} s ({rows[0][0]}'s collect: startup "
              f"{rows[0][2]['startup_seconds']:.2f} s before run_collect)")
    print()
    print("collect, seconds per stage:")
    stages: list[str] = []
    for *_x, col, _ns in rows:
        stages += [k for k in col["stages"] if k not in stages]
    print(f"{'input':6} " + " ".join(f"{s[:9]:>9}" for s in stages))
    for name, _src, col, _ns in rows:
        print(f"{name:6} " + " ".join(f"{col['stages'].get(s, 0.0):9.2f}" for s in stages))
    if not args.tmp:
        shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
