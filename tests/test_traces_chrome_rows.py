"""nsys -> Chrome JSON rows formatted in bulk (issue 25), checked event by event.

The converter builds each event's JSON in SQL (json_quote, printf) and fetches batches, or, for
NVTX ranges, from columns and names quoted once per distinct name, assembled by numpy, so every
field is checked here against the export's own rows read with plain queries written for this test:
names with quotes, backslashes, control characters, non-ASCII text and 200 kB, an NVTX range whose
end lies before its start (written with dur 0 and counted as clamped), one without an end (an
instant), one that began before 1970 on the UTC clock (a negative `ts`), and the kernels of both
GPUs of the public 2-GPU FSDP capture with their args.
"""
from __future__ import annotations

import gzip
import json
import shutil
import sqlite3
import sys
from collections import Counter
from decimal import Decimal
from pathlib import Path

import pytest
from verlprof.stages.traces.jsonout import ChromeTraceWriter
from verlprof.stages.traces.nsys_chrome import nsys_sqlite_to_chrome

sys.path.insert(0, str(Path(__file__).parent))
from testdata import data_path  # noqa: E402

FSDP = "captures/nsysai_h100_2gpu/h100_2gpu_1s.sqlite"
MASK = (1 << 24) - 1
TRICKY = ['say "hi"', "back\\slash", "tab\there\nnewline", "ctrl\x01\x1f", "ünï€ 漢字 😀", "sep\u2028x", "a/b",
          "long " * 40_000]   # 200 kB: the NVTX rows are assembled in slices of a few MiB


def _us(ns: int) -> Decimal:
    return Decimal(ns) / 1000


@pytest.fixture(scope="module")
def converted(tmp_path_factory: pytest.TempPathFactory) -> dict:
    tmp = tmp_path_factory.mktemp("chrome_rows")
    src = tmp / "fsdp.sqlite"
    shutil.copyfile(data_path(FSDP), src)
    con = sqlite3.connect(src)
    ids = [r[0] for r in con.execute("SELECT rowid FROM NVTX_EVENTS ORDER BY rowid LIMIT ?", (len(TRICKY) + 3,))]
    for rid, text in zip(ids, TRICKY):
        con.execute("UPDATE NVTX_EVENTS SET text = ? WHERE rowid = ?", (text, rid))
    con.execute('UPDATE NVTX_EVENTS SET "end" = "start" - 5 WHERE rowid = ?', (ids[-2],))
    con.execute('UPDATE NVTX_EVENTS SET "end" = NULL WHERE rowid = ?', (ids[-1],))
    epoch = con.execute("SELECT utcEpochNs FROM TARGET_INFO_SESSION_START_TIME").fetchone()[0]
    con.execute('UPDATE NVTX_EVENTS SET start = ?, "end" = ? WHERE rowid = ?',
                (-epoch - 1_234_567, -epoch + 2_000, ids[-3]))
    con.commit()
    con.close()
    dst = tmp / "fsdp.trace.json.gz"
    counts = nsys_sqlite_to_chrome(src, dst)
    with gzip.open(dst, "rt", encoding="utf-8") as f:
        doc = json.load(f, parse_float=Decimal)
    return {"src": src, "counts": counts, "events": doc["traceEvents"]}


def _ro(path: Path) -> sqlite3.Connection:
    return sqlite3.connect(f"file:{path}?mode=ro", uri=True)


def test_every_nvtx_range_is_its_row(converted: dict) -> None:
    con = _ro(converted["src"])
    epoch = con.execute("SELECT utcEpochNs FROM TARGET_INFO_SESSION_START_TIME").fetchone()[0]
    want = Counter()
    for start, end, name, gtid in con.execute(
            'SELECT n.start, n."end", coalesce(n.text, s.value), n.globalTid FROM NVTX_EVENTS n '
            "LEFT JOIN StringIds s ON s.id = n.textId"):
        dur = None if end is None else _us(max(end - start, 0))
        want[(name, (gtid >> 24) & MASK, gtid & MASK, _us(epoch + start), dur)] += 1
    got = Counter((e["name"], e["pid"], e["tid"], e["ts"], e.get("dur"))
                  for e in converted["events"] if e.get("cat") == "nvtx")
    assert got == want
    assert sum(want.values()) > 16_000
    names = {e["name"] for e in converted["events"] if e.get("cat") == "nvtx"}
    assert set(TRICKY) <= names  # quoted by SQLite, read back unchanged by json
    assert [e["ts"] for e in converted["events"] if e.get("cat") == "nvtx" and e["ts"] < 0] == [Decimal("-1234.567")]
    instants = [e for e in converted["events"] if e.get("cat") == "nvtx" and e["ph"] == "i"]
    assert len(instants) == 1 and instants[0]["s"] == "t" and "dur" not in instants[0]
    assert converted["counts"].clamped == 1
    assert converted["counts"].events["nvtx"] == sum(want.values())


def test_every_kernel_is_its_row_with_args(converted: dict) -> None:
    con = _ro(converted["src"])
    epoch = con.execute("SELECT utcEpochNs FROM TARGET_INFO_SESSION_START_TIME").fetchone()[0]
    want = Counter()
    for start, end, dev, stream, gpid, corr, name in con.execute(
            "SELECT k.start, k.\"end\", k.deviceId, k.streamId, k.globalPid, k.correlationId, s.value "
            "FROM CUPTI_ACTIVITY_KIND_KERNEL k JOIN StringIds s ON s.id = k.demangledName"):
        pid = ((dev + 1) << 24) + ((gpid >> 24) & MASK)
        want[(name, pid, stream, _us(epoch + start), _us(end - start), dev, corr)] += 1
    got = Counter((e["name"], e["pid"], e["tid"], e["ts"], e["dur"], e["args"]["device"], e["args"]["correlation"])
                  for e in converted["events"] if e.get("cat") == "kernel")
    assert got == want
    assert {k[5] for k in want} == {0, 1}  # both GPUs of the capture
    assert all(e["args"]["stream"] == e["tid"] for e in converted["events"] if e.get("cat") == "kernel")


def test_flows_pair_each_launch_with_its_kernel(converted: dict) -> None:
    ev = converted["events"]
    starts = {e["id"]: e for e in ev if e["ph"] == "s"}
    ends = {e["id"]: e for e in ev if e["ph"] == "f"}
    assert starts.keys() == ends.keys() and sorted(starts) == list(range(1, len(starts) + 1))
    gpu = {(e["pid"], e["tid"], e["ts"]) for e in ev if e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset")}
    api = {(e["pid"], e["tid"], e["ts"]) for e in ev if e.get("cat") in ("cuda_runtime", "cuda_driver")}
    assert all((f["pid"], f["tid"], f["ts"]) in gpu for f in ends.values())
    assert all((s["pid"], s["tid"], s["ts"]) in api for s in starts.values())
    assert converted["counts"].events["flow"] == len(starts)


def test_writer_joins_batches_and_an_error_leaves_the_file_unclosed(tmp_path: Path) -> None:
    ok = tmp_path / "ok.json.gz"
    with ChromeTraceWriter(ok, {"a": 1}) as w:
        w.write(b'{"n":0}')
        w.write_joined([b'{"n":1}', b'{"n":2},\n{"n":3}'], count=3)
        w.write_joined([])
        w.write(b'{"n":4}')
    assert w.count == 5
    assert [e["n"] for e in json.loads(gzip.decompress(ok.read_bytes()))["traceEvents"]] == [0, 1, 2, 3, 4]
    bad = tmp_path / "bad.json.gz"
    with pytest.raises(RuntimeError):
        with ChromeTraceWriter(bad) as w:
            w.write_joined([b"{}"] * 50_000)
            raise RuntimeError("producer failed")
    assert not gzip.decompress(bad.read_bytes()).rstrip().endswith(b"]}")
