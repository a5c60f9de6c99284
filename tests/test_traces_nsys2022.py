"""Window traces of an nsys 2022.4 export made here (CPU only: NVTX + OS runtime calls).

Why: nsys export schemas differ by version. The H200 fixtures are 2025.3 exports; this test records
a small NVTX program with the installed nsys 2022.4, whose export has `EXPORT_META_DATA`,
`OSRT_API` and `OSRT_CALLCHAINS` (with a primary key) and no CUDA tables at all.
"""
from __future__ import annotations

import gzip
import json
import shutil
import sqlite3
import sys
from pathlib import Path

import pytest
from nsys_profiling import export_with_nsys, profile_with_nsys
from verlprof.stages.readers.sqlite_export import validate_export
from verlprof.stages.traces.jobs import nsys_sqlite_to_chrome, window_nsys_sqlite

pytestmark = [pytest.mark.nsys,
              pytest.mark.skipif(shutil.which("nsys") is None, reason="nsys not installed")]

PROGRAM = """
import os, time
import nvtx
for step in range(1, 4):
    with nvtx.annotate("step"):
        with nvtx.annotate("gen"):
            time.sleep(0.02)
            os.stat("/")
        with nvtx.annotate("update_actor"):
            time.sleep(0.01)
"""


@pytest.fixture(scope="module")
def export_2022(tmp_path_factory: pytest.TempPathFactory) -> Path:
    d = tmp_path_factory.mktemp("nsys2022")
    (d / "w.py").write_text(PROGRAM)
    nsys = shutil.which("nsys") or "nsys"
    profile_with_nsys([nsys, "profile", "-t", "nvtx,osrt", "-s", "none", "--cpuctxsw=none",
                       "-o", str(d / "r"), "-f", "true", sys.executable, str(d / "w.py")],
                      d / "r.nsys-rep", cwd=d, timeout=120)
    export_with_nsys(nsys, d / "r.nsys-rep", d / "r.sqlite", timeout=120)
    return d / "r.sqlite"


def test_window_of_a_2022_export(export_2022: Path, tmp_path: Path) -> None:
    info = validate_export(export_2022)
    if not {"NVTX_EVENTS", "OSRT_API"} <= set(info.tables):
        pytest.skip("this nsys recorded no NVTX/OSRT rows")
    con = sqlite3.connect(f"file:{export_2022}?mode=ro", uri=True)
    epoch = con.execute("SELECT utcEpochNs FROM TARGET_INFO_SESSION_START_TIME").fetchone()[0]
    steps = con.execute("SELECT n.start, n.end FROM NVTX_EVENTS n LEFT JOIN StringIds s ON s.id = n.textId "
                        "WHERE coalesce(n.text, s.value) = 'step' ORDER BY n.start").fetchall()
    assert len(steps) == 3
    s, e = steps[1]
    want_nvtx = con.execute("SELECT count(*) FROM NVTX_EVENTS WHERE end IS NOT NULL AND start <= ? AND end >= ?",
                            (e, s)).fetchone()[0]
    want_osrt = con.execute("SELECT count(*) FROM OSRT_API WHERE start <= ? AND end >= ?", (e, s)).fetchone()[0]
    con.close()

    dst = tmp_path / "w.sqlite"
    counts = window_nsys_sqlite(export_2022, dst, epoch + s, epoch + e)
    assert validate_export(dst).tables == tuple(sorted(set(info.tables) | {"VERLPROF_WINDOW"}))
    w = sqlite3.connect(dst)
    got_nvtx = w.execute("SELECT count(*) FROM NVTX_EVENTS WHERE end IS NOT NULL").fetchone()[0]
    assert got_nvtx == want_nvtx == 3  # step, gen, update_actor of step 2
    assert counts.rows["OSRT_API"] == want_osrt > 0
    if "OSRT_CALLCHAINS" in info.tables:
        src = sqlite3.connect(f"file:{export_2022}?mode=ro", uri=True)
        recorded = {r[0] for r in src.execute("SELECT DISTINCT id FROM OSRT_CALLCHAINS")}
        src.close()
        kept = {r[0] for r in w.execute("SELECT DISTINCT id FROM OSRT_CALLCHAINS")}
        used = {r[0] for r in w.execute("SELECT DISTINCT callchainId FROM OSRT_API")}
        # A call that nsys sampled no stack for refers to a chain id the export never wrote (often 0):
        # the window keeps exactly the recorded chains its kept calls refer to, no more, no fewer.
        assert kept == used & recorded
        assert kept, "no kept call refers to a recorded call chain"
        unresolved = w.execute("SELECT count(*) FROM OSRT_CALLCHAINS c LEFT JOIN StringIds s ON s.id = c.symbol "
                               "WHERE s.id IS NULL").fetchone()[0]
        assert unresolved == 0
    w.close()

    chrome = nsys_sqlite_to_chrome(dst, tmp_path / "w.json.gz")
    assert chrome.events["nvtx"] == want_nvtx
    assert "kernel" not in chrome.events
    events = json.load(gzip.open(tmp_path / "w.json.gz"))["traceEvents"]
    names = sorted(ev["name"] for ev in events if ev.get("cat") == "nvtx")
    assert names == ["gen", "step", "update_actor"]
    assert any(ev["ph"] == "M" and ev["name"] == "thread_name" for ev in events)
