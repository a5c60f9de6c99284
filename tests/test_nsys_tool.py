"""The nsys command line wrapper, against the real local nsys (no mocks)."""
from __future__ import annotations

import os
import re
import sqlite3
import subprocess
from pathlib import Path

import pytest
from testdata import data_path
from verlprof.stages.core.errors import BadInputError, ToolMissingError, VerlprofError
from verlprof.stages.core.hashing import sha256_file
from verlprof.stages.export import nsys_tool
from verlprof.stages.export.nsys_tool import export_sqlite, find_nsys, import_qdstrm, parse_version

pytestmark = pytest.mark.nsys


@pytest.fixture(scope="module")
def tool(nsys_exe: Path) -> nsys_tool.NsysTool:
    return find_nsys(str(nsys_exe))


def _leftovers(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir() if ".tmp-" in p.name or p.name.endswith("-journal"))


def _nvtx_names(sqlite: Path) -> list[str]:
    con = sqlite3.connect(f"file:{sqlite}?mode=ro", uri=True)
    try:
        cols = [r[1] for r in con.execute("PRAGMA table_info(NVTX_EVENTS)")]
        name_expr = "COALESCE(e.text, s.value)" if "textId" in cols else "e.text"
        join = "LEFT JOIN StringIds s ON s.id = e.textId" if "textId" in cols else ""
        return [r[0] for r in con.execute(f"SELECT {name_expr} FROM NVTX_EVENTS e {join}") if r[0]]
    finally:
        con.close()


# ---- find / probe --------------------------------------------------------------------------------

def test_ci_finds_the_qdstrm_importer(nsys_exe: Path) -> None:
    """On CI (`CI=true`, set by .ci/run) nsys is installed with its importer linked: verlprof's own
    lookup must find it, or every qdstrm test would pass by skipping its import half."""
    if os.environ.get("CI") != "true":
        pytest.skip("checked where CI=true (.ci/run installs nsys and links its importer)")
    tool = find_nsys(nsys_exe)
    assert tool.qdstrm_importer is not None, f"{tool.path}: verlprof finds no QdstrmImporter"
    assert os.access(tool.qdstrm_importer, os.X_OK)


def test_probe_matches_what_nsys_itself_says(tool: nsys_tool.NsysTool, nsys_exe: Path) -> None:
    version_text = subprocess.run([str(nsys_exe), "--version"], capture_output=True, text=True).stdout
    help_text = subprocess.run([str(nsys_exe), "export", "--help"], capture_output=True, text=True).stdout
    assert tool.version in version_text
    assert tool.version_tuple == parse_version(version_text)[1]
    assert tool.short_version == f"{tool.version_tuple[0]}.{tool.version_tuple[1]}"
    assert tool.supports_tables == ("--tables" in help_text)
    assert tool.supports_quiet == ("--quiet" in help_text)
    if tool.qdstrm_importer is not None:
        assert tool.qdstrm_importer.name == "QdstrmImporter" and os.access(tool.qdstrm_importer, os.X_OK)
        out = subprocess.run([str(tool.qdstrm_importer), "--version"], capture_output=True, text=True)
        assert tool.version.split("-")[0] in out.stdout + out.stderr  # the importer of *this* nsys


def test_find_nsys_from_env_folder_and_path(nsys_exe: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    real = Path(os.path.realpath(nsys_exe))
    monkeypatch.setenv(nsys_tool.ENV_NSYS, str(real.parent))  # a folder holding nsys is accepted
    assert find_nsys(None).path == real
    monkeypatch.delenv(nsys_tool.ENV_NSYS)
    monkeypatch.setenv("PATH", str(nsys_exe.parent))
    assert find_nsys(None).path.name == "nsys"


def test_missing_nsys_is_one_line_with_install_hint(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(ToolMissingError) as err:
        find_nsys(str(tmp_path / "nope" / "nsys"))
    assert "\n" not in str(err.value) and "nope/nsys" in str(err.value) and "nsight-systems" in str(err.value)
    monkeypatch.delenv(nsys_tool.ENV_NSYS, raising=False)
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.setattr(nsys_tool, "_KNOWN_NSYS_GLOBS", ())  # no fallback install folders either
    with pytest.raises(ToolMissingError, match=r"^nsys: not found on PATH; install Nsight Systems"):
        find_nsys(None)
    fake = tmp_path / "nsys"
    fake.write_text("#!/bin/sh\necho hello\n")
    fake.chmod(0o755)
    with pytest.raises(ToolMissingError, match="does not answer like Nsight Systems"):
        find_nsys(str(fake))


# ---- export --------------------------------------------------------------------------------------

def test_export_real_report(tool: nsys_tool.NsysTool, nsys_reports: list[Path], tmp_path: Path) -> None:
    before = {p: (p.stat().st_mtime_ns, p.stat().st_size) for p in nsys_reports}
    dst = tmp_path / "cache" / "r3.sqlite"
    tables = ["^StringIds$", "^NVTX_.*$", "^META_DATA_.*$", "^EXPORT_META_DATA$"]
    info = export_sqlite(tool, nsys_reports[2], dst, tables=tables)
    assert info.path == dst and dst.is_file() and _leftovers(dst.parent) == []
    assert info.nsys_version and info.nsys_version.startswith(tool.short_version)
    assert "StringIds" in info.tables and info.schema_version
    names = _nvtx_names(dst)
    assert names.count("step") == 3 and names.count("gen") == 3 and names.count("update_actor") == 3
    assert {p: (p.stat().st_mtime_ns, p.stat().st_size) for p in nsys_reports} == before  # inputs untouched
    if tool.supports_tables:
        assert "ProcessStreams" not in info.tables


@pytest.mark.parametrize("damage", ["truncated", "empty", "random", "missing"])
def test_export_of_damaged_report_is_one_line_and_leaves_nothing(
        damage: str, tool: nsys_tool.NsysTool, nsys_reports: list[Path], tmp_path: Path) -> None:
    bad = tmp_path / f"{damage}.nsys-rep"
    data = nsys_reports[0].read_bytes()
    if damage == "truncated":
        bad.write_bytes(data[: len(data) // 2])
    elif damage == "empty":
        bad.write_bytes(b"")
    elif damage == "random":
        bad.write_bytes(os.urandom(4096))
    dst = tmp_path / "cache" / "x.sqlite"
    with pytest.raises(BadInputError) as err:
        export_sqlite(tool, bad, dst)
    msg = str(err.value)
    assert "\n" not in msg and msg.startswith(str(bad) + ": ")
    expected = {"truncated": "truncated or corrupt", "empty": "empty file", "random": "truncated or corrupt",
                "missing": "file not found"}[damage]
    assert expected in msg
    assert not dst.exists() and (not dst.parent.exists() or list(dst.parent.iterdir()) == [])


def test_report_from_newer_nsys_says_what_to_install(
        tool: nsys_tool.NsysTool, nsys_reports: list[Path], tmp_path: Path) -> None:
    """A report whose container version the local nsys does not know: nsys says "Version not supported".

    Made from a real report by raising its version tag (and the writer version in its trailer) the
    way a newer nsys writes them; the local nsys itself produces the error.
    """
    data = bytearray(nsys_reports[0].read_bytes())
    m = re.match(rb"NVIDIA Tegra Profiler Report (\d+)", bytes(data[:64]))
    assert m, "unexpected report header"
    data[m.start(1)] = ord("9")
    newer = f"{tool.version_tuple[0] + 3}.1"
    for hit in re.finditer(re.escape(tool.version.encode()), bytes(data)):
        repl = (newer + ".0.0-deadbee").encode()[: len(hit.group(0))].ljust(len(hit.group(0)), b"0")
        data[hit.start():hit.end()] = repl
    bad = tmp_path / "newer.nsys-rep"
    bad.write_bytes(bytes(data))
    dst = tmp_path / "cache" / "newer.sqlite"
    with pytest.raises(ToolMissingError) as err:
        export_sqlite(tool, bad, dst)
    msg = str(err.value)
    assert "\n" not in msg
    assert f"written by nsys {newer}.0.0-deadbee"[:40] in msg and f"this nsys is {tool.version}" in msg
    assert "install a newer Nsight Systems or point --nsys / VERLPROF_NSYS at one" in msg
    assert not dst.exists()


#: Written by nsys 2025.3.1.0 (tests/data/nsys-2025.3-report/README.md: `nsys --version` there).
REPORT_2025 = data_path("nsys-2025.3-report/tiny_2025.nsys-rep")


def test_writer_version_of_real_reports(nsys_reports: list[Path], tool: nsys_tool.NsysTool) -> None:
    """The version a report names as its writer: a 2025.3.1 report, and the local nsys's own reports
    (whose writer is what `nsys --version` of the local nsys prints)."""
    assert nsys_tool.report_writer_version(REPORT_2025) == ("2025.3.1.0", (2025, 3))
    local = subprocess.run([str(tool.path), "--version"], capture_output=True, text=True).stdout
    for rep in nsys_reports:
        got = nsys_tool.report_writer_version(rep)
        assert got is not None and got[0] in local and got[1] == tool.version_tuple


def test_writer_version_found_before_a_large_telemetry_section(tool: nsys_tool.NsysTool) -> None:
    """A real report (CI, nsys 2022.4) whose trailer is followed by 115 KB of GPU-metric telemetry:
    the container directory, not a fixed tail of the file, says where the trailer is."""
    report = data_path("nsys-2022.4-telemetry/telemetry_after_trailer.nsys-rep")
    assert report.stat().st_size - 137_906 > (1 << 16), "the trailer must lie outside the file's last 64 KB"
    assert nsys_tool.report_writer_version(report) == ("2022.4.2.1-df9881f", (2022, 4))
    nsys_tool.check_report_version(tool, report)  # written by Debian's nsys: never refused as newer


def test_report_of_a_newer_nsys_is_refused_in_one_line_before_nsys_runs(
        tool: nsys_tool.NsysTool, tmp_path: Path) -> None:
    """A real report written by nsys 2025.3.1; the local nsys (2022.4 in CI) is older."""
    assert tool.version_tuple < (2025, 3), "this test needs an nsys older than 2025.3"
    dst = tmp_path / "cache" / "tiny.sqlite"
    with pytest.raises(ToolMissingError) as err:
        export_sqlite(tool, REPORT_2025, dst)
    assert str(err.value) == (f"{REPORT_2025}: written by nsys 2025.3.1.0, this nsys is {tool.version}: "
                              "install a newer Nsight Systems or point --nsys / VERLPROF_NSYS at one")
    assert not dst.parent.exists() or list(dst.parent.iterdir()) == []


def test_the_local_nsys_itself_refuses_that_report(tool: nsys_tool.NsysTool, tmp_path: Path) -> None:
    """Negative control: without the version check, nsys fails on the report (in words naming no
    version), and that failure is explained in the same one line."""
    out = subprocess.run([str(tool.path), "export", "--type", "sqlite", "-o", str(tmp_path / "x.sqlite"),
                          str(REPORT_2025)], capture_output=True, text=True, timeout=300)
    said = out.stdout + out.stderr
    assert "Version not supported" in said and "2025" not in said
    err = nsys_tool.explain_nsys_failure(tool, REPORT_2025, said, out.returncode)
    assert isinstance(err, ToolMissingError) and "written by nsys 2025.3.1.0" in str(err)


def test_export_timeout_kills_nsys_and_leaves_nothing(
        tool: nsys_tool.NsysTool, nsys_reports: list[Path], tmp_path: Path) -> None:
    dst = tmp_path / "cache" / "t.sqlite"
    # timeout 0, not a tiny positive one: a small report's export can finish within 1 ms of a busy
    # machine's clock (the test failed 2 times in 6 loaded runs); with 0 the wait's first check is
    # already past its end, so the timeout path (kill the group, leave nothing) always runs
    with pytest.raises(VerlprofError, match="did not finish within"):
        export_sqlite(tool, nsys_reports[0], dst, timeout=0)
    assert not dst.exists() and _leftovers(dst.parent) == []


# ---- qdstrm --------------------------------------------------------------------------------------

def test_import_real_qdstrm_into_work_dir(tool: nsys_tool.NsysTool, nsys_qdstrm: Path, tmp_path: Path) -> None:
    if tool.qdstrm_importer is None:
        pytest.skip("no QdstrmImporter beside this nsys")
    listing = sorted(p.name for p in nsys_qdstrm.parent.iterdir())
    before = (sha256_file(nsys_qdstrm), nsys_qdstrm.stat().st_mtime_ns)
    rep = import_qdstrm(tool, nsys_qdstrm, tmp_path / "imports" / "u.nsys-rep")
    assert sorted(p.name for p in rep.parent.iterdir()) == ["u.nsys-rep"]  # no temps, no copy left
    assert sorted(p.name for p in nsys_qdstrm.parent.iterdir()) == listing  # nothing beside the input
    # QdstrmImporter appends to the file it imports: verlprof must have given it a copy.
    assert (sha256_file(nsys_qdstrm), nsys_qdstrm.stat().st_mtime_ns) == before
    info = export_sqlite(tool, rep, tmp_path / "u.sqlite")
    assert _nvtx_names(info.path).count("step") == 2


def test_import_of_damaged_qdstrm(tool: nsys_tool.NsysTool, nsys_qdstrm: Path, tmp_path: Path) -> None:
    if tool.qdstrm_importer is None:
        pytest.skip("no QdstrmImporter beside this nsys")
    bad = tmp_path / "cut.qdstrm"
    with open(nsys_qdstrm, "rb") as f:
        bad.write_bytes(f.read(nsys_qdstrm.stat().st_size // 3))
    with pytest.raises(BadInputError, match=r"cut\.qdstrm: QdstrmImporter could not import it \(.+\)$") as err:
        import_qdstrm(tool, bad, tmp_path / "imports" / "cut.nsys-rep")
    assert "\n" not in str(err.value)
    assert list((tmp_path / "imports").iterdir()) == []


def test_import_without_importer_is_a_clear_tool_error(
        tool: nsys_tool.NsysTool, nsys_qdstrm: Path, tmp_path: Path) -> None:
    from dataclasses import replace

    with pytest.raises(ToolMissingError, match="no QdstrmImporter beside nsys .*host-linux-x64"):
        import_qdstrm(replace(tool, qdstrm_importer=None), nsys_qdstrm, tmp_path / "x.nsys-rep")


def test_importer_found_through_symlink_chain(nsys_exe: Path, tmp_path: Path) -> None:
    imp = nsys_tool.find_qdstrm_importer(nsys_exe)
    if imp is None:
        pytest.skip("this nsys install has no QdstrmImporter")
    link = tmp_path / "mybin" / "nsys"
    link.parent.mkdir()
    link.symlink_to(nsys_exe)  # e.g. a user's ~/bin/nsys -> /usr/bin/nsys -> ../lib/...
    assert nsys_tool.find_qdstrm_importer(link) is not None
    lone = tmp_path / "lone" / "nsys"  # a bare copy of the binary belongs to no install
    lone.parent.mkdir()
    lone.write_bytes(b"#!/bin/sh\n")
    assert nsys_tool.find_qdstrm_importer(lone) is None
