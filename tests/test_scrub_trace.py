"""Scrub of torch chrome traces: key-aware rules, streaming, bounded memory, bad inputs."""
from __future__ import annotations

import gzip
import io
import json
import re
import subprocess
import sys
from pathlib import Path

import orjson
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from provenance_expect import published_ok
from testdata import fixtures_dir
from verlprof.stages.core.errors import BadInputError
from verlprof.stages.scrub.check import check_paths
from verlprof.stages.scrub.policy import load_policy
from verlprof.stages.scrub.rules import REDACTED
from verlprof.stages.scrub.tasks import ScrubTask, build_options, find_identities, scrub_artifact
from verlprof.stages.readers.chrome_trace import ChromeTraceStream

FIXTURES = fixtures_dir()
TORCH = FIXTURES / "h200-torch-2.11"
STEP2 = TORCH / "actor-rollout-ref_train_step2_rank0-of-1_pid754_20261202085621396.json.gz"
STEP1 = TORCH / "actor-rollout-ref_train_step1_rank0-of-1_pid754_20261202085618976.json.gz"
POLICY = load_policy(use_local_environment=False)

PLANTED = {
    "host_name": "gpu-node-erin-03",
    "user": "/home/erin",
    "job": "job-Secret-77aa88",
    "process_name": "hf_TraceProcName0123456789abcdefghijk",
    "thread_name": "TraceThreadSecret55",
    "arg_key": "TraceArgsSecret66",
    "annotation": "TraceAnnoSecret44",
    "concrete_input": "sk-proj-TraceConcrete0123456789abcdEFGH",
}


def planted_trace(dst: Path, fmt: str = "gz") -> Path:
    d = orjson.loads(gzip.decompress(STEP2.read_bytes()))
    d["host_name"] = PLANTED["host_name"]
    d["traceName"] = "/home/erin/traces/x.json"
    d["PT_PROFILER_JOB_ID"] = PLANTED["job"]
    d["custom_meta"] = {"owner": "erin", "n": 3}
    d["distributedInfo"] = {"backend": "nccl", "rank": 0, "world_size": 1}
    # a slice of the real events keeps the test fast; metadata and annotations all stay
    per_cat: dict = {}

    def keep(e: dict) -> bool:
        c = (e.get("ph"), e.get("cat"))
        per_cat[c] = per_cat.get(c, 0) + 1
        return per_cat[c] <= 2500 or e.get("ph") == "M" or e.get("cat") == "user_annotation"

    ev = d["traceEvents"] = [e for e in d["traceEvents"] if keep(e)]
    done = set()
    for e in ev:
        a = e.get("args") or {}
        if e.get("ph") == "M" and e["name"] == "process_name" and "proc" not in done:
            a["name"] = "python3 " + PLANTED["process_name"]
            done.add("proc")
        elif e.get("ph") == "M" and e["name"] == "thread_name" and "thr" not in done:
            a["name"] = f"thread 801 (token={PLANTED['thread_name']})"
            done.add("thr")
        elif e.get("cat") == "python_function" and e["name"].startswith("torch/nn/functional.py") and "pf" not in done:
            e["name"] = "/home/erin/.venv/lib/python3.11/site-packages/" + e["name"]
            done.add("pf")
        elif e.get("cat") == "python_function" and e["name"].startswith("workload.py") and "wl" not in done:
            e["name"] = "/home/erin/rlproj/" + e["name"]
            done.add("wl")
        elif e.get("cat") == "cuda_runtime" and "arg" not in done:
            a["api_key"] = PLANTED["arg_key"]
            done.add("arg")
        elif e.get("cat") == "user_annotation" and e["name"] == "mini_batch1":
            e["name"] = f"update_actor password={PLANTED['annotation']}"
            done.add("anno")
        elif "Concrete Inputs" in a and "ci" not in done:
            a["Concrete Inputs"] = ["", PLANTED["concrete_input"]]
            done.add("ci")
    assert len(done) == 7, done
    if fmt == "array":
        data = orjson.dumps(ev)
    else:
        data = orjson.dumps(d, option=orjson.OPT_INDENT_2)
    dst.write_bytes(gzip.compress(data, 3) if fmt == "gz" else data)
    return dst


def scrub(src: Path, dst: Path):
    ids = find_identities(src, "torch_trace", POLICY)
    opts = build_options([ids], POLICY, salt="t", include_local=False)
    return scrub_artifact(ScrubTask(str(src), str(dst), "torch_trace", src.name), opts), opts


def load(p: Path):
    raw = p.read_bytes()
    return orjson.loads(gzip.decompress(raw) if raw[:2] == b"\x1f\x8b" else raw)


@pytest.mark.parametrize("fmt", ["gz", "json", "array"])
def test_planted_trace_is_clean_and_intact(tmp_path: Path, fmt: str) -> None:
    src = planted_trace(tmp_path / ("in.json.gz" if fmt == "gz" else "in.json"), fmt)
    raw_in = load(src)
    blob_in = orjson.dumps(raw_in)
    top_level = {"host_name", "job"}
    for k, v in PLANTED.items():
        if fmt != "array" or k not in top_level:
            assert v.encode() in blob_in, v
    out = tmp_path / "out" / "in.trace.json.gz"
    res, opts = scrub(src, out)
    assert res.status == "done" and out.read_bytes()[:2] == b"\x1f\x8b"
    clean = load(out)
    text = gzip.decompress(out.read_bytes())
    for k, v in PLANTED.items():
        assert v.encode() not in text, k
    assert b"erin" not in text
    assert check_paths([out], POLICY, known=opts.pseudonyms) == []
    evs_in = raw_in if fmt == "array" else raw_in["traceEvents"]
    evs_out = clean if fmt == "array" else clean["traceEvents"]
    assert len(evs_in) == len(evs_out) == res.info["events"]
    assert sum(e.get("dur", 0) for e in evs_in) == sum(e.get("dur", 0) for e in evs_out)
    assert [e["ts"] for e in evs_in] == [e["ts"] for e in evs_out]
    # record_function names are user-written (issue 39): torch's own and public ones stay, any other
    # becomes one whole-string pseudonym, listed for the owner
    pairs = [(a["name"], b["name"]) for a, b in zip(evs_in, evs_out) if a.get("cat") == "user_annotation"]
    assert ("Optimizer.step#AdamW.step", "Optimizer.step#AdamW.step") in pairs
    assert all(published_ok(a, b, res.named, op=True) for a, b in pairs), pairs
    assert not any("update_actor" in b for _a, b in pairs if "password" in _a)
    pf = {e["name"] for e in evs_out if e.get("cat") == "python_function"}
    assert any(n.startswith("site-packages/torch/nn/functional.py") for n in pf)
    # a frame of the user's own file is user-written: one pseudonym for the whole frame
    assert any(re.fullmatch(r"name-[g-z]{8}", n) for n in pf), sorted(pf)[:20]
    kernels_in = [e["name"] for e in evs_in if e.get("cat") == "kernel"]
    assert kernels_in == [e["name"] for e in evs_out if e.get("cat") == "kernel"]
    if fmt != "array":
        assert clean["host_name"] == "host-1"
        assert clean["traceName"] == "x.json"
        assert clean["PT_PROFILER_JOB_ID"] == REDACTED
        assert clean["custom_meta"] == {"owner": REDACTED, "n": 3}
        assert {k: v for k, v in clean["distributedInfo"].items() if k != "backend"} == {"rank": 0, "world_size": 1}
        assert published_ok("nccl", clean["distributedInfo"]["backend"], res.named)
        assert clean["deviceProperties"] == raw_in["deviceProperties"]
        assert list(clean) == list(raw_in)         # member order kept
    assert res.counts["traceEvents[].args.api_key"]["secret_by_name"] == 1


def test_fixture_trace_is_unchanged_but_for_user_text(tmp_path: Path) -> None:
    """A real trace: every toolchain name and value stays; a record_function name is published as it
    is when public, else as its pseudonym (issue 39); no rule of the second net fires."""
    out = tmp_path / "s1.json.gz"
    res, _ = scrub(STEP1, out)
    a, b = load(STEP1), load(out)
    assert len(a["traceEvents"]) == len(b["traceEvents"])
    for x, y in zip(a["traceEvents"], b["traceEvents"]):
        if x.get("cat") in ("user_annotation", "gpu_user_annotation"):
            assert published_ok(x["name"], y["name"], res.named, op=True), (x["name"], y["name"])
            x, y = {**x, "name": ""}, {**y, "name": ""}
        assert x == y
    assert {k: v for k, v in a.items() if k not in ("traceName", "traceEvents")} == \
        {k: v for k, v in b.items() if k not in ("traceName", "traceEvents")}
    assert {k for c in res.counts.values() for k in c} <= {"user_text"}


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(doc=st.fixed_dictionaries({
    "meta": st.text(max_size=30),
    "traceEvents": st.lists(st.dictionaries(st.text(max_size=8), st.one_of(
        st.text(max_size=40), st.integers(-2**62, 2**62), st.floats(allow_nan=False, allow_infinity=False),
        st.booleans(), st.none(), st.lists(st.integers(), max_size=3)), max_size=6), max_size=20),
    "tail": st.integers()}), chunk=st.integers(1, 64), indent=st.sampled_from([None, 1]))
# found by Hypothesis: orjson reads an integer below -2**63 (or from 2**64) as a float, silently
@example(doc={"meta": "", "traceEvents": [{"ts": 2**64}], "tail": -2**63 - 1}, chunk=7, indent=None)
def test_stream_reader_matches_json_loads(doc, chunk: int, indent) -> None:
    """The one chrome-trace stream (what scrub and check read through), fed `chunk` bytes at a time."""
    import tempfile

    blob = json.dumps(doc, indent=indent).encode()
    with tempfile.TemporaryDirectory() as td:
        src = Path(td) / "x.json"
        src.write_bytes(blob)
        stream = ChromeTraceStream(src, chunk_bytes=chunk)
        raws = b",".join(batch.raw for batch in stream)
    events = json.loads(b"[" + raws + b"]")
    assert {**stream.head, "traceEvents": events, **stream.tail} == json.loads(blob)


@pytest.mark.parametrize("case", ["empty", "truncated_gz", "corrupt_gz", "invalid", "not_utf8", "trailing", "scalar"])
def test_bad_traces_fail_with_one_line(tmp_path: Path, case: str) -> None:
    good = gzip.decompress(STEP1.read_bytes())
    data = {
        "empty": b"",
        "truncated_gz": STEP1.read_bytes()[: len(STEP1.read_bytes()) // 2],
        "corrupt_gz": STEP1.read_bytes()[:5000] + bytes(200) + STEP1.read_bytes()[5200:],
        "invalid": good[:100000] + b"}}}{{{" + good[100000:],
        "not_utf8": b'{"traceEvents": [{"name": "\xff\xfe"}]}',
        "trailing": b'{"traceEvents": []} extra',
        "scalar": b'42',
    }[case]
    src = tmp_path / ("bad.json.gz" if "gz" in case else "bad.json")
    src.write_bytes(data)
    dst = tmp_path / "out" / "bad.json.gz"
    with pytest.raises(BadInputError) as ei:
        scrub(src, dst)
    assert "bad.json" in str(ei.value) and "\n" not in str(ei.value)
    assert not dst.exists()
    assert not dst.parent.exists() or not list(dst.parent.iterdir())


_MEM_SCRIPT = r"""
import gzip, resource, sys, orjson
from pathlib import Path
from verlprof.stages.scrub.tasks import ScrubTask, build_options, scrub_artifact
from verlprof.stages.scrub.policy import load_policy
src, big, out = Path(sys.argv[1]), Path(sys.argv[2]), Path(sys.argv[3])
d = orjson.loads(gzip.decompress(src.read_bytes()))
ev = d.pop("traceEvents")
with open(big, "wb") as f:                      # ~75 MB: the fixture's events three times
    f.write(b'{"schemaVersion": 1, "traceEvents": [\n')
    first = True
    for rep in range(3):
        for e in ev:
            f.write((b"" if first else b",\n") + orjson.dumps(e)); first = False
    f.write(b"\n]}")
del d, ev
import gc; gc.collect()
base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
pol = load_policy(use_local_environment=False)
opts = build_options([], pol, "s", include_local=False)
r = scrub_artifact(ScrubTask(str(big), str(out), "torch_trace", "big.json"), opts)
peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
print(big.stat().st_size, r.info["events"], base, peak)
"""


@pytest.mark.slow
def test_trace_scrub_memory_does_not_grow_with_trace_size(tmp_path: Path) -> None:
    """A 75 MB trace is scrubbed with a small fraction of its size in extra memory (streaming)."""
    p = subprocess.run([sys.executable, "-c", _MEM_SCRIPT, str(STEP2), str(tmp_path / "big.json"), str(tmp_path / "o.json.gz")],
                       capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr[-2000:]
    size, events, base_kb, peak_kb = map(int, p.stdout.split())
    assert events == 3 * 79959
    growth_mb = (peak_kb - base_kb) / 1024
    assert growth_mb < size / 1e6 / 2, (growth_mb, size)
