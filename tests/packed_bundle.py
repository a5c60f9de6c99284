"""Read a packed bundle back, safely: what tests need to check `pack_bundle`'s archive.

Moved here from pipeline/pack.py (issue 30): no command reads an archive back (users run `tar xzf`
and `sha256sum -c SHA256SUMS`), so these live beside the tests that use them. They refuse absolute
names, `..`, links and devices instead of extracting them.
"""
from __future__ import annotations

import hashlib
import tarfile
from pathlib import Path, PurePosixPath
from typing import Iterator

from verlprof.pipeline.pack import ARCHIVE_SUFFIX, SUMS_NAME
from verlprof.stages.core.errors import BadInputError

_CHUNK = 1 << 20


def is_bundle_archive(path: Path) -> bool:
    """True for a file that looks like a packed bundle (gzip magic and a .tar.gz/.tgz name)."""
    p = Path(path)
    if not p.is_file() or not p.name.lower().endswith((ARCHIVE_SUFFIX, ".tgz")):
        return False
    with open(p, "rb") as f:
        return f.read(2) == b"\x1f\x8b"


def parse_sums(text: str) -> dict[str, str]:
    """`sha256sum` lines -> {relative name: hex digest}."""
    out: dict[str, str] = {}
    for line in text.splitlines():
        if not line.strip():
            continue
        digest, _, name = line.partition("  ")
        out[name.lstrip("*")] = digest.strip().lower()
    return out


def _open_archive(archive: Path) -> tarfile.TarFile:
    try:
        return tarfile.open(archive, mode="r:gz")
    except FileNotFoundError:
        raise BadInputError(archive, "file not found") from None
    except (tarfile.TarError, OSError, EOFError) as exc:
        raise BadInputError(archive, f"not a readable .tar.gz ({exc})") from None


def _safe_name(member: tarfile.TarInfo, archive: Path) -> tuple[str, str]:
    """(top folder, name inside it) of a member, or BadInputError for anything unsafe."""
    p = PurePosixPath(member.name)
    if p.is_absolute() or ".." in p.parts or len(p.parts) < 2 or "\\" in member.name:
        raise BadInputError(archive, f"unsafe member name {member.name!r}")
    if not member.isfile():
        raise BadInputError(archive, f"member {member.name!r} is not a regular file")
    return p.parts[0], PurePosixPath(*p.parts[1:]).as_posix()


def iter_members(archive: Path) -> Iterator[tuple[str, bytes]]:
    """(name inside the bundle, content) of every file of a packed bundle, checked for safety.

    Reads members one by one (each is one summary or one window trace, small by construction).
    """
    archive = Path(archive)
    with _open_archive(archive) as tar:
        top: str | None = None
        try:
            for member in tar:
                folder, name = _safe_name(member, archive)
                if top is None:
                    top = folder
                elif folder != top:
                    raise BadInputError(archive, f"members under two folders ({top!r}, {folder!r})")
                f = tar.extractfile(member)
                yield name, f.read() if f is not None else b""
        except (tarfile.TarError, OSError, EOFError) as exc:
            raise BadInputError(archive, f"truncated or corrupt archive ({exc})") from None


def verify_archive(archive: Path) -> list[str]:
    """Problems with a packed bundle's SHA256SUMS (missing, extra or changed files); [] when fine."""
    digests: dict[str, str] = {}
    sums_text: str | None = None
    for name, data in iter_members(archive):
        if name == SUMS_NAME:
            sums_text = data.decode("utf-8", "replace")
        else:
            digests[name] = hashlib.sha256(data).hexdigest()
    if sums_text is None:
        return [f"no {SUMS_NAME} in the archive"]
    listed = parse_sums(sums_text)
    problems = [f"{n}: listed in {SUMS_NAME} but missing" for n in sorted(set(listed) - set(digests))]
    problems += [f"{n}: not listed in {SUMS_NAME}" for n in sorted(set(digests) - set(listed))]
    problems += [f"{n}: SHA256 mismatch" for n in sorted(set(listed) & set(digests))
                 if listed[n] != digests[n]]
    return problems


def unpack_bundle(archive: Path, dest: Path) -> Path:
    """Extract a packed bundle into `dest` (safe names and regular files only); return its folder."""
    dest = Path(dest)
    top_dir: Path | None = None
    with _open_archive(Path(archive)) as tar:
        try:
            for member in tar:
                folder, name = _safe_name(member, Path(archive))
                if top_dir is not None and folder != top_dir.name:
                    raise BadInputError(archive, f"members under two folders ({top_dir.name!r}, {folder!r})")
                target = dest / folder / name
                target.parent.mkdir(parents=True, exist_ok=True)
                src = tar.extractfile(member)
                with open(target, "wb") as out:
                    while src is not None and (chunk := src.read(_CHUNK)):
                        out.write(chunk)
                top_dir = top_dir or dest / folder
        except (tarfile.TarError, OSError, EOFError) as exc:
            raise BadInputError(archive, f"truncated or corrupt archive ({exc})") from None
    if top_dir is None:
        raise BadInputError(archive, "empty archive")
    return top_dir
