"""The static HTML reports: bars that add up to the step, a timeline per process, escaped names,
nothing fetched from outside. Numbers are checked against the real whole_1873 H200 capture."""
from __future__ import annotations

import importlib.util
import re
import xml.etree.ElementTree as ET
from pathlib import Path

import pandas as pd
import pytest
from testdata import data_dir
from verlprof.pipeline import batch, compare
from verlprof.pipeline.executors import InlineExecutor
from verlprof.pipeline.report.gpu_lanes import GpuIntervals, busy_ns, read_nsys_window
from verlprof.pipeline.report.processes import process_steps
from verlprof.pipeline.report.template import fmt_ms, kernel_labels
from verlprof.pipeline.report.timeline import svg_timeline
from verlprof.pipeline.report_html import render_compare_report, render_run_report
from verlprof.stages.core.phases import canonical_stage
from verlprof.stages.summarize.kernel_category import categorize
from nsys_summaries import summarize_nsys


def _helpers():
    spec = importlib.util.spec_from_file_location("verlprof_test_batch_helpers_html", Path(__file__).with_name("test_batch.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


tb = _helpers()
WHOLE = tb.WHOLE


@pytest.fixture(scope="module")
def rows():
    return tb.fixture_rows()


@pytest.fixture(scope="module")
def whole() -> dict:
    """What summarize writes for the real whole_1873 capture (step 2, with its `(unattributed)` row)."""
    return {k: pd.DataFrame(v) for k, v in summarize_nsys(WHOLE).items() if k in ("phases", "kernels", "steps")}


def svgs(page: str) -> list[ET.Element]:
    """Every inline SVG of the page, parsed as XML (so each one is well-formed)."""
    return [ET.fromstring(m) for m in re.findall(r"<svg role=\"img\".*?</svg>", page, re.DOTALL)]


def chart(page: str, cls: str) -> ET.Element:
    (one,) = [s for s in svgs(page) if s.get("class") == cls]
    return one


def px_per_ms(svg: ET.Element) -> tuple[float, float]:
    """(x of 0 ms, pixels per ms), read off the chart's own tick lines and labels."""
    ticks = [(float(t.find("text").text.replace(",", "")), float(t.find("line").get("x1"))) for t in svg.iter("g")
             if t.get("class") == "tick"]
    (v0, x0), (v1, x1) = ticks[0], ticks[-1]
    assert v0 == 0 and v1 > 0
    return x0, (x1 - x0) / v1


def assert_offline(page: str) -> None:
    low = page.lower()
    for bad in ("http:", "https:", "<script", " src=", "url(", "@import", "<link"):
        assert bad not in low, bad


def test_bars_are_as_long_as_the_step_and_gpu_time_is_not_stacked(whole) -> None:
    """The issue's bug: whole_1873's 223 ms step drew as 446 ms, `(unattributed)` stacked on top."""
    ph = whole["phases"]
    page = render_run_report(ph, whole["kernels"], {"window": {"step": 2}}, steps_rows=whole["steps"])
    assert_offline(page)
    bars = chart(page, "stepbars")
    x0, scale = px_per_ms(bars)
    (proc,) = [g for g in bars.iter("g") if g.get("class") == "proc"]
    (wall,) = [g for g in proc.iter("g") if g.get("class") == "wall"]
    rects = wall.findall("rect")
    step = ph[ph.phase == "step"].iloc[0]
    assert float(rects[0].get("x")) == pytest.approx(x0)
    right = max(float(r.get("x")) + float(r.get("width")) for r in rects)
    assert right - x0 == pytest.approx(step.wall_ns / 1e6 * scale, abs=0.05)
    assert sum(float(r.get("width")) for r in rects) == pytest.approx(step.wall_ns / 1e6 * scale, abs=0.05)
    titles = [r.find("title").text for r in rects]
    assert not any("(unattributed)" in t for t in titles)
    # The top-level phases appear once each, at their own length; the rest is gaps.
    top = ph[(ph.parent == "step") & (ph.depth == 1)]
    named = {t.split(" · ")[1].split(" (")[0]: float(r.get("width")) for t, r in zip(titles, rects)
             if "between phases" not in t}
    assert set(named) == set(top.phase)
    for r in top.itertuples():
        assert named[r.phase] == pytest.approx(r.wall_ns / 1e6 * scale, abs=0.05)
    # GPU busy is its own thin bar on the same scale; the unattributed GPU share a labelled figure.
    (gpu,) = [g for g in proc.iter("g") if g.get("class") == "gpu"]
    assert float(gpu.find("rect").get("width")) == pytest.approx(step.gpu_busy_ns / 1e6 * scale, abs=0.05)
    un = ph[ph.phase == "(unattributed)"].iloc[0]
    assert f"unattributed GPU {un.gpu_busy_ns / 1e6:.2f} ms" in page


def test_timeline_places_phases_at_their_start_times(whole) -> None:
    ph = whole["phases"]
    gpu = read_nsys_window(WHOLE)
    page = render_run_report(ph, whole["kernels"], {"window": {"step": 2}}, steps_rows=whole["steps"])
    tl = chart(page, "timeline")
    x0, scale = px_per_ms(tl)
    lanes = [g for g in tl.iter("g") if g.get("class") == "lane"]
    assert len(lanes) == 1
    t0 = int(ph[ph.phase == "step"].start_ns.iloc[0])
    boxes = {r.get("data-phase"): r for r in lanes[0].iter("rect") if r.get("class") == "ph"}
    top = ph[(ph.parent == "step") & (ph.depth == 1)]
    assert set(boxes) == set(top.phase)
    for r in top.itertuples():
        assert float(boxes[r.phase].get("x")) == pytest.approx(x0 + (r.start_ns - t0) / 1e6 * scale, abs=0.05)
        assert f"{fmt_ms(r.wall_ns)} ms" in boxes[r.phase].find("title").text
    # GPU lane: what the window's kernels say, merged; its title sums what it draws.
    procs = process_steps(ph, whole["steps"], {"window": {"step": 2}})
    svg = svg_timeline(procs, {procs[0].ident: gpu[1873]}, {})
    lane = next(g for g in ET.fromstring(svg).iter("g") if g.get("class") == "gpulane")
    busy = busy_ns(gpu[1873], procs[0].start_ns, procs[0].end_ns)
    assert f"GPU busy {busy / 1e6:.2f} of 223.03 ms" in lane.find("title").text
    assert {p.get("class") for p in lane.iter("path")} >= {"gpu-gemm", "gpu-attention", "gpu-other"}


def test_sixty_four_lanes_stay_small(whole) -> None:
    """64 ranks of the real step with its 4,500 kernels each: a scrolling, compact page under 2 MB."""
    ph = whole["phases"]
    iv = read_nsys_window(WHOLE)[1873]
    shift = {5000 + rank: rank * 150_000 for rank in range(64)}
    ph64 = pd.concat([ph.assign(rank=pid - 5000, pid=pid, start_ns=ph.start_ns + d) for pid, d in shift.items()],
                     ignore_index=True)
    procs = process_steps(ph64, None, {"window": {"step": 2}})
    assert len(procs) == 64 and all(p.step_from == "step range" for p in procs)
    gpu = {p.ident: GpuIntervals(iv.start + shift[p.pid], iv.end + shift[p.pid], iv.cat) for p in procs}
    svg = svg_timeline(procs, gpu, {})
    page = render_run_report(ph64, whole["kernels"], {"window": {"step": 2}})
    assert len(page.encode()) + len(svg.encode()) < 2_000_000, (len(page), len(svg))
    lanes = [g for g in ET.fromstring(svg).iter("g") if g.get("class") == "lane"]
    assert len(lanes) == 64
    assert all(len(list(g.iter("path"))) >= 3 for g in lanes)          # every GPU lane is drawn
    assert 'class="lanes"' in page and "scroll inside the box" in page


def test_kernels_are_named_for_what_they_are(whole) -> None:
    k = whole["kernels"]
    norm = k[k.kernel_short.str.contains("layer_norm|GammaBeta", regex=True)]
    assert len(norm) and set(norm.category) == {"normalization"}
    assert categorize("vectorized_layer_norm_kernel") == "normalization"
    assert categorize("reduce_kernel") == "reduction"
    assert categorize("normal_kernel") == "elementwise"          # a random-normal fill, not a norm
    # Same short name, different kernels: the table tells them apart.
    top = compare.kernel_totals(k).head(40)
    labels = kernel_labels(list(zip(top.kernel, top.kernel_short)))
    dup = top.kernel_short.duplicated(keep=False)
    assert dup.sum() >= 2
    assert len(set(labels)) == len(labels)
    for lab, short in zip(labels, top.kernel_short):
        assert lab.startswith(short)


def test_names_are_escaped() -> None:
    evil = "<script>alert('x')</script>"
    kernel = "void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<float>>(int)"
    phases = [{"phase": evil, "stage": canonical_stage(evil), "parent": None, "wall_ns": 5_000_000, "role": "actor&co",
               "rank": 0, "step": 1, "source_kind": "torch"}]
    kernels = [{"kernel": kernel, "kernel_short": kernel, "category": "elementwise", "count": 3, "total_ns": 9_000,
                "step": 1, "source_kind": "torch"}]
    page = render_run_report(phases, kernels, {"window": {"reason": evil}})
    assert evil not in page and "&lt;script&gt;" in page and "CUDAFunctor_add&lt;float&gt;" in page
    assert "actor&amp;co" in page
    assert_offline(page)
    svgs(page)   # still well-formed


def test_compare_report_groups_runs_and_lists_kernel_changes(tmp_path: Path, rows) -> None:
    paths = tb.make_runs(tmp_path / "in", rows)
    res = batch.summarize_runs(list(paths.values()), tmp_path / "out", executor=InlineExecutor(),
                               work_dir=tmp_path / "w", html=True, top_kernels=5)
    page = (tmp_path / "out" / "report.html").read_text()
    assert page.startswith("<!DOCTYPE html>")
    assert_offline(page)
    (chart,) = svgs(page)
    wall = res.compare[res.compare.metric == "wall_ns"]
    groups = wall[["stage", "role"]].drop_duplicates()
    rects = list(chart.iter("rect"))
    assert len(rects) == len(groups) * 3
    width = {r.find("title").text.split(":")[0]: float(r.get("width")) for r in rects}
    g = width["generation (actor) · slow_gen"] / width["generation (actor) · base"]
    assert g == pytest.approx(1.5, rel=0.01)
    assert "base (baseline)" in page and "+50.0%" in page
    kc = page.split("Largest kernel-time changes")[1]
    heavy = max(rows[1], key=lambda k: k["total_ns"])
    assert "<h3>fast_update</h3>" in kc and heavy["kernel_short"] in kc and "+200.0%" in kc
    assert "<h3>slow_gen</h3>" not in kc          # nothing changed there
    assert kc.count("<tr>") <= 1 + 5


def test_many_runs_and_missing_values_render(rows) -> None:
    phases, _ = rows
    totals = {}
    for i in range(14):
        keep = [r for r in phases if not (i % 2 and r["stage"] == "reward")]   # odd runs lack "reward"
        totals[f"r{i}"] = compare.stage_totals(tb.scaled(keep, {"generation": 1 + i / 10}))
    cmp = compare.compare_stages(totals, "r0")
    runs = [{"run": r} for r in totals]
    page = render_compare_report(cmp, [], runs, baseline="r0")
    assert_offline(page)
    (chart,) = svgs(page)
    n_groups = len(cmp[["stage", "role"]].drop_duplicates())
    assert len(list(chart.iter("rect"))) == n_groups * 14 - 7      # 7 runs without a reward bar
    assert "–" in page and "No other run, or no kernel rows." in page


def test_empty_inputs_give_a_page_not_a_crash() -> None:
    page = render_run_report([], [], None)
    assert "No phase rows." in page and "No kernel rows." in page
    assert_offline(page)


def _three_ranks(phases: list[dict]) -> list[dict]:
    """Ranks 0-2 of one role, each from its own source; rank 1 generates twice as long."""
    out = []
    for rank, factor in ((0, 1.0), (1, 2.0), (2, 1.0)):
        out += [{**r, "source": f"nsys/rank{rank}#a.sqlite"}
                for r in tb.scaled(phases, {"generation": factor}, rank=rank)]
    return out


def _trace_entry(source: str, chrome: str, sqlite: str | None = None) -> dict:
    outputs = {"chrome": chrome, **({"sqlite": sqlite} if sqlite else {})}
    return {"source": source, "kind": "nsys", "outputs": outputs,
            "counts": {"chrome": {"size": 2048}}, "events": {"kernel": 5, "nvtx": 2, "metadata": 3}}


def test_run_report_links_each_process_to_its_window_trace(rows) -> None:
    phases, kernels = rows
    manifest = {"window": {"step": 2}, "traces": [
        _trace_entry("nsys/rank0#a.sqlite", "traces/nsys__rank0#a.trace.json.gz", "traces/nsys__rank0#a.sqlite"),
        _trace_entry("nsys/rank1#a.sqlite", "traces/nsys__rank1#a.trace.json.gz"),
        # rank 2's trace went missing (a failed trace stage): its bar stays unlinked
    ]}
    page = render_run_report(_three_ranks(phases), kernels, manifest)
    assert_offline(page)
    bars = chart(page, "stepbars")
    linked = {a.find("text").text: a.get("href") for a in bars.iter("a")}
    # '#' in a file name is URL-quoted, so the link names the file and not a fragment of it.
    assert linked == {"actor rank 0 [nsys]": "traces/nsys__rank0%23a.trace.json.gz",
                      "actor rank 1 [nsys]": "traces/nsys__rank1%23a.trace.json.gz"}
    for a in bars.iter("a"):
        assert list(a.iter("rect")), "the bar segments open the trace too"
    labels = [t.text for t in bars.iter("text") if t.text and t.text.startswith("actor rank")]
    assert labels == ["actor rank 0 [nsys]", "actor rank 1 [nsys]", "actor rank 2 [nsys]"]
    # Stage table: the row shows the slowest process's value and links that process's trace.
    stages = page.split("<h2>Stages")[1].split("<h2")[0]
    gen = next(r for r in stages.split("<tr>") if '<td class="l">generation</td>' in r)
    assert 'href="traces/nsys__rank1%23a.trace.json.gz"' in gen and ">actor rank 1</a>" in gen
    upd = next(r for r in stages.split("<tr>") if '<td class="l">actor_update</td>' in r)
    assert "href=" in upd
    # Window traces table: both files, the SQLite too, the viewers named without a URL.
    section = page.split('<h2 id="traces">')[1].split("<h2")[0]
    assert section.count("<tr>") == 3 and 'href="traces/nsys__rank0%23a.sqlite"' in section
    assert "ui.perfetto.dev" in section and "chrome://tracing" in section
    assert "7" in section and "2.0 KB" in section           # events without metadata, file size
    assert 'href="#traces"' in page and 'id="traces"' in page


def test_unsafe_trace_paths_are_never_linked(rows) -> None:
    phases, kernels = rows
    bad = ["../outside.trace.json.gz", "/etc/passwd", "http://evil.example/x.json.gz", "traces/../../x",
           "traces//x", "javascript:alert(1)", "traces\\..\\x", None, 7]
    entries = [_trace_entry("nsys/rank0#a.sqlite", b) for b in bad]
    entries.append({"source": "nsys/rank0#a.sqlite", "kind": "nsys", "outputs": "not a dict"})
    entries.append("not an entry")
    page = render_run_report(_three_ranks(phases), kernels, {"traces": entries})
    assert_offline(page)
    bars = chart(page, "stepbars")
    assert list(bars.iter("a")) == []
    # no link leaves the page (the headline's in-page anchors, issue 42, are the only hrefs)
    assert "Window traces" not in page and all(h.startswith("#") for h in re.findall(r'href="([^"]*)"', page))
    # A colon in a name is quoted: the href stays a relative file name, never a scheme.
    entries = [_trace_entry("nsys/rank0#a.sqlite", "traces/javascript:x?.trace.json.gz")]
    page = render_run_report(_three_ranks(phases), kernels, {"traces": entries})
    bars = chart(page, "stepbars")
    assert [a.get("href") for a in bars.iter("a")] == ["traces/javascript%3Ax%3F.trace.json.gz"]


TORCH_STEP2 = (WHOLE.parents[2] / "h200-torch-2.11"
               / "actor-rollout-ref_train_step2_rank0-of-1_pid754_20261202085621396.json.gz")


def test_a_torch_trace_draws_its_mini_batches_and_gpu_lane_on_the_same_clock() -> None:
    """The real H200 torch trace: one `train` range around everything, so its children are the
    bar's phases; its kernels (read from the trace, absolute UTC) fall inside the step; the rows
    of a memory snapshot (allocation times of another process) are not a lane."""
    from verlprof.pipeline.report.gpu_lanes import LANE_CATEGORIES, read_torch_window
    from verlprof.stages.summarize.torch_profile import summarize_torch_trace
    from verlprof.stages.window import identity_from_path

    rows = summarize_torch_trace(TORCH_STEP2, identity_from_path(TORCH_STEP2))
    ph = pd.DataFrame(rows["phases"])
    memory = ph.assign(source_kind="memory", role=None, pid=804, start_ns=ph.start_ns + 20_000_000_000)
    (proc,) = process_steps(pd.concat([ph, memory]), pd.DataFrame(rows["steps"]), {})
    train = ph[ph.phase == "train"].iloc[0]
    assert (proc.start_ns, proc.wall_ns) == (train.start_ns, train.wall_ns)
    assert [p.name for p in proc.phases] == ["mini_batch0", "mini_batch1"]
    assert sum(s.wall_ns for s in proc.segments()) == train.wall_ns
    assert proc.gpu_busy_ns == train.gpu_busy_ns
    iv = read_torch_window(TORCH_STEP2)
    inside = busy_ns(iv, proc.start_ns, proc.end_ns)
    assert inside == busy_ns(iv, int(iv.start.min()), int(iv.end.max())) > 0.9 * train.gpu_busy_ns
    gemm = LANE_CATEGORIES.index("gemm")
    assert busy_ns(iv, proc.start_ns, proc.end_ns, [gemm]) > 0


def test_report_shows_the_inherited_gpu_figure_of_each_phase(tmp_path: Path) -> None:
    """Issue 10: the HTML shows, beside NVIDIA's figure, the GPU time a phase gets when kernels of
    range-less threads (the autograd thread's backward) are inherited; the public DDP Kineto trace
    (on the emit_nvtx capture autograd's thread opens ranges, nested in update_actor, so both
    figures agree there)."""
    import shutil

    from testdata import data_path
    from typer.testing import CliRunner
    from verlprof.pipeline.cli import app

    src = tmp_path / "src"
    src.mkdir()
    shutil.copy(data_path("kineto_public/hta_ddp_nccl_rank0.json"), src / "ddp_trace.json")
    out = tmp_path / "out"
    res = CliRunner().invoke(app, ["collect", str(src), "-o", str(out), "--work", str(tmp_path / "w"), "--html"])
    assert res.exit_code == 0, res.output
    phases = pd.read_parquet(out / "summaries" / "phases.parquet")
    back = phases[(phases.phase == "## backward ##") & (phases.depth == 1)].iloc[0]
    assert back.gpu_busy_inherited_ns > 2 * back.gpu_busy_ns    # backward kernels run on another thread
    html = (out / "report.html").read_text()
    want = (f"## backward ## ({back.stage}), GPU {fmt_ms(back.gpu_busy_ns)} ms "
            f"({fmt_ms(back.gpu_busy_inherited_ns)} ms with kernels of other threads)")
    assert want in html
