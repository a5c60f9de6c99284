"""The export stage on real reports made by the real nsys, and export validation on real exports."""
from __future__ import annotations

import os
import shutil
import sqlite3
from dataclasses import replace
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from testdata import data_path, fixtures_dir
from verlprof.pipeline.executors import InlineExecutor, ProcessPoolExecutorBackend
from verlprof.pipeline.stage_runs import export_all
from verlprof.stages.core.errors import BadInputError
from verlprof.stages.core.hashing import sha256_file
from verlprof.stages.core.model import Artifact, ArtifactKind
from verlprof.stages.export.nsys_export import ExportOptions, ExportResult, clean_dead_temps, export_one
from verlprof.stages.export.nsys_tool import find_nsys
from verlprof.stages.readers.sqlite_export import validate_export

FIXTURES = fixtures_dir()
WHOLE = FIXTURES / "h200-nsys-2025.3" / "whole" / "whole_1873.sqlite"
CONTINUOUS = sorted((FIXTURES / "h200-nsys-2025.3" / "ray-continuous").glob("*.sqlite"))


def _art(path: Path, kind: ArtifactKind, root: Path | None = None, sha: str = "") -> Artifact:
    rel = str(path.relative_to(root)) if root else path.name
    return Artifact(kind=kind, path=path, rel=rel, size=path.stat().st_size if path.exists() else 0, sha256=sha)


def _copy(src: Path, folder: Path, name: str | None = None) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    dst = folder / (name or src.name)
    shutil.copy2(src, dst)
    return dst


def _assert_cache_clean(work: Path) -> None:
    """After anything, the cache holds only complete, valid exports: no temps, no invalid SQLite."""
    for folder in (work / "exports", work / "imports"):
        if not folder.is_dir():
            continue
        assert [p.name for p in folder.iterdir() if ".tmp-" in p.name or p.name.endswith("-journal")] == []
        for p in folder.glob("*.sqlite"):
            validate_export(p)


def _assert_one_line_no_abs_path(res: ExportResult, art: Artifact) -> None:
    assert "\n" not in res.detail and res.detail.startswith(art.rel)
    assert str(art.path.parent) not in res.detail


# ---- validate_export on real exports ----------------------------------------------------------------

@pytest.mark.nsys
def test_validate_real_exports_of_two_nsys_generations(nsys_reports: list[Path], tmp_path: Path) -> None:
    info = validate_export(WHOLE)  # read-only fixture folder: must open without journals
    assert info.nsys_version == "2025.3.2.0" and info.schema_version == "3.20.3"
    assert info.schema_version == "3.20.3" and "CUPTI_ACTIVITY_KIND_KERNEL" in info.tables
    assert info.size == WHOLE.stat().st_size
    for p in CONTINUOUS:
        assert "TARGET_INFO_SESSION_START_TIME" in validate_export(p).tables
    nsys = find_nsys(None)
    res = export_one(_art(nsys_reports[0], ArtifactKind.NSYS_REPORT), ExportOptions(work_dir=tmp_path))
    local = validate_export(res.sqlite)
    assert local.nsys_version.startswith(nsys.short_version)
    assert local.meta.get("EXPORT_PRODUCT_NAME") == "NVIDIA Nsight Systems"


def test_validate_rejects_broken_files_in_one_line(tmp_path: Path) -> None:
    empty = tmp_path / "empty.sqlite"
    empty.write_bytes(b"")
    cut = tmp_path / "cut.sqlite"
    with open(WHOLE, "rb") as f:
        cut.write_bytes(f.read(WHOLE.stat().st_size // 2))
    other = tmp_path / "other.sqlite"
    con = sqlite3.connect(other)
    con.execute("CREATE TABLE t (x)")
    con.commit()
    con.close()
    text = tmp_path / "text.sqlite"
    text.write_text("hello, not a database\n" * 10)
    cases = {empty: "empty file (0 bytes)", cut: "truncated SQLite file", other: "not an Nsight Systems export",
             text: "not an SQLite database", tmp_path / "absent.sqlite": "file not found"}
    for path, what in cases.items():
        with pytest.raises(BadInputError) as err:
            validate_export(path)
        assert str(err.value).startswith(f"{path}: ") and what in str(err.value) and "\n" not in str(err.value)


@pytest.fixture(scope="module")
def whole_head() -> bytes:
    with open(WHOLE, "rb") as f:
        return f.read(256 * 1024)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_validate_fuzz_never_crashes(data: st.DataObject, whole_head: bytes, tmp_path: Path) -> None:
    """Cut and flipped bytes of a real export: a valid ExportInfo or a one-line BadInputError."""
    blob = bytearray(WHOLE.read_bytes() if data.draw(st.booleans()) else whole_head)
    cut = data.draw(st.integers(min_value=0, max_value=len(blob)))
    blob = blob[:cut]
    for _ in range(data.draw(st.integers(min_value=0, max_value=8))):
        if blob:
            i = data.draw(st.integers(min_value=0, max_value=len(blob) - 1))
            blob[i] = data.draw(st.integers(min_value=0, max_value=255))
    p = tmp_path / "fuzz.sqlite"
    p.write_bytes(bytes(blob))
    try:
        info = validate_export(p)
    except BadInputError as exc:
        assert "\n" not in str(exc)
    else:
        assert "StringIds" in info.tables


# ---- export_all on real reports ------------------------------------------------------------------

@pytest.mark.nsys
def test_parallel_export_then_cache_then_corrupt_cache(nsys_reports: list[Path], tmp_path: Path) -> None:
    src = tmp_path / "run"
    reports = [_copy(r, src / "profile") for r in nsys_reports]
    before = {p: (sha256_file(p), p.stat().st_mtime_ns) for p in reports}
    arts = [_art(p, ArtifactKind.NSYS_REPORT, src) for p in reports]
    work = tmp_path / "work"
    opts = ExportOptions(work_dir=work, jobs=2)
    seen: list[ExportResult] = []

    first = export_all(arts, opts, ProcessPoolExecutorBackend(2), on_done=seen.append)
    assert [r.status for r in first] == ["exported"] * 3, [r.detail for r in first]
    assert len(seen) == 3 and {r.artifact for r in seen} == {a.rel for a in arts}
    assert [r.artifact for r in first] == [a.rel for a in arts]  # input order
    for r, p in zip(first, reports):
        assert r.sqlite == work / "exports" / f"{before[p][0]}.sqlite"   # keyed by content hash
        assert r.sha256 == before[p][0] and r.seconds > 0 and r.nsys_version
        assert r.to_outcome().status == "done" and r.to_outcome().info["export"] == "exported"
    assert {p: (sha256_file(p), p.stat().st_mtime_ns) for p in reports} == before  # inputs untouched
    assert sorted(x.name for x in src.rglob("*")) == sorted(["profile", *(p.name for p in reports)])
    _assert_cache_clean(work)
    stamps = {r.sqlite: r.sqlite.stat().st_mtime_ns for r in first}

    # Second run exports nothing: it does not even need nsys.
    second = export_all(arts, replace(opts, nsys=str(tmp_path / "no" / "nsys")), InlineExecutor())
    assert [r.status for r in second] == ["cached"] * 3
    assert {r.sqlite: r.sqlite.stat().st_mtime_ns for r in second} == stamps

    # A corrupted cached export is detected by validation (not mtime) and exported again.
    victim = first[1].sqlite
    with open(victim, "r+b") as f:
        f.truncate(victim.stat().st_size // 3)
    third = export_all(arts, opts, InlineExecutor())
    assert [r.status for r in third] == ["cached", "exported", "cached"]
    assert "re-exported: cached export was invalid (truncated SQLite file" in third[1].detail
    validate_export(victim)
    _assert_cache_clean(work)


@pytest.mark.nsys
def test_export_beside_given_and_stale_beside(nsys_reports: list[Path], tmp_path: Path) -> None:
    src = tmp_path / "run"
    rep = _copy(nsys_reports[1], src)
    work = tmp_path / "work"
    opts = ExportOptions(work_dir=work)
    made = export_one(_art(rep, ArtifactKind.NSYS_REPORT, src), replace(opts, work_dir=tmp_path / "elsewhere"))
    beside = _copy(made.sqlite, src, rep.name.replace(".nsys-rep", ".sqlite"))

    res = export_one(_art(rep, ArtifactKind.NSYS_REPORT, src), opts)
    assert res.status == "beside" and res.sqlite == beside and "beside" in res.detail
    assert not (work / "exports").exists()  # nothing exported, nothing cached

    # Given alone: a real 2025 export, no nsys needed at all.
    g = export_one(_art(WHOLE, ArtifactKind.NSYS_SQLITE, WHOLE.parent),
                   replace(opts, nsys=str(tmp_path / "no" / "nsys")))
    assert g.status == "given" and g.sqlite == WHOLE and g.nsys_version == "2025.3.2.0"
    assert g.export_schema == "3.20.3" and g.to_outcome().status == "cached"

    # A beside export older than its report is stale (re-profiled into the same name): export again.
    os.utime(beside, (rep.stat().st_atime - 100, rep.stat().st_mtime - 100))
    stale = export_one(_art(rep, ArtifactKind.NSYS_REPORT, src), opts)
    assert stale.status == "exported" and "ignored: it is older than the report" in stale.detail
    # An invalid beside file is ignored too.
    beside.write_bytes(b"")
    cached = export_one(_art(rep, ArtifactKind.NSYS_REPORT, src), opts)
    assert cached.status == "cached" and cached.sqlite.parent == work / "exports"


@pytest.mark.nsys
def test_bad_inputs_fail_clearly_and_leave_no_temps(nsys_reports: list[Path], tmp_path: Path) -> None:
    src = tmp_path / "run"
    src.mkdir()
    data = nsys_reports[0].read_bytes()
    (src / "cut.nsys-rep").write_bytes(data[: len(data) // 2])
    (src / "empty.nsys-rep").write_bytes(b"")
    (src / "zero.sqlite").write_bytes(b"")
    (src / "empty.qdstrm").write_bytes(b"")
    (src / "cut.qdstrm").write_bytes(os.urandom(1000))
    good = _copy(nsys_reports[0], src, "good.nsys-rep")
    arts = [_art(src / n, k, src) for n, k in [
        ("cut.nsys-rep", ArtifactKind.NSYS_REPORT), ("empty.nsys-rep", ArtifactKind.NSYS_REPORT),
        ("zero.sqlite", ArtifactKind.NSYS_SQLITE), ("empty.qdstrm", ArtifactKind.NSYS_QDSTRM),
        ("cut.qdstrm", ArtifactKind.NSYS_QDSTRM), ("good.nsys-rep", ArtifactKind.NSYS_REPORT)]]
    work = tmp_path / "work"
    results = export_all(arts, ExportOptions(work_dir=work), ProcessPoolExecutorBackend(2))
    by = {r.artifact: r for r in results}
    assert by["good.nsys-rep"].status == "exported"
    assert "truncated or corrupt" in by["cut.nsys-rep"].detail
    assert "empty file (0 bytes)" in by["empty.nsys-rep"].detail
    assert "empty file (0 bytes), not an SQLite export" in by["zero.sqlite"].detail
    tool = find_nsys(None)
    for name in ("cut.nsys-rep", "empty.nsys-rep", "zero.sqlite", "empty.qdstrm", "cut.qdstrm"):
        r = by[name]
        if name.endswith(".qdstrm") and tool.qdstrm_importer is None:
            assert r.status == "skipped" and "QdstrmImporter" in r.detail
        else:
            assert r.status == "failed" and r.sqlite is None, r
        _assert_one_line_no_abs_path(r, next(a for a in arts if a.rel == name))
    if tool.qdstrm_importer is not None:
        assert "QdstrmImporter could not import it" in by["cut.qdstrm"].detail
    assert sorted(p.name for p in (work / "exports").iterdir()) == [f"{sha256_file(good)}.sqlite"]
    _assert_cache_clean(work)
    assert sorted(p.name for p in src.iterdir()) == sorted(a.rel for a in arts)  # nothing beside inputs


@pytest.mark.nsys
def test_qdstrm_is_imported_in_work_dir_then_exported(nsys_qdstrm: Path, tmp_path: Path) -> None:
    tool = find_nsys(None)
    src = tmp_path / "run"
    qd = _copy(nsys_qdstrm, src)
    art = _art(qd, ArtifactKind.NSYS_QDSTRM, src)
    work = tmp_path / "work"
    if tool.qdstrm_importer is None:
        res = export_one(art, ExportOptions(work_dir=work))
        assert res.status == "skipped" and "QdstrmImporter" in res.detail
        return
    before = (sha256_file(qd), qd.stat().st_mtime_ns)
    res = export_one(art, ExportOptions(work_dir=work))
    assert (sha256_file(qd), qd.stat().st_mtime_ns) == before  # the importer only saw a copy
    assert res.status == "exported", res.detail
    assert "imported the unfinished report (.qdstrm), then exported" in res.detail
    sha = sha256_file(qd)
    assert res.sqlite == work / "exports" / f"{sha}.sqlite" and (work / "imports" / f"{sha}.nsys-rep").is_file()
    assert sorted(p.name for p in src.iterdir()) == [qd.name]  # nothing written beside the input
    again = export_one(art, ExportOptions(work_dir=work, nsys=str(tmp_path / "no" / "nsys")))
    assert again.status == "cached"
    # With an nsys that has no importer, a .qdstrm is skipped with the fix in one line.
    nothing = export_one(art, ExportOptions(work_dir=tmp_path / "w2", tool=replace(tool, qdstrm_importer=None)))
    assert nothing.status == "skipped" and "no QdstrmImporter" in nothing.detail and "\n" not in nothing.detail
    _assert_cache_clean(work)


@pytest.mark.nsys
def test_missing_nsys_fails_reports_but_not_sqlite_inputs(nsys_reports: list[Path], tmp_path: Path,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    src = tmp_path / "run"
    rep = _copy(nsys_reports[0], src)
    arts = [_art(rep, ArtifactKind.NSYS_REPORT, src),
            _art(CONTINUOUS[0], ArtifactKind.NSYS_SQLITE, CONTINUOUS[0].parent),
            Artifact(kind=ArtifactKind.TORCH_TRACE, path=tmp_path / "t.json", rel="t.json", size=0)]
    monkeypatch.delenv("VERLPROF_NSYS", raising=False)
    res = export_all(arts, ExportOptions(work_dir=tmp_path / "work", nsys=str(tmp_path / "no" / "nsys")))
    assert [r.artifact for r in res] == [arts[0].rel, arts[1].rel]  # other kinds are not export's
    assert res[0].status == "failed" and "does not exist; install Nsight Systems" in res[0].detail
    assert res[1].status == "given"


@pytest.mark.nsys
def test_real_report_of_nsys_2025_fails_with_which_nsys_wrote_it(tmp_path: Path) -> None:
    """A report nsys 2025.3.1 wrote (tests/data/nsys-2025.3-report): the artifact fails in one line
    naming both versions and what to do; nothing is left in the work dir."""
    src = tmp_path / "run"
    rep = _copy(data_path("nsys-2025.3-report/tiny_2025.nsys-rep"), src)
    work = tmp_path / "work"
    tool = find_nsys()
    res = export_one(_art(rep, ArtifactKind.NSYS_REPORT, src), ExportOptions(work_dir=work))
    assert res.status == "failed"
    assert (f"written by nsys 2025.3.1.0, this nsys is {tool.version}: install a newer Nsight Systems "
            "or point --nsys / VERLPROF_NSYS at one") in res.detail
    _assert_one_line_no_abs_path(res, _art(rep, ArtifactKind.NSYS_REPORT, src))
    assert not any(p.suffix == ".sqlite" for p in work.rglob("*"))


@pytest.mark.nsys
def test_report_newer_than_local_nsys_falls_back_to_stale_beside(nsys_reports: list[Path], tmp_path: Path) -> None:
    src = tmp_path / "run"
    data = bytearray(nsys_reports[0].read_bytes())
    data[29] = ord("9")  # version tag "NVIDIA Tegra Profiler Report 1." -> 9: "Version not supported"
    assert bytes(data[:29]) == b"NVIDIA Tegra Profiler Report "
    src.mkdir()
    rep = src / "new.nsys-rep"
    rep.write_bytes(bytes(data))
    work = tmp_path / "work"
    res = export_one(_art(rep, ArtifactKind.NSYS_REPORT, src), ExportOptions(work_dir=work))
    assert res.status == "failed" and "install a newer Nsight Systems or point --nsys" in res.detail
    _assert_one_line_no_abs_path(res, _art(rep, ArtifactKind.NSYS_REPORT, src))
    beside = _copy(CONTINUOUS[1], src, "new.sqlite")
    os.utime(beside, (rep.stat().st_atime - 100, rep.stat().st_mtime - 100))
    res = export_one(_art(rep, ArtifactKind.NSYS_REPORT, src), ExportOptions(work_dir=work))
    assert res.status == "beside" and res.sqlite == beside and "older than the report" in res.detail
    _assert_cache_clean(work)


def test_clean_dead_temps_keeps_live_ones(tmp_path: Path) -> None:
    dead = tmp_path / ".abc.sqlite.tmp-999999999-0a0b.sqlite"
    live = tmp_path / f".def.sqlite.tmp-{os.getpid()}-0c0d.sqlite"
    keep = tmp_path / "abc.sqlite"
    for p in (dead, live, keep):
        p.write_bytes(b"x")
    assert clean_dead_temps(tmp_path) == 1
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([live.name, keep.name])


def test_work_dir_inside_out_is_refused(tmp_path: Path) -> None:
    from verlprof.stages.core.errors import VerlprofError

    art = _art(WHOLE, ArtifactKind.NSYS_SQLITE, WHOLE.parent)
    with pytest.raises(VerlprofError, match="work dir is inside the output folder"):
        export_all([art], ExportOptions(work_dir=tmp_path / "out" / ".work", out_dir=tmp_path / "out"))
    res = export_all([art], ExportOptions(work_dir=tmp_path / "work", out_dir=tmp_path / "out"))
    assert [r.status for r in res] == ["given"] and not (tmp_path / "out").exists()
