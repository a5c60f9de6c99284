"""A process's (and a role's) stages never outlast its step, on every run the test data holds.

Why: the step wall is what `other` and every share are computed from; a step shorter than its own
stages (discrete mode before issue 31: each file's own span) makes stages sum to 2x the step. The
stage intervals are taken unclipped from phases rows, so a step that is too short fails here even
though compare clips what it shows.
"""
from __future__ import annotations

from pathlib import Path

import pytest
from testdata import data_dir, fixtures_dir
from verlprof.pipeline.compare import UNATTRIBUTED, process_stage_totals
from verlprof.pipeline.stage_runs import summarize_sources
from verlprof.stages.gather import gather
from verlprof.stages.summarize import SummarizeOptions
from verlprof.stages.window.steps import identity_from_artifact

RUNS = {
    "discrete-cpu": lambda: data_dir("discrete-cpu"),
    "gpu whole": lambda: data_dir("gpu_captures/whole-emit-nvtx"),
    "gpu continuous": lambda: data_dir("gpu_captures/worker-continuous"),
    "gpu 2 ranks": lambda: data_dir("gpu_captures/n2-gloo-same-gpu"),
    "h200 continuous": lambda: fixtures_dir() / "h200-nsys-2025.3" / "ray-continuous",
    "h200 whole": lambda: fixtures_dir() / "h200-nsys-2025.3" / "whole",
    "h200 torch": lambda: fixtures_dir() / "h200-torch-2.11",
    "gloo nsys": lambda: data_dir("gloo_ranks/nsys"),
    "gloo torch": lambda: data_dir("gloo_ranks/torch"),
    "same workload torch": lambda: data_dir("same_workload/torch"),
}


def _union(ivs: list[tuple[int, int]]) -> int:
    total, end = 0, None
    for a, b in sorted(ivs):
        if end is None or a > end:
            total += b - a
            end = b
        elif b > end:
            total += b - end
            end = b
    return total


@pytest.mark.parametrize("name", sorted(RUNS))
def test_stages_never_outlast_their_step(name):
    folder: Path = RUNS[name]()
    arts = [a for a in gather([folder], with_hashes=False, find_config=False).artifacts
            if a.kind.value in ("nsys_sqlite", "torch_trace")]
    assert arts, folder
    res = summarize_sources([(a.path, identity_from_artifact(a)) for a in arts], SummarizeOptions())
    phases = [r for r in res.rows["phases"] if r.get("source_kind") != "memory"]
    assert phases, name
    per = process_stage_totals(phases)
    keys = ["source_kind", "role", "rank", "pid", "step"]
    groups = list(per.groupby(keys, dropna=False, sort=False))
    assert groups, name
    for key, grp in groups:
        want = dict(zip(keys, key))
        step = int(grp.loc[grp["stage"] == "step", "wall_ns"].iloc[0])
        mine = [r for r in phases if all(_same(r.get(k), want[k]) for k in keys)]
        staged = [r for r in mine if r["phase"] != UNATTRIBUTED and r.get("stage") not in (None, "other", "step")]
        paths = {r.get("path") or r["phase"] for r in staged}
        tops = [(int(r["start_ns"]), int(r["start_ns"]) + int(r["wall_ns"])) for r in staged
                if not any(" > ".join((r.get("path") or r["phase"]).split(" > ")[:i]) in paths
                           for i in range(1, len((r.get("path") or r["phase"]).split(" > "))))]
        assert tops, (name, want)
        assert _union(tops) <= step, (name, want)
        # the stages and `other` make up the step exactly
        assert int(grp.loc[grp["stage"] != "step", "wall_ns"].sum()) == step, (name, want)


def _same(a: object, b: object) -> bool:
    return (a is None or a != a) and (b is None or b != b) or a == b
