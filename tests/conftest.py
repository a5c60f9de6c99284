"""Shared test fixtures.

`run_cli`: a `verlprof` command run in this process, through the console script's own `main`
(same exit code, stdout and stderr), for tests about a command's behaviour rather than about the
process (signals, the wheel and a fresh environment keep their subprocess). `collect_once`: each
(input, options, COLUMNS) collected once per test run and shared, read-only (`made_once`).

nsys fixtures (`nsys_exe`, `nsys_reports`, `nsys_qdstrm`): real, small Nsight Systems reports made
by the local nsys from a tiny python program with `nvtx` ranges (nsys 2022.4 records the python
`nvtx` package up to 0.2.10). No GPU is needed: `--trace=nvtx,osrt --sample=none --cpuctxsw=none`.
The reports hold this machine's environment, so they live only in pytest's temp folders.
"""
from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Callable, Iterator

import pytest

# Tests import `testdata` (tests/data through data_path/data_dir); pytest's importlib mode does not
# put tests/ on sys.path, so conftest, loaded first, does.
sys.path.insert(0, str(Path(__file__).resolve().parent))

from inprocess import Collected, run_cli  # noqa: E402 - found through the path set just above
from nsys_profiling import profile_with_nsys  # noqa: E402



# ----------------------------------------------------------------------------------------------
# Tests that cannot take each other down
# ----------------------------------------------------------------------------------------------


@pytest.fixture(autouse=True, scope="module")
def _own_ray_temp_dir(request: pytest.FixtureRequest) -> Iterator[None]:
    """Each module marked `ray` gets its own Ray temp folder, and whatever Ray it started is stopped
    when it ends.

    Why: Ray keeps its sessions, sockets and the address of "the" local cluster under
    `$RAY_TMPDIR/ray` (default `/tmp/ray`), shared by every job on the machine; a test run that
    found another job's cluster there (or left its own behind) once died inside pytest's process
    with no summary line. `RAY_TMPDIR` is what Ray itself reads for that folder (the path stays
    short: Ray's socket paths must fit 107 bytes).
    """
    if not _uses_ray(request):
        yield
        return
    base = tempfile.mkdtemp(prefix="vpray", dir="/tmp")
    old = os.environ.get("RAY_TMPDIR")
    os.environ["RAY_TMPDIR"] = base
    try:
        yield
    finally:
        stop_ray()
        if old is None:
            os.environ.pop("RAY_TMPDIR", None)
        else:
            os.environ["RAY_TMPDIR"] = old
        shutil.rmtree(base, ignore_errors=True)


def _uses_ray(request: pytest.FixtureRequest) -> bool:
    """The module, or one of its tests, carries the `ray` mark."""
    if request.node.get_closest_marker("ray") is not None:
        return True
    for obj in vars(request.module).values():
        marks = getattr(obj, "pytestmark", [])
        if any(getattr(m, "name", None) == "ray" for m in (marks if isinstance(marks, list) else [marks])):
            return True
    return False


#: Markers of the tests that run a real outside tool at length (a wheel build, the sample's
#: regeneration, a Ray cluster, nsys): each such test is also `slow`, so `-m "not slow"` is the
#: quick run and the full run starts them first (see `pytest_collection_modifyitems`).
REAL_TOOL_MARKS = ("ray", "nsys")


def pytest_collection_modifyitems(session: pytest.Session, config: pytest.Config, items: list[pytest.Item]) -> None:
    """Order and group the run: modules holding a slow test first, tests marked `ray` last.

    Why ray last: once this process has been a Ray driver (tests/test_ray.py's `ray.init`), a
    process pool forked from it later is not safe: a later in-process pooled collect
    (test_report_chromium's bundle) lost a worker to SIGSEGV in pass 2, reproducibly, with nothing
    in faulthandler's output (Ray's native state survives `ray.shutdown`). verlprof's own commands
    never fork after being a Ray driver (one command, one executor); only a test process does both.

    Why slow first: with pytest-xdist (`.ci/run`: `-n <cores> --dist loadfile --no-loadscope-reorder`)
    every module is one unit (its module fixtures run once, on one worker) and the units are dealt
    in the order of their first test here, so the long modules start early and the workers end
    together. The one module of in-process Ray tests (tests/test_ray.py, all `ray`) is dealt last:
    one Ray cluster at a time, and the worker that ran it takes nothing after it. (test_samples.py's
    `ray` test runs its cluster in a child process, so it stays in its module's unit, at its end.)
    Not `--dist loadgroup`: pytest-xdist 3.8 groups by rewriting `item._nodeid`, which pytest 9
    no longer reads, so every test became its own unit and module fixtures ran on every worker."""
    for item in items:
        if any(item.get_closest_marker(m) is not None for m in REAL_TOOL_MARKS):
            item.add_marker(pytest.mark.slow)
    slow_modules = {item.path for item in items if item.get_closest_marker("slow") is not None}
    order = {id(item): i for i, item in enumerate(items)}
    items.sort(key=lambda item: (item.get_closest_marker("ray") is not None,
                                 item.path not in slow_modules, order[id(item)]))


def stop_ray() -> None:
    """Disconnect this process from Ray if a test connected it (no-op without Ray)."""
    ray = sys.modules.get("ray")
    if ray is not None and getattr(ray, "is_initialized", lambda: False)():
        ray.shutdown()


def pytest_runtest_logstart(nodeid: str, location: tuple) -> None:
    """Name the running test in $VERLPROF_CURRENT_TEST_FILE (set by .ci/run), so a run that dies
    without pytest's summary line (a native crash in a library) still says where it died."""
    path = os.environ.get("VERLPROF_CURRENT_TEST_FILE")
    if path:
        try:
            Path(path).write_text(nodeid + "\n")
        except OSError:
            pass


# ----------------------------------------------------------------------------------------------
# Made once per test run, shared by every xdist worker
# ----------------------------------------------------------------------------------------------


@contextlib.contextmanager
def made_once(tmp_path_factory: pytest.TempPathFactory, name: str) -> Iterator[tuple[Path, bool]]:
    """`(folder, made)`: the run-wide folder `name` (beside every xdist worker's own temp folder),
    held under an exclusive lock; `made` says whether an earlier holder finished it (its
    `.done` marker). The caller fills it when not made; the marker is written when the block
    ends without an error, so a failed attempt is redone by the next asker, never half-reused.

    Why: with `-n <cores>` each worker is its own pytest session, so a session fixture (three nsys
    profiles, a collect of the sample) would run once per worker, at the same time; nsys 2022.4
    even loses races on its semaphore when several profile at once."""
    base = tmp_path_factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):
        base = base.parent                  # the run's folder, shared by the workers
    folder = base / "shared" / name
    folder.mkdir(parents=True, exist_ok=True)
    with open(folder.with_name(name + ".lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        done = folder / ".done"
        made = done.is_file()
        if not made:                        # what a failed earlier attempt left is not reused
            shutil.rmtree(folder)
            folder.mkdir()
        yield folder, made
        if not made:
            done.touch()


NSYS_PROFILE_FLAGS = ["--trace=nvtx,osrt", "--sample=none", "--cpuctxsw=none", "--force-overwrite=true"]

# The profiled program: `steps` "step" ranges with verl-like children, so reports differ in content.
_NVTX_PROGRAM = """
import sys, time
import nvtx
steps = int(sys.argv[1])
for i in range(steps):
    with nvtx.annotate("step", color="blue"):
        with nvtx.annotate("gen"):
            time.sleep(0.01)
        with nvtx.annotate("update_actor"):
            time.sleep(0.005)
"""


@pytest.fixture(scope="session")
def nsys_exe() -> Path:
    """The local nsys (PATH or $VERLPROF_NSYS); tests that need it skip without it."""
    exe = os.environ.get("VERLPROF_NSYS") or shutil.which("nsys")
    if not exe:
        pytest.skip("nsys is not installed (CI installs Debian's nsight-systems: .ci/install_nsys.sh)")
    return Path(exe)


def _profile_cmd(nsys: Path | str, out_base: Path, program: Path, steps: int) -> list[str]:
    return [str(nsys), "profile", *NSYS_PROFILE_FLAGS, "-o", str(out_base),
            sys.executable, str(program), str(steps)]


@pytest.fixture(scope="session")
def nsys_reports(nsys_exe: Path, tmp_path_factory: pytest.TempPathFactory) -> list[Path]:
    """Three real `.nsys-rep` files (1, 2 and 3 NVTX "step" ranges), profiled in parallel, once
    per test run (shared by the xdist workers: `made_once`).

    Read-only by convention: tests copy them into tmp_path before changing anything.
    """
    with made_once(tmp_path_factory, "nsys_reports") as (folder, made):
        if not made:
            _profile_three(nsys_exe, folder)
        return [folder / f"report_steps{steps}.nsys-rep" for steps in (1, 2, 3)]


def _profile_three(nsys_exe: Path, folder: Path) -> None:
    program = folder / "nvtx_steps.py"
    program.write_text(_NVTX_PROGRAM)
    for steps in (1, 2, 3):             # one nsys session at a time: tests/nsys_profiling.py says why
        base = folder / f"report_steps{steps}"
        profile_with_nsys(_profile_cmd(nsys_exe, base, program, steps), base.with_name(base.name + ".nsys-rep"),
                          cwd=folder)


@pytest.fixture(scope="session")
def nsys_qdstrm(nsys_exe: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A real unfinished report (`.qdstrm`), as nsys leaves it when it cannot find its importer.

    nsys looks for QdstrmImporter relative to its own binary, so a copy of the nsys binary in a
    folder of symlinks to the rest of its target folder (and no host folder beside it) profiles
    normally but stops at the `.qdstrm` - exactly the Debian "importer link" quirk.
    """
    real = Path(os.path.realpath(nsys_exe))
    folder = tmp_path_factory.mktemp("nsys_qdstrm")
    target = folder / "no-importer" / real.parent.name
    target.mkdir(parents=True)
    for entry in real.parent.iterdir():
        if entry.name != real.name:
            (target / entry.name).symlink_to(entry)
    shutil.copy2(real, target / real.name)
    program = folder / "nvtx_steps.py"
    program.write_text(_NVTX_PROGRAM)
    base = folder / "unfinished"
    out = profile_with_nsys(_profile_cmd(target / real.name, base, program, 2),
                            base.with_name(base.name + ".qdstrm"), cwd=folder, expect_report=False)
    shutil.rmtree(folder / "no-importer")
    qd = base.with_name(base.name + ".qdstrm")
    if not qd.is_file():
        pytest.skip(f"this nsys layout did not leave a .qdstrm (exit {out.returncode}): {out.stdout[-500:]}")
    return qd


# ----------------------------------------------------------------------------------------------
# Commands in this process, and collects shared by the whole session
# ----------------------------------------------------------------------------------------------


@pytest.fixture(scope="session")
def collect_once(tmp_path_factory: pytest.TempPathFactory) -> Callable[..., Collected]:
    """`collect_once(source, *options, columns=80)`: `verlprof collect SOURCE -o <folder>/<name of
    SOURCE> OPTIONS` (in-process, `run_cli`), run the first time a test of the run asks for that
    input, options and width, and shared with every later test, on every xdist worker
    (`made_once`).

    Why: the shipped sample and the runs of tests/data were collected again by test after test
    (the same sample ~10 times); a collect is deterministic (every bundle byte-identical on the
    same input, options and WORK salt, which keys the pseudonyms of user-written names; the
    owner's names are in `<folder>/work/names_review.txt`; tests/test_collect*.py check it), so one run serves every test that
    only reads its bundle or its output. The bundle's folder is named after the input (run ids of
    `summarize` come from it). Read-only by convention: a test that changes a bundle copies it."""
    done: dict[str, Collected] = {}

    def collect(source: str | Path, *options: str | Path, columns: int = 80) -> Collected:
        key = json.dumps([str(Path(source).resolve()), [str(o) for o in options], columns])
        if key not in done:
            name = "collect-" + hashlib.sha256(key.encode()).hexdigest()[:16]
            with made_once(tmp_path_factory, name) as (base, made):
                out, facts = base / Path(source).name, base / "collected.json"
                if not made:
                    res = run_cli("collect", source, "-o", out, "--work", base / "work", *options, columns=columns)
                    facts.write_text(json.dumps([res.returncode, res.stdout, res.stderr]))
                code, stdout, stderr = json.loads(facts.read_text())
            done[key] = Collected(code, stdout, stderr, out)
        return done[key]

    return collect
