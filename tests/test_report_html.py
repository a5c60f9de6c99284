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
from verlprof.stages.phases import canonical_stage


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
