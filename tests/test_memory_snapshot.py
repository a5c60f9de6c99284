"""mem_peak_bytes per phase from the real H200 CUDA caching-allocator snapshot.

The reference replays the snapshot's allocation history with a plain loop (alloc adds,
free_requested subtracts, anchored on the blocks still allocated at the end) and scans it for the
peak inside every START/END annotation pair.
"""
from __future__ import annotations

import pickle
import shutil
from pathlib import Path

import pytest
from testdata import fixtures_dir
from verlprof.stages.core.errors import BadInputError
from verlprof.stages.summarize.torch_profile import (
    MemoryItem,
    summarize_memory_item,
    summarize_memory_snapshot,
)
from verlprof.stages.summarize.types import SummarizeOptions
from verlprof.stages.window import memory_source_steps
from verlprof.stages.window.types import SourceIdentity

FIXTURES = fixtures_dir() / "h200-torch-2.11"
SNAPSHOT = FIXTURES / "step2" / "torch_memory_rank0_pid804.pickle"

IDENT = SourceIdentity(source="step2/torch_memory_rank0_pid804.pickle", source_kind="memory", rank=0, pid=804,
                       step_hint=2)


@pytest.fixture(scope="module")
def snap() -> dict:
    with open(SNAPSHOT, "rb") as fh:   # the fixture is trusted: plain pickle for the reference
        return pickle.load(fh)


def _replay(snap: dict) -> tuple[list[tuple[int, int]], int]:
    final = sum(b["size"] for seg in snap["segments"] for b in seg["blocks"] if b["state"] == "active_allocated")
    ev = [(e["time_us"] * 1000, e["size"] if e["action"] == "alloc" else -e["size"])
          for e in snap["device_traces"][0] if e["action"] in ("alloc", "free_requested")]
    ev.sort(key=lambda x: x[0])
    level = final - sum(d for _, d in ev)
    base = level
    out = []
    for t, d in ev:
        level += d
        out.append((t, level))
    return out, base


def _peak(levels: list[tuple[int, int]], base: int, lo: int, hi: int) -> int:
    before = base
    best = None
    for t, lvl in levels:
        if t < lo:
            before = lvl
        elif t <= hi:
            best = lvl if best is None else max(best, lvl)
    return before if best is None else max(before, best)


def _instances(snap: dict) -> list[dict]:
    out, stack = [], {}
    for a in sorted(snap["external_annotations"], key=lambda a: a["time_us"]):
        if a["stage"] == "START":
            out.append({"name": a["name"], "start": a["time_us"] * 1000, "end": None})
            stack.setdefault(a["name"], []).append(out[-1])
        else:
            stack[a["name"]].pop()["end"] = a["time_us"] * 1000
    return out


def test_peaks_per_phase_match_a_replay(snap: dict) -> None:
    rows = summarize_memory_snapshot(SNAPSHOT, IDENT, SummarizeOptions())
    levels, base = _replay(snap)
    assert base >= 0 and min(lvl for _, lvl in levels) >= 0
    reserved = sum(seg["total_size"] for seg in snap["segments"])
    assert max(lvl for _, lvl in levels) <= reserved   # allocated never exceeds what cudaMalloc held
    inst = _instances(snap)
    first_top = inst[0]["name"]
    step2_start = [i["start"] for i in inst if i["name"] == first_top][1]   # second occurrence: step 2
    want: dict[str, int] = {}
    for i in inst:
        if i["start"] >= step2_start:
            want[i["name"]] = max(want.get(i["name"], 0), _peak(levels, base, i["start"], i["end"]))
    got: dict[str, int] = {}
    for r in rows["phases"]:
        got[r["phase"]] = max(got.get(r["phase"], 0), r["mem_peak_bytes"])
        assert r["step"] == 2 and r["source_kind"] == "memory" and r["pid"] == 804
    assert got == want
    assert [(r["step"], r["chosen"], r["boundary"]) for r in rows["steps"]] == \
        [(1, False, "snapshot_dir"), (2, True, "snapshot_dir")]
    assert not rows["warnings"]


def test_wrapped_history_gives_the_same_peaks(snap: dict, tmp_path: Path) -> None:
    """A ring buffer that dropped the oldest half (max_entries) still yields step 2's peaks."""
    full = summarize_memory_snapshot(SNAPSHOT, IDENT, SummarizeOptions())
    cut = dict(snap)
    trace = snap["device_traces"][0]
    cut["device_traces"] = [trace[len(trace) // 2:]]
    p = tmp_path / "step2" / "torch_memory_rank0_pid804.pickle"
    p.parent.mkdir()
    p.write_bytes(pickle.dumps(cut))
    again = summarize_memory_snapshot(p, IDENT, SummarizeOptions())
    step2_lo = min(r["start_ns"] for r in full["phases"])
    assert trace[len(trace) // 2]["time_us"] * 1000 < step2_lo   # the cut keeps all of step 2
    assert [r["mem_peak_bytes"] for r in again["phases"]] == [r["mem_peak_bytes"] for r in full["phases"]]


def test_attach_to_phase_rows(snap: dict) -> None:
    own = summarize_memory_snapshot(SNAPSHOT, IDENT, SummarizeOptions())["phases"]
    blank = [{**r, "source": "trace.json.gz", "source_kind": "torch", "mem_peak_bytes": None} for r in own]
    levels, base = _replay(snap)
    lo = min(r["start_ns"] for r in own)
    extra = {"source": "trace.json.gz", "step": 2, "pid": 804, "phase": "not_in_snapshot", "start_ns": lo,
             "wall_ns": 5_000_000, "mem_peak_bytes": None}
    other_pid = {**extra, "pid": 754}
    far = {**extra, "start_ns": lo - 10**12}
    out = summarize_memory_item(MemoryItem(str(SNAPSHOT), IDENT, tuple(blank + [extra, other_pid, far])),
                                SummarizeOptions())["phases"]
    assert [r["mem_peak_bytes"] for r in out[:len(own)]] == [r["mem_peak_bytes"] for r in own]
    assert out[len(own)]["mem_peak_bytes"] == _peak(levels, base, lo, lo + 5_000_000)
    assert out[len(own) + 1]["mem_peak_bytes"] is None   # another process's rows stay unchanged
    assert out[len(own) + 2]["mem_peak_bytes"] is None   # outside the snapshot's timeline


def test_real_trace_rows_of_another_run_are_left_alone() -> None:
    from verlprof.stages.summarize.torch_profile import summarize_torch_trace

    trace = next(FIXTURES.glob("*_step2_*.json.gz"))
    rows = summarize_torch_trace(trace, SourceIdentity(source=trace.name, source_kind="torch", step_hint=2),
                                 SummarizeOptions())["phases"]
    ident = SourceIdentity(source=IDENT.source, source_kind="memory", step_hint=2)   # pid unknown
    out = summarize_memory_snapshot(SNAPSHOT, ident, SummarizeOptions(), rows)["phases"]
    assert out == rows   # the workload's memory run happened after its torch run: no overlap


def test_steps_for_the_window() -> None:
    src = memory_source_steps(SNAPSHOT, IDENT)
    assert [s.step for s in src.steps] == [1, 2]
    assert src.steps[0].wall_ns > src.steps[1].wall_ns   # step 1 warms up


def test_empty_history_warns(tmp_path: Path) -> None:
    p = tmp_path / "s.pickle"
    p.write_bytes(pickle.dumps({"segments": [], "device_traces": [[]], "external_annotations": []}))
    rows = summarize_memory_snapshot(p, IDENT, SummarizeOptions())
    assert rows["phases"] == [] and any("no allocation history" in w["message"] for w in rows["warnings"])


class _Evil:
    def __reduce__(self):
        return (shutil.rmtree, ("/nonexistent-verlprof-test",))


@pytest.mark.parametrize("blob,what", [
    (b"", "empty"),
    (pickle.dumps({"segments": []})[:-5], "truncated"),
    (pickle.dumps(_Evil()), "refused"),
    (pickle.dumps([1, 2]), "not a torch memory snapshot"),
])
def test_bad_snapshots(tmp_path: Path, blob: bytes, what: str) -> None:
    p = tmp_path / "bad.pickle"
    p.write_bytes(blob)
    with pytest.raises(BadInputError) as ei:
        summarize_memory_snapshot(p, IDENT, SummarizeOptions())
    assert str(p) in str(ei.value) and what in str(ei.value) and "\n" not in str(ei.value)


def test_snapshot_without_times_takes_its_folders_step(tmp_path):
    """torch before 2.2 wrote trace entries without `time_us` (and no external annotations): the
    snapshot still belongs to the step its verl folder names (`step2/`), not to no step."""
    import pickle

    from testdata import data_dir
    from verlprof.stages.gather import gather
    from verlprof.stages.window import identity_from_artifact, source_steps_item

    src = next(data_dir("h200-torch-2.11/step2").iterdir())
    snap = pickle.loads(src.read_bytes())
    for trace in snap["device_traces"]:
        for ev in trace:
            ev.pop("time_us", None)
    snap.pop("external_annotations", None)
    dst = tmp_path / "profile" / "step2" / src.name
    dst.parent.mkdir(parents=True)
    dst.write_bytes(pickle.dumps(snap))
    (art,) = [a for a in gather([tmp_path / "profile"], with_hashes=False).artifacts]
    steps = source_steps_item((str(art.path), identity_from_artifact(art))).steps
    assert [(s.step, s.boundary) for s in steps] == [(2, "snapshot_dir")]
