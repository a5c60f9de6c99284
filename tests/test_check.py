"""`verlprof check`: opens files the way a reader would and reports findings by location, never value."""
from __future__ import annotations

import gzip
import io
import json
import pickle
import shutil
import sqlite3
import subprocess
import tarfile
import zipfile
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
from typer.testing import CliRunner
from verlprof.pipeline.cli import app
from verlprof.stages.scrub.check import check_paths
from verlprof.stages.scrub.policy import load_policy

POLICY = load_policy(use_local_environment=False)
SECRET = "hf_CheckPlanted0123456789abcdefghijk"
runner = CliRunner()


def kinds(path: Path) -> set[str]:
    return {f.kind for f in check_paths([path], POLICY)}


def test_sqlite_cells_are_read_by_python_past_nul_bytes(tmp_path: Path) -> None:
    db = tmp_path / "nul.sqlite"
    c = sqlite3.connect(db)
    c.execute("CREATE TABLE StringIds(id INTEGER PRIMARY KEY, value TEXT)")
    c.execute("INSERT INTO StringIds VALUES (1, ?)", ("PATH=/usr/bin\x00HF_TOKEN=" + SECRET,))
    c.commit()
    # SQL sees nothing: LIKE and length() stop at the first NUL byte
    assert c.execute("SELECT count(*) FROM StringIds WHERE value LIKE '%hf_%'").fetchone()[0] == 0
    c.close()
    f = check_paths([db], POLICY)
    assert {x.kind for x in f} == {"pattern:hf"}
    assert f[0].location.startswith("StringIds.value") and SECRET not in str(f[0])


def test_deleted_rows_in_free_pages_are_found(tmp_path: Path) -> None:
    db = tmp_path / "free.sqlite"
    c = sqlite3.connect(db)
    c.execute("PRAGMA secure_delete=OFF")
    c.execute("CREATE TABLE t(v TEXT)")
    c.executemany("INSERT INTO t VALUES (?)", [(f"row {i} {SECRET}",) for i in range(200)])
    c.commit()
    c.execute("DELETE FROM t")
    c.commit()
    c.close()
    assert SECRET.encode() in db.read_bytes()
    f = check_paths([db], POLICY)
    assert f and all(x.location.startswith("raw bytes") for x in f)


def test_containers_members_are_opened(tmp_path: Path) -> None:
    payload = json.dumps({"traceEvents": [{"name": "x", "args": {"note": SECRET}}]}).encode()
    (tmp_path / "a.json.gz").write_bytes(gzip.compress(payload))
    with tarfile.open(tmp_path / "b.tar.gz", "w:gz") as tf:
        info = tarfile.TarInfo("inner/trace.json")
        info.size = len(payload)
        tf.addfile(info, io.BytesIO(payload))
    with zipfile.ZipFile(tmp_path / "c.zip", "w") as zf:
        zf.writestr("deep/d.txt", f"log line token={SECRET}\n")
    for name in ("a.json.gz", "b.tar.gz", "c.zip"):
        assert kinds(tmp_path / name), name
    if shutil.which("zstd"):
        (tmp_path / "e.txt").write_text(f"x {SECRET}\n")
        subprocess.run(["zstd", "-q", str(tmp_path / "e.txt"), "-o", str(tmp_path / "e.txt.zst")], check=True)
        (tmp_path / "e.txt").unlink()
        assert kinds(tmp_path / "e.txt.zst") == {"pattern:hf"}
    locs = {f.location for f in check_paths([tmp_path / "b.tar.gz"], POLICY)}
    assert any("args.note" in loc for loc in locs)
    assert any(f.path.endswith("b.tar.gz!b.tar!inner/trace.json") for f in check_paths([tmp_path / "b.tar.gz"], POLICY))


def test_parquet_columns_and_metadata(tmp_path: Path) -> None:
    t = pa.table({"phase": ["step", "gen"], "note": ["ok", f"x {SECRET}"], "n": [1, 2]})
    pq.write_table(t, tmp_path / "a.parquet")
    t2 = pa.table({"phase": ["step"]}).replace_schema_metadata({"api_key": "abcdef123456"})
    pq.write_table(t2, tmp_path / "b.parquet")
    pq.write_table(pa.table({"phase": ["step"]}), tmp_path / "c.parquet")
    fa = check_paths([tmp_path / "a.parquet"], POLICY)
    # the token where it is; and the column's own words are user-written text no public source writes
    # (issue 39): reported as `user_text`, the location naming the column by its pseudonym, never "note"
    assert [f.location.split(" ", 2)[2] for f in fa if f.kind == "pattern:hf"] == ["(first at row 1)"]
    assert {f.kind for f in fa} == {"pattern:hf", "user_text"} and not any("note" in f.location for f in fa)
    assert kinds(tmp_path / "b.parquet") == {"secret_by_name"}
    assert kinds(tmp_path / "c.parquet") == set()


def test_raw_reports_and_hostile_pickles(tmp_path: Path) -> None:
    (tmp_path / "r.nsys-rep").write_bytes(b"anything")
    assert kinds(tmp_path / "r.nsys-rep") == {"raw_nsys_report"}

    class Boom:
        def __reduce__(self):
            return (print, ("pwned",))

    (tmp_path / "h.pickle").write_bytes(pickle.dumps([Boom()]))
    assert kinds(tmp_path / "h.pickle") == {"unsafe_pickle"}
    (tmp_path / "ok.pickle").write_bytes(pickle.dumps({"frames": [{"filename": "/home/gina/x.py"}]}, protocol=4))
    assert kinds(tmp_path / "ok.pickle") == {"home_path", "user_text"}   # a frame outside any package


def test_file_names_and_text_files(tmp_path: Path) -> None:
    (tmp_path / f"run_{SECRET}.txt").write_text("harmless\n")
    (tmp_path / "notes.md").write_text("export WANDB_API_KEY=0123456789abcdef0123456789abcdef01234567\n")
    (tmp_path / "clean.csv").write_text("phase,ms\nstep,1.0\ngen,0.5\n")
    f = check_paths([tmp_path], POLICY)
    assert {(Path(x.path).name, x.location.split(" (")[0]) for x in f} == {
        (f"run_{SECRET}.txt", "file name"), ("notes.md", "text")}


def test_cli_exit_codes_and_no_values_printed(tmp_path: Path) -> None:
    bad = tmp_path / "bad"
    bad.mkdir()
    (bad / "x.json").write_text(json.dumps({"traceEvents": [{"name": f"note {SECRET}"}]}))
    res = runner.invoke(app, ["check", str(bad), "--no-local-env"])
    assert res.exit_code == 1
    assert "x.json" in res.output and "pattern:hf" in res.output and SECRET not in res.output
    good = tmp_path / "good"
    good.mkdir()
    (good / "y.json").write_text(json.dumps({"traceEvents": [{"name": "step"}]}))
    res = runner.invoke(app, ["check", str(good), "--no-local-env"])
    assert res.exit_code == 0 and "no findings" in res.output
    values = tmp_path / "values.txt"
    values.write_text("PlainKnownValue77\n")
    (good / "z.txt").write_text("the PlainKnownValue77 leaked\n")
    res = runner.invoke(app, ["check", str(good), "--no-local-env", "--values-file", str(values)])
    assert res.exit_code == 1 and "secret_value" in res.output and "PlainKnownValue77" not in res.output
