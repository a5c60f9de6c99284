"""The static HTML reports: right bars for the numbers, escaped names, nothing fetched from outside."""
from __future__ import annotations

import html
import importlib.util
import re
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
from verlprof.pipeline import batch, compare
from verlprof.pipeline.executors import InlineExecutor
from verlprof.pipeline.report_html import render_compare_report, render_run_report
from verlprof.stages.core.phases import canonical_stage


def _helpers():
    spec = importlib.util.spec_from_file_location("verlprof_test_batch_helpers_html", Path(__file__).with_name("test_batch.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


tb = _helpers()


@pytest.fixture(scope="module")
def rows():
    return tb.fixture_rows()


def svgs(page: str) -> list[ET.Element]:
    """Every inline SVG of the page, parsed as XML (so each one is well-formed)."""
    return [ET.fromstring(m) for m in re.findall(r"<svg role=\"img\".*?</svg>", page, re.S)]


def assert_offline(page: str) -> None:
    low = page.lower()
    for bad in ("http:", "https:", "<script", " src=", "url(", "@import", "<link"):
        assert bad not in low, bad


def test_run_report_bars_match_the_stage_times(rows) -> None:
    phases, kernels = rows
    two_ranks = tb.scaled(phases, {}, rank=0) + tb.scaled(phases, {"generation": 2.0}, rank=1)
    page = render_run_report(two_ranks, kernels, {"created": "2026-12-01", "window": {"step": 2, "reason": "steady"}})
    assert_offline(page)
    (chart,) = svgs(page)
    bars: dict[str, float] = {}
    for rect in chart.iter("rect"):
        label, stage = rect.find("title").text.split(":")[0].split(" · ")
        bars.setdefault(label, {})[stage] = float(rect.get("width"))
    assert set(bars) == {"actor rank 0 [nsys]", "actor rank 1 [nsys]"}
    assert "step" not in bars["actor rank 0 [nsys]"]        # the step is a tick, not a segment
    # Widths are proportional to the stage times: rank 1 generates twice as long as rank 0.
    r0, r1 = bars["actor rank 0 [nsys]"], bars["actor rank 1 [nsys]"]
    assert r1["generation"] / r0["generation"] == pytest.approx(2.0, rel=0.01)
    assert r1["actor_update"] == pytest.approx(r0["actor_update"], rel=0.01)
    gen_ms = sum(r["wall_ns"] for r in phases if r["phase"] == "gen") / 1e6
    upd_ms = sum(r["wall_ns"] for r in phases if r["phase"] == "update_actor") / 1e6
    assert r0["generation"] / r0["actor_update"] == pytest.approx(gen_ms / upd_ms, rel=0.01)
    # Top kernels: the heaviest fixture kernel is listed first.
    heavy = max(kernels, key=lambda k: k["total_ns"])
    first = re.search(r'<span title="([^"]*)">', page.split("Top 20 kernels")[1]).group(1)
    assert html.unescape(first) == heavy["kernel"]


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
    (chart,) = svgs(page)
    linked = {a.find("text").text: a.get("href") for a in chart.iter("a")}
    # '#' in a file name is URL-quoted, so the link names the file and not a fragment of it.
    assert linked == {"actor rank 0 [nsys]": "traces/nsys__rank0%23a.trace.json.gz",
                      "actor rank 1 [nsys]": "traces/nsys__rank1%23a.trace.json.gz"}
    for a in chart.iter("a"):
        assert a.findall("rect"), "the bar segments open the trace too"
    labels = [t.text for t in chart.iter("text") if t.text and t.text.startswith("actor rank")]
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
    (chart,) = svgs(page)
    assert list(chart.iter("a")) == []
    assert "Window traces" not in page and "href=" not in page
    # A colon in a name is quoted: the href stays a relative file name, never a scheme.
    entries = [_trace_entry("nsys/rank0#a.sqlite", "traces/javascript:x?.trace.json.gz")]
    page = render_run_report(_three_ranks(phases), kernels, {"traces": entries})
    (chart,) = svgs(page)
    assert [a.get("href") for a in chart.iter("a")] == ["traces/javascript%3Ax%3F.trace.json.gz"]
