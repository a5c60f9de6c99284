"""Issue 42: the answer at a glance, and issue 41's report items, on real multi-rank runs.

The three 4-rank gloo runs of tests/data/straggler_runs (a rank slow in generation, a rank slow in
every actor update, an even run) and the shipped sample are collected for real; the headline at
the top of the terminal and of report.html must carry ranks.parquet's own statements of the
chosen step, each linked to a section the page has. The stage table's title names the step it
shows and its trace link opens the process whose numbers the row shows.
"""
from __future__ import annotations

import html
import re
from pathlib import Path

import pandas as pd
import pytest
from typer.testing import CliRunner
from verlprof.pipeline import compare
from verlprof.pipeline.cli import app
from verlprof.pipeline.culprits import fmt_ms
from verlprof.pipeline.report.template import fmt_ms as page_ms

ROOT = Path(__file__).resolve().parents[1]
RUNS = {"gen_slow": ROOT / "tests/data/straggler_runs/gen_slow", "update_slow": ROOT / "tests/data/straggler_runs/update_slow",
        "even": ROOT / "tests/data/straggler_runs/even", "sample": ROOT / "samples/tiny_run"}
runner = CliRunner()


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[Path, str]]:
    root = tmp_path_factory.mktemp("headline")
    out = {}
    for name, src in RUNS.items():
        res = runner.invoke(app, ["collect", str(src), "-o", str(root / name), "--work", str(root / "work"), "--html"],
                            env={"COLUMNS": "80"})
        assert res.exit_code == 0, (name, res.output[-3000:])
        out[name] = (root / name, res.output)
    return out


def _flat(text: str) -> str:
    return " ".join(text.split())


def _text(fragment: str) -> str:
    return _flat(html.unescape(re.sub(r"<[^>]+>", " ", fragment)))


def _headline_html(page: str) -> str:
    m = re.search(r'<section id="headline"[^>]*>(.*?)</section>', page, re.S)
    assert m, "no headline section"
    return m.group(1)


def _chosen(t: pd.DataFrame, kind: str) -> pd.DataFrame:
    return t[(t["row_kind"] == kind) & ((t["chosen"] == True) | t["chosen"].isna())]   # noqa: E712


@pytest.mark.parametrize("name", list(RUNS))
def test_headline_tops_page_and_terminal_with_the_tables_own_statements(runs, name: str) -> None:
    b, output = runs[name]
    t = pd.read_parquet(b / "summaries" / "ranks.parquet")
    page = (b / "report.html").read_text()
    head = _headline_html(page)
    # first thing after the title: nothing but the page's meta line stands before it
    before = page[page.index("</h1>"):page.index('<section id="headline"')]
    assert "<table" not in before and "<h2" not in before and "<svg" not in before
    crit = _chosen(t, "critical_path").iloc[0]
    cul = _chosen(t, "culprit")["statement"].iloc[0]
    rec = t[t["row_kind"] == "recurrence"]["statement"].iloc[0]
    step = f"step {int(crit['step'])}: {fmt_ms(crit['wall_ns'])}, bound by {crit['bound_stage']} ({fmt_ms(crit['bound_ns'])})"
    want = [step, cul, rec]
    lines = output.splitlines()
    start = lines.index("at a glance:")
    first_table = next(i for i, x in enumerate(lines) if re.match(r"\S.*: \d+ ranks?, step", x))
    assert start < first_table, output
    glance_terminal = _flat(" ".join(lines[start:first_table]))
    for text in want:
        assert text in _text(head), (text, _text(head))
        assert text in glance_terminal, (text, glance_terminal)
    # each fact links to a section the page has
    links = re.findall(r'href="#([\w-]+)"', head)
    assert {"critical-path", "ranks"} <= set(links) or name == "sample"
    for a in links:
        assert re.search(rf'\bid="?{a}"?[ >]', page), a
    # a named culprit is marked; an even run names nobody at the top either
    named = _chosen(t, "culprit")["rank"].dropna()
    if len(named):
        assert f'<b class="straggler-rank">rank {int(named.iloc[0])}</b>' in head
    else:
        assert "straggler-rank" not in head and "culprit: rank" not in glance_terminal
    assert all(len(x) <= 80 for x in lines)


def test_headline_gpu_line_on_a_cpu_capture_says_so(runs) -> None:
    for name in RUNS:
        b, output = runs[name]
        assert "no GPU work recorded in this step (a CPU-only capture)" in _text(_headline_html((b / "report.html").read_text()))
        assert "no GPU work recorded in this step" in _flat(output)


def test_stage_table_names_its_step_and_links_the_process_it_shows(runs) -> None:
    """Issue 41: the title said `mean over steps` while the table is of the summarized step, and the
    trace link opened the stage's slowest rank while the numbers were another rank's."""
    for name in ("gen_slow", "update_slow", "even"):
        b, _ = runs[name]
        page = (b / "report.html").read_text()
        ph = pd.read_parquet(b / "summaries" / "phases.parquet")
        step = int(ph["step"].iloc[0])
        assert f"Stages of step {step} (" in _text(page) and "mean over steps" not in page
        per = compare.process_stage_totals(ph)
        steps = per[per["stage"] == "step"]
        shown_rank = int(steps.loc[steps["wall_ns"].idxmax(), "rank"])   # the process that lends the rows
        table = page[page.index("<h2>Stages of"):]
        table = table[:table.index("</table>")]
        rows = re.findall(r"<tr>(.*?)</tr>", table, re.S)[1:]
        assert rows
        for row in rows:
            cells = re.findall(r"<td[^>]*>(.*?)</td>", row, re.S)
            stage = _text(cells[0])
            first = re.search(r'<a href="([^"]+)" title="the process whose', cells[-1])
            assert first and f"rank{shown_rank}-of-4" in first.group(1), (name, stage, cells[-1])
            mine = per[(per["rank"] == shown_rank) & (per["stage"] == stage)]
            assert _text(cells[3]) == page_ms(mine["wall_ns"].iloc[0]), (name, stage)


def test_report_names_the_row_kind_column(runs) -> None:
    page = _text((runs["gen_slow"][0] / "report.html").read_text())
    assert "rows with row_kind = critical_path" in page and "rows of kind" not in page


def test_terminal_other_line_says_where_its_whole_comes_from(runs) -> None:
    out = _flat(runs["sample"][1])
    out = out[out.index("actor_rollout_ref: 2 ranks"):]
    m = re.search(r"other \(in no stage\): ([\d.]+) ms of ([\d.]+) ms, the step window of the slowest rank", out)
    assert m, out[-3000:]
    ph = pd.read_parquet(runs["sample"][0] / "summaries" / "phases.parquet")
    per = compare.process_stage_totals(ph)
    mine = per[per["role"] == "actor_rollout_ref"]
    slow = mine[mine["stage"] == "step"]["wall_ns"].max()
    assert float(m.group(2)) == round(slow / 1e6, 1)


def _timeline(page: str) -> str:
    return re.search(r'<svg role="img" class="timeline".*?</svg>', page, re.S).group(0)


def _lanes(svg: str) -> dict[str, str]:
    """lane label -> its SVG fragment."""
    parts = re.split(r'(?=<g class="lane" data-proc=")', svg)
    return {re.match(r'<g class="lane" data-proc="([^"]+)"', p).group(1): p for p in parts if p.startswith('<g class="lane"')}


def _px_per_ms(svg: str) -> tuple[float, float]:
    ticks = [(float(x), float(v.replace(",", ""))) for x, v in
             re.findall(r'<g class="tick"><line x1="([\d.]+)"[^>]*/><text[^>]*>([\d.,]+)</text></g>', svg)]
    (xa, va), (xb, vb) = ticks[0], ticks[-1]
    return xa, (xb - xa) / (vb - va)


def test_timeline_marks_the_culprit_lane_and_the_victims_waits(runs) -> None:
    """gen_slow: rank 2's lane is the culprit's, its lost range outlined as long as its
    generate_sequences (phases.parquet); ranks 0, 1, 3 each have their wait hatched, ending where
    their actor_update ends and as long as the wait the culprit row states; the even run has none."""
    b, _ = runs["gen_slow"]
    page = (b / "report.html").read_text()
    lanes = _lanes(_timeline(page))
    x0, ppm = _px_per_ms(_timeline(page))
    ph = pd.read_parquet(b / "summaries" / "phases.parquet")
    t = pd.read_parquet(b / "summaries" / "ranks.parquet")
    cul = _chosen(t, "culprit").iloc[0]
    assert int(cul["rank"]) == 2
    marked = {k for k, v in lanes.items() if "culprit-mark" in v}
    assert marked == {"actor_rollout_ref rank 2 [torch]"}
    assert 'class="lbl culprit-lane"' in lanes["actor_rollout_ref rank 2 [torch]"]
    m = re.search(r'class="culprit-mark" x="([\d.]+)" y="[\d.]+" width="([\d.]+)"', lanes["actor_rollout_ref rank 2 [torch]"])
    lost = ph[(ph["rank"] == 2) & (ph["path"] == cul["path"])].iloc[0]
    assert abs((float(m.group(2)) - 2) / ppm - lost["wall_ns"] / 1e6) < 1.5 / ppm + 0.01
    t0 = lost["start_ns"] / 1e6 - (float(m.group(1)) + 1 - x0) / ppm   # the axis origin, read off the mark
    victims = {int(v) for v in str(cul["victim_ranks"]).split(",")}
    assert victims == {0, 1, 3}
    for r in victims:
        lane = lanes[f"actor_rollout_ref rank {r} [torch]"]
        v = re.search(r'class="victim-mark" x="([\d.]+)" y="[\d.]+" width="([\d.]+)"[^>]*><title>waited ([\d.]+) ms', lane)
        assert v, r
        end = ph[(ph["rank"] == r) & (ph["path"] == cul["victim_path"])]
        end_ms = float((end["start_ns"] + end["wall_ns"]).max()) / 1e6 - t0
        assert abs((float(v.group(1)) + float(v.group(2)) - x0) / ppm - end_ms) < 2 / ppm + 0.05, r
        assert abs(float(v.group(2)) / ppm - float(v.group(3))) < 1.0 + 2 / ppm, r
    assert "culprit-mark" not in (runs["even"][0] / "report.html").read_text()
    assert "victim-mark" not in (runs["even"][0] / "report.html").read_text()


@pytest.mark.parametrize("name", ["gen_slow", "update_slow", "even"])
def test_per_rank_bars_are_labelled_with_ranks_parquet_figures(runs, name: str) -> None:
    """One labelled bar per rank: its own time and its waiting in the role's top stage ranges of the
    chosen step, as ranks.parquet's `rank` rows give them; the culprit's bar (and only it) outlined."""
    b, _ = runs[name]
    page = (b / "report.html").read_text()
    t = pd.read_parquet(b / "summaries" / "ranks.parquet")
    rows = _chosen(t, "rank")
    known = rows[~rows["stage"].isin(["step", "other"]) & rows["stage"].notna()]
    paths = set(known["path"])
    top = known[[not any(" > ".join(p.split(" > ")[:i]) in paths for i in range(1, p.count(" > ") + 1)) for p in known["path"]]]
    bars = dict(re.findall(r'<g class="rankbar" data-rank="(\d+)">(.*?)</g>', page, re.S))
    assert set(map(int, bars)) == set(top["rank"].astype(int))
    culprit = _chosen(t, "culprit")["rank"].dropna()
    for r, g in top.groupby("rank"):
        own = float((g["wall_ns"] - g["wait_ns"]).sum()) / 1e6
        wait = float(g["wait_ns"].sum()) / 1e6
        text = _text(bars[str(int(r))])
        assert f"{page_ms(own * 1e6)} ms own · {page_ms(wait * 1e6)} ms waiting" in text, (r, text)
        outlined = 'stroke="#d62728"' in bars[str(int(r))]
        assert outlined == (len(culprit) > 0 and int(culprit.iloc[0]) == int(r)), r
