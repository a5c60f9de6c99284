"""Issue 22: safe to share from a real cluster. Fresh fake values of every class a cluster writes
into traces (user directories outside /home, host names and addresses, e-mails, URL credentials,
argv secrets in every spelling, the run's own config values, tokens the old entropy rule missed,
split values, memory-snapshot annotations) are planted in copies of the real fixtures; `collect`
must publish a bundle in which no byte (gzip and tar members opened, Parquet cells and metadata
read) holds any of them, and `check` must find each in the raw input. And what users need stays:
the fmha kernel names, the content hashes, `token_uri`, `--host 0.0.0.0`.
"""
from __future__ import annotations

import gzip
import io
import json
import pickle
import shutil
import sqlite3
import sys
import tarfile
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from typer.testing import CliRunner

sys.path.insert(0, str(Path(__file__).parent))
from testdata import data_dir, data_path  # noqa: E402
from verlprof.pipeline.cli import app  # noqa: E402
from verlprof.stages.scrub import Checker, check_paths, load_policy  # noqa: E402
from verlprof.stages.scrub.scrubber import Scrubber

runner = CliRunner()
POLICY = load_policy(use_local_environment=False)

# class -> (text planted, values that must not reach the bundle). All values are made up.
LONG = "Zq8Lm3Nv7Bx2Kc5Jh9Gf4Ds1Ap6Ow0Ie" * 5          # 165 chars, base62
NSYS_PLANTS: dict[str, tuple[str, tuple[str, ...]]] = {
    "user_dir": ("load /fsx/zeldaq/ckpt/model.pt and /scratch/mortimer7/run", ("zeldaq", "mortimer7")),
    "fqdn": ("dial gpu-node-17.corp.acme-ml.com", ("gpu-node-17", "acme-ml")),
    "ipv4": ("master 10.44.3.19 peer 192.168.77.5", ("10.44.3.19", "192.168.77.5")),
    "ipv6": ("bind [fd00:1234:abcd::42]:29500", ("fd00:1234:abcd::42",)),
    "email": ("mail jq@acme-ml.com", ("jq@acme-ml",)),
    "url_empty_user": ("cache redis://:Pw9redisXq@cache-1:6379/0", ("Pw9redisXq",)),
    "url_at_password": ("db postgres://bob:p@ssW0rdZq@db-1/x", ("p@ssW0rdZq", "ssW0rdZq")),
    "argv_list": ("argv ['--api-key', 'AbQ1w2E3r4Yt']", ("AbQ1w2E3r4Yt",)),
    "argv_quoted": ("run --api-key 'Zy9Xw8Vu7Ts'", ("Zy9Xw8Vu7Ts",)),
    "argv_tool": ("mysql -u root -p MyS3cretPw db; sshpass -p 'SshP4ssw0rd' ssh x", ("MyS3cretPw", "SshP4ssw0rd")),
    "basic_header": ("hdr {'Authorization': 'Basic dXM6cHc='}", ("dXM6cHc=",)),
}
THREAD_PLANTS: dict[str, tuple[str, tuple[str, ...]]] = {
    "config_value": ("judge plumtree-lantern-horizon", ("plumtree-lantern-horizon",)),
    "entropy_lower": ("x qzkvbxwplrtjhgfdsmncqwrtz", ("qzkvbxwplrtjhgfdsmncqwrtz",)),
    "entropy_no_digit": ("y QwErTyUiOpAsDfGhJkLzXcVb", ("QwErTyUiOpAsDfGhJkLzXcVb",)),
    "entropy_long": ("z " + LONG, (LONG[:40],)),
    "thread_host": ("worker@gpu-node-18.corp.acme-ml.com", ("gpu-node-18",)),
}
SPLIT_TOKEN = "ghp_Q7w2E3r4T5y6U7i8O9p0A1s2D3f4G5h6J7k9"
SPLIT = (f"tok_part1 {SPLIT_TOKEN[:14]}", f"{SPLIT_TOKEN[14:]} tail")
FMHA = "fmha_cutlassF_bf16_aligned_64x128_rf_sm80"
CONFIG = "judge_api_key: plumtree-lantern-horizon\ntrainer:\n  total_epochs: 1\n"


def _plant_nsys(db: Path) -> dict[str, int]:
    """Plant NSYS_PLANTS into phase names, THREAD_PLANTS into thread names, SPLIT into two adjacent
    ranges and FMHA as a kernel name; returns class -> StringIds id (for `check`'s locations)."""
    from verlprof.stages.scrub.sqlite_cells import iter_adjacent_nvtx

    con = sqlite3.connect(db)
    try:
        ids: dict[str, int] = {}
        pair = next((a, b) for a, b in iter_adjacent_nvtx(con)
                    if a[1] is not None and b[1] is not None and a[2] != b[2] and "step" not in (a[2], b[2]))
        con.execute("UPDATE StringIds SET value = ? WHERE id = ?", (pair[0][2] + " " + SPLIT[0], pair[0][1]))
        con.execute("UPDATE StringIds SET value = ? WHERE id = ?", (SPLIT[1], pair[1][1]))
        ids["split"] = pair[0][1]
        phases = [r for r in con.execute(
            "SELECT DISTINCT s.id, s.value FROM NVTX_EVENTS n JOIN StringIds s ON s.id = n.textId "
            "WHERE s.value NOT IN ('step') AND s.id NOT IN (?, ?) ORDER BY s.id", (pair[0][1], pair[1][1]))]
        names = dict(phases)
        for i, (cls, (text, _v)) in enumerate(NSYS_PLANTS.items()):    # two classes share a name at most
            sid = phases[i % len(phases)][0]
            names[sid] = f"{names[sid]} {text}"
            ids[cls] = sid
        for sid, name in names.items():
            con.execute("UPDATE StringIds SET value = ? WHERE id = ?", (name, sid))
        threads = [r[0] for r in con.execute("SELECT DISTINCT nameId FROM ThreadNames ORDER BY nameId")]
        for sid, (cls, (text, _v)) in zip(threads, THREAD_PLANTS.items()):
            con.execute("UPDATE StringIds SET value = ? WHERE id = ?", (text, sid))
            ids[cls] = sid
        kern = con.execute("SELECT demangledName FROM CUPTI_ACTIVITY_KIND_KERNEL GROUP BY 1 "
                           "ORDER BY count(*) DESC LIMIT 1").fetchone()[0]
        con.execute("UPDATE StringIds SET value = ? WHERE id = ?", (FMHA, kern))
        con.commit()
    finally:
        con.close()
    return ids


def bundle_text(root: Path) -> bytes:
    """Every byte a reader of the bundle can see: files, gzip and tar members, Parquet cells and
    key-value metadata, file names."""
    out: list[bytes] = []

    def add(name: str, data: bytes) -> None:
        out.append(name.encode())
        out.append(data)
        if data[:2] == b"\x1f\x8b":
            add(name + "!gz", gzip.decompress(data))
        elif len(data) > 262 and data[257:262] == b"ustar":
            with tarfile.open(fileobj=io.BytesIO(data)) as tf:
                for m in tf.getmembers():
                    f = tf.extractfile(m)
                    if f is not None:
                        add(name + "!" + m.name, f.read())
        elif data[:4] == b"PAR1":
            pf = pq.ParquetFile(io.BytesIO(data))
            out.append(json.dumps({k.decode(): v.decode() for k, v in (pf.metadata.metadata or {}).items()}).encode())
            out.append(json.dumps(pf.read().to_pylist(), default=str).encode())

    for p in sorted(root.rglob("*")):
        if p.is_file():
            add(str(p.relative_to(root)), p.read_bytes())
    return b"\n".join(out)


@pytest.fixture(scope="module")
def nsys_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, dict[str, int], bytes]:
    base = tmp_path_factory.mktemp("share_nsys")
    run = base / "run"
    (run / ".hydra").mkdir(parents=True)
    (run / ".hydra" / "config.yaml").write_text(CONFIG)
    db = run / "whole_1873.sqlite"
    shutil.copyfile(data_path("h200-nsys-2025.3/whole/whole_1873.sqlite"), db)
    db.chmod(0o644)
    ids = _plant_nsys(db)
    raw = db.read_bytes()
    out = base / "out"
    res = runner.invoke(app, ["collect", str(run), "-o", str(out), "--work", str(base / "work"), "--jobs", "1"])
    assert res.exit_code == 0, res.output
    assert db.read_bytes() == raw                                  # inputs never modified
    return run, out, ids, bundle_text(out) + res.output.encode()


@pytest.fixture(scope="module")
def raw_findings(nsys_run: tuple[Path, Path, dict[str, int], bytes]) -> dict[int, tuple[str, ...]]:
    """What `check` reports for each planted StringIds cell of the raw export (the checker's own
    per-cell rule, after it learned the run's config as check_paths does), and the whole check."""
    run, _out, ids, _blob = nsys_run
    assert check_paths([run], POLICY), "check found nothing in the raw run"
    chk = Checker(POLICY)
    chk._learn_configs([run])
    con = sqlite3.connect(run / "whole_1873.sqlite")
    try:
        return {sid: chk.sc.keyed_findings("value", con.execute("SELECT value FROM StringIds WHERE id = ?", (sid,)).fetchone()[0])
                for sid in ids.values()}
    finally:
        con.close()


ALL = {**NSYS_PLANTS, **THREAD_PLANTS}


@pytest.mark.parametrize("cls", sorted(ALL))
def test_class_never_reaches_the_bundle_and_check_finds_it_raw(cls: str, nsys_run: tuple, raw_findings: set[str]) -> None:
    _run, _out, ids, blob = nsys_run
    for value in ALL[cls][1]:
        assert value.encode() not in blob, f"{cls}: {value[:12]}... reached the bundle"
    assert raw_findings[ids[cls]], f"check missed {cls} in the raw export"


def test_split_value_redacted_whole(nsys_run: tuple, raw_findings: set[str]) -> None:
    blob = nsys_run[3]
    assert SPLIT_TOKEN[:14].encode() not in blob and SPLIT_TOKEN[14:].encode() not in blob
    run = nsys_run[0]
    assert any(f.kind == "split_value" for f in check_paths([run / "whole_1873.sqlite"], POLICY))


def test_what_users_need_survives(nsys_run: tuple) -> None:
    _run, out, _ids, blob = nsys_run
    kernels = pq.read_table(out / "summaries" / "kernels.parquet").column("kernel").to_pylist() \
        if "kernel" in pq.read_schema(out / "summaries" / "kernels.parquet").names else []
    assert FMHA.encode() in blob and (not kernels or FMHA in kernels)
    meta = pq.ParquetFile(out / "summaries" / "phases.parquet").metadata.metadata
    inputs = json.loads(meta[b"verlprof.inputs"])
    manifest = json.loads((out / "manifest.json").read_text())
    hashes = {a["rel"]: a["sha256"] for a in manifest["artifacts"] if a.get("sha256")}
    assert inputs and all(inputs[k] == hashes[k] for k in inputs), "content hashes changed"
    assert all("/" not in s and "\\" not in s for s in manifest["sources"]), manifest["sources"]


@pytest.mark.parametrize("text", [
    "{'token_uri': 'https://oauth2.googleapis.com/token'}", "python -m sglang --host 0.0.0.0 --port 30000",
    FMHA, "fmha_cutlassB_bf16_aligned_64x128_k128_sm80", "http://127.0.0.1:8265", "torch.nn.functional.linear",
])
def test_no_over_redaction(text: str) -> None:
    from verlprof.stages.scrub.identities import IdentityCollector, Pseudonyms

    col = IdentityCollector(POLICY)
    col.feed(text)
    assert Scrubber(POLICY, Pseudonyms.build([col.ids], salt="t")).scrub_rules(text, "x") == text


# ------------------------------------------------------------------------------------------------
# Kineto traces and memory snapshots
# ------------------------------------------------------------------------------------------------

FQDN_FILE = "gpu-node-19.corp.acme-ml.com_754.1733216000000.pt.trace.json.gz"
TORCH_PLANTS: dict[str, tuple[str, ...]] = {
    "annotation_email": ("wanda.wolf@acme-ml.com",),
    "annotation_path": ("ottilie5",),
    "thread_name_host": ("gpu-node-20",),
    "device_properties_ip": ("10.55.1.3",),
    "c10d_args": ("10.55.1.4",),
    "file_name_host": ("gpu-node-19",),
    "snapshot_annotation_ip": ("172.20.9.9",),
    "snapshot_annotation_path": ("ferdinand8",),
    "snapshot_annotation_token": ("hf_Vb3Nm5Qw7Er9Ty1Ui3Op5As7Df9Gh1Jk3",),
}


def _plant_torch(src: Path, dst: Path) -> None:
    doc = json.loads(gzip.decompress(src.read_bytes()))
    anns = [e for e in doc["traceEvents"] if e.get("cat") == "user_annotation" and e["name"] != "train"]
    anns[0]["name"] += " notify wanda.wolf@acme-ml.com"
    anns[1]["name"] += " /fsx/ottilie5/rl/step.py"
    for e in doc["traceEvents"]:
        if e.get("ph") == "M" and e.get("name") == "thread_name":
            e["args"]["name"] = "pt_main gpu-node-20.cluster.local"
            break
    doc["deviceProperties"][0]["name"] = "NVIDIA H200 @ 10.55.1.3"
    ev = next(e for e in doc["traceEvents"] if e.get("cat") == "cpu_op")
    ev["args"]["Process Group Description"] = "default_pg tcp://10.55.1.4:29500"
    doc["token_uri_note"] = None
    dst.write_bytes(gzip.compress(json.dumps(doc).encode()))


def _plant_snapshot(src: Path, dst: Path) -> None:
    snap = pickle.loads(src.read_bytes())
    anns = snap["external_annotations"]
    names = sorted({a["name"] for a in anns})
    new = {names[0]: names[0] + " on 172.20.9.9", names[1]: names[1] + " /scratch/ferdinand8/x",
           names[2]: names[2] + " hf_Vb3Nm5Qw7Er9Ty1Ui3Op5As7Df9Gh1Jk3"}
    for a in anns:
        a["name"] = new.get(a["name"], a["name"])
    dst.write_bytes(pickle.dumps(snap))


@pytest.fixture(scope="module")
def torch_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, bytes]:
    base = tmp_path_factory.mktemp("share_torch")
    run = base / "run"
    (run / "step2").mkdir(parents=True)
    src = data_dir("h200-torch-2.11")
    _plant_torch(next(src.glob("*step2*.json.gz")), run / FQDN_FILE)
    _plant_snapshot(src / "step2" / "torch_memory_rank0_pid804.pickle", run / "step2" / "torch_memory_rank0_pid804.pickle")
    out = base / "out"
    res = runner.invoke(app, ["collect", str(run), "-o", str(out), "--work", str(base / "work"), "--jobs", "1"])
    assert res.exit_code == 0, res.output
    return run, bundle_text(out) + res.output.encode()


@pytest.mark.parametrize("cls", sorted(TORCH_PLANTS))
def test_torch_class_never_reaches_the_bundle_and_check_finds_it_raw(cls: str, torch_run: tuple) -> None:
    run, blob = torch_run
    for value in TORCH_PLANTS[cls]:
        assert value.encode() not in blob, f"{cls}: {value[:12]}... reached the bundle"
    sc = Scrubber(POLICY)
    raw = (run / FQDN_FILE).name + gzip.decompress((run / FQDN_FILE).read_bytes()).decode() \
        + json.dumps([a["name"] for a in pickle.loads((run / "step2" / "torch_memory_rank0_pid804.pickle").read_bytes())["external_annotations"]])
    assert value in raw
    assert check_paths([run], POLICY), "check found nothing in the raw inputs"
    # check's rules, on the raw strings holding the value
    holders = {s for s in json.loads(json.dumps(_strings(run))) if value in s}
    assert holders and all(sc.findings(s) for s in holders), f"check's rules miss {cls}"


def _strings(run: Path) -> list[str]:
    doc = json.loads(gzip.decompress((run / FQDN_FILE).read_bytes()))
    out = [FQDN_FILE]

    def walk(v: object) -> None:
        if isinstance(v, str):
            out.append(v)
        elif isinstance(v, dict):
            for x in v.values():
                walk(x)
        elif isinstance(v, list):
            for x in v:
                walk(x)

    walk(doc)
    walk(pickle.loads((run / "step2" / "torch_memory_rank0_pid804.pickle").read_bytes())["external_annotations"])
    return out
