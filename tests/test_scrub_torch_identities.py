"""Issue 39, two parts: identities only a torch trace names, and secrets split across the inputs of
consecutive ops.

1. User and host names are planted, with made-up values, only where a torch trace writes them:
   `Concrete Inputs` items, Kineto args and kwargs, a python frame, `distributedInfo`, `traceName`,
   process and thread metadata and a user annotation's args of a copy of a REAL H200 torch trace.
   The identity pass learns each one. The same names stand alone in other files of the same run:
   an NVTX range, a thread name and the file name of a copy of the real H200 nsys export of the
   same workload, and user annotations and thread names of the other steps' traces. A real
   `verlprof collect` runs; no byte of the bundle holds any of them (file names, file bytes, gzip
   members, Parquet cells and metadata, SQLite cells). A scrub of the other files without the
   trace that names them keeps the lone names: it is the learning that removes them.
2. A token is written in two pieces into the `Concrete Inputs` of two consecutive ops of one
   thread, and another into the `kwargs` of two consecutive ops: each piece alone passes every
   rule (under the entropy rule's 20 characters). `verlprof scrub` redacts both pieces whole,
   `verlprof check` of the raw trace reports `split_value`, a collect publishes no piece; with the
   pairing off (`[context] join_adjacent_nvtx = false`) the pieces stay, so the pairing is what
   finds them.
"""
from __future__ import annotations

import gzip
import json
import re
import shutil
import sqlite3
import sys
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
from typer.testing import CliRunner

sys.path.insert(0, str(Path(__file__).parent))
from test_scrub_issue33 import _bundle_texts  # noqa: E402
from testdata import DATA, data_path  # noqa: E402
from verlprof.pipeline.cli import app  # noqa: E402
from verlprof.stages.scrub.policy import load_policy  # noqa: E402
from verlprof.stages.scrub.tasks import find_identities  # noqa: E402

runner = CliRunner()
POLICY = load_policy(use_local_environment=False)
TRACES = sorted((DATA / "h200-torch-2.11").glob("*.json.gz"))

# Made-up names (no earlier test uses them), one per place a torch trace names who and where.
USERS = {
    "concrete_input": "qzvelmarsk",          # Concrete Inputs item `USER=...`
    "kineto_arg": "brontheliq",              # an op's arg `LOGNAME` (torch writes kwinputs as args)
    "frame": "ostrawimple",                  # a python frame under /home/<user>
    "concrete_home": "dravencolt",           # `HOME=/mnt/nfs/<user>`
    "trace_name": "pemberquist",             # traceName under /Users/<user>
    "process_name": "yorvathen",             # process metadata `<user>@<host>: ...`
    "thread_name": "glimmerdaw",             # thread metadata `SLURM_JOB_USER=...`
    "hydra_override": "marrowvane",          # Concrete Inputs `+wandb.entity=...`
    "git_author": "Hestia Quorvald",         # an op's arg `GIT_AUTHOR_NAME`
}
HOSTS = {
    "kwargs": "fennix-gpu17",                # kwargs `{"HOSTNAME": ...}`
    "distributed_info": "kaldorvex04",       # distributedInfo `hostname`
    "process_name": "trellisnode9",          # process metadata `<user>@<host>: ...`
    "annotation_arg": "brisklab-n3",         # a user annotation's arg `HOST`
}
LONE_USER, LONE_HOST = USERS["concrete_input"], HOSTS["kwargs"]

# Split tokens (fake): each piece under the entropy rule's 20 characters, neither a pattern alone.
HF_TOKEN = "hf_" + "QvRt7LmZpX2kWn9bYc4sDf6gHj8KaUe3"      # 35 characters
KW_TOKEN = "hf_" + "Zq8rT3vLm9XwB2nK7pD4sF6hJ1cY5aE0"      # 35 characters
CI_HALVES = ("push " + HF_TOKEN[:17], HF_TOKEN[17:])
KW_HALVES = ("x " + KW_TOKEN[:18], KW_TOKEN[18:])


def _load(src: Path) -> dict[str, Any]:
    return json.loads(gzip.decompress(src.read_bytes()))


def _save(doc: dict[str, Any], dst: Path) -> None:
    dst.write_bytes(gzip.compress(json.dumps(doc).encode()))


def _main_thread_ops(doc: dict[str, Any]) -> list[dict[str, Any]]:
    """The cpu ops of the busiest thread, in ts order (what the pairing walks)."""
    ops = [e for e in doc["traceEvents"] if e.get("cat") == "cpu_op"]
    tids = {e["tid"] for e in ops}
    tid = max(tids, key=lambda t: sum(1 for e in ops if e["tid"] == t))
    return sorted((e for e in ops if e["tid"] == tid), key=lambda e: e["ts"])


def _plant_identities(doc: dict[str, Any]) -> None:
    """Every name of USERS and HOSTS, each in its one place of the trace."""
    ev = doc["traceEvents"]
    ops = _main_thread_ops(doc)
    m = len(ops) // 3
    ops[m]["args"]["Concrete Inputs"] = ["", f"USER={USERS['concrete_input']}"]
    ops[m + 1]["args"]["LOGNAME"] = USERS["kineto_arg"]
    ops[m + 2]["args"]["kwargs"] = {"HOSTNAME": HOSTS["kwargs"]}
    ev.append(dict(ops[m + 3], cat="python_function", name=f"/home/{USERS['frame']}/rl/train.py(12): main", args={}))
    ops[m + 4]["args"]["Concrete Inputs"] = ["", f"HOME=/mnt/nfs/{USERS['concrete_home']}"]
    ops[m + 5]["args"]["Concrete Inputs"] = ["", "--", f"+wandb.entity={USERS['hydra_override']}"]
    ops[m + 6]["args"]["GIT_AUTHOR_NAME"] = USERS["git_author"]
    ev.append(dict(ops[m + 7], cat="user_annotation", name="sync", args={"HOST": HOSTS["annotation_arg"]}))
    doc["distributedInfo"] = {"backend": "nccl", "rank": 0, "world_size": 1, "hostname": HOSTS["distributed_info"]}
    doc["traceName"] = f"/Users/{USERS['trace_name']}/runs/trace.json"
    for e in ev:
        if e.get("ph") == "M" and e.get("name") == "process_name":
            e["args"]["name"] = f"{USERS['process_name']}@{HOSTS['process_name']}: python3 main_ppo.py"
        elif e.get("ph") == "M" and e.get("name") == "thread_name":
            e["args"]["name"] = f"SLURM_JOB_USER={USERS['thread_name']}"


def _plant_lone_names(doc: dict[str, Any]) -> None:
    """Every planted name standing alone: a user annotation each, and the thread names."""
    ev = doc["traceEvents"]
    ops = _main_thread_ops(doc)
    m = len(ops) // 2
    for i, name in enumerate(list(USERS.values()) + list(HOSTS.values())):
        ev.append(dict(ops[m + i], cat="user_annotation", name=name, args={}))
    for e in ev:
        if e.get("ph") == "M" and e.get("name") == "thread_name":
            e["args"]["name"] = LONE_HOST


def _plant_split(doc: dict[str, Any]) -> None:
    """One token across the Concrete Inputs of two consecutive ops, one across their kwargs."""
    ops = _main_thread_ops(doc)
    m = len(ops) // 2 + 40
    ops[m]["args"]["Concrete Inputs"] = ["", CI_HALVES[0]]
    ops[m + 1]["args"]["Concrete Inputs"] = ["", CI_HALVES[1], "1"]
    ops[m + 5]["args"]["kwargs"] = {"note": KW_HALVES[0]}
    ops[m + 6]["args"]["kwargs"] = {"rest": KW_HALVES[1]}


def _plant_export(db: Path) -> None:
    """The lone names in the nsys export of the same workload: an NVTX range inside `reward` named
    after the user, and a thread named after the host."""
    con = sqlite3.connect(db)
    try:
        row = con.execute("SELECT n.rowid, n.start, n.end FROM NVTX_EVENTS n JOIN StringIds s ON s.id = n.textId "
                          "WHERE s.value = 'reward' ORDER BY n.start LIMIT 1 OFFSET 1").fetchone()
        cols = [c[1] for c in con.execute("PRAGMA table_info(NVTX_EVENTS)")]
        keep = ", ".join(c for c in cols if c not in ("start", "end", "text", "textId"))
        con.execute(f"INSERT INTO NVTX_EVENTS(start, end, text, {keep}) SELECT ?, ?, ?, {keep} "
                    "FROM NVTX_EVENTS WHERE rowid = ?", (row[1] + 1000, row[2] - 1000, LONE_USER, row[0]))
        for name_id, in con.execute("SELECT nameId FROM ThreadNames").fetchall():
            con.execute("UPDATE StringIds SET value = ? WHERE id = ?", (LONE_HOST, name_id))
        con.commit()
    finally:
        con.close()


def _planted() -> list[str]:
    return list(USERS.values()) + list(HOSTS.values())


def test_the_identity_pass_learns_every_name_a_torch_trace_holds(tmp_path: Path) -> None:
    doc = _load(TRACES[0])
    _plant_identities(doc)
    _save(doc, tmp_path / "t.json.gz")
    ids = find_identities(tmp_path / "t.json.gz", "torch_trace", POLICY)
    missing = {k: v for k, v in USERS.items() if v not in ids.users}
    missing |= {k: v for k, v in HOSTS.items() if v not in ids.hosts}
    assert not missing, (missing, ids.users, ids.hosts)
    # nothing else: the real trace names no user or host by itself
    assert ids.users == set(USERS.values()) and ids.hosts == set(HOSTS.values()), (ids.users, ids.hosts)
    assert not find_identities(TRACES[0], "torch_trace", POLICY).users


def _run(root: Path) -> None:
    """The run: step 1's trace names who and where; the nsys export (named after the host) and
    steps 2 and 3 hold the names alone; every trace holds the split tokens."""
    root.mkdir()
    for i, src in enumerate(TRACES):
        doc = _load(src)
        (_plant_identities if i == 0 else _plant_lone_names)(doc)
        _plant_split(doc)
        _save(doc, root / src.name)
    db = root / f"whole_1873_{LONE_HOST}.sqlite"
    shutil.copyfile(data_path("h200-nsys-2025.3/whole/whole_1873.sqlite"), db)
    _plant_export(db)


def test_names_only_a_torch_trace_holds_leave_no_byte_of_a_collect(tmp_path: Path) -> None:
    root = tmp_path / "run"
    _run(root)
    raw = _bundle_texts(root)
    for s in _planted() + [*CI_HALVES, *KW_HALVES]:
        assert s in raw, s

    # The owner approves the lone names (--keep-names: user-written text they allow out, issue 39).
    # Without the trace that names them, the approved names pass: nothing else marks them ...
    approved = tmp_path / "approved.txt"
    approved.write_text("\n".join((LONE_USER, USERS["kineto_arg"], HOSTS["distributed_info"], LONE_HOST)) + "\n")
    alone = tmp_path / "alone"
    res = runner.invoke(app, ["scrub", str(root / TRACES[1].name), str(next(root.glob("*.sqlite"))),
                              "-o", str(alone), "--no-local-env", "--keep-names", str(approved)])
    assert res.exit_code == 0, res.output
    kept = _bundle_texts(alone)
    assert all(n in kept for n in (LONE_USER, USERS["kineto_arg"], HOSTS["distributed_info"])), "control"

    # ... while learned from the trace, they are the run's identities, replaced even where approved
    out = tmp_path / "out"
    res = runner.invoke(app, ["collect", str(root), "-o", str(out), "--work", str(tmp_path / "work"), "--jobs", "1",
                              "--keep-names", str(approved)])
    assert res.exit_code == 0, res.output
    assert " 0 summarized" not in res.output, res.output
    blob = _bundle_texts(out)
    leaked = [s for s in _planted() + [*CI_HALVES, *KW_HALVES, HF_TOKEN[:17], HF_TOKEN[17:], KW_TOKEN[18:]] if s in blob]
    assert not leaked, leaked
    # the lone names were published, as the run's pseudonyms: the NVTX range named after the user
    # in the summaries, the host in the export's file name and as the window trace's thread names
    paths = pq.read_table(out / "summaries" / "phases.parquet").column("path").to_pylist()
    assert any(re.fullmatch(r"step > reward > user-\d+", p or "") for p in paths), paths
    assert any(re.fullmatch(r"whole_1873_host-\d+\.sqlite", p.name) for p in (out / "traces").iterdir())
    window = next((out / "traces").glob(TRACES[1].name.replace(".json.gz", "*.json.gz")))
    threads = {e["args"]["name"] for e in _load(window)["traceEvents"] if e.get("name") == "thread_name"}
    assert threads and all(re.fullmatch(r"host-\d+", t) for t in threads), threads
    assert runner.invoke(app, ["check", str(out), "--no-local-env"]).exit_code == 0


def test_a_token_split_across_consecutive_ops_is_redacted_whole_and_checked(tmp_path: Path) -> None:
    doc = _load(TRACES[2])
    _plant_split(doc)
    src = tmp_path / "split.json.gz"
    _save(doc, src)

    chk = runner.invoke(app, ["check", str(src), "--no-local-env"])
    assert chk.exit_code == 1 and "<inputs of consecutive ops>: split_value" in chk.output, chk.output
    assert "by class: split_value: 4 occurrences" in chk.output, chk.output

    out = tmp_path / "out.json.gz"
    res = runner.invoke(app, ["scrub", str(src), "-o", str(out), "--no-local-env"])
    assert res.exit_code == 0, res.output
    text = gzip.decompress(out.read_bytes()).decode()
    assert not [h for h in (*CI_HALVES, *KW_HALVES) if h in text]
    assert text.count('"[REDACTED]"') >= 4      # each piece whole, not a part of it
    report = json.loads(Path(str(out) + ".scrub_report.json").read_text())
    assert report["totals"].get("split_value", 0) >= 4, report["totals"]
    assert runner.invoke(app, ["check", str(out), "--no-local-env"]).exit_code == 0

    # the pairing is what finds them: with it off, every piece the owner approved (user-written
    # op inputs leave only so, issue 39) passes scrub and check
    policy = tmp_path / "p.toml"
    policy.write_text("[context]\njoin_adjacent_nvtx = false\n")
    approved = tmp_path / "approved.txt"
    approved.write_text("\n".join((*CI_HALVES, *KW_HALVES)) + "\n")
    off = tmp_path / "off.json.gz"
    res = runner.invoke(app, ["scrub", str(src), "-o", str(off), "--no-local-env", "--policy", str(policy),
                              "--keep-names", str(approved)])
    assert res.exit_code == 0, res.output
    text = gzip.decompress(off.read_bytes()).decode()
    assert all(h in text for h in (*CI_HALVES, *KW_HALVES))
    assert runner.invoke(app, ["check", str(off), "--no-local-env", "--policy", str(policy),
                               "--keep-names", str(approved)]).exit_code == 0


def _reference_inputs(doc: dict[str, Any]) -> dict[tuple[str, str], list[tuple[str, ...]]]:
    """Per thread, the non-trivial string inputs of every op, ts order: every event decoded."""
    from verlprof.stages.scrub.op_inputs import OpInputs
    ref = OpInputs()
    for ev in doc["traceEvents"]:
        ref.feed_event(ev)
    return {k: [items for _ts, _n, items in sorted(v)] for k, v in ref._threads.items()}


def test_the_raw_scan_finds_the_inputs_a_full_decode_finds(tmp_path: Path) -> None:
    """The byte-level scan (only lists that may hold text are decoded) against decoding every
    event, on real traces with look-alike items planted: a `]` inside an item, an escaped quote,
    booleans and numbers, a dict of kwargs, compact and spaced JSON."""
    from verlprof.stages.readers.chrome_trace import ChromeTraceStream
    from verlprof.stages.scrub.op_inputs import OpInputs
    from verlprof.stages.scrub.trace import loads_event
    tricky = [["", "[1, 2] by qzlorn"], ["", 'a\\"]b qzlorn'], ["", "True", "1e-05", "[768]"], ["[True, False]"],
              ["", "cuda:0"], [["nested", "qz list"]]]
    srcs = TRACES + [Path(data_path("kineto_public/hta_ddp_nccl_rank0.json"))]   # ours and a public one
    for i, src in enumerate(srcs):
        doc = _load(src) if src.name.endswith(".gz") else json.loads(src.read_bytes())
        _plant_split(doc)
        ops = _main_thread_ops(doc)
        for j, items in enumerate(tricky):
            ops[len(ops) // 4 + 2 * j]["args"]["Concrete Inputs"] = items
        ops[len(ops) // 4 + 20]["args"]["kwargs"] = {"a": "qz kw", "b": 3}
        path = tmp_path / f"t{i}.json.gz"
        path.write_bytes(gzip.compress(json.dumps(doc, separators=(",", ":") if i % 2 else None).encode()))
        scan = OpInputs()
        for batch in ChromeTraceStream(path):
            scan.feed_batch(batch.raw, batch.events, lambda raw: loads_event(raw, path))
        got = {k: [items for _ts, _n, items in sorted(v)] for k, v in scan._threads.items()}
        want = _reference_inputs(json.loads(gzip.decompress(path.read_bytes())))
        assert got == want, (src.name, got, want)
        assert any("qz kw" in items for v in got.values() for items in v)


def test_real_captures_hold_no_split_value_and_name_no_one() -> None:
    """No false positives: every torch trace of tests/data, as captured, teaches no split half,
    and no user or host beyond the host key the straggler runs write (`vm`)."""
    srcs = sorted(DATA.glob("*/*.json.gz")) + sorted(DATA.glob("*/*/*.json.gz"))
    srcs += [data_path(str(p.relative_to(DATA))[:-3]) for p in sorted(DATA.rglob("*.json.xz"))]
    assert len(srcs) >= 20
    for src in srcs:
        ids = find_identities(src, "torch_trace", POLICY)
        assert not ids.split_values and not ids.users and ids.hosts <= {"vm"}, (src, ids)
