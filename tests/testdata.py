"""One way for tests to reach their data: `data_path("h200-nsys-2025.3/whole/whole_1873.sqlite")`.

Why: the repository must carry every input its tests read (a fresh clone passes alone), and git-tracked
test data stays small, so large files are stored compressed (`<name>.xz`) under `tests/data/` and
decompressed once per machine into a cache keyed by the compressed file's content. Tests never write
into what `data_path` returns (the cached copies are read-only); they copy into `tmp_path` first.
"""
from __future__ import annotations

import hashlib
import lzma
import os
import shutil
import tempfile
from pathlib import Path

DATA = Path(__file__).resolve().parent / "data"
_CACHE = Path(os.environ.get("VERLPROF_TEST_CACHE", Path(tempfile.gettempdir()) / "verlprof-testdata"))


def _digest(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()[:16]


def _decompressed(compressed: Path, rel: str) -> Path:
    """The cached plain copy of `compressed` (made atomically the first time it is asked for)."""
    final = _CACHE / _digest(compressed) / rel
    if final.is_file():
        return final
    final.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=final.parent, prefix=f".{final.name}.")
    try:
        with os.fdopen(fd, "wb") as out, lzma.open(compressed, "rb") as src:
            shutil.copyfileobj(src, out, 1 << 20)
        os.chmod(tmp, 0o444)
        os.replace(tmp, final)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return final


def _publish(staging: Path, final: Path) -> Path:
    """Move the finished folder `staging` to `final` atomically (keeping another worker's if it won)."""
    final.parent.mkdir(parents=True, exist_ok=True)
    try:
        os.replace(staging, final)
    except OSError:  # another worker made it first
        shutil.rmtree(staging, ignore_errors=True)
    return final


def data_path(rel: str) -> Path:
    """The readable path of test input `rel` (relative to tests/data), decompressing `rel + ".xz"`.

    Raises FileNotFoundError naming the file when the repository does not hold it: a test never
    skips because its data is missing.
    """
    plain = DATA / rel
    if plain.exists():
        return plain
    compressed = DATA / (rel + ".xz")
    if compressed.is_file():
        return _decompressed(compressed, rel)
    raise FileNotFoundError(f"tests/data/{rel}: not in the repository (neither the file nor {rel}.xz)")


def data_dir(rel: str) -> Path:
    """A folder of test inputs with every `.xz` member decompressed (cached), for tests that glob."""
    src = DATA / rel
    if not src.is_dir():
        raise FileNotFoundError(f"tests/data/{rel}: no such folder in the repository")
    members = sorted(p for p in src.rglob("*") if p.is_file())
    if not any(p.suffix == ".xz" for p in members):
        return src
    h = hashlib.sha256()
    for p in members:
        h.update(str(p.relative_to(src)).encode())
        h.update(_digest(p).encode())
    final = _CACHE / f"dir-{h.hexdigest()[:16]}" / Path(rel).name
    if final.is_dir():
        return final
    staging = Path(tempfile.mkdtemp(dir=_CACHE.mkdir(parents=True, exist_ok=True) or _CACHE))
    for p in members:
        relp = p.relative_to(src)
        dst = staging / (relp.with_suffix("") if p.suffix == ".xz" else relp)
        dst.parent.mkdir(parents=True, exist_ok=True)
        if p.suffix == ".xz":
            shutil.copyfile(_decompressed(p, str(Path(rel) / relp.with_suffix(""))), dst)
        else:
            shutil.copyfile(p, dst)
        os.chmod(dst, 0o444)
    return _publish(staging, final)


#: The H200 fixture folders and files of tests/data, under the names the old shared fixture layout gave them.
_H200 = {"h200-nsys-2025.3": "h200-nsys-2025.3", "h200-torch-2.11": "h200-torch-2.11",
         "README.md": "h200-README.md", "workload.py": "h200-workload.py"}


def fixtures_dir() -> Path:
    """The H200 fixtures as one read-only folder named `fixtures` (laid out as the old shared fixture layout was).

    Why: several tests hand the whole tree to `gather` or walk it; this keeps their view of one run's
    files while every file comes out of tests/data (decompressed once through `data_dir`).
    """
    parts = {name: (data_dir(src) if (DATA / src).is_dir() else data_path(src)) for name, src in _H200.items()}
    h = hashlib.sha256("".join(f"{n}={p}" for n, p in sorted(parts.items())).encode())
    final = _CACHE / f"fixtures-{h.hexdigest()[:16]}" / "fixtures"
    if final.is_dir():
        return final
    _CACHE.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(dir=_CACHE))
    for name, src in parts.items():
        if src.is_dir():
            shutil.copytree(src, staging / name)
        else:
            shutil.copyfile(src, staging / name)
    for p in staging.rglob("*"):
        if p.is_file():
            os.chmod(p, 0o444)
    return _publish(staging, final)


def owner_names(work: Path | None) -> dict[str, str]:
    """pseudonym -> the owner's original, from a WORK folder's review list (empty without one).

    Why tests need it: a file, folder or range name a test chose is user-written text, published as
    a pseudonym (issue 39); a test that names what it planted reads it back as the owner does."""
    from verlprof.stages.scrub.provenance import REVIEW_NAME, read_review_map

    review = work / REVIEW_NAME if work is not None else None
    return read_review_map(review) if review is not None and review.is_file() else {}
