"""identify_report: role/rank/world size of a Ray `worker_process_<pid>` report, from its export.

Expected answers come from outside the exports: `samples/tiny_run/sample_manifest.json` (written by
the script that ran the sample) and `tests/data/README.md` (one process that opens verl's
controller `step` ranges and its worker stage ranges, with no RANK in its environment).
"""
from __future__ import annotations

import json
import os
import random
import shutil
import sqlite3
import sys
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from nsys_profiling import export_with_nsys, profile_with_nsys
from testdata import fixtures_dir
from verlprof.stages.core.errors import BadInputError
from verlprof.stages.readers.naming import ROLE_ALIASES
from verlprof.stages.readers.report_identity import (
    E_CLASS,
    E_COLOCATED,
    E_STAGES,
    E_STEP,
    ENV_PROCESS,
    ENV_SESSION,
    EVIDENCE_LABELS,
    ReportIdentity,
    _pick_env,
    class_role,
    identify_report,
)

REPO = Path(__file__).resolve().parents[1]
SAMPLE = REPO / "samples" / "tiny_run"
NSIGHT = SAMPLE / "ray_logs" / "nsight"
MANIFEST = json.loads((SAMPLE / "sample_manifest.json").read_text())
FIXTURES = fixtures_dir() / "h200-nsys-2025.3"
FIXTURE_EXPORTS = sorted(FIXTURES.glob("*/*.sqlite"))
ROLES = set(ROLE_ALIASES.values()) | {"trainer"}


def _expected() -> list[tuple[int, str, int | None, int | None]]:
    """(pid, role, rank, world_size) per profiled process, from the sample's own manifest."""
    out = [(MANIFEST["controller"]["pid"], "trainer", None, None)]
    out += [(w["pid"], w["role"], w["rank"], w["world_size"]) for w in MANIFEST["workers"]]
    return out


def _pid_of(path: Path) -> int:
    return int(path.name.split("_")[-1].split(".")[0])


def _assert_secret_free(ident: ReportIdentity) -> None:
    """Nothing but known roles, numbers and fixed labels can leave identify_report."""
    assert ident.role is None or ident.role in ROLES
    assert ident.rank is None or isinstance(ident.rank, int)
    assert ident.world_size is None or isinstance(ident.world_size, int)
    assert set(ident.evidence) <= EVIDENCE_LABELS
    text = repr(ident)
    for secret in [*MANIFEST["fake_secrets"].values(), "alice", "sMpL3e", "/tmp/"]:
        assert secret not in text


def _copy(src: Path, tmp_path: Path, name: str | None = None) -> Path:
    dst = tmp_path / (name or src.name)
    shutil.copyfile(src, dst)
    dst.chmod(0o644)
    return dst


def _edit(path: Path, *sql: str, params: tuple = ()) -> None:
    con = sqlite3.connect(path)
    try:
        for i, statement in enumerate(sql):
            con.execute(statement, params if i == 0 else ())
        con.commit()
    finally:
        con.close()


# --- the sample: nsys 2022.4, Ray actors, answers from sample_manifest.json ------------------------


@pytest.mark.parametrize("pid,role,rank,world", _expected())
def test_sample_reports_match_the_manifest(pid: int, role: str, rank: int | None, world: int | None) -> None:
    path = NSIGHT / f"worker_process_{pid}.sqlite"
    ident = identify_report(path, pid)
    assert (ident.role, ident.rank, ident.world_size) == (role, rank, world)
    assert ident.evidence[0] == E_CLASS          # the Ray class (ray::TaskRunner, ray::ActorRollo)
    if rank is not None:
        assert f"RANK env ({ENV_SESSION})" in ident.evidence   # 2022.4: DeviceEnvironment, NUL-separated
    _assert_secret_free(ident)
    # without the pid (or with one the export never saw) the profiled process is found by its NVTX
    assert identify_report(path) == ident
    assert identify_report(path, 999_999) == ident


def test_sample_ranks_are_told_apart() -> None:
    """Each worker export also names the other rank's threads and holds its environment block in
    StringIds; only the profiled process's own environment may decide."""
    idents = {p: identify_report(NSIGHT / f"worker_process_{p}.sqlite", p) for p, *_ in _expected()}
    ranks = sorted(i.rank for i in idents.values() if i.rank is not None)
    assert ranks == list(range(MANIFEST["workers"][0]["world_size"]))


def test_inputs_are_not_touched(tmp_path: Path) -> None:
    src = _copy(NSIGHT / "worker_process_473.sqlite", tmp_path)
    before = (src.read_bytes(), src.stat().st_mtime_ns)
    identify_report(src, 473)
    assert (src.read_bytes(), src.stat().st_mtime_ns) == before
    assert sorted(p.name for p in tmp_path.iterdir()) == [src.name]   # no journal, no -wal


# --- the H200 fixtures: nsys 2025.3 --------------------------------------------------------------


@pytest.mark.parametrize("path", FIXTURE_EXPORTS, ids=lambda p: p.name)
def test_fixtures_are_a_trainer_without_rank(path: Path) -> None:
    """The fixture workload is one plain python3 process (no Ray class) that opens verl's controller
    `step` ranges around worker stage ranges, with no RANK/WORLD_SIZE set: a trainer, rank unknown.
    Each capture-range file (`.1` `.2` `.3`) says so on its own."""
    ident = identify_report(path, _pid_of(path))
    assert ident == ReportIdentity(role="trainer", rank=None, world_size=None, evidence=(E_STEP,))
    assert identify_report(path) == ident


@pytest.fixture()
def capture_copy(tmp_path: Path) -> Path:
    """A 2025.3 capture-range export (copied: the fixtures are read-only)."""
    return _copy(FIXTURES / "ray-continuous" / "worker_process_1983.2.sqlite", tmp_path)


def test_rank_from_the_process_capture_settings_first(capture_copy: Path) -> None:
    """nsys 2025 keeps the launched process's environment one variable a row; it wins over the
    session environment (`;`-separated in 2025)."""
    _edit(capture_copy,
          "INSERT INTO META_DATA_CAPTURE(name, value) VALUES ('PROCESS_0:ENVIRONMENT_VARIABLE', 'RANK=2'), "
          "('PROCESS_0:ENVIRONMENT_VARIABLE', 'WORLD_SIZE=8'), ('PROCESS_0:ENVIRONMENT_VARIABLE', 'LOCAL_RANK=7')",
          "UPDATE TARGET_INFO_SYSTEM_ENV SET value = value || ';RANK=5;WORLD_SIZE=8' WHERE name = 'DeviceEnvironment'")
    ident = identify_report(capture_copy, 1983)
    assert (ident.rank, ident.world_size) == (2, 8)
    assert f"RANK env ({ENV_PROCESS})" in ident.evidence
    _edit(capture_copy, "DELETE FROM META_DATA_CAPTURE WHERE value IN ('RANK=2', 'WORLD_SIZE=8')")
    ident = identify_report(capture_copy, 1983)
    assert (ident.rank, ident.world_size) == (5, 8)
    assert f"WORLD_SIZE env ({ENV_SESSION})" in ident.evidence
    _assert_secret_free(ident)


def test_contradictory_rank_is_dropped(capture_copy: Path) -> None:
    _edit(capture_copy, "UPDATE TARGET_INFO_SYSTEM_ENV SET value = value || ';RANK=9;WORLD_SIZE=4' "
                        "WHERE name = 'DeviceEnvironment'")
    ident = identify_report(capture_copy, 1983)
    assert (ident.rank, ident.world_size) == (None, None)


def _rename_main_thread(path: Path, pid: int, name: str) -> None:
    _edit(path, "INSERT INTO StringIds(id, value) VALUES ((SELECT max(id) + 1 FROM StringIds), ?)",
          f"UPDATE ThreadNames SET nameId = (SELECT max(id) FROM StringIds) "
          f"WHERE globalTid & 16777215 = {pid} AND ((globalTid >> 24) & 16777215) = {pid}",
          params=(name,))


def _drop_ranges(path: Path, *names: str) -> None:
    marks = ",".join(f"'{n}'" for n in names)
    _edit(path, f"DELETE FROM NVTX_EVENTS WHERE text IN ({marks}) "
                f"OR textId IN (SELECT id FROM StringIds WHERE value IN ({marks}))")


def test_colocated_worker_role_comes_from_its_stage_ranges(capture_copy: Path) -> None:
    """verl's trainer wraps each resource pool in `WorkerDict` (process `ray::WorkerDict`): the
    class says nothing, the worker stage ranges it opened do."""
    _rename_main_thread(capture_copy, 1983, "ray::WorkerDict")
    _drop_ranges(capture_copy, "step")
    ident = identify_report(capture_copy, 1983)
    assert ident.role == "actor_rollout_ref"
    assert ident.evidence == (E_COLOCATED, E_STAGES)
    _drop_ranges(capture_copy, "ref_compute_log_prob")
    assert identify_report(capture_copy, 1983).role == "actor_rollout"
    _drop_ranges(capture_copy, "generate_sequences")
    assert identify_report(capture_copy, 1983).role == "actor"


def test_class_name_beats_nvtx(capture_copy: Path) -> None:
    _rename_main_thread(capture_copy, 1983, "ray::CriticWorker.update_critic")
    ident = identify_report(capture_copy, 1983)
    assert (ident.role, ident.evidence) == ("critic", (E_CLASS,))


# --- nothing to go on ---------------------------------------------------------------------------


def test_export_without_the_tables_is_unknown(tmp_path: Path) -> None:
    path = _copy(NSIGHT / "worker_process_473.sqlite", tmp_path)
    _edit(path, *(f"DROP TABLE {t}" for t in
                  ("ThreadNames", "PROCESSES", "TARGET_INFO_SYSTEM_ENV", "NVTX_EVENTS", "OSRT_API")))
    assert identify_report(path, 473) == ReportIdentity()
    assert identify_report(path) == ReportIdentity()
    assert not identify_report(path).known


def test_export_with_empty_tables_is_unknown(tmp_path: Path) -> None:
    path = _copy(FIXTURES / "ray-continuous" / "worker_process_1983.3.sqlite", tmp_path)
    _edit(path, *(f"DELETE FROM {t}" for t in
                  ("ThreadNames", "PROCESSES", "TARGET_INFO_SYSTEM_ENV", "META_DATA_CAPTURE", "NVTX_EVENTS",
                   "CUPTI_ACTIVITY_KIND_RUNTIME")))
    assert identify_report(path, 1983) == ReportIdentity()


# --- bad input ----------------------------------------------------------------------------------


@pytest.mark.parametrize("content", [b"", b"not a database at all\n" * 50, b"SQLite format 3\x00" + b"\x01" * 90])
def test_garbage_is_a_one_line_bad_input(tmp_path: Path, content: bytes) -> None:
    path = tmp_path / "worker_process_1.sqlite"
    path.write_bytes(content)
    with pytest.raises(BadInputError) as err:
        identify_report(path, 1)
    assert "\n" not in str(err.value) and path.name in str(err.value)


def test_truncated_and_foreign_sqlite_are_bad_input(tmp_path: Path) -> None:
    data = (NSIGHT / "worker_process_452.sqlite").read_bytes()
    cut = tmp_path / "cut.sqlite"
    cut.write_bytes(data[: len(data) // 3])
    foreign = tmp_path / "foreign.sqlite"
    con = sqlite3.connect(foreign)
    con.execute("CREATE TABLE t(x)")
    con.commit()
    con.close()
    for path in (cut, foreign):
        with pytest.raises(BadInputError) as err:
            identify_report(path, 452)
        assert "\n" not in str(err.value) and path.name in str(err.value)


def test_damaged_pages_never_escape_as_other_errors(tmp_path: Path) -> None:
    """Garbage over parts of a valid export: an answer or a BadInputError, nothing else."""
    data = (NSIGHT / "worker_process_473.sqlite").read_bytes()
    rng = random.Random(7)
    raised = 0
    for i in range(12):
        buf = bytearray(data)
        at = rng.randrange(4096, len(buf) - 8192)
        buf[at:at + 8192] = rng.randbytes(8192)
        path = tmp_path / f"damaged_{i}.sqlite"
        path.write_bytes(bytes(buf))
        try:
            _assert_secret_free(identify_report(path, 473))
        except BadInputError as exc:
            raised += 1
            assert "\n" not in str(exc)
    assert raised < 12   # most damage misses the few small tables it reads


# --- names and environments ---------------------------------------------------------------------


@pytest.mark.parametrize("name,prefix,expected", [
    ("ray::ActorRollo", None, (True, "actor_rollout_ref")),          # cut to 15 characters by Linux
    ("ray::AsyncActor", None, (True, "actor_rollout_ref")),
    ("ray::TaskRunner", None, (True, "trainer")),
    ("ray::CriticWorker.compute_values", None, (True, "critic")),
    ("ray::RewardMode", None, (True, "reward")),
    ("ray::vLLMHttpSe", None, (True, "rollout")),
    ("ray::sMpL3eActo", "sMpL3e", (True, "actor_rollout_ref")),      # verl's worker-group prefix
    ("ray::sMpL3eActo", None, (False, None)),
    ("ray::xY12zwActorRolloutRefWorker", None, (True, "actor_rollout_ref")),
    ("ray::WorkerDict", None, (True, None)),                         # colocated: role from NVTX
    ("ray::FusedWorker_actor_critic", None, (True, None)),
    ("ray::IDLE", None, (False, None)),
    ("ray::DashboardA", None, (False, None)),
    ("ray::Act", None, (False, None)),
    ("python3", None, (False, None)),
])
def test_class_names(name: str, prefix: str | None, expected: tuple[bool, str | None]) -> None:
    assert class_role(name, prefix) == expected


_VAR = st.from_regex(r"[A-Z][A-Z0-9_]{0,12}", fullmatch=True).filter(
    lambda k: k not in ("RANK", "WORLD_SIZE", "WG_PREFIX"))


@settings(max_examples=60, deadline=None)
@given(others=st.dictionaries(_VAR, st.text(st.characters(blacklist_characters=";\x00", codec="utf-8")),
                              max_size=8),
       rank=st.integers(0, 4095), sep=st.sampled_from(["\x00", ";"]))
def test_only_the_three_variables_are_kept(others: dict[str, str], rank: int, sep: str) -> None:
    items = [f"{k}={v}" for k, v in others.items()] + [f"RANK={rank}"]
    random.Random(rank).shuffle(items)
    picked = _pick_env(sep.join(items).encode())
    assert picked == {"RANK": str(rank)}


# --- real reports made here by nsys (CPU: NVTX + OS runtime) -------------------------------------

_PROGRAM = """
import sys, time
import nvtx
for name in sys.argv[1:]:
    with nvtx.annotate(name):
        time.sleep(0.01)
"""


@pytest.fixture(scope="module")
def local_exports(nsys_exe: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Two exports made now: a ref worker with RANK/WORLD_SIZE set, and a bare process."""
    folder = tmp_path_factory.mktemp("identity_reports")
    program = folder / "prog.py"
    program.write_text(_PROGRAM)
    base_env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(folder),
                "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}
    runs = {"ref": ({"RANK": "3", "WORLD_SIZE": "4", "LOCAL_RANK": "1"}, ["ref_compute_log_prob"]),
            "bare": ({}, [])}
    out = {}
    for name, (env, ranges) in runs.items():       # one nsys session at a time: tests/nsys_profiling.py
        cmd = [str(nsys_exe), "profile", "--trace=nvtx,osrt", "--sample=none", "--cpuctxsw=none",
               "--force-overwrite=true", "-o", str(folder / name), sys.executable, str(program), *ranges]
        rep = folder / f"{name}.nsys-rep"
        profile_with_nsys(cmd, rep, cwd=folder, env={**base_env, **env})
        out[name] = export_with_nsys(nsys_exe, rep, folder / f"{name}.sqlite")
    return out


@pytest.mark.nsys
def test_local_ref_worker_report(local_exports: dict[str, Path]) -> None:
    ident = identify_report(local_exports["ref"])
    assert (ident.role, ident.rank, ident.world_size) == ("ref", 3, 4)
    assert E_STAGES in ident.evidence
    _assert_secret_free(ident)


@pytest.mark.nsys
def test_local_bare_report_is_unknown(local_exports: dict[str, Path]) -> None:
    assert identify_report(local_exports["bare"]) == ReportIdentity()
