"""Every place a command will write, checked before any work starts.

Why: a collect used to run its whole pipeline (minutes on a big run) and then die with a traceback
and exit 1 because `-o` was on a read-only mount, under `/proc`, below a file, or in a folder the
user cannot write. Each command now names its output places first (`-o`, `--work`, the archive of
`pack`), and each one that cannot take files ends the command at once with one line naming the
path and the reason, exit 2 (bad usage).

How: the checks run on the nearest folder that exists, since that is where the command's first
write lands (it creates the missing folders below it): a path below a regular file, a special file
system (proc, sysfs, devtmpfs, cgroup...: the kernel's, not a place for files), a read-only file
system, and finally a real probe file created and removed there. The probe is the only check that
sees every cause (permissions, ACLs, read-only bind mounts, quotas, FUSE) the way the real write
will; root passes `os.access` everywhere, the probe does not lie to it.
"""
from __future__ import annotations

import errno
import os
import stat
import tempfile
from dataclasses import dataclass
from pathlib import Path

from ..stages.core.errors import VerlprofError

#: File system types that hold the kernel's views, never user files (from /proc/self/mountinfo).
SPECIAL_FS = frozenset({
    "proc", "sysfs", "devtmpfs", "devpts", "cgroup", "cgroup2", "debugfs", "tracefs", "securityfs",
    "configfs", "bpf", "pstore", "efivarfs", "mqueue", "hugetlbfs", "fusectl", "binfmt_misc",
    "autofs", "nsfs", "rpc_pipefs", "selinuxfs",
})


@dataclass(frozen=True)
class OutputPlace:
    """One place a command writes: `path`, how the user named it (`-o`, `--work`), and whether the
    files land inside it (a folder the command fills) or beside it (a temp sibling renamed onto it,
    as for a bundle or an archive)."""

    path: Path
    option: str
    inside: bool = True


class OutputPlaceError(VerlprofError):
    """An output place that cannot take files; exit 2 (bad usage), before any work."""


def check_output_places(*places: OutputPlace) -> None:
    """Raise OutputPlaceError for the first place that cannot be written (one line: the option,
    the path and why). Nothing is created: a missing folder is checked through its nearest
    existing parent, which is where the command will create it."""
    for place in places:
        why = why_not_writable(place.path, place.inside)
        if why is not None:
            raise OutputPlaceError(None, f"{place.option} {_absolute(place.path)}: {why}")


def why_not_writable(path: Path, inside: bool = True) -> str | None:
    """None when a command can write at `path`, else the reason in a few plain words."""
    target = _absolute(path)
    start = target if inside else target.parent
    existing, why = _nearest_existing(start)
    if why is not None:
        return why
    if existing is None:
        return "no existing folder above it"
    fs = _fs_type(existing)
    if fs in SPECIAL_FS:
        return f"on the kernel's {fs} file system (not a place for files)"
    try:
        if os.statvfs(existing).f_flag & os.ST_RDONLY:
            return f"on a read-only file system ({existing} is mounted read-only)"
    except OSError:
        pass
    return _probe(existing)


def _absolute(path: Path) -> Path:
    return Path(os.path.abspath(Path(path).expanduser()))


def _nearest_existing(path: Path) -> tuple[Path | None, str | None]:
    """(the nearest existing folder at or above `path`, or why there is none to write in)."""
    for p in (path, *path.parents):
        try:
            st = os.stat(p)
        except FileNotFoundError:
            continue
        except PermissionError:
            return None, f"permission denied: {p} cannot be reached by this user"
        except NotADirectoryError:
            continue                   # a file further up: found as the blocker on the way up
        except OSError as exc:
            return None, f"cannot look at {p}: {exc.strerror or exc}"
        if stat.S_ISDIR(st.st_mode):
            return p, None
        return None, f"{p} is a file, not a folder (nothing can be created below it)"
    return None, None


def _fs_type(path: Path) -> str | None:
    """The file system type of the mount holding `path` (longest mount point that contains it)."""
    try:
        real = os.path.realpath(path)
        best, kind = "", None
        with open("/proc/self/mountinfo", encoding="utf-8", errors="replace") as f:
            for line in f:
                left, _, right = line.partition(" - ")
                fields = left.split()
                if len(fields) < 5 or not right:
                    continue
                mount = fields[4].replace("\\040", " ")
                if (real == mount or real.startswith(mount.rstrip("/") + "/")) and len(mount) >= len(best):
                    best, kind = mount, right.split()[0]
        return kind
    except OSError:
        return None


def _probe(folder: Path) -> str | None:
    """Create and remove one empty file in `folder`: the honest answer to "can I write here?"."""
    try:
        fd, name = tempfile.mkstemp(prefix=".verlprof-probe-", dir=folder)
    except OSError as exc:
        return _errno_words(exc, folder)
    os.close(fd)
    try:
        os.unlink(name)
    except OSError:
        pass
    return None


def _errno_words(exc: OSError, folder: Path) -> str:
    if exc.errno in (errno.EACCES, errno.EPERM):
        return f"permission denied: {folder} is not writable by this user"
    if exc.errno == errno.EROFS:
        return f"on a read-only file system ({folder})"
    if exc.errno == errno.ENOSPC:
        return f"no space left on the device of {folder}"
    if exc.errno == errno.EDQUOT:
        return f"disk quota exceeded in {folder}"
    return f"cannot create a file in {folder}: {exc.strerror or exc}"


def check_not_inputs(sources: "list[Path]", *places: OutputPlace) -> None:
    """Refuse, in one line (exit 2), a SOURCE given twice and an output place that is a SOURCE or
    holds one: outputs never land in an input folder, and publishing a bundle replaces its folder.

    Why: `scrub RUN -o RUN` excluded its own OUT, found nothing and wrote its report into the run
    folder; `collect RUN RUN` read every file twice before deduplicating them silently. An OUT
    *inside* a SOURCE is fine: gather skips it (stages/core/own_outputs.py)."""
    seen: dict[Path, Path] = {}
    for src in sources:
        real = Path(os.path.realpath(Path(src).expanduser()))
        if real in seen:
            raise VerlprofError(src, f"given twice (the same as {seen[real]}); name each SOURCE once")
        seen[real] = Path(src)
    for place in places:
        target = Path(os.path.realpath(_absolute(place.path)))
        for real, src in seen.items():
            if target == real:
                raise OutputPlaceError(None, f"{place.option} {_absolute(place.path)}: is the input {src}; "
                                             f"outputs never go into an input, choose another {place.option}")
            if target in real.parents:
                raise OutputPlaceError(None, f"{place.option} {_absolute(place.path)}: holds the input {src}; "
                                             f"choose another {place.option}")
