"""Pack a share bundle into one `OUT.tar.gz` with a `SHA256SUMS` inside, and read it back safely.

Why: a bundle is a folder of summaries and traces; people send one file. The archive is built so
that it reveals nothing about the machine that made it and is the same bytes for the same bundle:

- members sorted by path, all under one folder named like the bundle (`OUT/...`), relative names
  only; regular files only (a symlink in the bundle is refused: it could point anywhere);
- tar headers carry uid/gid 0, empty user/group names, mode 0644, and one fixed mtime
  (`SOURCE_DATE_EPOCH` when set, else 0); the gzip header has no file name and mtime 0;
- hidden files (`.name`, e.g. temp files of a crashed run) are left out;
- `SHA256SUMS` (the `sha256sum` format, paths relative to the bundle folder) is the last member,
  so `tar xzf OUT.tar.gz && cd OUT && sha256sum -c SHA256SUMS` checks it;
- written to a temp name and renamed, so a crash never leaves a half archive.

Reading an archive back (members, SHA256SUMS) is the tests' (tests/packed_bundle.py): no command
unpacks one; `tar` and `sha256sum -c` do.
"""
from __future__ import annotations

import gzip
import hashlib
import os
import tarfile
from pathlib import Path
from typing import BinaryIO

from ..stages.core.atomic import atomic_path
from ..stages.core.errors import VerlprofError

SUMS_NAME = "SHA256SUMS"
MANIFEST_NAME = "manifest.json"
ARCHIVE_SUFFIX = ".tar.gz"


def default_archive_path(out_dir: Path) -> Path:
    """`OUT.tar.gz` beside the bundle folder `OUT`."""
    full = Path(out_dir).resolve()
    return full.parent / f"{full.name}{ARCHIVE_SUFFIX}"


def bundle_files(out_dir: Path, exclude: Path | None = None) -> list[tuple[str, Path]]:
    """(relative posix name, path) of every file to pack, sorted; refuses links and devices."""
    root = Path(out_dir)
    skip = exclude.resolve() if exclude is not None else None
    found: list[tuple[str, Path]] = []
    for dirpath, dirnames, filenames in os.walk(root, followlinks=False):
        here = Path(dirpath)
        for d in list(dirnames):
            if d.startswith("."):
                dirnames.remove(d)
            elif (here / d).is_symlink():
                raise VerlprofError(here / d, "a symlink inside the bundle; refusing to pack it")
        for name in filenames:
            path = here / name
            rel = path.relative_to(root).as_posix()
            if name.startswith(".") or rel == SUMS_NAME:
                continue
            if skip is not None and path.resolve() == skip:
                continue
            if path.is_symlink():
                raise VerlprofError(path, "a symlink inside the bundle; refusing to pack it")
            if not path.is_file():
                raise VerlprofError(path, "not a regular file; refusing to pack it")
            if "\n" in rel or "\\" in rel:
                raise VerlprofError(path, "file name with a newline or backslash; refusing to pack it")
            found.append((rel, path))
    return sorted(found)


def _fixed_mtime() -> int:
    try:
        return max(0, int(os.environ.get("SOURCE_DATE_EPOCH", "0")))
    except ValueError:
        return 0


def _info(name: str, size: int, mtime: int) -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.size = size
    info.mtime = mtime
    info.mode = 0o644
    info.uid = info.gid = 0
    info.uname = info.gname = ""
    info.type = tarfile.REGTYPE
    return info


class _HashingReader:
    """File wrapper that hashes what tarfile reads, so each file is read once."""

    def __init__(self, f: BinaryIO) -> None:
        self.f = f
        self.h = hashlib.sha256()

    def read(self, n: int = -1) -> bytes:
        data = self.f.read(n)
        self.h.update(data)
        return data


def pack_bundle(out_dir: Path, archive: Path | None = None) -> Path:
    """Write `OUT.tar.gz` (or `archive`) holding bundle `out_dir` and its SHA256SUMS; return its path."""
    root = Path(out_dir)
    if not root.is_dir():
        raise VerlprofError(root, "no such bundle folder")
    if not (root / MANIFEST_NAME).is_file():
        raise VerlprofError(root, f"not a verlprof bundle (no {MANIFEST_NAME}); run verlprof collect first")
    target = Path(archive) if archive is not None else default_archive_path(root)
    top = root.resolve().name
    files = bundle_files(root, exclude=target)
    mtime = _fixed_mtime()
    sums: list[str] = []
    with atomic_path(target) as tmp:
        with open(tmp, "wb") as raw, \
                gzip.GzipFile(filename="", mode="wb", fileobj=raw, mtime=0) as gz, \
                tarfile.open(fileobj=gz, mode="w", format=tarfile.PAX_FORMAT) as tar:  # type: ignore[call-overload]
            for rel, path in files:
                with open(path, "rb") as f:
                    size = os.fstat(f.fileno()).st_size
                    reader = _HashingReader(f)
                    try:
                        tar.addfile(_info(f"{top}/{rel}", size, mtime), reader)  # type: ignore[arg-type]
                    except OSError as exc:
                        raise VerlprofError(path, f"changed while packing ({exc})") from None
                sums.append(f"{reader.h.hexdigest()}  {rel}\n")
            blob = "".join(sums).encode()
            tar.addfile(_info(f"{top}/{SUMS_NAME}", len(blob), mtime), _BytesReader(blob))  # type: ignore[arg-type]
    return target


class _BytesReader:
    def __init__(self, data: bytes) -> None:
        self.data, self.pos = data, 0

    def read(self, n: int = -1) -> bytes:
        end = len(self.data) if n < 0 else self.pos + n
        chunk, self.pos = self.data[self.pos:end], min(end, len(self.data))
        return chunk
