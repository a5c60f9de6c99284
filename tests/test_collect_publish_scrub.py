"""Issue 11: collect summarizes and cuts windows from the RAW export and scrubs only what it
publishes. This proves the new order still scrubs every string a summary or a window takes from the
raw input: secrets planted in a phase name, a kernel name and a thread name of a copy of the real
H200 export are read by summarize (the rows show them redacted, not dropped) and never reach any
byte of the bundle (Parquet, window SQLite, Chrome JSON, manifest, report).
"""
from __future__ import annotations

import gzip
import json
import shutil
import sqlite3
from pathlib import Path

import pyarrow.parquet as pq
from verlprof.stages.scrub.provenance import REVIEW_NAME, read_review_map
from typer.testing import CliRunner
from testdata import fixtures_dir
from verlprof.pipeline.cli import app

REPO = Path(__file__).resolve().parents[1]
WHOLE = fixtures_dir() / "h200-nsys-2025.3" / "whole" / "whole_1873.sqlite"
runner = CliRunner()

# Made up, provider-shaped (HF token) and a value only the by-value rule can know (an env value).
PHASE_SECRET = "hf_Zx9QwErTyUiOpAsDfGhJkLzXcVbNm12345"
KERNEL_SECRET = "hf_Qq1Ww2Ee3Rr4Tt5Yy6Uu7Ii8Oo9Pp0AaSsDd"
THREAD_SECRET = "hf_Mm1Nn2Bb3Vv4Cc5Xx6Zz7Ll8Kk9Jj0HhGgFf"


def _plant(db: Path) -> dict[str, str]:
    """Append a secret to the name of the `update_actor` range, of the most frequent kernel and of a
    thread; returns the planted (original -> planted) names."""
    con = sqlite3.connect(db)
    try:
        upd = con.execute("SELECT id, value FROM StringIds WHERE value = 'update_actor'").fetchone()
        kern = con.execute("SELECT demangledName FROM CUPTI_ACTIVITY_KIND_KERNEL GROUP BY 1 "
                           "ORDER BY count(*) DESC LIMIT 1").fetchone()[0]
        kname = con.execute("SELECT value FROM StringIds WHERE id = ?", (kern,)).fetchone()[0]
        thread = con.execute("SELECT nameId FROM ThreadNames LIMIT 1").fetchone()[0]
        con.execute("UPDATE StringIds SET value = value || ' token=' || ? WHERE id = ?", (PHASE_SECRET, upd[0]))
        con.execute("UPDATE StringIds SET value = value || ?  WHERE id = ?", ("_" + KERNEL_SECRET, kern))
        con.execute("UPDATE StringIds SET value = 'worker ' || ? WHERE id = ?", (THREAD_SECRET, thread))
        con.commit()
    finally:
        con.close()
    return {"phase": upd[1], "kernel": kname}


def _all_bytes(root: Path) -> bytes:
    chunks = []
    for p in sorted(root.rglob("*")):
        if p.is_file():
            data = p.read_bytes()
            chunks.append(data)
            if data[:2] == b"\x1f\x8b":
                chunks.append(gzip.decompress(data))
    return b"\n".join(chunks)


def test_strings_summarize_and_window_take_from_the_raw_export_are_scrubbed(tmp_path: Path) -> None:
    run = tmp_path / "run"
    run.mkdir()
    db = run / "whole_1873.sqlite"
    shutil.copyfile(WHOLE, db)
    names = _plant(db)
    raw = db.read_bytes()
    assert all(s.encode() in raw for s in (PHASE_SECRET, KERNEL_SECRET, THREAD_SECRET))

    out = tmp_path / "out"
    res = runner.invoke(app, ["collect", str(run), "-o", str(out), "--work", str(tmp_path / "work"),
                              "--jobs", "1", "--html"])
    assert res.exit_code == 0, res.output

    blob = _all_bytes(out)
    for secret in (PHASE_SECRET, KERNEL_SECRET, THREAD_SECRET):
        assert secret.encode() not in blob, f"{secret[:6]}... reached the bundle"
        assert secret.encode() not in res.output.encode()
    # the input is never modified
    assert db.read_bytes() == raw

    # Summaries were made from the raw strings and scrubbed, not dropped: the phase is still there
    # (a user-written name holding a secret: one pseudonym, issue 39; the owner's review list maps
    # it back) with its numbers, the kernel (a toolchain name) under its redacted name.
    review = read_review_map(tmp_path / "work" / REVIEW_NAME)
    pseudo = [p for p, o in review.items() if o.startswith(names["phase"]) and PHASE_SECRET in o]
    phases = pq.read_table(out / "summaries" / "phases.parquet").to_pylist()
    upd = [r for r in phases if r.get("phase") in pseudo]
    assert upd and all(r["wall_ns"] > 0 for r in upd)
    kernels = pq.read_table(out / "summaries" / "kernels.parquet").to_pylist()
    texts = [str(v) for r in kernels for v in r.values() if isinstance(v, str)]
    assert any("REDACTED" in t for t in texts)

    # The window trace was cut from the raw export and scrubbed: it holds the redacted names.
    windows = list((out / "traces").glob("*.sqlite"))
    assert windows
    con = sqlite3.connect(f"file:{windows[0]}?mode=ro", uri=True)
    try:
        values = [v for (v,) in con.execute("SELECT value FROM StringIds")]
    finally:
        con.close()
    assert set(pseudo) & set(values)

    report = json.loads((out / "scrub_report.json").read_text())
    by_rel = {a["rel"]: a for a in report["artifacts"]}
    assert sum(n for k in by_rel["summaries"]["counts"].values() for n in k.values()) >= 2
