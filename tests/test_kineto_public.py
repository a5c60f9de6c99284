"""The one summarizer on public Kineto traces other people made (tests/data/kineto_public/README.md).

Expected figures come from the traces themselves, read here with plain `json` (no verlprof reader):
event counts per name, `distributedInfo`, where `baseTimeNanoseconds` sits.
"""
from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))
from testdata import data_path, owner_names  # noqa: E402
from verlprof.stages.summarize.torch_profile import (  # noqa: E402
    UNATTRIBUTED,
    summarize_torch_trace,
)
from verlprof.stages.summarize.types import SummarizeOptions  # noqa: E402
from verlprof.stages.window import identity_from_path, torch_source_steps  # noqa: E402
from verlprof.stages.scrub.provenance import reveal  # noqa: E402

DDP = "kineto_public/hta_ddp_nccl_rank0.json"
SAMPLED = "kineto_public/hta_sampled_rank1.json"


def _doc(rel: str) -> dict:
    return json.loads(data_path(rel).read_text())


def _summary(rel: str, **opts) -> dict:
    p = data_path(rel)
    return summarize_torch_trace(p, identity_from_path(p), SummarizeOptions(**opts))


@pytest.fixture(scope="module")
def ddp() -> dict:
    return _summary(DDP)


def _chosen_span(doc: dict, label: str) -> tuple[float, float]:
    (ev,) = [e for e in doc["traceEvents"] if e.get("cat") == "user_annotation" and e["name"] == label]
    return ev["ts"], ev["ts"] + ev["dur"]


def test_base_time_after_the_events_is_read() -> None:
    doc = _doc(DDP)
    keys = list(doc)
    assert keys.index("baseTimeNanoseconds") > keys.index("traceEvents")   # the case under test
    p = data_path(DDP)
    (first, *_) = torch_source_steps(p, identity_from_path(p)).steps
    lo, _ = _chosen_span(doc, "ProfilerStep#4")
    assert first.start_ns == doc["baseTimeNanoseconds"] + round(lo * 1000)


def test_backward_gpu_time_is_inherited_by_the_backward_range(ddp: dict) -> None:
    rows = {r["path"]: r for r in ddp["phases"]}
    back = rows["ProfilerStep > ## backward ##"]
    reduce = rows["ProfilerStep > ## backward ## > nccl:all_reduce"]   # opened on autograd's thread
    un = rows[UNATTRIBUTED]
    step_kernel_ns = sum(r["kernel_ns"] for r in ddp["phases"] if r["depth"] == 0)
    # NVIDIA's same-thread rule: autograd's thread launched the backward kernels outside any range
    # (only its all_reduce ranges, nested in the backward range, hold theirs)
    assert back["kernel_ns"] - reduce["kernel_ns"] < 0.01 * step_kernel_ns and un["kernel_ns"] > 0.2 * step_kernel_ns
    # inherited: the range open on the main thread at launch owns them; almost nothing is left
    assert back["kernel_inherited_ns"] > 0.2 * step_kernel_ns
    assert un["kernel_inherited_ns"] < 0.10 * step_kernel_ns
    for r in ddp["phases"]:   # inherited figures are never null where NVIDIA's are set
        assert None not in (r["kernel_inherited_ns"], r["gpu_busy_inherited_ns"], r["kernel_count_inherited"])


def test_helper_thread_ranges_nest_under_the_main_thread(ddp: dict) -> None:
    """DDP's `nccl:all_reduce` ranges run on autograd's thread with no range of their own thread
    around them: each nests in the innermost range open on the main thread at its start (raw JSON)."""
    doc = _doc(DDP)
    lo, hi = _chosen_span(doc, "ProfilerStep#5")
    users = [e for e in doc["traceEvents"] if e.get("cat") == "user_annotation"]
    (step,) = [e for e in users if e["name"] == "ProfilerStep#5"]
    reduces = [e for e in users if e["name"] == "nccl:all_reduce" and lo <= e["ts"] <= hi]
    assert reduces and all(e["tid"] != step["tid"] and not _inside(users, e["tid"], e["ts"])[:-1] for e in reduces)
    want = set()
    for e in reduces:
        around = sorted(_inside(users, step["tid"], e["ts"]), key=lambda u: (u["ts"], -u["dur"]))
        want.add(" > ".join(["ProfilerStep"] + [u["name"] for u in around[1:]] + ["nccl:all_reduce"]))
    got = {r["path"] for r in ddp["phases"] if r["phase"] == "nccl:all_reduce"}
    assert got == want == {"ProfilerStep > ## backward ## > nccl:all_reduce"}
    assert {r["path"] for r in ddp["phases"] if r["depth"] == 0} == {"ProfilerStep", UNATTRIBUTED}


def test_instances_are_counted(ddp: dict) -> None:
    doc = _doc(DDP)
    lo, hi = _chosen_span(doc, "ProfilerStep#5")   # the chosen step (step 6: the middle one)
    want = sum(1 for e in doc["traceEvents"] if e.get("cat") == "user_annotation"
               and e["name"] == "nccl:all_reduce" and lo <= e["ts"] <= hi)
    got = [r for r in ddp["phases"] if r["phase"] == "nccl:all_reduce"]
    assert want == 5 and sum(r["instances"] for r in got) == want
    assert all(r["path"] and r["instances"] >= 1 for r in ddp["phases"])


def test_rank_from_distributed_info(ddp: dict) -> None:
    for rel, rows in ((DDP, ddp), (SAMPLED, _summary(SAMPLED))):
        info = _doc(rel)["distributedInfo"]
        assert {r["rank"] for r in rows["phases"]} == {info["rank"]}
        assert {r["rank_source"] for r in rows["phases"]} == {"distributedInfo"}


def test_profiler_step_label_and_number(ddp: dict) -> None:
    steps = ddp["steps"]
    assert [s["label"] for s in steps] == ["ProfilerStep#4", "ProfilerStep#5", "ProfilerStep#6"]
    assert [s["step"] for s in steps] == [5, 6, 7]          # profiler.step() counts from 0
    assert {r["step"] for r in ddp["phases"]} == {s["step"] for s in steps if s["chosen"]}


def test_step_range_on_a_torch_trace() -> None:
    rows = _summary(DDP, step_range=r"^## optimizer ##$", step=2)
    doc = _doc(DDP)
    opt = sorted(e["ts"] for e in doc["traceEvents"] if e.get("cat") == "user_annotation"
                 and e["name"] == "## optimizer ##")
    assert [s["label"] for s in rows["steps"]] == ["## optimizer ##"] * len(opt) == ["## optimizer ##"] * 3
    assert {s["boundary"] for s in rows["steps"]} == {"step_range"}
    chosen = [s for s in rows["steps"] if s["chosen"]]
    assert [s["step"] for s in chosen] == [2]
    assert chosen[0]["start_ns"] == doc["baseTimeNanoseconds"] + round(opt[1] * 1000)
    names = {r["phase"] for r in rows["phases"]} - {UNATTRIBUTED}
    assert names == {"## optimizer ##", "Optimizer.step#SGD.step"}


def test_a_trace_without_base_time_still_summarises() -> None:
    rows = _summary(SAMPLED)
    doc = _doc(SAMPLED)
    assert "baseTimeNanoseconds" not in doc
    lo, _ = _chosen_span(doc, "ProfilerStep#551")      # ts are epoch microseconds in this trace
    assert rows["steps"][0]["start_ns"] == round(lo * 1000) > 10 ** 18
    assert [s["label"] for s in rows["steps"]] == ["ProfilerStep#551", "ProfilerStep#552"]


def test_window_holds_the_gpu_work_it_summarises(tmp_path: Path) -> None:
    """The published window of the chosen step holds every GPU op launched inside the step, also
    those that ran after the step's CPU range ended (here the real trace with the step's kernels
    delayed by one step's wall time, as in a serving trace whose GPU queue lags), plus the whole
    header (dict values, keys written after the events)."""
    import gzip

    from verlprof.stages.traces.torch_window import window_chrome_trace_utc

    doc = _doc(DDP)
    lo, hi = _chosen_span(doc, "ProfilerStep#5")
    launched = {e["args"]["correlation"] for e in doc["traceEvents"] if e.get("cat") == "cuda_runtime"
                and lo <= e["ts"] <= hi and "correlation" in e.get("args", {})}
    for e in doc["traceEvents"]:
        if e.get("cat") == "kernel" and e["args"].get("correlation") in launched:
            e["ts"] += hi - lo
    src = tmp_path / "delayed_rank0.json"
    src.write_text(json.dumps(doc))   # key order kept: baseTimeNanoseconds still after the events
    rows = summarize_torch_trace(src, identity_from_path(src), SummarizeOptions())
    (step,) = [s for s in rows["steps"] if s["chosen"]]
    out = tmp_path / "w.json.gz"
    window_chrome_trace_utc(src, out, step["start_ns"], step["start_ns"] + step["wall_ns"])
    win = json.loads(gzip.open(out).read())
    want = {(e["name"], e["ts"]) for e in doc["traceEvents"] if e.get("cat") == "kernel"
            and e["args"].get("correlation") in launched}
    got = {(e["name"], e["ts"]) for e in win["traceEvents"] if e.get("cat") == "kernel"}
    assert all(ts > hi for _, ts in want) and want <= got
    summarised = sum(r["kernel_count"] for r in rows["phases"] if r["depth"] == 0)
    assert summarised == len(want) > 800
    assert win["distributedInfo"] == doc["distributedInfo"]
    assert win["baseTimeNanoseconds"] == doc["baseTimeNanoseconds"] and "traceName" not in win


def test_window_header_keeps_dict_values() -> None:
    from verlprof.stages.traces.torch_window import trace_header

    doc = _doc(SAMPLED)
    head = trace_header(data_path(SAMPLED))
    assert head["distributedInfo"] == doc["distributedInfo"] and head["distributedInfo"]["world_size"] == 128
    assert list(head) == list(doc)[:list(doc).index("traceEvents")]


def test_the_window_line_names_the_marker(ddp: dict) -> None:
    (chosen,) = [s for s in ddp["steps"] if s["chosen"]]
    assert chosen["step"] == 6 and "marked by ProfilerStep#5" in chosen["reason"]


def _launches(doc: dict, lo: float, hi: float) -> list[tuple[dict, dict]]:
    """(kernel, launching runtime call) of the kernels launched inside [lo, hi] (plain json)."""
    ev = doc["traceEvents"]
    api = {e["args"]["correlation"]: e for e in ev if e.get("cat") == "cuda_runtime" and "correlation" in e.get("args", {})}
    out = []
    for k in ev:
        if k.get("cat") == "kernel":
            a = api.get(k["args"].get("correlation"))
            if a is not None and lo <= a["ts"] <= hi:
                out.append((k, a))
    return out


def _inside(evs: list[dict], tid: int, ts: float) -> list[dict]:
    return [e for e in evs if e["tid"] == tid and e["ts"] <= ts <= e["ts"] + e["dur"]]


def test_backward_range_inherits_exactly_the_autograd_launches_inside_it(ddp: dict) -> None:
    """`## backward ##` holds every kernel launched inside its span by any thread: the main
    thread's, autograd's launches with no range open (inherited), and those of the `nccl:all_reduce`
    ranges autograd's thread opened inside it (nested in it); `(unattributed)` keeps under 10% of the step."""
    doc = _doc(DDP)
    lo, hi = _chosen_span(doc, "ProfilerStep#5")
    (back,) = [e for e in doc["traceEvents"] if e.get("cat") == "user_annotation" and e["name"] == "## backward ##"
               and lo <= e["ts"] <= hi]
    want = sum(round(k["dur"] * 1000) for k, _ in _launches(doc, back["ts"], back["ts"] + back["dur"]))
    rows = {r["path"]: r for r in ddp["phases"]}
    assert want > 0 and rows["ProfilerStep > ## backward ##"]["kernel_inherited_ns"] == want
    step_kernel_ns = sum(round(k["dur"] * 1000) for k, _ in _launches(doc, lo, hi))
    assert rows[UNATTRIBUTED]["kernel_inherited_ns"] < 0.10 * step_kernel_ns


def test_backward_work_goes_to_its_forward_range_by_sequence_number(tmp_path: Path) -> None:
    """Without a range open on the main thread at backward time (here: the DDP trace with its `##
    backward ##` ranges removed), autograd's kernels go to the range open on the main thread when
    their forward op (same `Sequence number`, `fwdbwd` flow) ran: `## forward ##`."""
    doc = _doc(DDP)
    doc["traceEvents"] = [e for e in doc["traceEvents"] if e.get("name") != "## backward ##"]
    p = tmp_path / "ddp_no_backward_rank0.json"
    p.write_text(json.dumps(doc))
    ev = doc["traceEvents"]
    users = [e for e in ev if e.get("cat") == "user_annotation"]
    lo, hi = _chosen_span(doc, "ProfilerStep#5")
    (fwd,) = [e for e in users if e["name"] == "## forward ##" and lo <= e["ts"] <= hi]
    main = fwd["tid"]
    seq_ops = [e for e in ev if e.get("cat") == "cpu_op" and "Sequence number" in e.get("args", {})]
    first: dict[int, dict] = {}
    for e in sorted(seq_ops, key=lambda e: e["ts"]):
        first.setdefault(e["args"]["Sequence number"], e)
    want = 0
    for k, a in _launches(doc, fwd["ts"], hi):
        if a["tid"] == main:   # the row's figures hold its whole subtree (DistributedDataParallel.forward)
            want += round(k["dur"] * 1000) if a["ts"] <= fwd["ts"] + fwd["dur"] else 0
            continue
        if _inside(users, a["tid"], a["ts"]):
            continue   # an nccl:all_reduce range on autograd's thread: its own home
        around = sorted(_inside(seq_ops, a["tid"], a["ts"]), key=lambda e: e["ts"])
        f = first.get(around[0]["args"]["Sequence number"]) if around else None
        if f is not None and f["tid"] == main and fwd["ts"] <= f["ts"] <= fwd["ts"] + fwd["dur"]:
            want += round(k["dur"] * 1000)
    rows = {r["path"]: r for r in _summary_of(p)["phases"]}
    got = rows["ProfilerStep > ## forward ##"]
    assert got["kernel_inherited_ns"] == want and want > 1.5 * got["kernel_ns"]


def _summary_of(p: Path) -> dict:
    return summarize_torch_trace(p, identity_from_path(p), SummarizeOptions())


def test_world_size_from_distributed_info_reaches_the_manifest(tmp_path: Path) -> None:
    """A trace whose name states no rank: `distributedInfo` gives the artifact its rank and world
    size (manifest.json; the runs table of `verlprof summarize` reads world_size from there)."""
    from typer.testing import CliRunner
    from verlprof.pipeline.cli import app

    doc = _doc(DDP)
    src = tmp_path / "src"
    src.mkdir()
    (src / "ddp_trace.json").write_text(json.dumps(doc))
    res = CliRunner().invoke(app, ["collect", str(src), "-o", str(tmp_path / "out"), "--work", str(tmp_path / "w")])
    assert res.exit_code == 0, res.output
    (art,) = json.loads((tmp_path / "out" / "manifest.json").read_text())["artifacts"]
    info = doc["distributedInfo"]
    assert (art["rank"], art["world_size"]) == (info["rank"], info["world_size"])


def test_a_window_that_cannot_be_cut_fails_its_artifact(tmp_path: Path) -> None:
    """`verlprof collect` on a trace whose time base is unusable (a damaged `baseTimeNanoseconds`
    that puts its events past 64-bit ns: no step window can be cut from it) beside a good one: the
    damaged artifact is `failed` with the reason, the good one `done`, exit 3; never a silent done."""
    from typer.testing import CliRunner
    from verlprof.pipeline.cli import app

    doc = _doc(DDP)
    src = tmp_path / "src"
    src.mkdir()
    (src / "good_trace.json").write_text(json.dumps(doc))
    doc["baseTimeNanoseconds"] = 2**63 - 1000
    (src / "damaged_trace.json").write_text(json.dumps(doc))
    res = CliRunner().invoke(app, ["collect", str(src), "-o", str(tmp_path / "out"), "--work", str(tmp_path / "w")])
    assert res.exit_code == 3, res.output
    m = json.loads((tmp_path / "out" / "manifest.json").read_text())
    # the file names this test chose are the owner's: published as pseudonyms (issue 39), read
    # back through WORK's review list
    names = owner_names(tmp_path / "w")
    assert all(re.fullmatch(r"name-[g-z]+\.json", a["rel"]) for a in m["artifacts"]), m["artifacts"]
    status = {reveal(a["rel"], names): a for a in m["artifacts"]}
    assert status["good_trace.json"]["status"] == "done"
    assert status["damaged_trace.json"]["status"] == "failed"
    assert "unusable time base" in status["damaged_trace.json"]["reason"]
    assert [reveal(f["rel"], names) for f in m["status"]["failed_artifacts"]] == ["damaged_trace.json"]
    assert not m["status"]["complete"]
    assert [reveal(p.name, names) for p in (tmp_path / "out" / "traces").glob("*trace.json*")] == ["good_trace.trace.json.gz"]


def test_a_window_that_cannot_be_written_fails_its_artifact(tmp_path: Path) -> None:
    """The trace summarizes, but its step window cannot be cut into the work dir (a file stands
    where `WORK/windows/` goes, as a full or read-only disk would): the artifact is `failed` for
    its window, exit 3, the summary still published; never a silent `done`."""
    from typer.testing import CliRunner
    from verlprof.pipeline.cli import app

    src = tmp_path / "src"
    src.mkdir()
    (src / "ddp_trace.json").write_text(json.dumps(_doc(DDP)))
    work = tmp_path / "w"
    work.mkdir()
    (work / "windows").write_text("not a folder")
    res = CliRunner().invoke(app, ["collect", str(src), "-o", str(tmp_path / "out"), "--work", str(work)])
    assert res.exit_code == 3, res.output
    m = json.loads((tmp_path / "out" / "manifest.json").read_text())
    (art,) = m["artifacts"]
    stages = {s["stage"]: s["status"] for s in art["stages"]}
    assert stages == {"summarize": "done", "traces": "failed"} and art["status"] == "failed"
    assert m["status"]["failed_artifacts"] == [{"rel": art["rel"], "stage": "traces", "reason": art["reason"]}]
    assert reveal(art["rel"], owner_names(work)) == "ddp_trace.json"       # the owner's name, a pseudonym
    assert (tmp_path / "out" / "summaries" / "phases.parquet").is_file()
    assert not list((tmp_path / "out").rglob("*.trace.json*"))


def test_reader_keeps_autograd_links() -> None:
    """The Kineto reader keeps every cpu op with a `Sequence number` and every `fwdbwd` flow end."""
    from verlprof.stages.readers.chrome_trace import read_chrome_trace

    for rel in (DDP, SAMPLED):
        ev = _doc(rel)["traceEvents"]
        d = read_chrome_trace(data_path(rel))
        seq = [e["args"]["Sequence number"] for e in ev
               if e.get("cat") == "cpu_op" and "Sequence number" in e.get("args", {})]
        flows = [e for e in ev if e.get("cat") == "fwdbwd"]
        assert list(d.seq_no) == seq and len(d.flow_id) == len(flows)
        assert sum(d.flow_end) == sum(1 for e in flows if e["ph"] == "f")


def test_tolerant_parser_keeps_the_same_links() -> None:
    """The parser for malformed traces (plain JSON values) keeps what the typed one keeps."""
    from verlprof.stages.readers import chrome_trace as ct

    p = data_path(DDP)
    loose = ct.TraceData(path=p)
    ct._Collector(loose).dicts(_doc(DDP)["traceEvents"])
    typed = ct.read_chrome_trace(p)
    for f in ("seq_thread", "seq_ts", "seq_dur", "seq_no", "flow_id", "flow_end", "flow_thread", "flow_ts"):
        assert list(getattr(loose, f)) == list(getattr(typed, f)), f
