"""What every view prints, over every bundle the test data yields (issues 32 and 34):

- no GPU % above 100, in collect's terminal, in each bundle's report.html and in `summarize`'s
  outputs over all the bundles: GPU % is GPU busy over the launch span (phases.parquet
  `launch_span_ns`), never over wall;
- collect's lines fit 80 columns (COLUMNS=80): names wrapped or kept whole, never a number cut
  from its unit; one run has more than 16 artifacts (the collapsed view) and a corrupt file among
  them (a failed row with a long reason).

Each run is a real `collect` of a folder of tests/data (copied to tmp first); the data folders
are enumerated, and a test checks that every input file lies in one of them, so new test data is
covered without editing this file.
"""
from __future__ import annotations

import html
import json
import re
import shutil
from pathlib import Path
from types import SimpleNamespace

import pandas as pd
import pytest
from typer.testing import CliRunner
from testdata import data_dir
from verlprof.pipeline import terminal_views
from verlprof.pipeline.cli import app
from verlprof.stages.scrub.provenance import REVIEW_NAME, read_review_map, reveal

DATA = Path(__file__).resolve().parent / "data"
#: Folders of tests/data whose subfolders are separate runs (captures of unrelated programs).
GROUPS = ("captures", "gpu_captures", "straggler_runs", "h200-nsys-2025.3")
#: Files that are no profiler input.
_NOT_INPUT = re.compile(r"(\.md|\.py|\.sh|^LICENSE.*)$")
WIDTH = 80
pytestmark = pytest.mark.slow   # ~25 s: collects every run of tests/data once (the module fixture)


def _inputs(folder: Path) -> list[Path]:
    return [p for p in folder.rglob("*") if p.is_file() and "golden" not in p.parts and not _NOT_INPUT.search(p.name)]


def _runs() -> list[str]:
    runs = []
    for top in sorted(p for p in DATA.iterdir() if p.is_dir()):
        subs = sorted(p for p in top.iterdir() if p.is_dir()) if top.name in GROUPS else [top]
        runs += [str(s.relative_to(DATA)) for s in subs if _inputs(s)]
    return runs


RUNS = _runs()
#: More than 16 artifacts (collect's collapsed view) with a corrupt file among them.
MANY = "many: gloo_ranks + discrete-cpu + a corrupt file"


def _collect(run: Path, tmp: Path) -> tuple[int, str, Path]:
    res = CliRunner().invoke(app, ["collect", str(run), "-o", str(tmp / "out"), "--work", str(tmp / "work"),
                                   "--jobs", "1", "--html"], env={"COLUMNS": str(WIDTH)})
    # in-process, a VerlprofError leaves the runner as exit 1; the command line gives its own code
    code = getattr(res.exception, "exit_code", res.exit_code) if res.exception is not None else res.exit_code
    return code, res.output, tmp / "out"


def _copy(rel: str, dest: Path) -> None:
    shutil.copytree(data_dir(rel), dest / Path(rel).name,
                    ignore=shutil.ignore_patterns("golden", "*.md", "*.py", "*.sh", "LICENSE*"))


@pytest.fixture(scope="module")
def collected(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[int, str, Path]]:
    """run -> (exit code, terminal output, OUT) for every run of tests/data and MANY."""
    out = {}
    for i, rel in enumerate(RUNS):
        tmp = tmp_path_factory.mktemp(f"views{i}")
        _copy(rel, tmp / "run")
        out[rel] = _collect(tmp / "run", tmp)
    tmp = tmp_path_factory.mktemp("views-many")
    for rel in ("gloo_ranks", "discrete-cpu"):
        _copy(rel, tmp / "run")
    (tmp / "run" / "discrete-cpu" / "worker_process_4242.sqlite").write_bytes(bytes(range(256)) * 64)
    out[MANY] = _collect(tmp / "run", tmp)
    return out


def test_every_input_is_in_a_run() -> None:
    covered = [DATA / r for r in RUNS]
    stray = [p for p in _inputs(DATA) if not any(c in p.parents for c in covered)]
    assert not stray, stray
    assert len(RUNS) >= 20, RUNS


def test_collects_publish(collected: dict[str, tuple[int, str, Path]]) -> None:
    """Most runs publish a bundle with a report (the views below read them); none crashes."""
    for rel, (code, output, _) in collected.items():
        assert code in (0, 2, 3, 4), (rel, code, output[-2000:])
        assert "Traceback" not in output, (rel, output[-2000:])
    published = [rel for rel, (_, _, out) in collected.items() if (out / "report.html").is_file()]
    assert len(published) >= 15, published
    assert collected[MANY][0] == 3 and (collected[MANY][2] / "report.html").is_file(), collected[MANY][1]


# ------------------------------------------------------------------------------------------------
# GPU % never above 100
# ------------------------------------------------------------------------------------------------

_PCT = re.compile(r"(?<![\d.,+\-])(\d[\d,]*)%")


def _terminal_gpu_percents(output: str) -> list[int]:
    """The GPU % column of collect's role tables: the rows under a `phase ... GPU %` header, up to
    the first line that is no table row."""
    vals, col = [], None
    for ln in output.splitlines():
        if re.match(r"\s+phase\s+min\s+median\s+max\s+GPU %", ln):
            col = ln.index("GPU %") + len("GPU %")
            continue
        cell = ln[col - 6:col].strip() if col is not None and ln.startswith("  ") else None
        if cell is None or not re.fullmatch(r"(\d[\d,]*%)?", cell) or not re.search(r"\d", ln[:col - 6]):
            col = None
            continue
        if cell:
            vals.append(int(cell[:-1].replace(",", "")))
    return vals


def _report_gpu_percents(page: str) -> list[int]:
    """Every GPU % of a report page: the stage table's `GPU %` column and the step bars' share."""
    vals = []
    for tbl in re.findall(r"<table.*?</table>", page, re.DOTALL):
        heads = [html.unescape(re.sub("<[^>]+>", "", h)).strip() for h in re.findall(r"<th[^>]*>(.*?)</th>", tbl, re.DOTALL)]
        if "GPU %" not in heads:
            continue
        at = heads.index("GPU %")
        for row in re.findall(r"<tr>(.*?)</tr>", tbl, re.DOTALL):
            cells = [re.sub("<[^>]+>", "", c).strip() for c in re.findall(r"<td[^>]*>(.*?)</td>", row, re.DOTALL)]
            if len(cells) > at and cells[at]:
                vals.append(int(cells[at].rstrip("%").replace(",", "")))
    vals += [int(v.replace(",", "")) for v in re.findall(r"(\d[\d,]*)% of the step", page)]
    return vals


def test_no_gpu_percent_above_100_in_the_terminal_or_the_report(collected: dict[str, tuple[int, str, Path]]) -> None:
    term, report = {}, {}
    for rel, (_, output, out) in collected.items():
        term[rel] = _terminal_gpu_percents(output)
        if (out / "report.html").is_file():
            report[rel] = _report_gpu_percents((out / "report.html").read_text())
    over = {rel: v for rel, vals in {**term, **report}.items() for v in vals if v > 100}
    assert not over, over
    # not vacuous: the views print GPU %, and some of them are of GPU-heavy phases
    assert sum(len(v) for v in term.values()) > 100 and sum(len(v) for v in report.values()) > 100
    assert max(v for vals in term.values() for v in vals) >= 50


def test_the_old_rule_would_pass_100_on_this_data(collected: dict[str, tuple[int, str, Path]]) -> None:
    """What the views used to print (GPU busy / wall) exceeds 100 on some bundle here, and that
    bundle's views print a GPU % for those rows: the test above can fail."""
    worst = []
    for rel, (_, output, out) in collected.items():
        p = out / "summaries" / "ranks.parquet"
        if not p.is_file():
            continue
        r = pd.read_parquet(p)
        r = r[(r["row_kind"] == "ranks") & r["wall_median_ns"].gt(0) & r["gpu_busy_inherited_ns"].notna()]
        over = r[r["gpu_busy_inherited_ns"] > r["wall_median_ns"]]
        if len(over):
            assert (over["gpu_busy_inherited_ns"] <= over["launch_span_ns"]).all(), rel
            worst.append(rel)
    assert worst, "no bundle where GPU busy passes wall: the test data no longer exercises issue 32's case"


def test_summarize_over_every_bundle(collected: dict[str, tuple[int, str, Path]], tmp_path: Path) -> None:
    bundles = [str(out) for _, (_, _, out) in collected.items() if (out / "manifest.json").is_file()]
    res = CliRunner().invoke(app, ["summarize", *bundles, "-o", str(tmp_path / "sum"), "--html"],
                             env={"COLUMNS": str(WIDTH)})
    assert res.exit_code in (0, 3), res.output[-3000:]
    page = (tmp_path / "sum" / "report.html").read_text()
    found = [int(v.replace(",", "")) for v in _PCT.findall(re.sub(r"<style.*?</style>", "", page, flags=re.DOTALL))]
    found += _report_gpu_percents(page)
    assert all(v <= 100 for v in found if v), sorted(found)[-5:]
    assert not [v for v in _terminal_gpu_percents(res.output) if v > 100]


# ------------------------------------------------------------------------------------------------
# 80 columns
# ------------------------------------------------------------------------------------------------


def test_collect_fits_80_columns(collected: dict[str, tuple[int, str, Path]]) -> None:
    too_wide = {}
    for rel, (_, output, _) in collected.items():
        for ln in output.splitlines():
            ln = ln.rstrip()
            if len(ln) > WIDTH and " " in ln.strip():   # one word wider than the line (a path) stays whole
                too_wide.setdefault(rel, []).append(ln)
    assert not too_wide, too_wide


def test_numbers_stay_with_their_units(collected: dict[str, tuple[int, str, Path]]) -> None:
    for rel, (_, output, _) in collected.items():
        lines = output.splitlines()
        for ln, nxt in zip(lines, lines[1:]):
            split = re.search(r"(^|\s)[\d.,:]+$", ln.rstrip()) and \
                (re.match(r"\s*(ms|s|MB|KB|GB|%|x)\b", nxt)     # a unit; a noun on an indented continuation
                 or re.match(r"\s+(ranks?|steps?|summarized|skipped|failed|artifacts?|files?)\b", nxt))
            assert not split, (rel, ln, nxt)


def test_the_collapsed_view_and_its_failure_fit(collected: dict[str, tuple[int, str, Path]]) -> None:
    code, output, out = collected[MANY]
    lines = output.splitlines()
    assert any(re.match(r"done\s+\d+ x nsys_sqlite", ln) for ln in lines), output   # collapsed, one line a group
    assert not any(ln.rstrip().endswith(".sqlite") and ln.startswith("done") for ln in lines)
    failed = next(i for i, ln in enumerate(lines) if ln.startswith("  failed: "))
    said = " ".join(ln.strip() for ln in lines[failed:failed + 3])
    assert "discrete-cpu/worker_process_4242.sqlite: nsys_sqlite: not an SQLite database (bad header)" in said
    roles = [ln for ln in lines if re.match(r"\S.*: \d+ ranks?, step", ln)]
    assert roles and all(len(ln) <= WIDTH for ln in roles)
    manifest = json.loads((out / "manifest.json").read_text())
    # `discrete-cpu/` is a folder the owner named: published as a pseudonym (issue 39), nsys's
    # `worker_process_<pid>` stays; the owner reads their own folder back from WORK's review list
    [rel] = [a["rel"] for a in manifest["status"]["failed_artifacts"]]
    assert re.fullmatch(r"name-[g-z]+/worker_process_4242\.sqlite", rel), rel
    assert reveal(rel, read_review_map(out.parent / "work" / REVIEW_NAME)) == "discrete-cpu/worker_process_4242.sqlite"


def _manifest_rows(out: Path) -> tuple[list[SimpleNamespace], list[SimpleNamespace]]:
    """collect's final statuses and artifacts, as artifact_summary reads them, from manifest.json."""
    arts = json.loads((out / "manifest.json").read_text())["artifacts"]
    statuses = [SimpleNamespace(rel=a["rel"], status=a["status"], reason=a.get("reason")) for a in arts]
    artifacts = [SimpleNamespace(rel=a["rel"], kind=SimpleNamespace(value=a["kind"]), size=a["size"], step=a["step"])
                 for a in arts]
    return statuses, artifacts


def test_the_views_lines_fit_before_the_console_sees_them(collected: dict[str, tuple[int, str, Path]]) -> None:
    """The role tables and the collapsed artifact view, as terminal_views returns them at width 80,
    on every bundle: rich never has to fold one (a fold cuts a word or a number anywhere)."""
    wide = []
    for rel, (_, _, out) in collected.items():
        if not (out / "summaries" / "phases.parquet").is_file():
            continue
        lines = terminal_views.role_tables(pd.read_parquet(out / "summaries" / "phases.parquet"),
                                           terminal_views.ranks_of_bundle(out), width=WIDTH)
        lines += terminal_views.artifact_summary(*_manifest_rows(out), width=WIDTH)
        wide += [(rel, ln) for ln in lines if len(ln) > WIDTH and " " in ln.strip()]
    assert not wide, wide
    lines = terminal_views.artifact_summary(*_manifest_rows(collected[MANY][2]), width=WIDTH)
    at = next(i for i, ln in enumerate(lines) if ln.startswith("  failed: "))
    assert len(lines[at]) + len(lines[at + 1]) > WIDTH   # it did need wrapping; at words, indented
    assert lines[at + 1].startswith("    ") and lines[at + 1].strip() in "database (bad header)"
