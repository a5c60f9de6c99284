"""collect imports the later stages while `nsys export` runs, and never forks beside that thread.

A real collect of a real `.nsys-rep` (the real nsys exports it) in a fresh interpreter, so
`sys.modules` starts as a user's does: when pass 1 begins, the modules of preload.AFTER_EXPORT
are loaded and the preload thread is gone (pass 2 forks its workers after that). A SQLite given
alone has no export to wait for: nothing is preloaded and no thread is started.
"""
from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.nsys
REPORT = Path(__file__).resolve().parents[1] / "samples/tiny_run/ray_logs/nsight/worker_process_300.nsys-rep"

_PROBE = r"""
import json, sys, threading
from pathlib import Path
from verlprof.pipeline import collect
from verlprof.pipeline.preload import AFTER_EXPORT

seen = {}
real_identify, real_export = collect.identify, collect.export
WATCHED = json.loads(sys.argv[4])

def export(run):
    seen["before_export"] = [m for m in WATCHED if m in sys.modules]
    return real_export(run)

def identify(run, inputs):
    seen["threads"] = [t.name for t in threading.enumerate()]
    seen["loaded"] = [m for m in WATCHED if m in sys.modules]
    return real_identify(run, inputs)

collect.identify, collect.export = identify, export
src, out, work = (Path(a) for a in sys.argv[1:4])
result = collect.run_collect(collect.CollectOptions(sources=[src], out=out, work_dir=work, jobs=2))
seen["published"] = result.published
print(json.dumps(seen))
"""


#: What pass 1 needs right after the export, stated here (not read from preload.AFTER_EXPORT, so an
#: emptied preload list fails this test): the heavy imports of the later stages.
LATER_STAGES = ["numpy", "pyarrow.parquet", "verlprof.stages.scrub", "verlprof.stages.summarize",
                "verlprof.stages.window", "verlprof.stages.traces", "verlprof.pipeline.merged_trace",
                "verlprof.pipeline.ranks"]


def _collect(tmp_path: Path, src: Path) -> dict:
    proc = subprocess.run([sys.executable, "-c", _PROBE, str(src), str(tmp_path / "out"), str(tmp_path / "work"),
                           json.dumps(LATER_STAGES)], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_a_report_loads_the_later_stages_during_its_export(tmp_path: Path) -> None:
    src = tmp_path / "run"
    src.mkdir()
    shutil.copy(REPORT, src / REPORT.name)
    seen = _collect(tmp_path, src)
    assert seen["published"]
    assert seen["loaded"] == LATER_STAGES                 # all loaded when pass 1 begins ...
    assert "verlprof.pipeline.ranks" not in seen["before_export"]   # ... some only while nsys exported
    assert "verlprof-preload" not in seen["threads"]   # joined before anything can fork


def test_a_sqlite_alone_starts_no_preload(tmp_path: Path) -> None:
    src = tmp_path / "run"
    src.mkdir()
    rep = tmp_path / "rep.nsys-rep"
    shutil.copy(REPORT, rep)
    from verlprof.stages.export import find_nsys

    subprocess.run([str(find_nsys(None).path), "export", "--type", "sqlite", "--output",
                    str(src / "worker_process_300.sqlite"), str(rep)], check=True, capture_output=True, timeout=300)
    seen = _collect(tmp_path, src)
    assert seen["published"]
    assert "verlprof.pipeline.ranks" not in seen["loaded"]   # imported later, by the stage that needs it
    assert "verlprof-preload" not in seen["threads"]
