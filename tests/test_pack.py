"""`verlprof pack`: one deterministic, anonymous OUT.tar.gz with SHA256SUMS, read back safely.

The bundle packed here holds real outputs: window traces of the H200 fixtures (SQLite and Chrome
JSON) and a Parquet summary, plus the kind of debris a crashed run leaves (hidden temp files).
"""
from __future__ import annotations

import hashlib
import io
import os
import shutil
import sqlite3
import subprocess
import tarfile
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from inprocess import run_cli
from testdata import fixtures_dir
from packed_bundle import is_bundle_archive, iter_members, unpack_bundle, verify_archive
from verlprof.pipeline.pack import SUMS_NAME, bundle_files, default_archive_path, pack_bundle
from verlprof.stages.core.errors import BadInputError, VerlprofError
from verlprof.stages.schema import arrow_schema
from verlprof.stages.traces.jobs import TraceJob, make_window_traces

FIX = fixtures_dir()
NSYS = FIX / "h200-nsys-2025.3" / "ray-continuous" / "worker_process_1983.2.sqlite"



@pytest.fixture(scope="module")
def bundle_src(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("bundle") / "OUT"
    with sqlite3.connect(f"file:{NSYS}?mode=ro&immutable=1", uri=True) as con:
        epoch = con.execute("SELECT utcEpochNs FROM TARGET_INFO_SESSION_START_TIME").fetchone()[0]
        s, e = con.execute("SELECT start, end FROM NVTX_EVENTS WHERE eventType = 60 ORDER BY end - start DESC "
                           "LIMIT 1").fetchone()
    make_window_traces(TraceJob("nsys", NSYS, "ray/worker_process_1983.2.sqlite", root, epoch + s, epoch + e))
    (root / "summaries").mkdir()
    pq.write_table(pa.Table.from_pylist([], schema=arrow_schema("phases")), root / "summaries" / "phases.parquet")
    (root / "manifest.json").write_text('{"version": 1}\n')
    return root


@pytest.fixture()
def bundle(bundle_src: Path, tmp_path: Path) -> Path:
    root = tmp_path / "OUT"
    shutil.copytree(bundle_src, root)
    (root / "traces" / ".w.sqlite.tmp-123-abcd").write_bytes(b"half-written")  # crash debris
    return root


def test_pack_layout_headers_and_sums(bundle: Path) -> None:
    archive = pack_bundle(bundle)
    assert archive == default_archive_path(bundle) == bundle.parent / "OUT.tar.gz"
    assert is_bundle_archive(archive)
    with tarfile.open(archive, "r:gz") as tar:
        members = tar.getmembers()
        names = [m.name for m in members]
        contents = {m.name: tar.extractfile(m).read() for m in members}  # type: ignore[union-attr]
    files = sorted(p.relative_to(bundle).as_posix() for p in bundle.rglob("*")
                   if p.is_file() and not p.name.startswith("."))
    assert names == [f"OUT/{f}" for f in files] + [f"OUT/{SUMS_NAME}"]
    assert "OUT/traces/ray__worker_process_1983.2.trace.json.gz" in names
    for m in members:
        assert (m.uid, m.gid, m.uname, m.gname, m.mode) == (0, 0, "", "", 0o644)
        assert m.isfile() and not m.name.startswith("/") and ".." not in m.name
        assert m.mtime == members[0].mtime
    sums = contents[f"OUT/{SUMS_NAME}"].decode().splitlines()
    assert sums == [f"{hashlib.sha256((bundle / f).read_bytes()).hexdigest()}  {f}" for f in files]
    assert verify_archive(archive) == []
    with open(archive, "rb") as f:
        head = f.read(10)
    assert head[4:8] == b"\x00\x00\x00\x00" and not head[3] & 0x08  # gzip: mtime 0, no file name


def test_sha256sum_checks_the_extracted_bundle(bundle: Path, tmp_path: Path) -> None:
    if shutil.which("sha256sum") is None or shutil.which("tar") is None:
        pytest.skip("coreutils/tar not installed")
    archive = pack_bundle(bundle, tmp_path / "share.tar.gz")
    dest = tmp_path / "x"
    dest.mkdir()
    subprocess.run(["tar", "xzf", str(archive), "-C", str(dest)], check=True)
    r = subprocess.run(["sha256sum", "-c", SUMS_NAME], cwd=dest / "OUT", capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr
    assert r.stdout.count(": OK") == len(bundle_files(bundle))


def test_pack_is_deterministic(bundle: Path, tmp_path: Path) -> None:
    a = pack_bundle(bundle, tmp_path / "a.tar.gz").read_bytes()
    for p in bundle.rglob("*"):
        os.utime(p, (1_000_000_000, 1_000_000_000))  # same content, other times
    b = pack_bundle(bundle, tmp_path / "b.tar.gz").read_bytes()
    assert a == b


def test_archive_inside_the_bundle_is_not_packed_into_itself(bundle: Path) -> None:
    first = pack_bundle(bundle, bundle / "inside.tar.gz")
    second = pack_bundle(bundle, bundle / "inside.tar.gz")
    assert second == first
    assert "inside.tar.gz" not in [n for n, _ in iter_members(second)]


def test_refusals_leave_no_archive_and_keep_an_old_one(bundle: Path, tmp_path: Path) -> None:
    old = tmp_path / "keep.tar.gz"
    old.write_bytes(b"previous archive")
    (bundle / "traces" / "link").symlink_to("/etc/passwd")
    with pytest.raises(VerlprofError, match="symlink"):
        pack_bundle(bundle, old)
    assert old.read_bytes() == b"previous archive"
    (bundle / "traces" / "link").unlink()
    os.mkfifo(bundle / "fifo")
    with pytest.raises(VerlprofError, match="regular file"):
        pack_bundle(bundle, old)
    (bundle / "fifo").unlink()
    (bundle / "manifest.json").unlink()
    with pytest.raises(VerlprofError, match="not a verlprof bundle"):
        pack_bundle(bundle, tmp_path / "new.tar.gz")
    with pytest.raises(VerlprofError, match="no such bundle"):
        pack_bundle(tmp_path / "nope")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["OUT", "keep.tar.gz"]


def test_unpack_round_trip_and_tamper_detection(bundle: Path, tmp_path: Path) -> None:
    archive = pack_bundle(bundle, tmp_path / "a.tar.gz")
    root = unpack_bundle(archive, tmp_path / "x")
    assert root == tmp_path / "x" / "OUT"
    for rel, path in bundle_files(bundle):
        assert (root / rel).read_bytes() == path.read_bytes()
    # rewrite the archive with one member changed: the sums no longer match
    tampered = tmp_path / "t.tar.gz"
    with tarfile.open(archive, "r:gz") as src, tarfile.open(tampered, "w:gz") as dst:
        for m in src.getmembers():
            data = src.extractfile(m).read()  # type: ignore[union-attr]
            if m.name.endswith("manifest.json"):
                data = b'{"version": 2}\n'
                m.size = len(data)
            dst.addfile(m, io.BytesIO(data))
    assert verify_archive(tampered) == ["manifest.json: SHA256 mismatch"]


@pytest.mark.parametrize("evil", ["../escape.txt", "/abs.txt", "OUT/../../escape.txt", "OUT/link"])
def test_unsafe_archives_are_refused(evil: str, tmp_path: Path) -> None:
    archive = tmp_path / "evil.tar.gz"
    with tarfile.open(archive, "w:gz") as tar:
        info = tarfile.TarInfo(evil)
        if evil.endswith("link"):
            info.type, info.linkname = tarfile.SYMTYPE, "/etc/passwd"
            tar.addfile(info)
        else:
            info.size = 4
            tar.addfile(info, io.BytesIO(b"evil"))
    dest = tmp_path / "dest"
    with pytest.raises(BadInputError):
        unpack_bundle(archive, dest)
    with pytest.raises(BadInputError):
        verify_archive(archive)
    assert not (tmp_path / "escape.txt").exists() and not Path("/abs.txt").exists()
    assert not dest.exists() or not any(p.is_file() for p in dest.rglob("*"))


def test_truncated_archive_is_a_clean_error(bundle: Path, tmp_path: Path) -> None:
    archive = pack_bundle(bundle, tmp_path / "a.tar.gz")
    cut = tmp_path / "cut.tar.gz"
    cut.write_bytes(archive.read_bytes()[: archive.stat().st_size // 2])
    with pytest.raises(BadInputError) as err:
        verify_archive(cut)
    assert str(cut) in str(err.value) and "\n" not in str(err.value)


def test_cli_pack(bundle: Path, tmp_path: Path) -> None:
    ok = run_cli("pack", bundle, "-o", tmp_path / "cli.tar.gz")
    assert ok.returncode == 0, ok.stderr
    assert "cli.tar.gz" in ok.stdout and verify_archive(tmp_path / "cli.tar.gz") == []
    bad = run_cli("pack", tmp_path / "missing")
    assert bad.returncode != 0 and len(bad.stderr.strip().splitlines()) == 1 and "missing" in bad.stderr


def test_check_finds_a_secret_inside_the_archive(tmp_path: Path) -> None:
    """Negative control for the share test: `check` on an archive does look at its members."""
    from verlprof.stages.scrub.check import check_paths
    from verlprof.stages.scrub.policy import load_policy

    policy = load_policy(use_local_environment=False)
    bundle = tmp_path / "OUT"
    (bundle / "summaries").mkdir(parents=True)
    (bundle / "manifest.json").write_text('{"version": 1}\n')
    pq.write_table(pa.Table.from_pylist([], schema=arrow_schema("phases")), bundle / "summaries" / "phases.parquet")
    clean = pack_bundle(bundle, tmp_path / "clean.tar.gz")
    assert check_paths([clean], policy) == []
    (bundle / "notes.txt").write_text("HF_TOKEN=hf_kQ7ZpLm2XvB9tR4sWc8YnD1eUfA6gHjK3o\n")
    dirty = pack_bundle(bundle, tmp_path / "dirty.tar.gz")
    findings = check_paths([dirty], policy)
    assert findings and all("notes.txt" in f.path for f in findings)
    assert all("hf_kQ7Zp" not in str(f) for f in findings)
