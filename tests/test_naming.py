"""File-name patterns: each pattern's own examples and look-alikes, real fixture names, and names
built by verl's real naming code (read from the installed verl without importing torch)."""
from __future__ import annotations

import ast
import importlib.util
import os
import re
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Optional

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from testdata import fixtures_dir
from verlprof.stages.core.model import ArtifactKind
from verlprof.stages.readers.naming import (
    PATTERNS,
    NameInfo,
    classify_name,
    normalize_role,
    pattern_by_id,
    role_of_scope,
)

FIXTURES = fixtures_dir()

_CASES = [(p.id, ex, exp) for p in PATTERNS for ex, exp in p.examples]
_NOT = [(p.id, ne) for p in PATTERNS for ne in p.not_examples]


def test_every_pattern_carries_examples_and_lookalikes() -> None:
    for p in PATTERNS:
        assert p.examples, p.id
        assert p.not_examples, p.id
    assert len({p.id for p in PATTERNS}) == len(PATTERNS)


@pytest.mark.parametrize("pid,name,expected", _CASES, ids=[f"{c[0]}:{c[1]}" for c in _CASES])
def test_pattern_examples_match_with_fields(pid: str, name: str, expected: dict[str, Any]) -> None:
    assert pattern_by_id(pid).regex.search(name), f"{pid} must match {name}"
    info = classify_name(name)
    assert info is not None and info.naming == pid, f"{name} classified as {info}"
    for key, value in expected.items():
        assert getattr(info, key) == value, (name, key)
    if info.host is not None:          # the span gather uses to mask host names in rels
        assert info.host_span is not None
        a, b = info.host_span
        assert name.rsplit("/", 1)[-1][a:b] == info.host


@pytest.mark.parametrize("pid,name", _NOT, ids=[f"{c[0]}:{c[1]}" for c in _NOT])
def test_pattern_rejects_lookalikes(pid: str, name: str) -> None:
    assert pattern_by_id(pid).regex.search(name) is None
    info = classify_name(name)
    assert info is None or info.naming != pid


@pytest.mark.parametrize("name", [
    "README.md", "workload.py", "golden/nsys-stats_nvtx_sum.csv", "all_stats.parquet",
    "report.nsys-rep.tmp", "db.sqlite-journal", "x.pickle.gz", ".hydra/overrides.yaml",
])
def test_non_artifacts_are_not_classified(name: str) -> None:
    assert classify_name(name) is None


def test_real_fixture_names() -> None:
    torch_dir = FIXTURES / "h200-torch-2.11"
    traces = sorted(torch_dir.glob("*.json.gz"))
    assert len(traces) == 3
    steps = []
    for t in traces:
        info = classify_name(f"{torch_dir.name}/{t.name}")
        assert info is not None and info.kind == ArtifactKind.TORCH_TRACE
        assert (info.prefix, info.scope, info.role) == ("actor-rollout-ref", "train", "actor_rollout_ref")
        assert (info.rank, info.world_size, info.pid) == (0, 1, 754)
        steps.append(info.step)
    assert steps == [1, 2, 3]
    snap = classify_name("h200-torch-2.11/step2/torch_memory_rank0_pid804.pickle")
    assert snap is not None and snap.kind == ArtifactKind.MEMORY_SNAPSHOT
    assert (snap.step, snap.rank, snap.pid) == (2, 0, 804)
    for k in (1, 2, 3):
        info = classify_name(f"ray-continuous/worker_process_1983.{k}.sqlite")
        assert info == NameInfo(ArtifactKind.NSYS_SQLITE, "ray_worker", pid=1983, capture_range=k)
    whole = classify_name("whole/whole_1873.sqlite")
    assert whole is not None and whole.kind == ArtifactKind.NSYS_SQLITE and whole.pid is None


def test_role_aliases_map_to_verl_roles() -> None:
    assert normalize_role("actor-rollout-ref") == "actor_rollout_ref"
    assert normalize_role("actor_rollout") == "actor_rollout"
    assert normalize_role("rm") == normalize_role("reward_model") == normalize_role("reward") == "reward"
    assert normalize_role("value-model") == "critic"
    assert normalize_role("Ref") == "ref"
    assert normalize_role("language-model") is None and normalize_role("") is None
    assert role_of_scope("actor-update") == "actor"
    assert role_of_scope("ref_compute_log_prob") == "ref"
    assert role_of_scope("compute-rm-score") == "reward"
    assert role_of_scope("train") is None


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=120))
def test_classify_name_never_raises(name: str) -> None:
    info = classify_name(name)
    assert info is None or isinstance(info.kind, ArtifactKind)


# --- names produced by verl's own code --------------------------------------------------------


def _verl_file(rel: str) -> Path | None:
    spec = importlib.util.find_spec("verl")   # finds the package without importing it (no torch)
    if spec is None or not spec.submodule_search_locations:
        return None
    p = Path(list(spec.submodule_search_locations)[0]) / rel
    return p if p.is_file() else None


def _load_verl_functions(rel: str, names: set[str]) -> dict[str, Any]:
    """Exec only the named top-level functions of a verl source file (they use stdlib only)."""
    path = _verl_file(rel)
    if path is None:
        pytest.skip("verl is not installed")
    tree = ast.parse(path.read_text())
    body = [n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name in names]
    assert {n.name for n in body} == names, f"verl changed {rel}"
    ns: dict[str, Any] = {"os": os, "re": re, "datetime": datetime, "timezone": timezone,
                          "Optional": Optional}
    exec(compile(ast.Module(body=body, type_ignores=[]), str(path), "exec"), ns)
    return ns


_ROLES = ["actor", "rollout", "ref", "critic", "actor_rollout", "actor_rollout_ref", "language_model",
          "value_model", None]
_SCOPES = ["train", "actor_update", "actor_compute_log_prob", "ref_compute_log_prob", "train_batch",
           "compute_values", None]


@settings(max_examples=150, deadline=None)
@given(prefix=st.sampled_from(_ROLES), scope=st.sampled_from(_SCOPES),
       step=st.one_of(st.none(), st.integers(0, 10**6)), rank=st.integers(0, 4095),
       world=st.one_of(st.none(), st.integers(1, 4096)),
       par=st.dictionaries(st.sampled_from(["tp", "pp", "dp", "cp"]), st.integers(0, 64)))
def test_names_built_by_verl_build_trace_basename(prefix, scope, step, rank, world, par) -> None:
    ns = _load_verl_functions("utils/profiler/torch_profile.py",
                              {"_sanitize_name_part", "build_trace_basename"})
    topo = dict(par, rank=rank)
    if world:
        topo["world_size"] = world
    base = ns["build_trace_basename"](rank=rank, role=scope, save_file_prefix=prefix, topology=topo,
                                      profile_step=step)
    info = classify_name(base + ".json.gz")
    assert info is not None and info.naming == "torch_verl", base
    assert (info.rank, info.world_size, info.step, info.pid) == (rank, world, step, os.getpid())
    want_prefix = ns["_sanitize_name_part"](prefix) if prefix else None
    want_scope = ns["_sanitize_name_part"](scope) if scope else None
    if prefix and not scope:
        assert info.prefix == want_prefix
    elif scope and not prefix:
        assert info.scope == want_scope
    elif prefix and scope:
        assert (info.prefix, info.scope) == (want_prefix, want_scope)
    expected_role = normalize_role(prefix) or role_of_scope(scope)
    if prefix or scope:
        assert info.role == expected_role
    if par:
        assert any(n.startswith("parallel=") for n in info.notes)


def test_memory_snapshot_dirs_built_by_verl() -> None:
    path = _verl_file("utils/profiler/torch_memory_profile.py")
    if path is None:
        pytest.skip("verl is not installed")
    src = path.read_text()
    # the folder names and the file name verl writes (asserted here so a change in verl is noticed)
    assert 'f"step{self._window_start_step}"' in src
    assert 'f"steps{self._window_start_step}-{self._window_end_step}"' in src
    assert "oom_{datetime.now().strftime('%Y%m%d-%H%M%S-%f')}" in src
    mem_utils = _verl_file("utils/memory_utils.py")
    assert mem_utils is not None and 'f"{tag}_rank{rank}_pid{pid}.pickle"' in mem_utils.read_text()
    oom = datetime.now().strftime("%Y%m%d-%H%M%S-%f")
    info = classify_name(f"oom_{oom}/torch_memory_oom_rank3_pid77.pickle")
    assert info is not None and info.notes == ("oom",) and (info.rank, info.pid) == (3, 77)


def test_relocated_nsys_names_follow_verl() -> None:
    path = _verl_file("utils/profiler/nvtx_profile.py")
    if path is None:
        pytest.skip("verl is not installed")
    src = path.read_text()
    assert 'f"{prefix}{hostname}_{os.path.basename(src)}"' in src
    for prefix, role in (("actor_rollout_ref", "actor_rollout_ref"), ("critic", "critic"), ("", None)):
        name = f"{prefix + '_' if prefix else ''}node-7.cluster_worker_process_4242.3.nsys-rep"
        info = classify_name(name)
        assert info is not None and info.naming == "ray_worker_relocated"
        assert (info.role, info.host, info.pid, info.capture_range) == (role, "node-7.cluster", 4242, 3)
