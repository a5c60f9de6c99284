"""`mem_peak_bytes` of torch phase rows from Kineto `[memory]` instants (profile_memory=True).

No trace in tests/data was recorded with profile_memory, so the test records a small one on CPU
with the real torch.profiler; the expected peaks come from the trace's raw events (plain json): the
largest `Total Allocated` inside each range, or the level the range started at."""
from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

sys.path.insert(0, str(Path(__file__).parent))
from verlprof.stages.readers.chrome_trace import read_chrome_trace  # noqa: E402
from verlprof.stages.summarize.torch_profile import summarize_torch_trace  # noqa: E402
from verlprof.stages.summarize.types import SummarizeOptions  # noqa: E402
from verlprof.stages.window import identity_from_path  # noqa: E402


@pytest.fixture(scope="module")
def trace(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from torch.profiler import ProfilerActivity, profile, record_function

    keep = []
    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        with record_function("outer"):
            with record_function("alloc_big"):
                a = torch.ones(1 << 20)
                keep.append(a * 2)
                del a
            for _ in range(2):
                with record_function("alloc_small"):
                    keep.append(torch.ones(1 << 12))
        keep.clear()
        with record_function("after_free"):
            keep.append(torch.ones(1 << 8))
    out = tmp_path_factory.mktemp("mem") / "memrun_rank0.json"
    prof.export_chrome_trace(str(out))
    return out


def _expected(doc: dict) -> dict[str, int]:
    ev = doc["traceEvents"]
    mem = sorted((e["ts"], e["args"]["Total Allocated"]) for e in ev if e.get("name") == "[memory]")
    out: dict[str, int] = {}
    for r in (e for e in ev if e.get("cat") == "user_annotation"):
        lo, hi = r["ts"], r["ts"] + r["dur"]
        before = [v for t, v in mem if t < lo]
        inside = [v for t, v in mem if lo <= t <= hi]
        peak = max(inside + before[-1:] or [0])
        out[r["name"]] = max(out.get(r["name"], 0), peak)
    return out


def test_memory_instants_are_read(trace: Path) -> None:
    doc = json.loads(trace.read_text())
    raw = [e for e in doc["traceEvents"] if e.get("name") == "[memory]"]
    d = read_chrome_trace(trace)
    assert raw and len(d.mem_ts) == len(raw)
    assert list(d.mem_total) == [e["args"]["Total Allocated"] for e in raw]
    from verlprof.stages.readers import chrome_trace as ct

    loose = ct.TraceData(path=trace)   # the tolerant parser (plain JSON values) keeps the same
    ct._Collector(loose).dicts(doc["traceEvents"])
    for f in ("mem_thread", "mem_ts", "mem_device", "mem_total", "mem_change"):
        assert list(getattr(loose, f)) == list(getattr(d, f)), f


def test_mem_peak_bytes_per_range(trace: Path) -> None:
    want = _expected(json.loads(trace.read_text()))
    rows = summarize_torch_trace(trace, identity_from_path(trace), SummarizeOptions())["phases"]
    got = {r["phase"]: r["mem_peak_bytes"] for r in rows if r["phase"] in want}
    assert got == want
    assert want["alloc_big"] >= 2 * 4 * (1 << 20) and want["after_free"] < want["outer"]
    assert {r["instances"] for r in rows if r["phase"] == "alloc_small"} == {2}
