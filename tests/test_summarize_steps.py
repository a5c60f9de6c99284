"""Every step a source is asked for is summarized in ONE read of it (issue 30).

collect summarizes the chosen step of each source and, for ranks.parquet (issue 32), up to four
other profiled steps. They are read together: one projection over an nsys export (one sweep of each
GPU table), one parse of a torch trace. Each step's rows must equal a summary of that step alone,
computed here on the same real data, except that the other steps carry no device-memory figure
(memory levels are read for the chosen step only; ranks.parquet keeps none of them).
"""
from __future__ import annotations

import re
import shutil
import sqlite3
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from testdata import data_path
from verlprof.stages.core.errors import VerlprofError
from verlprof.stages.readers.nsys_sqlite import KERNEL, RUNTIME, NsysExport
from verlprof.stages.summarize import SummarizeOptions, summarize_any_item, summarize_job, summarize_steps
from verlprof.stages.summarize import nsys as nsys_adapter
from verlprof.stages.summarize import torch_profile
from verlprof.stages.window import (
    SourceSteps,
    identity_from_path,
    pick_window,
    source_steps_item,
    window_spans,
)

NSYS_EXPORTS = ["gpu_captures/whole-emit-nvtx/whole_956.sqlite",
                "gloo_ranks/nsys/worker_process_30826.sqlite",
                "same_workload/cuda/make_gpu_run_cuda.sqlite"]
TORCH_TRACE = "kineto_public/hta_ddp_nccl_rank0.json"


def _steps_of(path: Path) -> tuple[Any, SourceSteps, int, list[int]]:
    """(identity, steps, chosen step, the other steps) of one real source, chosen as collect does."""
    ident = identity_from_path(path)
    src = source_steps_item((str(path), ident), SummarizeOptions())
    win = pick_window([src], "auto")
    src, chosen = win.sources[0], win.choice.step
    others = sorted({s.step for s in src.steps if s.step is not None} - {chosen})
    assert chosen is not None and len(others) >= 1, path   # the data holds several profiled steps
    return (src.ident if ident.source_kind == "torch" else ident), src, chosen, others


def _without_memory(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [{k: v for k, v in r.items() if k != "mem_peak_bytes"} for r in rows]


def _assert_same_as_alone(path: Path, export: NsysExport | None = None) -> None:
    ident, src, chosen, others = _steps_of(path)
    opts = SummarizeOptions()
    got = summarize_steps(summarize_job(str(path), ident, src, chosen, others), opts, export=export)
    alone = summarize_any_item(summarize_job(str(path), ident, src, chosen), opts)
    assert got.chosen == alone, "the chosen step's rows differ from a summary of it alone"
    assert len(got.others) == len(others)
    for step, rows in zip(others, got.others):
        alone = summarize_any_item(summarize_job(str(path), ident, src, step), opts)
        assert rows["phases"] and {r["step"] for r in rows["phases"]} == {step}
        assert _without_memory(rows["phases"]) == _without_memory(alone["phases"]), step
        assert rows["kernels"] == alone["kernels"], step
        if ident.source_kind != "torch":   # memory levels: the chosen step's only
            assert all(r["mem_peak_bytes"] is None for r in rows["phases"])


@pytest.mark.parametrize("rel", NSYS_EXPORTS)
def test_each_step_of_a_joint_nsys_scan_equals_its_scan_alone(rel: str) -> None:
    _assert_same_as_alone(data_path(rel))


def test_each_step_of_a_joint_torch_read_equals_its_read_alone() -> None:
    _assert_same_as_alone(data_path(TORCH_TRACE))


def _sweeps(statements: list[str]) -> Counter:
    """How many statements read each GPU / API table in rowid windows (projection sweeps)."""
    found: Counter = Counter()
    for sql in statements:
        m = re.search(r'FROM "(\w+)" WHERE rowid BETWEEN', sql)
        if m:
            found[m.group(1)] += 1
    return found


def test_several_steps_of_an_export_are_read_in_one_projection(monkeypatch: pytest.MonkeyPatch) -> None:
    """The real export's SQL, traced by SQLite: the three steps of whole_956 read together sweep each
    table as often as ONE step alone does, through one call of the projection, and the joint scan
    issues fewer statements than the steps' scans apart (kernel names, ranks: read once)."""
    path = data_path(NSYS_EXPORTS[0])
    ident, src, chosen, others = _steps_of(path)
    opts = SummarizeOptions()
    projections: list[int] = []
    real_project = nsys_adapter.project

    def counted(*args: Any, **kwargs: Any) -> Any:   # the real projection, counted
        projections.append(1)
        return real_project(*args, **kwargs)

    monkeypatch.setattr(nsys_adapter, "project", counted)

    def traced(job: Any) -> list[str]:
        statements: list[str] = []
        db = NsysExport.open(str(path))
        try:
            db.nvtx_ranges()   # the survey pass's read; what is counted is the summary's
            db.con.set_trace_callback(statements.append)
            summarize_steps(job, opts, export=db)
        finally:
            db.close()
        return statements

    joint = traced(summarize_job(str(path), ident, src, chosen, others))
    assert len(projections) == 1
    apart = [traced(summarize_job(str(path), ident, src, s)) for s in [chosen, *others]]
    assert len(projections) == 1 + len(apart)
    one = _sweeps(apart[0])
    assert one[KERNEL] >= 1 and one[RUNTIME] >= 1
    assert _sweeps(joint) == one
    assert len(joint) < sum(len(a) for a in apart)


def test_a_trace_of_several_steps_is_parsed_once(monkeypatch: pytest.MonkeyPatch) -> None:
    path = data_path(TORCH_TRACE)
    ident, src, chosen, others = _steps_of(path)
    parses: list[str] = []
    real_read = torch_profile.read_chrome_trace

    def counted(p: Any, *args: Any, **kwargs: Any) -> Any:   # the real parser, counted
        parses.append(str(p))
        return real_read(p, *args, **kwargs)

    monkeypatch.setattr(torch_profile, "read_chrome_trace", counted)
    got = summarize_steps(summarize_job(str(path), ident, src, chosen, others), SummarizeOptions())
    assert parses == [str(path)]
    assert [{r["step"] for r in rows["phases"]} for rows in got.others] == [{s} for s in others]


def test_a_source_that_missed_the_chosen_step_gives_its_other_steps() -> None:
    """collect asks a source with no span in the chosen step for its other steps only."""
    path = data_path(NSYS_EXPORTS[1])
    ident, src, chosen, others = _steps_of(path)
    job = summarize_job(str(path), ident, src, 10_000, [chosen, *others])
    assert not job.chosen and len(job.other_steps) == 1 + len(others)
    got = summarize_steps(job, SummarizeOptions())
    assert got.chosen is None
    assert [{r["step"] for r in rows["phases"]} for rows in got.others] == [{s} for s in [chosen, *others]]
    assert window_spans(src, 10_000) == []



def test_bad_input_in_another_step_leaves_the_chosen_step_read_alone(tmp_path: Path) -> None:
    """A corrupt kernel row in another step's window (a copy of a real export: inputs are never
    modified) fails that step's read; the chosen step is then read alone, with the rows a clean
    export gives it, and the other steps are left out, as when each step was read apart."""
    clean_path = data_path(NSYS_EXPORTS[0])
    path = tmp_path / clean_path.name
    shutil.copy(clean_path, path)
    ident, src, chosen, others = _steps_of(path)
    db = NsysExport.open(str(path))
    offset = db.session_start_ns() or 0
    db.close()
    spans = window_spans(src, others[0])
    lo, hi = min(s.start_ns for s in spans) - offset, max(s.end_ns for s in spans) - offset
    con = sqlite3.connect(path)
    try:
        con.execute(f'UPDATE {KERNEL} SET "end" = \'corrupt\' WHERE rowid = (SELECT rowid FROM {KERNEL} '
                    "WHERE start BETWEEN ? AND ? LIMIT 1)", (lo, hi))
        con.commit()
    finally:
        con.close()
    opts = SummarizeOptions()
    with pytest.raises(VerlprofError, match="non-numeric"):
        summarize_any_item(summarize_job(str(path), ident, src, others[0]), opts)
    got = summarize_steps(summarize_job(str(path), ident, src, chosen, others), opts)
    assert got.others == []
    assert got.chosen == summarize_any_item(summarize_job(str(clean_path), ident, src, chosen), opts)
