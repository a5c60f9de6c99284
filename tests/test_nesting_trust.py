"""Nesting you can trust (issue 32), on every export and trace of tests/data and on real bundles:

- no phases row is longer than its parent row (same source, process and step);
- steps.parquet names the same processes and ranks as phases.parquet;
- no GPU % above 100: every phase's GPU busy time (both rules) lies within its launch-time span.

And the case that broke it, made for real (`tests/data/nvtx_threads`): one range name on 8 worker
threads at once under one main-thread range is its intervals' union, not their sum.
"""
from __future__ import annotations

import shutil
import sqlite3
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest
from typer.testing import CliRunner
from testdata import data_dir, data_path
from verlprof.pipeline.cli import app
from verlprof.stages.summarize.intervals import union_length
from verlprof.stages.summarize.nsys import scan_nsys
from verlprof.stages.summarize.phases import PATH_SEP
from verlprof.stages.summarize.render import top_phases
from verlprof.stages.summarize.torch_profile import summarize_torch_trace
from verlprof.stages.summarize.types import SummarizeOptions
from verlprof.stages.window import identity_from_path

DATA = Path(__file__).resolve().parent / "data"
THREADS = "nvtx_threads/nvtx_threads.sqlite"


def _inputs() -> list[str]:
    """Every nsys export and torch trace tests/data holds (relative names, `.xz` dropped)."""
    out = []
    for p in sorted(DATA.rglob("*")):
        rel = str(p.relative_to(DATA))
        rel = rel[:-3] if rel.endswith(".xz") else rel
        if "/golden/" not in rel and rel.endswith((".sqlite", ".json", ".json.gz")):
            out.append(rel)
    return out


INPUTS = _inputs()


def nesting_violations(phases: list[dict[str, Any]], steps: list[dict[str, Any]]) -> list[str]:
    """What breaks the three rules in one set of rows (empty when none)."""
    bad = []
    by_key = {(r.get("source"), r.get("pid"), r.get("step"), r.get("path")): r for r in phases}
    for (source, pid, step, path), r in by_key.items():
        if path and PATH_SEP in path:
            up = by_key.get((source, pid, step, path.rsplit(PATH_SEP, 1)[0]))
            if up is not None and r["wall_ns"] > up["wall_ns"]:
                bad.append(f"{source} {pid} {path}: child {r['wall_ns']} > parent {up['wall_ns']}")
        span = r.get("launch_span_ns")
        for col in ("gpu_busy_ns", "gpu_busy_inherited_ns"):
            if r.get(col) and (span is None or r[col] > span):
                bad.append(f"{source} {pid} {path}: {col} {r[col]} > launch span {span} (GPU % above 100)")
    def procs(rows: list[dict[str, Any]]) -> dict[Any, set]:
        out: dict[Any, set] = {}
        for r in rows:
            if r.get("source_kind") != "memory":
                out.setdefault(r.get("source"), set()).add((r.get("pid"), r.get("rank")))
        return out

    of_phases, of_steps = procs(phases), procs(steps)
    for source, want in of_phases.items():
        if of_steps.get(source) != want:
            bad.append(f"{source}: steps name {sorted(of_steps.get(source, ()), key=str)}, "
                       f"phases {sorted(want, key=str)}")
    return bad


@pytest.mark.parametrize("rel", INPUTS)
def test_every_input_nests(rel: str) -> None:
    """Each export or trace summarized on its own (its own step choice, with its steps rows)."""
    path = data_path(rel)
    ident = identity_from_path(path)
    if rel.endswith(".sqlite"):
        rows = scan_nsys(path, ident, SummarizeOptions()).rows
    else:
        rows = summarize_torch_trace(path, ident, SummarizeOptions())
    if not rows["phases"]:
        # nothing to summarize is right only for a capture with no ranges and no GPU work
        assert _ranges_and_kernels(path) == (0, 0), rel
        return
    assert not nesting_violations(rows["phases"], rows["steps"])
    assert not tree_violations(rows["phases"])


def _ranges_and_kernels(path: Path) -> tuple[int, int]:
    """How many NVTX ranges (marks have no end) and kernels an export holds (plain SQL; 0 for an absent table)."""
    if not str(path).endswith(".sqlite"):
        return (-1, -1)
    con = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        tables = {r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type='table'")}
        queries = {"NVTX_EVENTS": 'SELECT COUNT(*) FROM NVTX_EVENTS WHERE "end" IS NOT NULL',
                   "CUPTI_ACTIVITY_KIND_KERNEL": "SELECT COUNT(*) FROM CUPTI_ACTIVITY_KIND_KERNEL"}
        return tuple(con.execute(q).fetchone()[0] if t in tables else 0 for t, q in queries.items())
    finally:
        con.close()


def tree_violations(phases: list[dict[str, Any]]) -> list[str]:
    """The terminal's table (`render_phase_table`, every phase shown) must read depth-first: each
    row right below its parent's subtree, never under a later sibling of its parent."""
    bad = []
    groups: dict[tuple, list[dict[str, Any]]] = {}
    for r in phases:
        groups.setdefault((r.get("source"), r.get("pid"), r.get("step")), []).append(r)
    for key, part in groups.items():
        shown, rest = top_phases(part, len(part))
        assert not rest
        stack: list[str] = []
        for r in shown:
            path = str(r.get("path") or r.get("phase"))
            while stack and not path.startswith(stack[-1] + PATH_SEP):
                stack.pop()
            parent = path.rsplit(PATH_SEP, 1)[0] if PATH_SEP in path else None
            if parent is not None and parent in {str(x.get("path")) for x in part} and (not stack or stack[-1] != parent):
                bad.append(f"{key}: {path} not under {parent}")
            stack.append(path)
    return bad


def test_the_inputs_are_all_there() -> None:
    # the parametrization must see the data, or the test above would pass vacuously
    assert len([r for r in INPUTS if r.endswith(".sqlite")]) >= 20
    assert len([r for r in INPUTS if not r.endswith(".sqlite")]) >= 15
    assert THREADS in INPUTS


def _sql_ranges(path: Path, text: str) -> list[tuple[int, int, int]]:
    con = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        return con.execute("SELECT n.start, n.end, n.globalTid FROM NVTX_EVENTS n JOIN StringIds s "
                           "ON s.id = n.textId WHERE s.value = ? ORDER BY n.start", (text,)).fetchall()
    finally:
        con.close()


def test_concurrent_same_name_ranges_are_their_union() -> None:
    path = data_path(THREADS)
    rows = scan_nsys(path, identity_from_path(path), SummarizeOptions()).rows
    chosen = next(s for s in rows["steps"] if s["chosen"])
    steps = _sql_ranges(path, "step")
    lo, hi, main = steps[chosen["step"] - 1]
    workers = [(s, e, g) for s, e, g in _sql_ranges(path, "compile_worker") if lo <= s <= hi]
    (clo, chi, _), = [c for c in _sql_ranges(path, "compile") if lo <= c[0] <= hi]
    (glo, ghi, _), = [c for c in _sql_ranges(path, "gen") if lo <= c[0] <= hi]
    in_compile = [(s, e) for s, e, _g in workers if clo <= s <= chi]
    in_gen = [(s, e) for s, e, _g in workers if glo <= s <= ghi]
    assert len(in_compile) == 8 and len({g for _s, _e, g in workers}) == 9 and main not in {g for *_x, g in workers}
    summed = sum(e - s for s, e in in_compile)
    assert summed > 4 * (chi - clo), "the case: the workers' sum is many times their parent"
    ph = {r["path"]: r for r in rows["phases"]}
    child, parent = ph["step > compile > compile_worker"], ph["step > compile"]
    assert child["instances"] == 8
    assert child["wall_ns"] == union_length([s for s, _ in in_compile], [e for _, e in in_compile]) <= parent["wall_ns"]
    # the worker range that outlives `gen` counts only its time inside `gen`
    (ws, we), = in_gen
    assert we > ghi and ph["step > gen > compile_worker"]["wall_ns"] == ghi - ws <= ph["step > gen"]["wall_ns"]


BUNDLE_RUNS = {
    "gloo": ["gloo_ranks"],                                  # 4 ranks, nsys and torch, one process each
    "threads": ["nvtx_threads"],
    "n2-same-gpu": ["gpu_captures/n2-gloo-same-gpu"],         # 2 ranks x 3 capture ranges, CUDA
    "h100-2gpu": ["captures/nsysai_h100_2gpu"],               # one export of 2 processes (ranks 0, 1)
}


@pytest.fixture(scope="module", params=sorted(BUNDLE_RUNS))
def bundle(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Path:
    tmp = tmp_path_factory.mktemp(f"bundle-{request.param}")
    run = tmp / "run"
    for rel in BUNDLE_RUNS[request.param]:
        shutil.copytree(data_dir(rel), run / Path(rel).name, ignore=shutil.ignore_patterns("golden", "*.md", "*.py", "LICENSE*"))
    res = CliRunner().invoke(app, ["collect", str(run), "-o", str(tmp / "out"), "--work", str(tmp / "work"),
                                   "--jobs", "1"])
    assert res.exit_code == 0, res.output
    return tmp / "out"


def test_bundle_nests(bundle: Path) -> None:
    phases = pq.read_table(bundle / "summaries" / "phases.parquet").to_pylist()
    steps = pq.read_table(bundle / "summaries" / "steps.parquet").to_pylist()
    assert phases and steps
    assert {r["rank"] for r in steps} == {r["rank"] for r in phases if r["source_kind"] != "memory"}
    assert not nesting_violations(phases, steps)
