"""The issue-7 path end to end on the real fixtures: scrub -> window (chosen step) -> traces ->
pack -> check, with the stages the pipeline uses (scrub, window/summarize, verify).

Must show: the window traces contain none of the planted secrets (`verlprof check`), and per-phase
kernel time summed from the converted Chrome trace equals `phases.parquet`'s `kernel_ns`.
"""
from __future__ import annotations

import gzip
import json
from collections import Counter, defaultdict
from decimal import Decimal
from pathlib import Path

import orjson
import pytest
from testdata import fixtures_dir
from packed_bundle import verify_archive
from verlprof.pipeline.pack import pack_bundle
from verlprof.pipeline.stage_runs import summarize_sources
from verlprof.stages.scrub.check import check_paths
from verlprof.stages.scrub.policy import load_policy
from verlprof.stages.scrub.tasks import ScrubTask, build_options, find_identities, scrub_artifact
from verlprof.stages.traces.jobs import TraceJob, make_window_traces, trace_file_name
from verlprof.stages.window.steps import identity_from_path

FIX = fixtures_dir()
WHOLE = FIX / "h200-nsys-2025.3" / "whole" / "whole_1873.sqlite"
TORCH2 = sorted((FIX / "h200-torch-2.11").glob("*_step2_*.json.gz"))
POLICY = load_policy(use_local_environment=False)
PLANTED = (
    "hf_kQ7ZpLm2XvB9tR4sWc8YnD1eUfA6gHjK3o", "5f0c3e9a1b7d24e8c6a90f1b3d5e7a9c2b4d6f80",
    "wJalrXUtnFEMI/K7MDENG/bPxRfiCYzEXAMPLEKEY", "s3cr3t-Pa55!", "hf_CmdLineTok3n0123456789abcdefghijkl",
    "/home/alice", "/tmp/home/alice",
)
DIV = 1 << 24

pytestmark = pytest.mark.slow  # ~15 s: scrubs and summarizes a 25 MB torch trace and a 4 MB export


def scrub(src: Path, dst: Path, kind: str) -> Path:
    ids = find_identities(src, kind, POLICY)
    opts = build_options([ids], POLICY, salt="t", include_local=False)
    res = scrub_artifact(ScrubTask(str(src), str(dst), kind, src.name), opts)
    assert res.status == "done", res
    return dst


@pytest.fixture(scope="module")
def shared(tmp_path_factory: pytest.TempPathFactory) -> dict:
    root = tmp_path_factory.mktemp("share")
    work, out = root / "work", root / "OUT"
    work.mkdir()
    db = scrub(WHOLE, work / "whole_1873.sqlite", "nsys_sqlite")
    trace = scrub(TORCH2[0], work / TORCH2[0].name, "torch_trace")
    summary = summarize_sources([(db, identity_from_path(db)), (trace, identity_from_path(trace))])
    assert summary.choice.step == 2
    spans = {s.source: s for s in summary.choice.steps if s.step == 2}
    span, tspan = spans[db.name], spans[trace.name]
    nsys = make_window_traces(TraceJob("nsys", db, "whole/whole_1873.sqlite", out, span.start_ns, span.end_ns))
    torch = make_window_traces(TraceJob("torch", trace, f"torch/{TORCH2[0].name}", out,
                                        tspan.start_ns, tspan.end_ns))
    (out / "manifest.json").write_text(json.dumps({"version": 1}) + "\n")
    return {"out": out, "summary": summary, "span": span, "nsys": nsys, "torch": torch, "tspan": tspan,
            "trace": trace}


def test_window_traces_hold_no_planted_secret(shared: dict) -> None:
    out = shared["out"]
    files = sorted(p for p in (out / "traces").iterdir())
    assert {p.name for p in files} == {
        "whole__whole_1873.sqlite", "whole__whole_1873.trace.json.gz",
        Path(trace_file_name(shared["torch"]["source"])).name}
    for p in files:
        data = gzip.decompress(p.read_bytes()) if p.name.endswith(".gz") else p.read_bytes()
        assert not [s for s in PLANTED if s.encode() in data], p.name
    archive = pack_bundle(out)
    assert verify_archive(archive) == []
    assert check_paths([archive], POLICY) == []  # `verlprof check` looks inside the archive, at every file


def test_per_phase_kernel_time_from_chrome_equals_phases_parquet(shared: dict) -> None:
    with gzip.open(shared["out"] / shared["nsys"]["outputs"]["chrome"], "rt") as f:
        events = json.load(f, parse_float=Decimal)["traceEvents"]
    launch = {(ev["pid"], ev["args"]["correlation"]): ev for ev in events
              if ev.get("cat") in ("cuda_runtime", "cuda_driver")}
    ranges = [ev for ev in events if ev.get("cat") == "nvtx" and ev["ph"] == "X"]
    per_range: dict[int, Decimal] = defaultdict(Decimal)
    unattributed = Decimal(0)
    for k in (ev for ev in events if ev.get("cat") == "kernel"):
        api = launch[(k["pid"] % DIV, k["args"]["correlation"])]
        owners = [i for i, r in enumerate(ranges) if (r["pid"], r["tid"]) == (api["pid"], api["tid"])
                  and r["ts"] <= api["ts"] <= r["ts"] + r["dur"]]
        for i in owners:
            per_range[i] += k["dur"]
        if not owners:
            unattributed += k["dur"]
    got = {(r["name"], int(r["ts"] * 1000)): int(per_range[i] * 1000) for i, r in enumerate(ranges)}
    phases = [p for p in shared["summary"].rows["phases"]
              if p["step"] == 2 and p["source"] == shared["span"].source]
    want = {(p["phase"], p["start_ns"]): p["kernel_ns"] for p in phases if p["phase"] != "(unattributed)"}
    assert got == want and sum(want.values()) > 0
    un = [p["kernel_ns"] for p in phases if p["phase"] == "(unattributed)"]
    assert int(unattributed * 1000) == (un[0] if un else 0)


def test_torch_window_holds_the_events_of_the_chosen_step(shared: dict) -> None:
    """The window stage's step-2 span of the torch source, cut from the scrubbed trace, holds exactly
    the source events overlapping it (counted here straight from the source) and all metadata."""
    doc = orjson.loads(gzip.open(shared["trace"]).read())
    lo = (shared["tspan"].start_ns - doc["baseTimeNanoseconds"]) / 1000
    hi = (shared["tspan"].end_ns - doc["baseTimeNanoseconds"]) / 1000
    want = Counter(e.get("cat") or f"ph:{e['ph']}" for e in doc["traceEvents"] if e["ph"] != "M"
                   and e["ts"] <= hi and e["ts"] + (e.get("dur", 0) if e["ph"] == "X" else 0) >= lo)
    got = dict(shared["torch"]["events"])
    assert got.pop("metadata") == sum(1 for e in doc["traceEvents"] if e["ph"] == "M")
    assert got == dict(want) and want["kernel"] > 4000
    assert sum(want.values()) < sum(1 for e in doc["traceEvents"] if e["ph"] != "M")  # really cut
