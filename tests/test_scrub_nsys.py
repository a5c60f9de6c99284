"""Scrub of real nsys 2022 exports with secrets planted where the 2025 fixtures have none.

A session fixture profiles a small program with the real nsys (2022.4 here, "nsys 2022" exports)
so that FAKE secrets land where real runs leak them: printed to stdout and stderr (ProcessStreams),
inside NVTX messages, passed with `nsys profile -e KEY=VAL`, in the environment of another process
running while nsys records (a `sleep` child), in a thread name (the OS name of a thread), and a
user name in the working directory. Then scrub must remove every one of them while the NVTX phase
names and OS-runtime rows survive, and `check` must agree.
"""
from __future__ import annotations

import os
import sqlite3
import sys
from pathlib import Path

import pytest
from nsys_profiling import export_with_nsys, profile_with_nsys
from provenance_expect import leaves_as_is
from verlprof.stages.core.errors import BadInputError
from verlprof.stages.scrub.check import check_paths
from verlprof.stages.scrub.policy import load_policy
from verlprof.stages.scrub.rules import REDACTED
from verlprof.stages.scrub.tasks import ScrubTask, build_options, find_identities, scrub_artifact

pytestmark = pytest.mark.nsys

POLICY = load_policy(use_local_environment=False)

SECRETS = {
    "stdout": "hf_StdoutLeak0123456789abcdefghijKLMN",
    "stderr": "ghp_StderrLeak0123456789abcdefghijklmnop",
    "nvtx_message": "NvtxMarkSecret42",
    "nvtx_range": "NvtxRangeSecret77",
    "nsys_e_flag": "hf_NsysEnvFlag0123456789abcdefghijKL",
    "other_process_env": "zz-OtherProcSecret-998877",
    "thread_name": "Zq7TnS3cr9x",
    "app_env": "hf_AppEnvTok3n0123456789abcdefghijklm",
}

APP = r'''
import ctypes, os, subprocess, sys, threading, time
import nvtx
libc = ctypes.CDLL(None)
def setname(n):
    libc.prctl(15, n.encode(), 0, 0, 0)   # PR_SET_NAME: the OS thread name nsys records
print("stdout token=" + os.environ["LEAK_STDOUT"], flush=True)
print("stderr secret " + os.environ["LEAK_STDERR"], file=sys.stderr, flush=True)
child = subprocess.Popen(["sleep", "2"], env=dict(os.environ, OTHER_PROC_SECRET=os.environ["LEAK_OTHER"]))
def work():
    setname("tn-" + os.environ["APP_THREAD_TOKEN"])
    with nvtx.annotate("thread_work"):
        for _ in range(90):          # alive ~2 s: nsys 2022 names threads it sees in its /proc scans
            time.sleep(0.02)
setname("tn-" + os.environ["APP_THREAD_TOKEN"])   # a new thread inherits the creator's name
t = threading.Thread(target=work)
t.start()
setname("python3")
time.sleep(0.01)
for step in range(2):
    with nvtx.annotate("step"):
        with nvtx.annotate("gen"):
            time.sleep(0.03)
        nvtx.mark(message="note password=" + os.environ["LEAK_MARK"] + " done")
        with nvtx.annotate("update_actor api_key=" + os.environ["LEAK_RANGE"]):
            time.sleep(0.03)
t.join()
child.wait()
'''


@pytest.fixture(scope="session")
def planted_2022(nsys_exe: Path, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """(.nsys-rep, SQLite export) of APP, recorded by the real nsys with every secret planted."""
    root = tmp_path_factory.mktemp("nsys_planted")
    cwd = root / "home" / "dave" / "rlproj"          # a user name in the working directory
    cwd.mkdir(parents=True)
    app = cwd / "app.py"
    app.write_text(APP)
    env = dict(os.environ, LEAK_STDOUT=SECRETS["stdout"], LEAK_STDERR=SECRETS["stderr"],
               LEAK_MARK=SECRETS["nvtx_message"], LEAK_RANGE=SECRETS["nvtx_range"],
               LEAK_OTHER=SECRETS["other_process_env"], APP_THREAD_TOKEN=SECRETS["thread_name"],
               HF_TOKEN=SECRETS["app_env"], PWD=str(cwd))
    base = cwd / "planted"
    rep = base.with_name("planted.nsys-rep")
    profile_with_nsys(
        [str(nsys_exe), "profile", "--trace=nvtx,osrt", "--sample=none", "--cpuctxsw=none",
         "--force-overwrite=true", "-e", f"NSYS_E_TOKEN={SECRETS['nsys_e_flag']}", "-o", str(base),
         sys.executable, str(app)], rep, cwd=cwd, env=env)
    db = export_with_nsys(nsys_exe, rep, cwd / "planted.sqlite", cwd=cwd)
    os.chmod(db, 0o444)   # inputs are read-only: scrub must not need to write them
    return rep, db


@pytest.fixture(scope="session")
def scrubbed_2022(planted_2022, tmp_path_factory):
    _rep, db = planted_2022
    ids = find_identities(db, "nsys_sqlite", POLICY)
    opts = build_options([ids], POLICY, salt="t", include_local=False)
    out = tmp_path_factory.mktemp("nsys_scrubbed") / "planted.sqlite"
    res = scrub_artifact(ScrubTask(str(db), str(out), "nsys_sqlite", "planted.sqlite"), opts)
    return out, res, opts


def _all_text(db: Path) -> str:
    conn = sqlite3.connect(f"file:{db}?mode=ro&immutable=1", uri=True)
    parts = []
    for (t,) in conn.execute("SELECT name FROM sqlite_master WHERE type='table'"):
        for row in conn.execute(f'SELECT * FROM "{t}"'):
            parts += [v for v in row if isinstance(v, str)]
    return "\n".join(parts)


def test_every_planted_secret_reached_the_2022_export(planted_2022) -> None:
    _rep, db = planted_2022
    text = _all_text(db)
    for where, value in SECRETS.items():
        assert value in text, where
    conn = sqlite3.connect(f"file:{db}?mode=ro&immutable=1", uri=True)
    version = dict(conn.execute("SELECT name, value FROM EXPORT_META_DATA"))["EXPORT_PRODUCT_VERSION"]
    assert version.startswith("2022."), version
    streams = [r[0] for r in conn.execute("SELECT s.value FROM ProcessStreams p JOIN StringIds s ON s.id = p.contentId")]
    assert any(SECRETS["stdout"] in s for s in streams) and any(SECRETS["stderr"] in s for s in streams)
    threads = [r[0] for r in conn.execute("SELECT s.value FROM ThreadNames t JOIN StringIds s ON s.id = t.nameId")]
    assert f"tn-{SECRETS['thread_name']}" in threads
    envs = [r[0] for r in conn.execute("SELECT value FROM StringIds WHERE instr(value, 'OTHER_PROC_SECRET') > 0 "
                                       "OR value LIKE '%NSYS_E_TOKEN%'")]
    assert envs  # env blocks of the app and of the sleep child (NUL-separated)


def test_scrubbed_2022_export_is_clean(scrubbed_2022, planted_2022) -> None:
    out, res, opts = scrubbed_2022
    assert res.status == "done"
    data = out.read_bytes()
    for where, value in SECRETS.items():
        assert value.encode() not in data, where
    assert b"/home/dave" not in data and b"dave" not in data
    assert check_paths([out], POLICY, known=opts.pseudonyms) == []
    assert check_paths([out], POLICY) == []   # also without the bundle's identities
    assert check_paths([planted_2022[1]], POLICY)  # while the raw export is flagged


def test_2022_phases_threads_and_osrt_survive(scrubbed_2022, planted_2022) -> None:
    out, res, _ = scrubbed_2022
    b = sqlite3.connect(out)
    texts = [r[0] for r in b.execute("SELECT s.value FROM NVTX_EVENTS n JOIN StringIds s ON s.id = n.textId ORDER BY n.start")]
    # NVTX text and thread names are user-written (issue 39): public ones stay, the others (the
    # workload's own `thread_work`, a message holding a secret) leave as one whole pseudonym each
    assert texts.count("step") == 2 and texts.count("gen") == 2
    named = res.named
    assert texts.count(named["thread_work"][0]) >= 1
    assert not any("update_actor api_key" in t or "note password" in t for t in texts)
    threads = {r[0] for r in b.execute("SELECT s.value FROM ThreadNames t JOIN StringIds s ON s.id = t.nameId")}
    assert not any(t.startswith("tn-") for t in threads)
    assert threads <= {p for p, _w in named.values()} | {t for t in threads if leaves_as_is(t)}
    a = sqlite3.connect(f"file:{planted_2022[1]}?mode=ro&immutable=1", uri=True)
    q = "SELECT count(*), total(end - start), min(start), max(end) FROM OSRT_API"
    assert a.execute(q).fetchone() == b.execute(q).fetchone()
    q = "SELECT count(*), total(end - start) FROM NVTX_EVENTS"
    assert a.execute(q).fetchone() == b.execute(q).fetchone()
    versions = dict(b.execute("SELECT name, value FROM EXPORT_META_DATA"))
    assert versions["EXPORT_PRODUCT_VERSION"].startswith("2022.") and not any("PATH" in k for k in versions)
    for t in ("ProcessStreams", "OSRT_CALLCHAINS", "PROFILER_OVERHEAD"):
        assert t in res.info["tables_dropped"]


def test_raw_report_is_refused_and_flagged(planted_2022, tmp_path: Path) -> None:
    rep, _db = planted_2022
    ids = find_identities(rep, "nsys_report", POLICY)
    opts = build_options([ids], POLICY, salt="t", include_local=False)
    with pytest.raises(BadInputError, match="cannot be scrubbed"):
        scrub_artifact(ScrubTask(str(rep), str(tmp_path / "x.nsys-rep"), "nsys_report", rep.name), opts)
    assert not (tmp_path / "x.nsys-rep").exists()
    kinds = {f.kind for f in check_paths([rep], POLICY)}
    assert kinds == {"raw_nsys_report"}
