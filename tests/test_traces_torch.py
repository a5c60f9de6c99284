"""Window of torch.profiler Chrome traces, on the real H200 fixtures (issue 7).

verl writes one torch trace per step, so a multi-step trace is made here the way a profiler left
running across steps 1-3 would write it: the three real traces of one process (same pid, same
`baseTimeNanoseconds`, disjoint in time) concatenated into one file. Cutting step 2's window out of
it must give back exactly the events of the real step-2 trace.
"""
from __future__ import annotations

import dataclasses
import gzip
import logging
from collections import Counter
from pathlib import Path

import orjson
import pytest
from testdata import fixtures_dir
from verlprof.stages.traces.jobs import (
    TraceJob,
    TraceWindowCounts,
    make_window_traces,
    trace_file_name,
    window_chrome_trace,
    window_chrome_trace_utc,
)

FIX = fixtures_dir() / "h200-torch-2.11"
STEPS = sorted(FIX.glob("actor-rollout-ref_train_step*_rank0-of-1_pid754_*.json.gz"))



def load(path: Path) -> dict:
    with gzip.open(path, "rb") as f:
        return orjson.loads(f.read())


def span(events: list[dict]) -> tuple[float, float]:
    timed = [e for e in events if e.get("ph") != "M"]
    return min(e["ts"] for e in timed), max(e["ts"] + e.get("dur", 0) for e in timed)


@pytest.fixture(scope="module")
def multi(tmp_path_factory: pytest.TempPathFactory) -> dict:
    d = tmp_path_factory.mktemp("torch")
    docs = [load(p) for p in STEPS]
    spans = [span(doc["traceEvents"]) for doc in docs]
    assert spans[0][1] < spans[1][0] and spans[1][1] < spans[2][0]  # the steps do not overlap
    merged = {k: v for k, v in docs[1].items() if k != "traceEvents"}
    merged["traceEvents"] = [e for doc in docs for e in doc["traceEvents"]]
    src = d / "multi_step.json"
    src.write_bytes(orjson.dumps(merged))
    # the pipeline's way: a job with the step on the absolute UTC clock (ns), as StepSpan gives it
    lo, hi = spans[1]
    base = merged["baseTimeNanoseconds"]
    rel = "h200-torch-2.11/multi_step.json"
    job = TraceJob("torch", src, rel, d / "OUT", base + round(lo * 1000), base + round(hi * 1000))
    res = make_window_traces(job)
    out = d / "OUT" / res["outputs"]["chrome"]
    assert res["outputs"]["chrome"] == trace_file_name(rel)
    counts = TraceWindowCounts(**res["counts"]["chrome"])
    return {"dir": d, "src": src, "out": out, "counts": counts, "docs": docs, "span": spans[1],
            "got": load(out), "res": res}


def key(e: dict) -> bytes:
    return orjson.dumps(e, option=orjson.OPT_SORT_KEYS)


def test_window_holds_exactly_the_events_of_step_2(multi: dict) -> None:
    got = multi["got"]
    step2 = multi["docs"][1]["traceEvents"]
    got_timed = sorted(key(e) for e in got["traceEvents"] if e["ph"] != "M")
    want_timed = sorted(key(e) for e in step2 if e["ph"] != "M")
    assert got_timed == want_timed  # same events, same timestamps, to the last digit
    by_cat = Counter(e.get("cat") or f"ph:{e['ph']}" for e in step2 if e["ph"] != "M")
    assert multi["counts"].kept == dict(by_cat)
    assert by_cat["kernel"] > 4000 and by_cat["ac2g"] > 0
    # all metadata events of the source are kept (process/thread names the tracks need)
    all_meta = sum(1 for doc in multi["docs"] for e in doc["traceEvents"] if e["ph"] == "M")
    assert multi["counts"].metadata == all_meta
    assert {e["name"] for e in got["traceEvents"] if e["ph"] == "M"} >= {"process_name", "thread_name"}
    assert multi["counts"].dropped == sum(len(doc["traceEvents"]) for doc in multi["docs"]) - all_meta \
        - sum(by_cat.values())


def test_window_header_keeps_the_clock_and_drops_the_local_path(multi: dict) -> None:
    got = multi["got"]
    src_header = {k: v for k, v in multi["docs"][1].items() if k != "traceEvents"}
    assert "traceName" in src_header and "traceName" not in got
    assert got["baseTimeNanoseconds"] == src_header["baseTimeNanoseconds"]
    assert got["deviceProperties"] == src_header["deviceProperties"]
    assert set(got) == set(src_header) - {"traceName"} | {"traceEvents"}


def test_window_is_no_bigger_than_the_step_torch_wrote(multi: dict) -> None:
    """The per-step file torch itself wrote is the yardstick: the window of a 3-step trace must not
    exceed it (the 3-step input is ~2.3x larger; step 2 carries Python stacks, so it is 43% of it)."""
    size = multi["out"].stat().st_size
    assert size == multi["counts"].size
    assert size <= STEPS[1].stat().st_size * 1.05
    with gzip.open(multi["out"]) as f:
        assert len(f.read()) <= multi["src"].stat().st_size / 2


def test_trace_and_utc_clocks_agree_and_output_is_deterministic(tmp_path: Path) -> None:
    doc = load(STEPS[2])
    events = doc["traceEvents"][:6000] + [e for e in doc["traceEvents"][6000:] if e["ph"] == "M"]
    src = tmp_path / "small.json.gz"
    with gzip.open(src, "wb") as f:
        f.write(orjson.dumps(dict(doc, traceEvents=events)))
    timed = sorted(e["ts"] for e in events if e["ph"] != "M")
    lo, hi = timed[1000], timed[3000]
    base = doc["baseTimeNanoseconds"]
    a = window_chrome_trace(src, tmp_path / "a.json.gz", lo, hi)
    b = window_chrome_trace_utc(src, tmp_path / "b.json.gz", base + round(lo * 1000), base + round(hi * 1000))
    # the UTC cut reads every top-level key (kineto writes traceName after the events) and drops traceName
    assert b.dropped_keys == ("traceName",)
    assert a == dataclasses.replace(b, size=a.size, dropped_keys=a.dropped_keys) and 2000 <= a.events < 6000
    assert (tmp_path / "a.json.gz").read_bytes() == (tmp_path / "b.json.gz").read_bytes()
    want = sum(1 for e in events if e["ph"] != "M"
               and e["ts"] <= hi and e["ts"] + (e.get("dur", 0) if e["ph"] == "X" else 0) >= lo)
    assert a.events == want


def test_window_loads_in_holistic_trace_analysis(multi: dict) -> None:
    hta = pytest.importorskip("hta.trace_analysis")
    logging.getLogger("hta").setLevel(logging.ERROR)
    analysis = hta.TraceAnalysis(trace_dir=str(multi["out"].parent))
    trace = analysis.t
    assert trace.get_ranks() == [0]
    df = trace.get_trace(0)
    cats = df["cat"].map(lambda i: trace.symbol_table.sym_table[i]).value_counts()
    assert cats["kernel"] == multi["counts"].kept["kernel"]
    breakdown = analysis.get_gpu_kernel_breakdown(visualize=False)[0]
    assert breakdown["sum"].sum() > 0
