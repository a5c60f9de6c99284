"""A memory snapshot without times (torch < 2.2) reports step-level figures, flagged as not per phase.

The snapshot is tests/data/torch-2.1-snapshot: the real torch 2.11 H200 snapshot with `time_us` (and
the keys torch 2.1 did not write) deleted. The reference figures are computed here from the pickle
with plain loops: the allocation entries replayed in their recorded order (alloc adds,
free_requested subtracts; segment_alloc/map add, segment_free/unmap subtract), anchored on the
segments' state at the end, and the segments' sizes summed.
"""
from __future__ import annotations

import lzma
import pickle
import shutil
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from testdata import data_dir, data_path
from typer.testing import CliRunner
from verlprof.pipeline.cli import app
from verlprof.stages.scrub.provenance import REVIEW_NAME, read_review_map, reveal
from verlprof.stages.summarize.torch_profile import summarize_memory_snapshot
from verlprof.stages.summarize.types import SummarizeOptions
from verlprof.stages.window.types import SourceIdentity

NAME = "torch_memory_rank0_pid804.pickle"
UNTIMED = data_path(f"torch-2.1-snapshot/step2/{NAME}")
TIMED = data_path(f"h200-torch-2.11/step2/{NAME}")
IDENT = SourceIdentity(source=f"step2/{NAME}", source_kind="memory", rank=0, pid=804, step_hint=2)
NEW_COLUMNS = {"mem_scope", "mem_reserved_peak_bytes", "mem_reserved_bytes", "mem_allocated_bytes",
               "mem_active_bytes"}
runner = CliRunner()


def _load(p: Path) -> dict:
    return pickle.loads(p.read_bytes())   # the project's own fixtures: trusted, plain pickle


@pytest.fixture(scope="module")
def reference() -> dict[str, int]:
    snap = _load(UNTIMED)
    (trace,) = snap["device_traces"]
    state = {k: sum(seg[k] for seg in snap["segments"]) for k in ("total_size", "allocated_size", "active_size")}
    out = {"reserved": state["total_size"], "allocated": state["allocated_size"], "active": state["active_size"]}
    for key, plus, minus, final in (("peak_allocated", {"alloc"}, {"free_requested"}, state["allocated_size"]),
                                    ("peak_reserved", {"segment_alloc", "segment_map"},
                                     {"segment_free", "segment_unmap"}, state["total_size"])):
        net = (sum(e["size"] for e in trace if e["action"] in plus)
               - sum(e["size"] for e in trace if e["action"] in minus))
        level = best = final - net
        for e in trace:
            if e["action"] in plus:
                level += e["size"]
            elif e["action"] in minus:
                level -= e["size"]
            best = max(best, level)
        assert level == final
        out[key] = best
    return out


def test_the_data_is_the_real_snapshot_less_the_newer_keys() -> None:
    timed, untimed = _load(TIMED), _load(UNTIMED)
    assert set(untimed) == {"segments", "device_traces"}
    assert untimed["segments"] == timed["segments"]
    (a,), (b,) = timed["device_traces"], untimed["device_traces"]
    assert len(a) == len(b) > 40000
    dropped = {"time_us", "compile_context", "user_metadata"}
    assert all(y == {k: v for k, v in x.items() if k not in dropped} for x, y in zip(a, b))
    assert not any("time_us" in e for e in b)


def test_step_level_figures_equal_a_replay(reference: dict[str, int]) -> None:
    rows = summarize_memory_snapshot(UNTIMED, IDENT, SummarizeOptions())
    (row,) = rows["phases"]
    assert (row["step"], row["pid"], row["phase"], row["depth"], row["stage"]) == (
        2, 804, "(recorded history)", 0, "step")
    assert row["mem_scope"] == "recorded_history"
    assert row["mem_peak_bytes"] == reference["peak_allocated"]
    assert row["mem_reserved_peak_bytes"] == reference["peak_reserved"]
    assert (row["mem_reserved_bytes"], row["mem_allocated_bytes"], row["mem_active_bytes"]) == (
        reference["reserved"], reference["allocated"], reference["active"])
    assert reference["peak_allocated"] > reference["allocated"]   # the history rose above the final state
    assert any("not per phase" in w["message"] for w in rows["warnings"])
    assert not any("no allocation history" in w["message"] for w in rows["warnings"])
    assert [(s["step"], s["boundary"]) for s in rows["steps"]] == [(2, "snapshot_dir")]


def test_timed_snapshot_rows_carry_none_of_the_new_columns() -> None:
    rows = summarize_memory_snapshot(TIMED, IDENT, SummarizeOptions())["phases"]
    assert rows and not any(NEW_COLUMNS & set(r) for r in rows)
    assert not any(r["phase"] == "(recorded history)" for r in rows)


def _collect(tmp: Path, snapshot_name: str) -> tuple[str, list[dict]]:
    run = tmp / "run"
    for f in data_dir("h200-torch-2.11").glob("*.json.gz"):
        (run / "profile").mkdir(parents=True, exist_ok=True)
        shutil.copy(f, run / "profile" / f.name)
    (run / "profile" / "step2").mkdir()
    shutil.copy(UNTIMED, run / "profile" / "step2" / snapshot_name)
    res = runner.invoke(app, ["collect", str(run), "-o", str(tmp / "out"), "--work", str(tmp / "work"),
                              "--jobs", "1"])
    assert res.exit_code == 0, res.output
    return " ".join(res.output.split()), pq.read_table(tmp / "out" / "summaries" / "phases.parquet").to_pylist()


def _owned(row: dict, tmp: Path) -> dict:
    """`row` with every pseudonym replaced by the owner's original (tmp/work's review list)."""
    names = read_review_map(tmp / "work" / REVIEW_NAME)
    return {k: reveal(v, names) if isinstance(v, str) else v for k, v in row.items()}


def test_collect_reports_the_peak(tmp_path: Path, reference: dict[str, int]) -> None:
    """A verl layout: torch traces per step, the snapshot in `step2/` (its step from the folder)."""
    text, phases = _collect(tmp_path / "a", NAME)
    mem = [r for r in phases if r["source_kind"] == "memory"]
    assert [(r["source"], r["step"], r["pid"], r["rank"], r["phase"], r["mem_scope"]) for r in mem] == [
        (f"profile/step2/{NAME}", 2, 804, 0, "(recorded history)", "recorded_history")]
    assert mem[0]["mem_peak_bytes"] == reference["peak_allocated"]
    assert mem[0]["mem_reserved_peak_bytes"] == reference["peak_reserved"]
    mb = lambda b: f"{b / 2**20:,.0f}"   # noqa: E731 - the terminal's MB
    assert (f"memory snapshot, rank 0: peak {mb(reference['peak_allocated'])} MB allocated, "
            f"{mb(reference['peak_reserved'])} MB reserved, over its recorded history (no times in it: "
            "not per phase)") in text
    assert all(r[c] is None for r in phases if r["source_kind"] != "memory" for c in NEW_COLUMNS)

    # The same snapshot as the traced process's (pid 754): the trace's rows come back unchanged
    # (no times, so no peak is placed in them) and the snapshot's row follows them.
    text2, phases2 = _collect(tmp_path / "b", NAME.replace("804", "754"))
    # each WORK salts its own pseudonyms (a range name no public source writes, issue 39): the rows
    # are compared by the owner's own names, read back through each WORK's review list
    traced = [_owned(r, tmp_path / "a") for r in phases if r["source_kind"] != "memory"]
    assert [_owned(r, tmp_path / "b") for r in phases2 if r["source_kind"] != "memory"] == traced
    (row,) = [r for r in phases2 if r["source_kind"] == "memory"]
    assert (row["pid"], row["step"], row["mem_peak_bytes"]) == (754, 2, reference["peak_allocated"])
    assert "peak" in text2 and "over its recorded history" in text2
