"""A catalogue of ordinary mistakes, each made for real against real data (issue 41).

Every case runs `python -m verlprof.pipeline.cli ...` as a subprocess on a copy of samples/tiny_run
(or on tests/data) and asserts, for each mistake:
- the one line: exactly one line of the named stream matches what the user must read (the file
  and what is wrong); where the command fails outright (exit 2) it is the only line on stderr;
- the exit code;
- nothing half-written: no temp file (`.NAME.tmp-...`) anywhere under the case's folder, no lock
  left beside OUT, and OUT either absent or a whole bundle (its manifest.json);
- bounded resources: the command's process tree, sampled with psutil while it runs, never held
  more than usable cores + 2 processes, and the sum of its RSS stayed under 2 GB.

One collect of the sample (with --html --pack) is shared by the module: it is also the bundle that
later cases misuse, and the one whose sizes and hashes `test_sizes_and_hashes_are_of_the_files`
recomputes. Cases that need nothing but a bad argument stop before any work, so the module stays
well under two minutes on two cores.
"""
from __future__ import annotations

import gzip
import hashlib
import os
import re
import shutil
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import psutil
import pytest
from packed_bundle import iter_members, parse_sums

from verlprof.pipeline.report.links import fmt_bytes
from verlprof.pipeline.workers import usable_cores

ROOT = Path(__file__).resolve().parents[1]
SAMPLE = ROOT / "samples" / "tiny_run"
CORES = usable_cores()
MAX_PROCS = CORES + 2
MAX_RSS = 2 << 30
NSIGHT = "ray_logs/nsight"


@dataclass
class Ran:
    """What one command did: exit code, its output, and the most processes / RSS its tree held."""

    rc: int
    out: str
    err: str
    procs: int = 0
    rss: int = 0

    def lines(self, stream: str) -> list[str]:
        return [ln for ln in (self.out if stream == "out" else self.err).splitlines() if ln.strip()]


def _env(work: Path) -> dict[str, str]:
    return {**os.environ, "VERLPROF_CACHE": str(work), "COLUMNS": "80", "TERM": "dumb"}


def _tree(p: psutil.Process) -> tuple[int, int]:
    try:
        tree = [p, *p.children(recursive=True)]
    except psutil.Error:
        return 0, 0
    rss = 0
    for q in tree:
        try:
            rss += q.memory_info().rss
        except psutil.Error:
            pass
    return len(tree), rss


def run_many(argvs: list[list[str]], env: dict[str, str], folder: Path, timeout: float = 240,
             during: Callable[[], None] | None = None) -> list[Ran]:
    """Run the commands at once (outputs to files, no pipe to fill), sampling every process tree."""
    folder.mkdir(parents=True, exist_ok=True)
    procs, files = [], []
    for i, argv in enumerate(argvs):
        out, err = open(folder / f"stdout{i}", "w+"), open(folder / f"stderr{i}", "w+")
        files.append((out, err))
        procs.append(subprocess.Popen([sys.executable, "-m", "verlprof.pipeline.cli", *argv],
                                      stdout=out, stderr=err, env=env, text=True, cwd=folder))
    if during is not None:
        during()
    watched = [psutil.Process(p.pid) for p in procs]
    peak = [(0, 0)] * len(procs)
    deadline = time.monotonic() + timeout
    while any(p.poll() is None for p in procs):
        assert time.monotonic() < deadline, f"{argvs} ran over {timeout} s"
        for i, w in enumerate(watched):
            n, rss = _tree(w)
            peak[i] = (max(peak[i][0], n), max(peak[i][1], rss))
        time.sleep(0.01)
    ran = []
    for p, (out, err), (n, rss) in zip(procs, files, peak):
        out.seek(0)
        err.seek(0)
        ran.append(Ran(p.returncode, out.read(), err.read(), n, rss))
        out.close()
        err.close()
    return ran


def run(argv: list[str], env: dict[str, str], folder: Path, **kw: object) -> Ran:
    return run_many([argv], env, folder, **kw)[0]  # type: ignore[arg-type]


def run_here(argv: list[str], env: dict[str, str]) -> Ran:
    """`verlprof ARGV` in this process, for a mistake refused before any work starts (a bad
    argument, an output place, a SOURCE that is verlprof's own): the same entry point as
    `python -m verlprof.pipeline.cli`, without the second or two a fresh interpreter costs."""
    import contextlib
    import io

    from verlprof.pipeline import cli

    out, err = io.StringIO(), io.StringIO()
    saved_env = {k: os.environ.get(k) for k in ("VERLPROF_CACHE", "COLUMNS")}
    saved_argv = sys.argv
    os.environ.update({k: env[k] for k in saved_env})
    sys.argv = ["verlprof", *argv]
    rc = 0
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            cli.main()
    except SystemExit as stop:
        rc = stop.code if isinstance(stop.code, int) else (0 if stop.code is None else 1)
    finally:
        sys.argv = saved_argv
        for k, v in saved_env.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
    n, rss = _tree(psutil.Process())
    return Ran(rc, out.getvalue(), err.getvalue(), n, rss)


def bounded(r: Ran) -> None:
    assert r.procs <= MAX_PROCS, f"{r.procs} processes at once (cores {CORES})"
    assert r.rss < MAX_RSS, f"peak RSS {r.rss / 2**20:.0f} MB"


def nothing_half_written(folder: Path, out: Path | None) -> None:
    temps = [p for p in folder.rglob("*") if ".tmp-" in p.name or p.name.endswith(".lock")]
    assert temps == [], temps
    if out is not None and out.exists() and out.is_dir() and any(out.iterdir()):
        assert (out / "manifest.json").is_file() or (out / "scrub_report.json").is_file() \
            or (out / "runs.parquet").is_file(), sorted(out.iterdir())


def tree_digest(root: Path) -> dict[str, str]:
    return {p.relative_to(root).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(root.rglob("*")) if p.is_file()}


# ------------------------------------------------------------------------------------------------
# The shared lab: one copy of the sample, one collect of it
# ------------------------------------------------------------------------------------------------


@dataclass
class Lab:
    root: Path
    run: Path
    bundle: Path
    work: Path
    first: Ran
    made: dict[str, Path] = field(default_factory=dict)

    @property
    def env(self) -> dict[str, str]:
        return _env(self.work)


@pytest.fixture(scope="module")
def lab(tmp_path_factory: pytest.TempPathFactory) -> Lab:
    root = tmp_path_factory.mktemp("mistakes")
    run_dir = root / "RUN"
    shutil.copytree(SAMPLE, run_dir)
    work = root / "work"
    first = run(["collect", str(run_dir), "-o", str(root / "bundle"), "--html", "--pack"], _env(work), root / "log")
    assert first.rc == 0, first.err
    bounded(first)
    return Lab(root, run_dir, root / "bundle", work, first)


def _nsight_only(lab: Lab, dst: Path) -> Path:
    """A run folder of the sample's three nsys reports and their exports (quick to collect)."""
    shutil.copytree(lab.run / NSIGHT, dst / NSIGHT)
    return dst


# ------------------------------------------------------------------------------------------------
# The catalogue: (id, argv builder, exit code, stream, the one line, only line on that stream)
# ------------------------------------------------------------------------------------------------

Build = Callable[[Lab, Path], tuple[list[str], "Path | None"]]


@dataclass(frozen=True)
class Case:
    id: str
    build: Build
    rc: int
    stream: str          # "err" or "out": where the one line is
    line: str            # regex the one line matches (re.search)
    only: bool = False   # the line is the only one on that stream


def _empty(t: Path) -> Path:
    (t / "empty").mkdir()
    return t / "empty"


def _zero_report(t: Path) -> Path:
    d = t / "zero"
    d.mkdir()
    (d / "worker_process_999.nsys-rep").write_bytes(b"")
    return d


def _truncated_sqlite(lab: Lab, t: Path) -> Path:
    f = t / "worker_process_300.sqlite"
    f.write_bytes((lab.run / NSIGHT / "worker_process_300.sqlite").read_bytes()[:100_000])
    return f


def _truncated_trace(lab: Lab, t: Path) -> Path:
    d = t / "traces"
    d.mkdir()
    src = sorted((lab.run / "outputs" / "profile").glob("*step2_rank0*.json.gz"))[0]
    (d / src.name).write_bytes(src.read_bytes()[:50_000])
    return d


def _symlink_loop(lab: Lab, t: Path) -> Path:
    d = t / "loop"
    d.mkdir()
    shutil.copy(lab.run / NSIGHT / "worker_process_300.sqlite", d)
    (d / "again").symlink_to(d, target_is_directory=True)
    (d / "up").symlink_to(t, target_is_directory=True)
    return d


def _bundle_inside(lab: Lab, t: Path) -> Path:
    d = _nsight_only(lab, t / "run2")
    shutil.copytree(lab.bundle, d / "bundle")
    return d


def _work_copy(lab: Lab, t: Path) -> Path:
    shutil.copytree(lab.work, t / "cache", ignore=shutil.ignore_patterns("*.tmp-*"))
    return t / "cache"


def _work_inside(lab: Lab, t: Path) -> Path:
    d = _nsight_only(lab, t / "run3")
    shutil.copytree(lab.work, d / "cache", ignore=shutil.ignore_patterns("*.tmp-*"))
    return d


CASES = [
    # --jobs below 1: refused in one line before any work
    Case("collect --jobs 0", lambda L, t: (["collect", str(L.run), "-o", str(t / "o"), "--jobs", "0"], t / "o"),
         2, "err", r"^verlprof: error: --jobs must be 1 or more .*not 0$", True),
    Case("collect --jobs -3", lambda L, t: (["collect", str(L.run), "-o", str(t / "o"), "-j", "-3"], t / "o"),
         2, "err", r"--jobs must be 1 or more .*not -3$", True),
    Case("scrub --jobs 0", lambda L, t: (["scrub", str(L.run), "-o", str(t / "o"), "--jobs", "0"], t / "o"),
         2, "err", r"--jobs must be 1 or more .*not 0$", True),
    Case("window --jobs -3", lambda L, t: (["window", str(L.run), "--phases", "--jobs", "-3"], None),
         2, "err", r"--jobs must be 1 or more .*not -3$", True),
    Case("summarize --jobs 0", lambda L, t: (["summarize", str(L.bundle), "-o", str(t / "o"), "--jobs", "0"], t / "o"),
         2, "err", r"--jobs must be 1 or more .*not 0$", True),
    # a huge --jobs: the work is done with no more workers than cores and inputs
    Case("scrub --jobs 100000 of a run folder", lambda L, t: (["scrub", str(L.run), "-o", str(t / "o"),
                                                             "--jobs", "100000"], t / "o"),
         0, "out", r"^9 inputs: 9 scrubbed, 0 failed$"),
    Case("window --phases --jobs 100000", lambda L, t: (["window", str(L.run), "--phases", "--jobs", "100000"], None),
         0, "out", r"^window: step 2 \(default, 99\.8 ms;"),
    Case("summarize --jobs 100000", lambda L, t: (["summarize", str(L.bundle), "-o", str(t / "o"),
                                                   "--jobs", "100000"], t / "o"),
         0, "out", r"^1 run: 1 summarized, 0 incomplete, 0 skipped$"),
    # the same path twice, outputs that are (or hold) an input
    Case("the same SOURCE twice", lambda L, t: (["collect", str(L.run), str(L.run), "-o", str(t / "o")], t / "o"),
         2, "err", r"RUN: given twice \(the same as .*RUN\); name each SOURCE once$", True),
    Case("collect -o SOURCE", lambda L, t: (["collect", str(L.run), "-o", str(L.run)], None),
         2, "err", r"-o .*RUN: is the input .*RUN; outputs never go into an input", True),
    Case("scrub -o SOURCE", lambda L, t: (["scrub", str(L.run), "-o", str(L.run)], None),
         2, "err", r"-o .*RUN: is the input .*RUN;", True),
    Case("-o holds the SOURCE", lambda L, t: (["collect", str(L.run / "ray_logs"), "-o", str(L.run)], None),
         2, "err", r"-o .*RUN: holds the input .*RUN/ray_logs; choose another -o$", True),
    Case("--work is the SOURCE", lambda L, t: (["collect", str(L.run), "-o", str(t / "o"), "--work", str(L.run)], t / "o"),
         2, "err", r"--work .*RUN: is the input", True),
    Case("--work inside -o", lambda L, t: (["collect", str(L.run), "-o", str(t / "o"), "--work", str(t / "o" / "w")],
                                          t / "o"),
         2, "err", r"work dir .*must lie outside OUT|--work .*inside", True),
    Case("-o under a file", lambda L, t: (["collect", str(L.run), "-o", str(L.run / "sample_manifest.json" / "o")], None),
         2, "err", r"sample_manifest\.json is a file, not a folder", True),
    Case("-o on /proc", lambda L, t: (["collect", str(L.run), "-o", "/proc/verlprof-out"], None),
         2, "err", r"-o /proc/verlprof-out: on the kernel's proc file system", True),
    Case("--step 0", lambda L, t: (["collect", str(L.run), "-o", str(t / "o"), "--step", "0"], t / "o"),
         2, "err", r"--step", True),
    # inputs that are not there, empty, cut short, or not what their name says
    Case("a SOURCE that is not there", lambda L, t: (["collect", str(t / "nope"), "-o", str(t / "o")], t / "o"),
         2, "err", r"nope: no such file or folder$", True),
    Case("an empty folder", lambda L, t: (["collect", str(_empty(t)), "-o", str(t / "o")], t / "o"),
         4, "err", r"no profiler artifacts found in empty; no bundle written$", True),
    Case("a 0-byte report", lambda L, t: (["collect", str(_zero_report(t)), "-o", str(t / "o")], t / "o"),
         4, "err", r"worker_process_999\.nsys-rep", True),
    Case("a truncated SQLite export", lambda L, t: (["collect", str(_truncated_sqlite(L, t)), "-o", str(t / "o")], t / "o"),
         4, "err", r"worker_process_300\.sqlite", True),
    Case("scrub of a truncated SQLite", lambda L, t: (["scrub", str(_truncated_sqlite(L, t)), "-o", str(t / "o")],
                                                     t / "o"),
         4, "err", r"worker_process_300\.sqlite: SQLite file truncated at 98 KB", True),
    Case("a truncated gzip trace", lambda L, t: (["window", str(_truncated_trace(L, t))], None),
         2, "err", r"\.json\.gz: truncated gzip", True),
    Case("a report given to window", lambda L, t: (["window", str(L.run / NSIGHT / "worker_process_300.nsys-rep")], None),
         2, "err", r"worker_process_300\.nsys-rep: an nsys report: export it first", True),
    Case("a file that is no artifact", lambda L, t: (["collect", str(L.run / "sample_manifest.json"), "-o", str(t / "o")],
                                                    t / "o"),
         2, "err", r"sample_manifest\.json: .*not a chrome trace", True),
    Case("summarize of an empty folder", lambda L, t: (["summarize", str(_empty(t)), "-o", str(t / "o")], t / "o"),
         4, "err", r"could not be summarized", True),
    Case("a symlink loop", lambda L, t: (["window", str(_symlink_loop(L, t))], None),
         0, "out", r"^window: step 2"),
    # verlprof's own outputs are never inputs
    Case("collect of a bundle", lambda L, t: (["collect", str(L.bundle), "-o", str(t / "o")], t / "o"),
         2, "err", r"bundle: verlprof's own output \(a bundle: its manifest\.json\), never an input", True),
    Case("window of a bundle", lambda L, t: (["window", str(L.bundle)], None),
         2, "err", r"bundle: verlprof's own output \(a bundle", True),
    Case("scrub of a WORK folder", lambda L, t: (["scrub", str(_work_copy(L, t)), "-o", str(t / "o")], t / "o"),
         2, "err", r"cache: verlprof's own output \(its WORK folder", True),
    Case("scrub of the WORK folder in use", lambda L, t: (["scrub", str(L.work), "-o", str(t / "o")], t / "o"),
         2, "err", r"--work .*work: is the input .*work; outputs never go into an input", True),
    Case("a bundle inside the SOURCE (window)", lambda L, t: (["window", str(_bundle_inside(L, t))], None),
         0, "err", r"^skipped .*run2/bundle: verlprof's own output", True),
    Case("a WORK folder inside the SOURCE (scrub)", lambda L, t: (["scrub", str(_work_inside(L, t)), "-o", str(t / "o")],
                                                                 t / "o"),
         0, "err", r"^skipped .*run3/cache: verlprof's own output \(its WORK folder: CACHEDIR\.TAG\)", True),
]


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_mistake(lab: Lab, tmp_path: Path, case: Case) -> None:
    argv, out = case.build(lab, tmp_path)
    before = tree_digest(lab.run)
    # refused before any work (exit 2): in this process; anything that works: a real subprocess
    r = run_here(argv, lab.env) if case.rc == 2 else run(argv, lab.env, tmp_path / "log")
    assert r.rc == case.rc, f"exit {r.rc}\nstdout: {r.out[-1500:]}\nstderr: {r.err[-1500:]}"
    lines = r.lines(case.stream)
    hits = [ln for ln in lines if re.search(case.line, ln)]
    assert len(hits) == 1, f"{case.stream}: {lines[-20:]}"
    if case.only:
        assert lines == hits, lines
    assert "Traceback" not in r.err
    bounded(r)
    nothing_half_written(tmp_path, out)
    nothing_half_written(lab.root / "RUN", None)
    if case.rc in (2, 4) and out is not None:
        assert not out.exists() or not any(out.iterdir()), sorted(out.rglob("*"))
    assert tree_digest(lab.run) == before, "an input was changed"


def test_bundle_inside_source_is_not_read(lab: Lab, tmp_path: Path) -> None:
    """The issue's case: `collect RUN -o RUN/bundle`, then `collect RUN -o OTHER` reads RUN alone
    (the second with `--jobs 100000`: no more workers than cores and inputs)."""
    src = _nsight_only(lab, tmp_path / "run")
    first = run(["collect", str(src), "-o", str(src / "bundle")], lab.env, tmp_path / "log1")
    second = run(["collect", str(src), "-o", str(tmp_path / "other"), "--jobs", "100000"], lab.env, tmp_path / "log2")
    assert (first.rc, second.rc) == (0, 0), second.out[-2000:]
    import json

    assert second.lines("err") == [f"skipped {src / 'bundle'}: verlprof's own output (a bundle: its manifest.json), "
                                   "never an input"], second.err
    a = json.loads((src / "bundle" / "manifest.json").read_text())
    b = json.loads((tmp_path / "other" / "manifest.json").read_text())
    assert [x["rel"] for x in b["artifacts"]] == [x["rel"] for x in a["artifacts"]]
    assert b["status"]["failed"] == 0 and b["window"]["step"] == a["window"]["step"]
    for r in (first, second):
        bounded(r)


def test_a_read_only_source(lab: Lab, tmp_path: Path) -> None:
    """A source on a read-only mount (a bind mount when root may make one, else read-only modes)
    is read, never written: scrub exits 0, the tree is unchanged (collect's reading is the same
    gather walk, tests/test_gather.py)."""
    ro = tmp_path / "ro"
    ro.mkdir()
    src = _nsight_only(lab, tmp_path / "src")
    mounted = subprocess.run(["mount", "--bind", "-o", "ro", str(src), str(ro)], capture_output=True).returncode == 0
    if not mounted:
        shutil.rmtree(ro)
        shutil.copytree(src, ro)
        for p in ro.rglob("*"):
            p.chmod(0o555 if p.is_dir() else 0o444)
    try:
        before = tree_digest(ro)
        r = run(["scrub", str(ro), "-o", str(tmp_path / "o"), "--jobs", "2"], lab.env, tmp_path / "log")
        assert r.rc == 0, r.err
        assert "3 inputs: 3 scrubbed, 0 failed" in r.lines("out")   # then the review list's line (issue 39)
        assert tree_digest(ro) == before
        bounded(r)
    finally:
        if mounted:
            subprocess.run(["umount", str(ro)], check=True)


def test_a_report_still_being_written(lab: Lab, tmp_path: Path) -> None:
    """A report that grows while collect reads it fails with that reason, in one row; the rest is
    summarized (exit 3) and nothing of the growing file is half-read into the bundle."""
    src = _nsight_only(lab, tmp_path / "run")
    growing = src / NSIGHT / "worker_process_901.nsys-rep"
    data = (lab.run / NSIGHT / "worker_process_452.nsys-rep").read_bytes()
    growing.write_bytes(data[:4096])
    stop = threading.Event()

    def writer() -> None:
        with open(growing, "ab", buffering=0) as f:
            i = 4096
            while not stop.is_set():
                f.write(data[i % len(data): i % len(data) + 512] or b"\0" * 512)
                i += 512
                time.sleep(0.0005)

    thread = threading.Thread(target=writer, daemon=True)
    try:
        r = run(["collect", str(src), "-o", str(tmp_path / "o")], lab.env, tmp_path / "log",
                during=thread.start)
    finally:
        stop.set()
        thread.join()
    assert r.rc == 3, r.out[-3000:] + r.err[-2000:]
    hits = [ln for ln in r.lines("out") if "still being written" in ln]
    assert len(hits) == 1 and "worker_process_901.nsys-rep" in r.out, r.out[-3000:]
    bounded(r)
    nothing_half_written(tmp_path, tmp_path / "o")


def test_two_collects_into_one_out_and_two_sharing_a_work(lab: Lab, tmp_path: Path) -> None:
    """Three collects at once, one --work: two into the same OUT (one writes the bundle, the other
    stops before any work, in one line naming OUT and the pid), the third elsewhere; the two that
    run share the WORK folder, both whole (neither cuts into the other's windows)."""
    src = _nsight_only(lab, tmp_path / "run")
    work = tmp_path / "shared-work"
    same = ["collect", str(src), "-o", str(tmp_path / "o"), "--work", str(work)]
    other = ["collect", str(src), "-o", str(tmp_path / "elsewhere"), "--work", str(work), "--jobs", "100000"]
    a, b, c = run_many([same, same, other], lab.env, tmp_path / "log")
    assert sorted((a.rc, b.rc)) == [0, 2], (a.err, b.err)
    loser = a if a.rc == 2 else b
    assert re.fullmatch(r"verlprof: error: .*/o: another verlprof \(pid \d+\) is writing this bundle now; "
                        r"wait for it to end, or choose another -o", loser.err.strip()), loser.err
    assert c.rc == 0, c.out[-3000:]
    for r in (a, b, c):
        if r.rc == 0:
            assert " 0 failed" in r.out, r.out[-3000:]
        bounded(r)
    assert (tmp_path / "o" / "manifest.json").is_file() and (tmp_path / "elsewhere" / "manifest.json").is_file()
    assert (work / "CACHEDIR.TAG").is_file()
    nothing_half_written(tmp_path, tmp_path / "o")


# ------------------------------------------------------------------------------------------------
# True sizes, and the terminal's small lies
# ------------------------------------------------------------------------------------------------


def test_sizes_and_hashes_are_of_the_files(lab: Lab) -> None:
    """Every trace size in manifest.json is its file's size, the report shows those sizes, and the
    archive's SHA256SUMS holds the files' hashes (recomputed from the bundle folder)."""
    import json

    man = json.loads((lab.bundle / "manifest.json").read_text())
    html = (lab.bundle / "report.html").read_text()
    checked = 0
    for t in man["traces"]:
        for key, rel in t["outputs"].items():
            size = (lab.bundle / rel).stat().st_size
            assert t["counts"][key]["size"] == size, (rel, t["counts"][key]["size"], size)
            checked += 1
        if "chrome" in t["outputs"]:
            assert fmt_bytes((lab.bundle / t["outputs"]["chrome"]).stat().st_size) in html
    assert checked >= 8
    archive = lab.bundle.with_name(lab.bundle.name + ".tar.gz")
    members = dict(iter_members(archive))
    sums = parse_sums(members["SHA256SUMS"].decode())
    on_disk = tree_digest(lab.bundle)
    assert sums == {k: v for k, v in on_disk.items()}
    for rel, data in members.items():
        if rel != "SHA256SUMS":
            assert len(data) == (lab.bundle / rel).stat().st_size


def test_torch_windows_are_gzipped_properly(lab: Lab) -> None:
    """A published torch window is no bigger than `gzip -6` of its own bytes (+2%)."""
    torch = [p for p in (lab.bundle / "traces").glob("outputs__profile__*.trace.json.gz")]
    assert len(torch) == 2
    for p in torch:
        raw = gzip.decompress(p.read_bytes())
        six = subprocess.run(["gzip", "-6", "-c"], input=raw, capture_output=True, check=True).stdout
        assert p.stat().st_size <= len(six) * 1.02, (p.name, p.stat().st_size, len(six))


def test_collect_terminal_says_what_happened(lab: Lab) -> None:
    """On a first run over a folder nsys exported: the exports beside the reports are named as
    such (not an export cache), and one rank is `1 rank`."""
    out = lab.first.out
    assert "Exported nothing: 3 reports read from the SQLite export beside it." in out
    assert "export cache" not in out
    assert re.search(r"^trainer: 1 rank, step 2", out, re.M) and "1 ranks" not in out


def test_window_at_80_columns_keeps_numbers_whole_and_names_roles(lab: Lab, tmp_path: Path) -> None:
    r = run(["window", str(lab.run), "--phases"], lab.env, tmp_path / "log")
    assert r.rc == 0
    lines = r.lines("out")
    assert all(len(ln) <= 80 for ln in lines), max(lines, key=len)
    for a, b in zip(lines, lines[1:]):   # never a number at a line's end and its unit on the next
        assert not (re.search(r"\d$", a) and re.match(r"\s*(ms|KB|MB)\b", b)), (a, b)
    assert any("99.8 ms" in ln for ln in lines if ln.startswith("window:"))
    assert "role ?" not in r.out and "rank ?" not in r.out
    assert re.search(r"^trainer \(pid 300\) step 2: worker_process_300\.sqlite", r.out, re.M)
    assert re.search(r"^actor_rollout_ref rank 1 \(pid 452\) step 2:", r.out, re.M)


def test_doctor_did_you_mean_fits_80_columns(tmp_path: Path) -> None:
    r = run(["doctor", "--nsys", "none", "--verl-release", "verl-0.9.1", "--", "python3", "-m",
             "verl.trainer.main_ppo", "actor_rollout_ref.rollout.gpu_memory_utilisation=0.5"],
            _env(tmp_path / "w"), tmp_path / "log")
    assert r.rc == 1
    lines = r.lines("out")
    assert "    did you mean actor_rollout_ref.rollout.gpu_memory_utilization?" in lines
    assert "    actor_rollout_ref.rollout.gpu_memory_utilization=0.5" in lines
    assert all(len(ln) <= 80 for ln in lines), max(lines, key=len)


def test_a_reason_is_cut_after_a_whole_word() -> None:
    from types import SimpleNamespace

    from verlprof.pipeline.terminal_views import artifact_summary
    from verlprof.stages.core.errors import cut_at_word

    reason = ('its step window was not published: no CUDA call or kernel with a numeric "ts" '
              "(a damaged or foreign trace?)")
    assert cut_at_word(reason, 60) == "its step window was not published: no CUDA call or kernel…"
    art = SimpleNamespace(rel="a.json.gz", kind=SimpleNamespace(value="trace"), size=1000, step=2)
    st = SimpleNamespace(rel="a.json.gz", status="failed", reason=reason)
    text = "\n".join(str(x) for x in artifact_summary([st], [art], 200))
    assert "or kernel…)" in text and "kernel wi)" not in text


def test_window_trace_of_sample_is_readable(lab: Lab) -> None:
    """The bundle's torch windows still open as gzip JSON (the level changed, not the format)."""
    p = next((lab.bundle / "traces").glob("outputs__profile__*.trace.json.gz"))
    assert b'"traceEvents"' in gzip.decompress(p.read_bytes())[:1 << 20]

