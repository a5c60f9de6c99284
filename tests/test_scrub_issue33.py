"""Issue 33: personal and internal data without a fixed shape never reaches a bundle, and real names
are never damaged.

Every class of the issue (hosts next to credentials and by shape, user names without a fixed place,
hardware ids, arguments in other shapes) is planted, with made-up values, where clusters put them:
NVTX range texts and domains, OS thread names, process argv and environment rows of a copy of the
real H200 nsys export; Kineto args (nested), `Concrete Inputs`, frames and process metadata of a
real torch trace; the run's Hydra config; the names of the input files. A real `verlprof collect`
runs on them and no planted value is found in any byte of the bundle: file bytes, gzip members,
Parquet cells and key-value metadata, SQLite cells, file names. `verlprof check` of the raw run
refuses it. The rules' own examples, the salt-independence of the verdict and the false-positive
corpus (with a user name that is an ordinary word) are checked too.
"""
from __future__ import annotations

import gzip
import json
import shutil
import sqlite3
import sys
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from typer.testing import CliRunner

sys.path.insert(0, str(Path(__file__).parent))
from scrub_corpus import corpus  # noqa: E402
from testdata import DATA, data_path  # noqa: E402
from verlprof.pipeline.cli import app  # noqa: E402
from verlprof.stages.scrub import publish_name  # noqa: E402
from verlprof.stages.scrub.identities import IdentityCollector, Pseudonyms  # noqa: E402
from verlprof.stages.scrub.policy import load_policy  # noqa: E402
from verlprof.stages.scrub.scrubber import Scrubber  # noqa: E402
from verlprof.stages.scrub.shapes import EXAMPLES  # noqa: E402

runner = CliRunner()
POLICY = load_policy(use_local_environment=False)

# Made-up identities and values, one per class of the issue.
USER = "hopperx"
EXPERIMENT = "qzexp-grpo"
PLANTS = {
    "url_host_after_credentials": ("amqp://svcuser:Pw0rdSecret9@broker.corp.example.com:5672",
                                   ("svcuser", "Pw0rdSecret9", "broker.corp")),
    "url_query_after_port": ("http://svc.corp.x.com:8000/score?token=TokVal7fakeQ",
                             ("svc.corp", "TokVal7fakeQ")),
    "host_team": ("ssh build01.team", ("build01",)),
    "host_lab_port": ("connect db7.lab:5432", ("db7.lab",)),
    "conda_env": (f"/opt/conda/envs/{USER}-env/bin/python", (USER,)),
    "venv": (f"/srv/venvs/{USER}/lib/python3.10", (USER,)),
    "tilde": (f"~{USER}/projects/run.sh", (USER,)),
    "windows_home": (f"C:\\Users\\{USER}\\AppData", (USER,)),
    "netrc": (f"machine api.corp login {USER} password x", (USER,)),
    "wandb_url": (f"https://wandb.ai/{USER}/verl-grpo/runs/a1b2c3d4", (USER,)),
    "wandb_entity": (f"+wandb.entity={USER}", (USER,)),
    "experiment": (f"trainer.experiment_name={EXPERIMENT}", (EXPERIMENT,)),
    "author": (f"author={USER}", (USER,)),
    "mac": ("eth0 ether 3c:ec:ef:12:34:56", ("3c:ec:ef:12:34:56",)),
    "gpu_short": ("GPU-bf8e6e3d", ("bf8e6e3d",)),
    "gpu_mig": ("MIG-GPU-bf8e6e3d-1234-5678-9abc-def012345678/1/0", ("bf8e6e3d",)),
}
SECRETS = sorted({s for _t, found in PLANTS.values() for s in found})
API_VALUE = "ZqSecretApiValue77"
BASIC = "dXM6cHc9"


def _identities(*texts: str) -> Pseudonyms:
    col = IdentityCollector(POLICY)
    for t in texts:
        col.feed(t)
    return Pseudonyms.build([col.ids], salt="t", policy=POLICY)


# ------------------------------------------------------------------------------------------------
# The rules, string by string
# ------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("rule", sorted(EXAMPLES))
def test_each_shape_rule_catches_its_examples_and_leaves_its_look_alikes(rule: str) -> None:
    sc = Scrubber(POLICY, Pseudonyms(salt="x"))
    catch, keep = EXAMPLES[rule]
    for ex in catch:
        assert sc.scrub_rules(ex, "t") != ex, ex
        assert sc.findings(ex), ex
    for ex in keep:
        assert sc.scrub_rules(ex, "t") == ex, (ex, sc.scrub_rules(ex, "t"))


@pytest.mark.parametrize("name", sorted(PLANTS))
def test_each_planted_class_is_replaced_and_the_result_is_clean(name: str) -> None:
    text, found = PLANTS[name]
    ps = _identities(f"SLURM_JOB_USER={USER}", f"experiment_name: {EXPERIMENT}")
    sc = Scrubber(POLICY, ps)
    out = sc.scrub_rules(text, "t")
    for s in found:
        assert s not in out, (text, out)
    assert not Scrubber(POLICY, ps).findings(out), out      # what scrub leaves, check calls clean


def test_identities_come_from_every_source() -> None:
    col = IdentityCollector(POLICY)
    for t in ("SLURM_JOB_USER=ua1xq", "LOGNAME=ua2xq", "HOME=/srv/people/ua3xq", "GIT_AUTHOR_NAME=ua4xq",
              "+wandb.entity=ua5xq", "machine h login ua6xq password p", "users:\n- name: ua7xq\n  user: {}",
              "GIT_AUTHOR_EMAIL=ua8xq@corp.example.com"):
        col.feed(t)
    col.feed_obj({"trainer": {"experiment_name": "ua9xq-grpo", "project_name": "ub1xq"}})
    assert {"ua1xq", "ua2xq", "ua3xq", "ua4xq", "ua5xq", "ua6xq", "ua7xq", "ua8xq", "ua9xq-grpo", "ub1xq"} <= col.ids.users


def test_known_names_are_replaced_as_whole_tokens_only() -> None:
    sc = Scrubber(POLICY, _identities("USER=grace", "HOSTNAME=gpu-node17"))
    assert sc.scrub_rules("grace_hopper_kernel", "t") == "grace_hopper_kernel"
    assert sc.scrub_rules("graceful_shutdown", "t") == "graceful_shutdown"
    assert "grace" not in sc.scrub_rules("run by grace today", "t")
    # in a file name `_` separates words: the input names lose the user and the host
    assert "grace" not in publish_name("runs/trace_grace_rank0.json.gz", Pseudonyms.build(
        [_collect("USER=grace")], salt="t", policy=POLICY))
    assert "gpu-node17" not in sc.scrub_rules("gpu-node17_rank0.1.pt.trace.json.gz", "t")


def _collect(*texts: str):
    col = IdentityCollector(POLICY)
    for t in texts:
        col.feed(t)
    return col.ids


def test_arguments_in_other_shapes() -> None:
    from verlprof.stages.scrub.trace import TraceScrubber

    sc = Scrubber(POLICY, Pseudonyms(salt="x"))
    ev = {"ph": "X", "name": "aten::to", "args": {"Concrete Inputs": ["", "--api-key", API_VALUE, "--lr", "0.1"],
                                                  "req": {"headers": {"Authorization": f"Basic {BASIC}"}}}}
    out = json.dumps(TraceScrubber(sc, POLICY).event(ev))
    # (the flag is user-written Concrete Inputs text since issue 39: public, approved or its pseudonym)
    assert API_VALUE not in out and BASIC not in out and '"0.1"' in out


REAL_NAMES = ("c10d::_allgather_base_", "## Call CompiledFxGraph fxkiq3d5hw7lqpmrzw2yq5cj2u7nsl3qfbsbpsgwjz5cdtyz3amz ##",
              "verl==0.6.0+git.3f2a9c1b7e4d5a6f8b9c0d1e2f3a4b5c6d7e8f90",
              "git_version=3f2a9c1b7e4d5a6f8b9c0d1e2f3a4b5c6d7e8f90",
              "fbqq5xn3tq3gdyqgqnxx4f2bpj3xqw7h5kjz2y6c4nqx7lbbmh3i", "grace_hopper_kernel",
              "c10d::allreduce_", "torch.ops.c10d.allreduce", "model-00001-of-00004.safetensors", "main_ppo.py:42")


def _public_trace_names() -> set[str]:
    names: set[str] = set()
    for p in sorted((DATA / "kineto_public").rglob("*.json*")) + sorted((DATA / "h200-torch-2.11").glob("*.json.gz")):
        if p.name.endswith(".xz"):
            p = data_path(str(p.relative_to(DATA))[:-3])
        opener = gzip.open if p.name.endswith(".gz") else open
        try:
            with opener(p, "rt", encoding="utf-8") as f:
                doc = json.load(f)
        except (OSError, ValueError):
            continue
        events = doc if isinstance(doc, list) else doc.get("traceEvents", ())
        names |= {e["name"] for e in events if isinstance(e, dict) and isinstance(e.get("name"), str)}
        names |= {e["args"]["name"] for e in events if isinstance(e, dict) and e.get("ph") == "M"
                  and isinstance(e.get("args"), dict) and isinstance(e["args"].get("name"), str)}
    return names


@pytest.mark.parametrize("salt", ["a", "ff" * 8])
def test_false_positive_corpus_unchanged_with_ordinary_word_identities(salt: str) -> None:
    """Every real kernel, op, range, frame and thread/process name of tests/data (and the issue's
    names) comes out unchanged, with user names that are ordinary words (`grace`, `kernel`-like)."""
    names = set().union(*corpus().values()) | _public_trace_names() | set(REAL_NAMES)
    ps = Pseudonyms.build([_collect("USER=grace", "LOGNAME=hopper", "SLURM_JOB_USER=train",
                                    "experiment_name: gsm8k")], salt=salt, policy=POLICY)
    sc = Scrubber(POLICY, ps)
    changed = sorted(n for n in names if sc.scrub_rules(n, "corpus") != n
                     and not any(w in n.split() for w in ("grace", "gsm8k")))
    assert len(names) > 20_000
    assert not changed, [(n[:100], sc.scrub_rules(n, "corpus")[:100]) for n in changed[:10]]


def test_the_verdict_does_not_depend_on_the_salt() -> None:
    """Whatever the salt, no pseudonym reads as an address or a secret to check."""
    texts = [t for t, _f in PLANTS.values()] + [
        "10.1.2.3", "10.0.0.5:8000", "node 10.1.2.3.4", "fe80::1%eth0 2001:db8::7", "host build01.team.5.6",
        "gpu-node17.internal:29500", "user:pass@10.1.2.3:5672", "db7.lab:5432/x?y=1", "a.b7.lab::1:2"]
    for i in range(60):
        salt = f"salt-{i}"
        ps = _identities(f"USER={USER}")
        ps = Pseudonyms(ps.hosts, ps.users, ps.secret_values, ps.gpu_uuids, salt)
        sc = Scrubber(POLICY, ps)
        fresh = Scrubber(POLICY, Pseudonyms(salt=""))
        for t in texts:
            out = sc.scrub_rules(t, "t")
            assert not fresh.findings(out), (salt, t, out, fresh.findings(out))
            assert not sc.findings(out), (salt, t, out)


# ------------------------------------------------------------------------------------------------
# End to end: planted in every location of real captures, a real collect, every byte of the bundle
# ------------------------------------------------------------------------------------------------

def _plant_sqlite(db: Path) -> None:
    texts = [t for t, _f in PLANTS.values()]
    con = sqlite3.connect(db)
    try:
        upd = con.execute("SELECT id FROM StringIds WHERE value = 'update_actor'").fetchone()[0]
        con.execute("UPDATE StringIds SET value = value || ' ' || ? WHERE id = ?", (" | ".join(texts[:8]), upd))
        # the NVTX domain's name (a domain-create row, eventType 75) and another range
        dom = con.execute("SELECT textId, text FROM NVTX_EVENTS WHERE eventType = 75").fetchone()
        rew = con.execute("SELECT id FROM StringIds WHERE value = 'reward'").fetchone()[0]
        con.execute("UPDATE StringIds SET value = value || ' ' || ? WHERE id = ?", (" | ".join(texts[8:]), rew))
        if dom is not None and dom[1] is not None:
            con.execute("UPDATE NVTX_EVENTS SET text = text || ? WHERE eventType = 75", (" " + texts[2],))
        elif dom is not None:
            con.execute("UPDATE StringIds SET value = value || ? WHERE id = ?", (" " + texts[2], dom[0]))
        tid = con.execute("SELECT nameId FROM ThreadNames ORDER BY rowid LIMIT 1").fetchone()[0]
        con.execute("UPDATE StringIds SET value = ? WHERE id = ?", (f"wk {texts[13]} {texts[14]} {texts[2]}", tid))
        con.execute("UPDATE PROCESSES SET name = ? ", (f"python3 -m verl.trainer.main_ppo --api-key {API_VALUE} "
                                                      f"{texts[11]} {texts[4]}",))
        rows = [("PROCESS_0:ARGUMENT_1", "--api-key"), ("PROCESS_0:ARGUMENT_2", API_VALUE),
                ("PROCESS_0:ENVIRONMENT_VARIABLE", f"SLURM_JOB_USER={USER}"),
                ("PROCESS_0:ENVIRONMENT_VARIABLE", f"GIT_AUTHOR_NAME={USER}"),
                ("PROCESS_0:ENVIRONMENT_VARIABLE", f"HOME=/home/{USER}")]
        con.executemany("INSERT INTO META_DATA_CAPTURE(name, value) VALUES (?, ?)", rows)
        con.commit()
    finally:
        con.close()


def _plant_trace(src: Path, dst: Path) -> None:
    doc = json.loads(gzip.decompress(src.read_bytes()))
    texts = [t for t, _f in PLANTS.values()]
    ev = doc["traceEvents"]
    ops = [e for e in ev if e.get("cat") == "cpu_op"]
    mid = len(ops) // 2              # inside the step the window keeps
    ops[mid]["args"]["Concrete Inputs"] = ["", "--api-key", API_VALUE]
    ops[mid + 1]["args"]["request"] = {"headers": {"Authorization": f"Basic {BASIC}"}, "url": texts[1]}
    ops[mid + 2]["args"]["note"] = " ; ".join(texts)
    ev.append(dict(ops[mid + 3], cat="user_annotation", name=f"fetch {texts[3]} {texts[9]}", args={}))
    frames = [e for e in ev if e.get("cat") == "python_function"]
    if frames:
        frames[len(frames) // 2]["name"] = f"/srv/venvs/{USER}/lib/python3.10/site-packages/verl/x.py(12): run"
        frames[len(frames) // 2 + 1]["name"] = f"~{USER}/train.py(3): main"
    for e in ev:
        if e.get("ph") == "M" and e.get("name") == "process_name":
            e["args"]["name"] = f"python3 {texts[2]} {texts[14]}"
    doc["deviceProperties"] = [dict(d, uuid="GPU-bf8e6e3d") for d in doc.get("deviceProperties", [])]
    dst.write_bytes(gzip.compress(json.dumps(doc).encode()))


def _bundle_texts(root: Path) -> str:
    """Every byte of a bundle as text: names, file bytes, gzip members, Parquet cells and metadata,
    SQLite cells."""
    parts: list[str] = []
    for p in sorted(root.rglob("*")):
        parts.append(str(p.relative_to(root)))
        if not p.is_file():
            continue
        data = p.read_bytes()
        parts.append(data.decode("latin-1"))
        if data[:2] == b"\x1f\x8b":
            parts.append(gzip.decompress(data).decode("latin-1"))
        if data[:4] == b"PAR1":
            pf = pq.ParquetFile(p)
            parts.append(repr(pf.metadata.metadata))
            parts.append(repr(pf.read().to_pylist()))
        if data[:16] == b"SQLite format 3\x00":
            con = sqlite3.connect(f"file:{p}?mode=ro", uri=True)
            con.text_factory = lambda b: b.decode("utf-8", "replace")
            try:
                parts.append("\n".join(con.iterdump()))
            finally:
                con.close()
    return "\n".join(parts)


def _hydra(run: Path) -> None:
    hydra = run / ".hydra"
    hydra.mkdir()
    (hydra / "config.yaml").write_text(f"trainer:\n  experiment_name: {EXPERIMENT}\n  project_name: verl\n"
                                       f"wandb:\n  entity: {USER}\n")


@pytest.mark.parametrize("fmt", ["nsys", "torch"])
def test_planted_classes_reach_no_byte_of_a_real_collect(tmp_path: Path, fmt: str) -> None:
    root = tmp_path / "run"
    run = root / USER                      # a user in the input's folder name
    run.mkdir(parents=True)
    if fmt == "nsys":
        db = run / f"whole_1873_{USER}.sqlite"  # and in its file name
        shutil.copyfile(data_path("h200-nsys-2025.3/whole/whole_1873.sqlite"), db)
        _plant_sqlite(db)
    else:
        for src in sorted((DATA / "h200-torch-2.11").glob("*.json.gz")):
            _plant_trace(src, run / src.name)
    _hydra(root)                           # the run's config: experiment name, wandb entity
    planted = SECRETS + [API_VALUE] + ([BASIC] if fmt == "torch" else [])
    raw = _bundle_texts(root)
    for s in planted:
        assert s in raw, s

    out = tmp_path / "out"
    res = runner.invoke(app, ["collect", str(root), "-o", str(out), "--work", str(tmp_path / "work"), "--jobs", "1"])
    assert res.exit_code == 0, res.output
    assert "summarized" in res.output and " 0 summarized" not in res.output, res.output
    blob = _bundle_texts(out)
    assert "REDACTED" in blob                  # the planted rows were read and scrubbed, not dropped
    leaked = [s for s in planted if s in blob]
    assert not leaked, leaked

    # check of the raw inputs refuses them, naming the classes
    chk = runner.invoke(app, ["check", str(root)])
    assert chk.exit_code != 0
    # (a raw export teaches check its own secret values, as scrub's identity pass does: the
    # `--api-key` value there is a known `secret_value`; a trace's is found by its flag's name)
    secret = "secret_value" if fmt == "nsys" else "secret_by_name"
    for kind in ("host_name", "url_part", "hardware_id", "gpu_uuid", secret):
        assert kind in chk.output, (kind, chk.output[-3000:])


def test_scrub_of_an_export_counts_what_check_finds_in_the_tables_it_drops(tmp_path: Path) -> None:
    """Issue 33: `verlprof scrub` of one export reported 0 replacements where `verlprof check` of
    the same file found secrets: those sat in tables the copy drops. Now both name them."""
    db = tmp_path / "w.sqlite"
    shutil.copyfile(data_path("h200-nsys-2025.3/whole/whole_1873.sqlite"), db)
    con = sqlite3.connect(db)
    con.executemany("INSERT INTO META_DATA_CAPTURE(name, value) VALUES (?, ?)",
                    [("PROCESS_0:ENVIRONMENT_VARIABLE", f"HF_TOKEN=hf_{API_VALUE}Zx9QwErTyUiOp"),
                     ("PROCESS_0:ENVIRONMENT_VARIABLE", "BROKER=amqp://svcuser:Pw0rdSecret9@broker.corp.example.com:5672")])
    con.commit()
    con.close()
    res = runner.invoke(app, ["scrub", str(db), "-o", str(tmp_path / "out.sqlite"), "--no-local-env"])
    assert res.exit_code == 0, res.output
    report = json.loads((tmp_path / "out.sqlite.scrub_report.json").read_text())
    dropped = report["artifacts"][0]["counts"].get("META_DATA_CAPTURE.value (dropped)", {})
    assert sum(dropped.values()) >= 2, report["artifacts"][0]["counts"]
    chk = runner.invoke(app, ["check", str(db), "--no-local-env"])
    assert chk.exit_code != 0 and "META_DATA_CAPTURE.value" in chk.output
    # and the scrubbed copy holds none of it
    assert runner.invoke(app, ["check", str(tmp_path / "out.sqlite"), "--no-local-env"]).exit_code == 0
