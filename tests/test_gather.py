"""The gather stage on real fixtures and on tmp trees laid out the way verl, Ray and torch write."""
from __future__ import annotations

import gzip
import hashlib
import json
import os
import pickle
import socket
import sqlite3
import time
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from testdata import fixtures_dir
from verlprof.pipeline.executors import InlineExecutor, run_all
from verlprof.stages.core.errors import BadInputError, VerlprofError
from verlprof.stages.core.hashing import salted_hash
from verlprof.stages.core.model import Artifact, ArtifactKind
from verlprof.stages.gather.discover import (
    GatherResult,
    default_sources,
    gather,
    hash_artifact,
    newest_session,
    sqlite_export_of,
)
from verlprof.stages.readers.hydra_config import RunConfig

FIXTURES = fixtures_dir()
K = ArtifactKind
SALT = "bundle-salt"


def _h(host: str) -> str:
    """How a host name inside a file name appears in `rel`."""
    return f"host-{salted_hash(host, SALT)}"


# --- helpers ----------------------------------------------------------------------------------


def _sha(p: Path) -> str:
    return hashlib.sha256(p.read_bytes()).hexdigest()


def _snapshot(root: Path) -> dict[str, tuple[float, int, str]]:
    """mtime, size and sha256 of every file under root (following nothing)."""
    out = {}
    for dirpath, _dirs, files in os.walk(root):
        for f in files:
            p = Path(dirpath) / f
            if p.is_symlink():
                continue
            st = p.stat()
            out[str(p.relative_to(root))] = (st.st_mtime_ns, st.st_size, _sha(p))
    return out


def _sqlite(p: Path) -> Path:
    p.parent.mkdir(parents=True, exist_ok=True)
    con = sqlite3.connect(p)
    con.execute("CREATE TABLE StringIds (id INTEGER PRIMARY KEY, value TEXT)")
    con.execute("INSERT INTO StringIds VALUES (1, 'step')")
    con.commit()
    con.close()
    return p


def _trace(p: Path, gz: bool = True) -> Path:
    p.parent.mkdir(parents=True, exist_ok=True)
    data = json.dumps({"schemaVersion": 1, "traceEvents": [{"ph": "X", "name": "step", "ts": 1,
                                                            "dur": 2}]}).encode()
    p.write_bytes(gzip.compress(data) if gz else data)
    return p


def _pickle(p: Path) -> Path:
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_bytes(pickle.dumps({"segments": [], "device_traces": []}, protocol=4))
    return p


def _blob(p: Path, data: bytes = b"NSYS-REPORT-BYTES") -> Path:
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_bytes(data)
    return p


def _by_rel(res: GatherResult) -> dict[str, Artifact]:
    return {a.rel: a for a in res.artifacts}


HYDRA = """\
actor_rollout_ref:
  actor:
    profiler:
      tool: ${oc.select:global_profiler.tool,null}
      enable: true
      ranks: []
      all_ranks: false
      tool_config:
        nsys:
          discrete: ${oc.select:global_profiler.global_tool_config.nsys.discrete}
trainer:
  total_training_steps: 10
global_profiler:
  tool: nsys
  steps: [2, 4]
  profile_continuous_steps: false
  save_path: outputs/profile
  global_tool_config:
    nsys:
      discrete: false
"""


def _mixed_tree(root: Path) -> Path:
    """Every kind verl / Ray / torch writes, plus junk and look-alikes."""
    # Ray nsight folder content (continuous mode: one report per capture range) and a leftover qdstrm
    _blob(root / "nsight/worker_process_4242.1.nsys-rep")
    _blob(root / "nsight/worker_process_4242.2.nsys-rep")
    _blob(root / "nsight/worker_process_4242.3.qdstrm")
    _blob(root / "nsight/worker_process_4243.nsys-rep")
    _blob(root / "nsight/worker_process_4243.qdstrm")            # superseded by the finished report
    # relocated reports, with an export beside one of them
    _blob(root / "profile/actor_rollout_ref_gpu-node-3_worker_process_77.2.nsys-rep")
    _sqlite(root / "profile/actor_rollout_ref_gpu-node-3_worker_process_77.2.sqlite")
    _blob(root / "profile/gpu-node-4_worker_process_78.nsys-rep", b"")    # zero bytes
    # a user -o name, a standalone export, a broken "export"
    _blob(root / "manual/my_run.nsys-rep")
    _sqlite(root / "manual/whole_1873.sqlite")
    _blob(root / "manual/notdb.sqlite", b"this is not sqlite at all")
    # torch traces, both verl generations, and rollout-engine traces
    _trace(root / "profile/actor-rollout-ref_train_step2_rank1-of-4_pid754_20261202085621396.json.gz")
    _trace(root / "profile/language-model_actor-update_step2_rank0-of-4_pid754_20261202085621396_mb0-1.json.gz")
    _trace(root / "old/e2e/prof_rank-0_1234_20250101120000123.json.gz")
    _trace(root / "profile/agent_loop_rollout_replica_1/node9_5555.1764660000000.pt.trace.json.gz")
    _trace(root / "profile/rollout-replica4-globalrank8_inst-rank-0.1764660000000.pt.trace.json.gz")
    _trace(root / "misc/custom_trace.json", gz=False)
    _blob(root / "misc/timeline.json", b'[{"cat": "task"}]')      # Ray timeline, not a torch trace
    _blob(root / "misc/broken.json.gz", b"not gzip")
    # memory snapshots
    _pickle(root / "profile/step2/torch_memory_rank0_pid804.pickle")
    _pickle(root / "profile/steps3-5/torch_memory_rank1_pid805.pickle")
    _pickle(root / "profile/oom_20260102-030405-123456/torch_memory_oom_rank0_pid806.pickle")
    # the Hydra run folder and junk
    _blob(root / "outputs/2026-01-02/03-04-05/.hydra/config.yaml", HYDRA.encode())
    _blob(root / "outputs/2026-01-02/03-04-05/.hydra/overrides.yaml", b"- global_profiler.tool=nsys\n")
    _blob(root / "README.md", b"# notes\n")
    _blob(root / "profile/.git/HEAD", b"ref: refs/heads/main\n")
    return root


# --- real fixtures ----------------------------------------------------------------------------


def test_real_fixtures() -> None:
    before = _snapshot(FIXTURES)
    res = gather([FIXTURES])
    assert _snapshot(FIXTURES) == before
    kinds = [a.kind for a in res.artifacts]
    assert kinds.count(K.NSYS_SQLITE) == 4
    assert kinds.count(K.TORCH_TRACE) == 3
    assert kinds.count(K.MEMORY_SNAPSHOT) == 1
    assert len(kinds) == 8 and res.config is None
    snap = res.by_kind(K.MEMORY_SNAPSHOT)[0]
    assert (snap.step, snap.rank, snap.pid) == (2, 0, 804)
    traces = res.by_kind(K.TORCH_TRACE)
    assert sorted(t.step for t in traces) == [1, 2, 3]
    assert {(t.rank, t.world_size, t.pid, t.role, t.scope) for t in traces} == {
        (0, 1, 754, "actor_rollout_ref", "train")}
    ray = sorted((a.capture_range, a.pid) for a in res.by_kind(K.NSYS_SQLITE) if a.naming == "ray_worker")
    assert ray == [(1, 1983), (2, 1983), (3, 1983)]
    for a in res.artifacts:
        assert a.sha256 == _sha(a.path) and a.size == a.path.stat().st_size
        assert not Path(a.rel).is_absolute() and a.path.is_absolute()
    skipped = dict(res.skipped)
    assert "README.md" in skipped and "workload.py" in skipped
    assert any(r.endswith(".parquet") for r in skipped)
    assert res.roots == ["fixtures"]
    rels = [a.rel for a in res.artifacts]
    assert rels == sorted(rels) and len(set(rels)) == len(rels)


def test_real_fixture_single_files() -> None:
    snap = FIXTURES / "h200-torch-2.11/step2/torch_memory_rank0_pid804.pickle"
    sq = FIXTURES / "h200-nsys-2025.3/ray-continuous/worker_process_1983.2.sqlite"
    res = gather([snap, sq], with_hashes=False)
    a, b = res.artifacts
    assert (a.rel, a.kind, a.step, a.source_index) == (snap.name, K.MEMORY_SNAPSHOT, 2, 0)
    assert (b.rel, b.kind, b.capture_range, b.source_index) == (sq.name, K.NSYS_SQLITE, 2, 1)
    assert a.sha256 == "" and b.sha256 == ""


# --- a tree with every kind -------------------------------------------------------------------


def test_mixed_tree(tmp_path: Path) -> None:
    root = _mixed_tree(tmp_path / "run")
    before = _snapshot(root)
    res = gather([root], host_salt=SALT)
    assert _snapshot(root) == before
    by = _by_rel(res)

    a = by["nsight/worker_process_4242.1.nsys-rep"]
    assert (a.kind, a.pid, a.capture_range, a.role, a.host, a.naming) == (
        K.NSYS_REPORT, 4242, 1, None, None, "ray_worker")
    # continuous nsys, steps [2, 4]: capture range k holds the k-th profiled step
    assert a.step == 2 and "step_from_config" in a.notes
    assert by["nsight/worker_process_4242.2.nsys-rep"].step == 4
    q = by["nsight/worker_process_4242.3.qdstrm"]
    assert q.kind == K.NSYS_QDSTRM and q.capture_range == 3 and q.step is None
    assert by["nsight/worker_process_4243.nsys-rep"].capture_range is None
    assert "nsight/worker_process_4243.qdstrm" not in by
    assert "superseded" in dict(res.skipped)["nsight/worker_process_4243.qdstrm"]

    g3 = _h("gpu-node-3")
    rep = by[f"profile/actor_rollout_ref_{g3}_worker_process_77.2.nsys-rep"]
    assert (rep.role, rep.host, rep.pid, rep.capture_range) == ("actor_rollout_ref", "gpu-node-3", 77, 2)
    assert rep.path.name == "actor_rollout_ref_gpu-node-3_worker_process_77.2.nsys-rep"
    assert rep.to_manifest(SALT)["host"] == salted_hash("gpu-node-3", SALT) and g3.endswith(
        rep.to_manifest(SALT)["host"])
    assert f"sqlite_export=profile/actor_rollout_ref_{g3}_worker_process_77.2.sqlite" in rep.notes
    assert sqlite_export_of(rep) == rep.path.with_name("actor_rollout_ref_gpu-node-3_worker_process_77.2.sqlite")
    exp = by[f"profile/actor_rollout_ref_{g3}_worker_process_77.2.sqlite"]
    assert exp.kind == K.NSYS_SQLITE and exp.host == "gpu-node-3"
    assert f"export_of={rep.rel}" in exp.notes
    empty = by[f"profile/{_h('gpu-node-4')}_worker_process_78.nsys-rep"]
    assert empty.size == 0 and "empty" in empty.notes and sqlite_export_of(empty) is None
    assert empty.sha256 == hashlib.sha256(b"").hexdigest()

    assert by["manual/my_run.nsys-rep"].naming == "nsys_user"
    alone = by["manual/whole_1873.sqlite"]
    assert alone.kind == K.NSYS_SQLITE and not any(n.startswith("export_of") for n in alone.notes)
    assert "bad header" in dict(res.skipped)["manual/notdb.sqlite"]

    t = by["profile/actor-rollout-ref_train_step2_rank1-of-4_pid754_20261202085621396.json.gz"]
    assert (t.kind, t.role, t.scope, t.step, t.rank, t.world_size, t.pid) == (
        K.TORCH_TRACE, "actor_rollout_ref", "train", 2, 1, 4, 754)
    d = by["profile/language-model_actor-update_step2_rank0-of-4_pid754_20261202085621396_mb0-1.json.gz"]
    assert (d.role, d.scope) == ("actor", "actor-update") and "window=mb0-1" in d.notes
    old = by["old/e2e/prof_rank-0_1234_20250101120000123.json.gz"]
    assert (old.naming, old.scope, old.rank, old.pid) == ("torch_verl_old", "e2e", 0, 1234)
    rr = by[f"profile/agent_loop_rollout_replica_1/{_h('node9')}_5555.1764660000000.pt.trace.json.gz"]
    assert (rr.role, rr.host, rr.pid) == ("rollout", "node9", 5555) and "replica=1" in rr.notes
    rel = by["profile/rollout-replica4-globalrank8_inst-rank-0.1764660000000.pt.trace.json.gz"]
    assert (rel.role, rel.rank) == ("rollout", 8) and "replica=4" in rel.notes
    assert by["misc/custom_trace.json"].naming == "chrome_trace_other"
    skipped = dict(res.skipped)
    assert "traceEvents" in skipped["misc/timeline.json"]
    assert "gzip" in skipped["misc/broken.json.gz"]

    s2 = by["profile/step2/torch_memory_rank0_pid804.pickle"]
    assert (s2.kind, s2.step, s2.rank, s2.pid) == (K.MEMORY_SNAPSHOT, 2, 0, 804)
    s35 = by["profile/steps3-5/torch_memory_rank1_pid805.pickle"]
    assert s35.steps == (3, 5) and s35.step is None
    oom = by["profile/oom_20260102-030405-123456/torch_memory_oom_rank0_pid806.pickle"]
    assert "oom" in oom.notes and oom.step is None

    hyd = by["outputs/2026-01-02/03-04-05/.hydra/config.yaml"]
    assert hyd.kind == K.HYDRA_CONFIG
    assert isinstance(res.config, RunConfig) and res.config.rel == hyd.rel
    assert res.config.steps == (2, 4) and res.config.tool == "nsys"
    assert res.config.enabled_roles == ("actor",)
    assert "outputs/2026-01-02/03-04-05/.hydra/overrides.yaml" in skipped
    assert "README.md" in skipped
    assert not any(r.startswith("profile/.git") for r in by) and not any(
        r.startswith("profile/.git") for r in skipped)

    for art in res.artifacts:
        assert art.sha256 == _sha(art.path)


def test_manifest_records_have_no_paths_or_hosts(tmp_path: Path) -> None:
    root = _mixed_tree(tmp_path / "run")
    res = gather([root])
    blob = json.dumps([a.to_manifest("salt") for a in res.artifacts] + [res.config.to_manifest()])
    assert str(tmp_path) not in blob and "gpu-node-3" not in blob and "node9" not in blob
    assert not any(r.startswith("/") for r in res.roots)
    assert "gpu-node-3" not in json.dumps(res.skipped)


def test_unhashed_then_hashed_in_an_executor(tmp_path: Path) -> None:
    root = _mixed_tree(tmp_path / "run")
    seen: list[tuple[int, int, str]] = []
    res = gather([root], with_hashes=False)
    assert all(a.sha256 == "" for a in res.artifacts)
    pickle.dumps(hash_artifact)          # plain module-level function: runs in any executor
    results = run_all(InlineExecutor(), hash_artifact, res.artifacts)
    assert all(r.error is None for r in results)
    hashed = [r.value for r in results]
    assert [h.sha256 for h in hashed] == [_sha(a.path) for a in res.artifacts]
    res2 = gather([root], progress=lambda d, n, rel: seen.append((d, n, rel)))
    assert [s[0] for s in seen] == list(range(1, len(res2.artifacts) + 1))
    assert all(s[1] == len(res2.artifacts) for s in seen)


# --- Ray session layout and default sources ---------------------------------------------------


def _ray_session(ray_dir: Path, name: str, pid: int, age_s: float = 0.0) -> Path:
    s = ray_dir / name
    _blob(s / "logs" / "nsight" / f"worker_process_{pid}.1.nsys-rep")
    t = time.time() - age_s
    os.utime(s, (t, t))
    return s


def test_default_sources_from_ray_tmpdir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    base = tmp_path / "raytmp"
    old = _ray_session(base / "ray", "session_2026-01-01_00-00-00_000001_100", 1, age_s=3600)
    new = _ray_session(base / "ray", "session_2026-01-02_00-00-00_000001_200", 2)
    monkeypatch.setenv("RAY_TMPDIR", str(base))
    monkeypatch.delenv("TMPDIR", raising=False)
    launch = tmp_path / "launch"
    (launch / "outputs" / "profile").mkdir(parents=True)
    # no session_latest: the newest session folder
    assert default_sources(cwd=launch) == [new / "logs" / "nsight", launch / "outputs" / "profile"]
    # session_latest points at the session Ray considers current, even if it is older
    (base / "ray" / "session_latest").symlink_to(old)
    assert newest_session(base / "ray") == old.resolve()
    srcs = default_sources(cwd=launch)
    assert srcs[0] == old.resolve() / "logs" / "nsight"
    res = gather(srcs)
    (a,) = res.artifacts
    assert a.rel == "worker_process_1.1.nsys-rep" and a.host == socket.gethostname()
    assert res.roots[0].startswith("session_2026-01-01") and res.roots[0].endswith("logs/nsight")
    assert res.roots[1] == "profile"


def test_default_sources_ray_start_temp_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RAY_TMPDIR", str(tmp_path / "empty"))
    custom = tmp_path / "custom"                  # `ray start --temp-dir=custom`: sessions directly inside
    s = _ray_session(custom, "session_2026-03-03_00-00-00_000001_9", 9)
    (custom / "session_latest").symlink_to(s)
    srcs = default_sources(ray_dirs=[custom], cwd=tmp_path)
    assert srcs == [s.resolve() / "logs" / "nsight"]
    res = gather(srcs, ray_dirs=[custom])
    assert res.artifacts[0].host == socket.gethostname()
    # the same reports copied elsewhere are not known to be from this host
    copy = tmp_path / "copied"
    _blob(copy / "worker_process_9.1.nsys-rep")
    assert gather([copy]).artifacts[0].host is None


def test_default_sources_none(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RAY_TMPDIR", str(tmp_path / "nothing"))
    monkeypatch.setenv("TMPDIR", str(tmp_path / "nothing2"))
    srcs = default_sources(cwd=tmp_path)
    assert all(not str(p).startswith(str(tmp_path)) for p in srcs)   # only /tmp/ray may remain


# --- Hydra config near the profile folder -----------------------------------------------------


def test_config_found_beside_default_save_path(tmp_path: Path) -> None:
    launch = tmp_path / "proj"
    prof = launch / "outputs" / "profile"
    _blob(prof / "gpu1_worker_process_5.1.nsys-rep")
    _blob(launch / "outputs/2026-01-02/03-04-05/.hydra/config.yaml", HYDRA.encode())
    res = gather([prof])
    assert res.config is not None and res.config.steps == (2, 4)
    hyd = res.by_kind(K.HYDRA_CONFIG)[0]
    assert hyd.rel == "2026-01-02/03-04-05/.hydra/config.yaml" and "found_near_source" in hyd.notes
    assert res.by_kind(K.NSYS_REPORT)[0].step == 2
    assert gather([prof], find_config=False).config is None


def test_bad_hydra_config_is_skipped_not_fatal(tmp_path: Path) -> None:
    root = tmp_path / "run"
    _blob(root / ".hydra/config.yaml", b"global_profiler: [unclosed\n")
    _blob(root / "worker_process_1.nsys-rep")
    res = gather([root])
    assert res.config is None and [a.kind for a in res.artifacts] == [K.NSYS_REPORT]
    assert "bad Hydra config" in dict(res.skipped)[".hydra/config.yaml"]


def test_config_yaml_beside_hydra_siblings(tmp_path: Path) -> None:
    root = tmp_path / "copied_hydra"
    _blob(root / "config.yaml", HYDRA.encode())
    _blob(root / "hydra.yaml", b"hydra: {}\n")
    _blob(root / "unrelated" / "config.yaml", b"a: 1\n")
    res = gather([root])
    assert [a.rel for a in res.by_kind(K.HYDRA_CONFIG)] == ["config.yaml"]
    assert res.config is not None and res.config.tool == "nsys"
    assert "unrelated/config.yaml" in dict(res.skipped)


# --- sources: several, single files, errors, links --------------------------------------------


def test_several_sources_keep_rels_unique(tmp_path: Path) -> None:
    a = _blob(tmp_path / "node1" / "worker_process_1.1.nsys-rep")
    _blob(tmp_path / "node2" / "worker_process_1.1.nsys-rep", b"other bytes")
    _blob(tmp_path / "node2" / "worker_process_2.1.nsys-rep")
    res = gather([tmp_path / "node1", tmp_path / "node2"])
    assert [x.rel for x in res.artifacts] == [
        "src1/worker_process_1.1.nsys-rep", "src2/worker_process_1.1.nsys-rep", "worker_process_2.1.nsys-rep"]
    assert [x.source_index for x in res.artifacts] == [0, 1, 1]
    assert res.artifacts[0].path == a
    # the same folder given twice: its files are recorded once
    res = gather([tmp_path / "node1", tmp_path / "node1"])
    assert len(res.artifacts) == 1 and "same file" in res.skipped[0][1]


def test_single_file_errors(tmp_path: Path) -> None:
    with pytest.raises(VerlprofError, match="no such file"):
        gather([tmp_path / "missing.nsys-rep"])
    bad = _blob(tmp_path / "export.sqlite", b"garbage, not a database")
    with pytest.raises(BadInputError) as ei:
        gather([bad])
    assert str(bad) in str(ei.value) and "bad header" in str(ei.value)
    junk = _blob(tmp_path / "notes.txt", b"hello")
    with pytest.raises(BadInputError, match="not a recognised profiler artifact"):
        gather([junk])
    trunc = _blob(tmp_path / "x_rank0_pid1_20260101000000000.json.gz", b"\x1f")
    with pytest.raises(BadInputError, match="gzip"):
        gather([trunc])
    empty = _blob(tmp_path / "worker_process_3.nsys-rep", b"")
    (a,) = gather([empty]).artifacts
    assert a.size == 0 and a.notes == ("empty",)


def test_symlink_loops_and_broken_links(tmp_path: Path) -> None:
    root = tmp_path / "run"
    _blob(root / "a" / "worker_process_1.nsys-rep")
    (root / "a" / "loop").symlink_to(root)                      # a loop back to the top
    (root / "dangling.sqlite").symlink_to(tmp_path / "gone.sqlite")
    ext = _sqlite(tmp_path / "elsewhere" / "whole.sqlite")
    (root / "linked").symlink_to(ext.parent)                   # a symlinked folder is followed once
    res = gather([root])
    assert sorted(a.rel for a in res.artifacts) == ["a/worker_process_1.nsys-rep", "linked/whole.sqlite"]
    assert dict(res.skipped)["dangling.sqlite"] == "broken symlink"
    assert (root / "a" / "loop").is_symlink() and not (tmp_path / "gone.sqlite").exists()


def test_exclude_output_folders(tmp_path: Path) -> None:
    root = tmp_path / "run"
    _blob(root / "worker_process_1.nsys-rep")
    out = root / "bundle"
    _sqlite(out / "traces" / "worker_process_1.sqlite")
    res = gather([root], exclude=[out])
    assert [a.rel for a in res.artifacts] == ["worker_process_1.nsys-rep"]
    assert ("bundle", "excluded (verlprof output or work folder)") in res.skipped


def test_unreadable_folder() -> None:
    """A folder this user may not read is listed as unreadable. Root reads every folder, so as
    root (CI) the gather runs in a child process that has become `nobody` (uid 65534)."""
    import pickle
    import shutil
    import tempfile

    base = Path(tempfile.mkdtemp(prefix="vp-gather-", dir="/tmp"))   # reachable by nobody
    base.chmod(0o755)
    d = base / "run" / "locked"
    _blob(d / "worker_process_1.nsys-rep")
    _blob(base / "run" / "worker_process_2.nsys-rep")
    (base / "run").chmod(0o755)
    d.chmod(0)
    try:
        if os.geteuid() != 0:
            res = gather([base / "run"], with_hashes=False)
            got = ([a.rel for a in res.artifacts], res.skipped)
        else:
            r, w = os.pipe()
            pid = os.fork()
            if pid == 0:                                   # the child: become nobody, gather, report
                try:
                    os.close(r)
                    os.setgroups([])
                    os.setgid(65534)
                    os.setuid(65534)
                    res = gather([base / "run"], with_hashes=False)
                    answer: object = ([a.rel for a in res.artifacts], res.skipped)
                except BaseException as exc:  # noqa: BLE001 - sent back to the parent
                    answer = exc
                os.write(w, pickle.dumps(answer))
                os._exit(0)
            os.close(w)
            with os.fdopen(r, "rb") as f:
                got = pickle.loads(f.read())
            os.waitpid(pid, 0)
            if isinstance(got, BaseException):
                raise got
        rels, skipped = got
        assert rels == ["worker_process_2.nsys-rep"]
        assert dict(skipped)["locked"] == "unreadable folder: Permission denied"
    finally:
        d.chmod(0o755)
        shutil.rmtree(base, ignore_errors=True)


# --- fuzz: random bytes under artifact names never crash gather --------------------------------

_NAMES = ["w/worker_process_1.2.sqlite", "a_rank0_pid1_20260101000000000.json.gz", "x.json",
          "step1/torch_memory_rank0_pid2.pickle", "r.nsys-rep", ".hydra/config.yaml", "t.json.gz"]


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(name=st.sampled_from(_NAMES), data=st.binary(max_size=300))
def test_fuzz_contents(tmp_path_factory: pytest.TempPathFactory, name: str, data: bytes) -> None:
    root = tmp_path_factory.mktemp("fuzz")
    p = _blob(root / name, data)
    res = gather([root])
    recorded = [a.rel for a in res.artifacts] + [r for r, _ in res.skipped]
    assert name in recorded
    for a in res.artifacts:
        assert a.size == len(data) and ("empty" in a.notes) == (not data)
    assert p.read_bytes() == data


# --- real nsys reports made by the local nsys ---------------------------------------------------


@pytest.mark.nsys
def test_real_nsys_reports_in_ray_layout(tmp_path: Path, nsys_reports: list[Path], nsys_qdstrm: Path) -> None:
    import shutil
    nsight = tmp_path / "session_2026-01-01_00-00-00_000001_1" / "logs" / "nsight"
    nsight.mkdir(parents=True)
    for k, rep in enumerate(nsys_reports, 1):
        shutil.copy2(rep, nsight / f"worker_process_900.{k}.nsys-rep")
    shutil.copy2(nsys_qdstrm, nsight / "worker_process_901.qdstrm")
    before = _snapshot(nsight)
    res = gather([nsight])
    assert _snapshot(nsight) == before
    reps = res.by_kind(K.NSYS_REPORT)
    assert [(a.pid, a.capture_range) for a in reps] == [(900, 1), (900, 2), (900, 3)]
    assert [a.sha256 for a in reps] == [_sha(r) for r in nsys_reports]
    (qd,) = res.by_kind(K.NSYS_QDSTRM)
    assert (qd.pid, qd.size) == (901, nsys_qdstrm.stat().st_size)
