"""Every output place is checked before any work (issue 34): `collect -o`, `collect --work`,
`summarize -o`, `pack -o`, `scrub -o` on a read-only file system, on the kernel's file systems
(`/proc/x`, `/sys/x`), below a regular file, or in a folder this user cannot write: one line naming
the path and the reason, exit 2, no traceback, and nothing created (the work dir of a refused
collect does not exist afterwards: no stage ran).

The read-only file system is a real read-only mount (`mount -t tmpfs -o ro`), which needs root (CI
runs as root); the unwritable folder is a real permission check, made as the unprivileged user
`nobody` when the tests run as root (root may write anywhere the file system allows).
"""
from __future__ import annotations

import os
import pickle
import shutil
import subprocess
from pathlib import Path
from typing import Iterator

import pytest
from inprocess import run_cli
from verlprof.pipeline.output_places import why_not_writable

ROOT = Path(__file__).resolve().parents[1]
SAMPLE = ROOT / "samples" / "tiny_run"
IS_ROOT = os.geteuid() == 0


def verlprof(*args: str | Path, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    """The command, in-process through the console script's `main` (exit code, stdout, stderr)."""
    return run_cli(*args, columns=100, cwd=cwd)


def refused(res: subprocess.CompletedProcess[str], option: str, path: Path | str, why: str) -> None:
    """Exit 2, and stderr is exactly one line naming the option, the path and the reason."""
    assert res.returncode == 2, (res.returncode, res.stdout, res.stderr)
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1, res.stderr
    assert "Traceback" not in res.stderr + res.stdout
    assert lines[0].startswith(f"verlprof: error: {option} {path}: "), lines[0]
    assert why in lines[0], lines[0]


@pytest.fixture
def ro_mount(tmp_path: Path) -> Iterator[Path]:
    """A real read-only file system (an empty tmpfs mounted read-only)."""
    where = tmp_path / "ro"
    where.mkdir()
    if not IS_ROOT:
        pytest.skip("a read-only mount needs root (CI runs as root)")
    made = subprocess.run(["mount", "-t", "tmpfs", "-o", "ro,size=1m", "tmpfs", str(where)],
                          capture_output=True, text=True)
    if made.returncode != 0:
        if os.environ.get("CI") == "true":
            pytest.fail(f"CI runs as root but cannot mount a read-only tmpfs: {made.stderr.strip()}")
        pytest.skip(f"cannot mount here: {made.stderr.strip()}")
    try:
        yield where
    finally:
        subprocess.run(["umount", "-l", str(where)], check=False)


@pytest.fixture(scope="module")
def bundle(collect_once) -> Path:
    """A real bundle of the shipped sample (the input of `summarize` and `pack`; read only)."""
    res = collect_once(SAMPLE)
    assert res.code == 0, res.stdout + res.stderr
    return res.out


@pytest.fixture
def a_file(tmp_path: Path) -> Path:
    f = tmp_path / "plain.txt"
    f.write_text("a file, not a folder\n")
    return f


# ----------------------------------------------------------------------------------------------
# collect
# ----------------------------------------------------------------------------------------------


def test_collect_out_on_proc_refused_before_any_stage(tmp_path: Path) -> None:
    work = tmp_path / "work"
    res = verlprof("collect", SAMPLE, "-o", "/proc/x", "--work", work)
    refused(res, "-o", "/proc/x", "on the kernel's proc file system")
    assert not work.exists()                           # no stage ran: the work dir was never made
    assert res.stdout == ""


def test_collect_out_below_a_file(tmp_path: Path, a_file: Path) -> None:
    work = tmp_path / "work"
    res = verlprof("collect", SAMPLE, "-o", a_file / "out", "--work", work)
    refused(res, "-o", a_file / "out", f"{a_file} is a file, not a folder")
    assert not work.exists()


def test_collect_out_on_a_read_only_mount(tmp_path: Path, ro_mount: Path) -> None:
    work = tmp_path / "work"
    res = verlprof("collect", SAMPLE, "-o", ro_mount / "out", "--work", work)
    refused(res, "-o", ro_mount / "out", "read-only file system")
    assert not work.exists()


def test_collect_work_on_a_read_only_mount(tmp_path: Path, ro_mount: Path) -> None:
    res = verlprof("collect", SAMPLE, "-o", tmp_path / "out", "--work", ro_mount / "work")
    refused(res, "--work", ro_mount / "work", "read-only file system")
    assert not (tmp_path / "out").exists()


def test_collect_work_on_sys_and_below_a_file(tmp_path: Path, a_file: Path) -> None:
    refused(verlprof("collect", SAMPLE, "-o", tmp_path / "out", "--work", "/sys/verlprof-work"),
            "--work", "/sys/verlprof-work", "on the kernel's sysfs file system")
    refused(verlprof("collect", SAMPLE, "-o", tmp_path / "out", "--work", a_file / "w"),
            "--work", a_file / "w", "is a file, not a folder")
    assert not (tmp_path / "out").exists()


# ----------------------------------------------------------------------------------------------
# summarize, pack, scrub
# ----------------------------------------------------------------------------------------------


def test_summarize_out_refused(bundle: Path, tmp_path: Path, a_file: Path) -> None:
    work = tmp_path / "work"
    refused(verlprof("summarize", bundle, "-o", "/proc/x", "--work", work), "-o", "/proc/x", "proc file system")
    refused(verlprof("summarize", bundle, "-o", a_file / "o", "--work", work), "-o", a_file / "o",
            "is a file, not a folder")
    refused(verlprof("summarize", bundle, "-o", tmp_path / "o", "--work", "/proc/w"), "--work", "/proc/w",
            "proc file system")
    assert not work.exists() and not (tmp_path / "o").exists()


def test_summarize_out_on_a_read_only_mount(bundle: Path, tmp_path: Path, ro_mount: Path) -> None:
    refused(verlprof("summarize", bundle, "-o", ro_mount / "cmp", "--work", tmp_path / "w"),
            "-o", ro_mount / "cmp", "read-only file system")
    assert not (tmp_path / "w").exists()


def test_pack_out_refused(bundle: Path, tmp_path: Path, a_file: Path) -> None:
    refused(verlprof("pack", bundle, "-o", "/proc/x.tar.gz"), "-o", "/proc/x.tar.gz", "proc file system")
    refused(verlprof("pack", bundle, "-o", a_file / "x.tar.gz"), "-o", a_file / "x.tar.gz",
            "is a file, not a folder")


def test_pack_out_on_a_read_only_mount(bundle: Path, ro_mount: Path) -> None:
    refused(verlprof("pack", bundle, "-o", ro_mount / "x.tar.gz"), "-o", ro_mount / "x.tar.gz",
            "read-only file system")


def test_scrub_out_refused(tmp_path: Path, a_file: Path) -> None:
    trace = next((SAMPLE / "outputs" / "profile").glob("*.json.gz"))
    refused(verlprof("scrub", trace, "-o", "/proc/t.json.gz", "--work", tmp_path / "w"), "-o", "/proc/t.json.gz",
            "proc file system")
    refused(verlprof("scrub", SAMPLE / "outputs" / "profile", "-o", a_file / "d", "--work", tmp_path / "w"),
            "-o", a_file / "d", "is a file, not a folder")


# ----------------------------------------------------------------------------------------------
# A folder this user cannot write
# ----------------------------------------------------------------------------------------------


def _as_nobody(path: Path, inside: bool) -> str | None:
    """why_not_writable(path) answered by a child process running as `nobody` (uid 65534)."""
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:                                       # the child: drop root, answer, leave
        try:
            os.close(r)
            os.setgroups([])
            os.setgid(65534)
            os.setuid(65534)
            answer: object = why_not_writable(path, inside)
        except BaseException as exc:  # noqa: BLE001 - sent back to the parent
            answer = exc
        os.write(w, pickle.dumps(answer))
        os._exit(0)
    os.close(w)
    with os.fdopen(r, "rb") as f:
        data = f.read()
    os.waitpid(pid, 0)
    answer = pickle.loads(data)
    if isinstance(answer, BaseException):
        raise answer
    return answer  # type: ignore[return-value]


@pytest.fixture
def open_dir() -> Iterator[Path]:
    """A folder every user can reach (pytest's own temp root is private to its user)."""
    import tempfile

    d = Path(tempfile.mkdtemp(prefix="vp-places-", dir="/tmp"))
    d.chmod(0o755)
    try:
        yield d
    finally:
        for p in d.rglob("*"):
            if p.is_dir():
                p.chmod(0o755)
        shutil.rmtree(d, ignore_errors=True)


def test_a_folder_this_user_cannot_write(open_dir: Path) -> None:
    tmp_path = open_dir
    locked = tmp_path / "locked"
    locked.mkdir()
    locked.chmod(0o555)                                # r-x for everyone: nobody may not create files
    private = tmp_path / "private"
    private.mkdir()
    private.chmod(0o700)                               # root's alone: nobody cannot even look inside
    try:
        if IS_ROOT:
            why_in = _as_nobody(locked / "out", inside=True)
            why_beside = _as_nobody(locked / "x.tar.gz", inside=False)
            assert _as_nobody(tmp_path / "open", inside=True) == \
                f"permission denied: {tmp_path} is not writable by this user"     # root's 0755
            assert _as_nobody(private / "out", inside=True) == \
                f"permission denied: {private / 'out'} cannot be reached by this user"
            shutil.rmtree(tmp_path / "nobody-can", ignore_errors=True)
            (tmp_path / "nobody-can").mkdir(mode=0o777)
            (tmp_path / "nobody-can").chmod(0o777)
            assert _as_nobody(tmp_path / "nobody-can" / "out", inside=True) is None
        else:
            why_in = why_not_writable(locked / "out", inside=True)
            why_beside = why_not_writable(locked / "x.tar.gz", inside=False)
            res = verlprof("collect", SAMPLE, "-o", locked / "out", "--work", tmp_path / "w")
            refused(res, "-o", locked / "out", "permission denied")
        assert why_in == f"permission denied: {locked} is not writable by this user"
        assert why_beside == f"permission denied: {locked} is not writable by this user"
    finally:
        locked.chmod(0o755)


def test_writable_places_pass_and_leave_nothing_behind(tmp_path: Path) -> None:
    assert why_not_writable(tmp_path / "a" / "b" / "c") is None       # created later, by the command
    assert why_not_writable(tmp_path / "bundle", inside=False) is None
    assert sorted(p.name for p in tmp_path.iterdir()) == []           # the probe file is gone
