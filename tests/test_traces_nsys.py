"""Window traces of nsys exports, on the real H200 fixtures (issue 7).

Every expected number is computed here by direct SQL on the source export, independently of
`stages/traces_nsys_*`: step bounds from the source's own NVTX `step` ranges, event counts and
per-phase kernel time by queries written for this test.
"""
from __future__ import annotations

import gzip
import json
import shutil
import sqlite3
from collections import Counter, defaultdict
from decimal import Decimal
from pathlib import Path

import pytest
from testdata import fixtures_dir
from verlprof.stages.readers.sqlite_export import validate_export
from verlprof.stages.traces.jobs import (
    TraceJob,
    make_window_traces,
    nsys_sqlite_to_chrome,
    trace_file_name,
    trace_sqlite_name,
    window_nsys_sqlite,
)

FIX = fixtures_dir()
NSYS = FIX / "h200-nsys-2025.3"
WHOLE = NSYS / "whole" / "whole_1873.sqlite"
RAY = NSYS / "ray-continuous"
PLANTED = (
    "hf_kQ7ZpLm2XvB9tR4sWc8YnD1eUfA6gHjK3o", "5f0c3e9a1b7d24e8c6a90f1b3d5e7a9c2b4d6f80",
    "wJalrXUtnFEMI/K7MDENG/bPxRfiCYzEXAMPLEKEY", "s3cr3t-Pa55!", "hf_CmdLineTok3n0123456789abcdefghijkl",
)
DIV = 1 << 24



def ro(path: Path) -> sqlite3.Connection:
    return sqlite3.connect(f"file:{path}?mode=ro&immutable=1", uri=True)


def epoch_of(path: Path) -> int:
    with ro(path) as con:
        return con.execute("SELECT utcEpochNs FROM TARGET_INFO_SESSION_START_TIME").fetchone()[0]


def step_bounds(path: Path, nth: int) -> tuple[int, int]:
    """Session-relative [start, end] of the nth NVTX `step` range of an export (1-based)."""
    with ro(path) as con:
        rows = con.execute(
            "SELECT n.start, n.end FROM NVTX_EVENTS n LEFT JOIN StringIds s ON s.id = n.textId "
            "WHERE coalesce(n.text, s.value) = 'step' AND n.end IS NOT NULL ORDER BY n.start").fetchall()
    return rows[nth - 1]


def expected_counts(path: Path, s: int, e: int) -> dict[str, int]:
    """Rows of the source in [s, e]: overlap, plus rows correlated (same process) with one that overlaps."""
    gpu = ("CUPTI_ACTIVITY_KIND_KERNEL", "CUPTI_ACTIVITY_KIND_MEMCPY", "CUPTI_ACTIVITY_KIND_MEMSET",
           "CUPTI_ACTIVITY_KIND_SYNCHRONIZATION")
    with ro(path) as con:
        con.execute("CREATE TEMP TABLE c (p INTEGER, k INTEGER)")
        con.execute("INSERT INTO c SELECT globalTid / ?, correlationId FROM CUPTI_ACTIVITY_KIND_RUNTIME "
                    "WHERE start <= ? AND end >= ?", (DIV, e, s))
        for t in gpu:
            con.execute(f"INSERT INTO c SELECT globalPid / ?, correlationId FROM {t} WHERE start <= ? AND end >= ?",
                        (DIV, e, s))
        out = {}
        out["CUPTI_ACTIVITY_KIND_RUNTIME"] = con.execute(
            "SELECT count(*) FROM CUPTI_ACTIVITY_KIND_RUNTIME r WHERE (start <= ? AND end >= ?) OR "
            "(globalTid / ?, correlationId) IN (SELECT p, k FROM c)", (e, s, DIV)).fetchone()[0]
        for t in gpu:
            out[t] = con.execute(
                f"SELECT count(*) FROM {t} WHERE (start <= ? AND end >= ?) OR "
                "(globalPid / ?, correlationId) IN (SELECT p, k FROM c)", (e, s, DIV)).fetchone()[0]
        out["nvtx_ranges"] = con.execute(
            "SELECT count(*) FROM NVTX_EVENTS WHERE eventType IN (59, 60) AND start <= ? AND end >= ?",
            (e, s)).fetchone()[0]
    return out


def phase_kernel_ns(path: Path, s: int, e: int) -> dict[tuple[str, int], int]:
    """(NVTX name, start) -> summed duration of kernels whose launch started inside that range,
    on its thread: the nsys `nvtx_gpu_proj` attribution, for ranges inside [s, e]."""
    q = """
        SELECT coalesce(n.text, s.value), n.start, sum(k.end - k.start)
        FROM NVTX_EVENTS n LEFT JOIN StringIds s ON s.id = n.textId
        JOIN CUPTI_ACTIVITY_KIND_RUNTIME r ON r.globalTid = n.globalTid AND r.start BETWEEN n.start AND n.end
        JOIN CUPTI_ACTIVITY_KIND_KERNEL k ON k.correlationId = r.correlationId
             AND k.globalPid / :d = r.globalTid / :d
        WHERE n.eventType IN (59, 60) AND n.start >= :s AND n.end <= :e
        GROUP BY n.rowid"""
    with ro(path) as con:
        return {(name, start): total for name, start, total in con.execute(q, {"s": s, "e": e, "d": DIV})}


@pytest.fixture(scope="module")
def whole_step2(tmp_path_factory: pytest.TempPathFactory) -> dict:
    out = tmp_path_factory.mktemp("whole2")
    epoch = epoch_of(WHOLE)
    s, e = step_bounds(WHOLE, 2)
    counts = window_nsys_sqlite(WHOLE, out / "w.sqlite", epoch + s, epoch + e)
    chrome = nsys_sqlite_to_chrome(out / "w.sqlite", out / "w.trace.json.gz")
    return {"dir": out, "s": s, "e": e, "epoch": epoch, "counts": counts, "chrome": chrome,
            "db": out / "w.sqlite", "json": out / "w.trace.json.gz"}


def test_window_holds_exactly_the_rows_of_step_2(whole_step2: dict) -> None:
    s, e = whole_step2["s"], whole_step2["e"]
    want = expected_counts(WHOLE, s, e)
    with ro(whole_step2["db"]) as con:
        for table, n in want.items():
            if table == "nvtx_ranges":
                got = con.execute("SELECT count(*) FROM NVTX_EVENTS WHERE eventType IN (59, 60)").fetchone()[0]
            else:
                got = con.execute(f"SELECT count(*) FROM {table}").fetchone()[0]
            assert got == n, table
        names = sorted(r[0] for r in con.execute(
            "SELECT coalesce(n.text, s.value) FROM NVTX_EVENTS n LEFT JOIN StringIds s ON s.id = n.textId "
            "WHERE eventType IN (59, 60)"))
    # On this fixture step 2 is cleanly separated: everything kept lies inside the step's range
    # and every kernel was launched inside it (so the closure added nothing from steps 1 or 3).
    with ro(WHOLE) as con:
        inside = con.execute("SELECT count(*) FROM CUPTI_ACTIVITY_KIND_KERNEL k JOIN CUPTI_ACTIVITY_KIND_RUNTIME r "
                             "ON r.correlationId = k.correlationId WHERE r.start >= ? AND r.end <= ?",
                             (s, e)).fetchone()[0]
        step2_names = sorted(r[0] for r in con.execute(
            "SELECT coalesce(n.text, s.value) FROM NVTX_EVENTS n LEFT JOIN StringIds s ON s.id = n.textId "
            "WHERE eventType IN (59, 60) AND n.start >= ? AND n.end <= ?", (s, e)))
    assert want["CUPTI_ACTIVITY_KIND_KERNEL"] == inside > 4000
    assert names == step2_names and names.count("step") == 1 and "actor_update" in names
    c = whole_step2["counts"]
    assert c.kernels == inside and c.rows["NVTX_EVENTS"] >= want["nvtx_ranges"]


def test_window_keeps_schema_and_only_source_rows(whole_step2: dict) -> None:
    db = whole_step2["db"]
    assert "CUPTI_ACTIVITY_KIND_KERNEL" in validate_export(db).tables
    con = sqlite3.connect(db)
    con.execute("ATTACH DATABASE ? AS src", (f"file:{WHOLE}?mode=ro&immutable=1",))
    src_tables = {r[0] for r in con.execute("SELECT name FROM src.sqlite_master WHERE type = 'table'")}
    dst_tables = {r[0] for r in con.execute("SELECT name FROM main.sqlite_master WHERE type = 'table'")}
    assert dst_tables == src_tables | {"VERLPROF_WINDOW"}
    for t in sorted(src_tables):
        assert (con.execute(f'PRAGMA main.table_info("{t}")').fetchall()
                == con.execute(f'PRAGMA src.table_info("{t}")').fetchall()), t
        extra = con.execute(f'SELECT count(*) FROM (SELECT * FROM main."{t}" EXCEPT SELECT * FROM src."{t}")')
        assert extra.fetchone()[0] == 0, f"{t} holds rows that are not in the source"
    # every string a kept row points to is there; the process environment blocks are not
    missing = con.execute("SELECT count(*) FROM CUPTI_ACTIVITY_KIND_KERNEL k LEFT JOIN StringIds s "
                          "ON s.id = k.demangledName WHERE s.id IS NULL").fetchone()[0]
    assert missing == 0
    strings = "\n".join(r[0] for r in con.execute("SELECT value FROM main.StringIds"))
    assert not [p for p in PLANTED if p in strings]
    assert con.execute("SELECT count(*) FROM main.StringIds").fetchone()[0] < \
        con.execute("SELECT count(*) FROM src.StringIds").fetchone()[0]
    assert con.execute("SELECT count(*) FROM main.ProcessStreams").fetchone()[0] == 0
    assert con.execute("SELECT count(*) FROM main.ANALYSIS_FILE").fetchone()[0] == 0
    assert con.execute("SELECT count(*) FROM main.PROCESSES").fetchone()[0] < \
        con.execute("SELECT count(*) FROM src.PROCESSES").fetchone()[0]
    con.close()


def test_window_is_at_most_a_third_of_the_3_step_source(whole_step2: dict) -> None:
    assert whole_step2["counts"].size == whole_step2["db"].stat().st_size
    assert whole_step2["db"].stat().st_size <= WHOLE.stat().st_size / 3
    assert whole_step2["json"].stat().st_size <= WHOLE.stat().st_size / 3


def test_same_sql_gives_the_same_answer_on_the_window(whole_step2: dict) -> None:
    s, e = whole_step2["s"], whole_step2["e"]
    on_source = phase_kernel_ns(WHOLE, s, e)
    on_window = phase_kernel_ns(whole_step2["db"], s, e)
    assert on_source == on_window and len(on_source) >= 8  # ranges that launched kernels


def test_memory_baseline_recovers_the_absolute_level(whole_step2: dict) -> None:
    """baseline + window events == the source's running total at every event of the window."""
    s = whole_step2["s"]
    signed = "sum(CASE memoryOperationType WHEN 0 THEN bytes ELSE -bytes END)"
    with ro(whole_step2["db"]) as con:
        base = dict(con.execute("SELECT name, value FROM VERLPROF_WINDOW").fetchall())
        last = con.execute("SELECT max(start) FROM CUDA_GPU_MEMORY_USAGE_EVENTS").fetchone()[0]
        in_window = con.execute(f"SELECT globalPid, deviceId, {signed} FROM CUDA_GPU_MEMORY_USAGE_EVENTS "
                                "GROUP BY 1, 2").fetchall()
    assert base["start_ns"] == str(s) and base["rule"] == "overlap+correlation"
    with ro(WHOLE) as con:
        truth = dict(((g, d), v) for g, d, v in con.execute(
            f"SELECT globalPid, deviceId, {signed} FROM CUDA_GPU_MEMORY_USAGE_EVENTS WHERE start <= ? GROUP BY 1, 2",
            (last,)))
    assert in_window
    for g, d, net in in_window:
        assert int(base[f"memory_baseline_bytes/{g}/{d}"]) + net == truth[(g, d)]


def load_chrome(path: Path) -> dict:
    with gzip.open(path, "rt") as f:
        return json.load(f, parse_float=Decimal)


def test_chrome_trace_is_valid_and_counts_match_sql(whole_step2: dict) -> None:
    doc = load_chrome(whole_step2["json"])
    events = doc["traceEvents"]
    for ev in events:
        assert {"ph", "ts", "pid", "tid"} <= ev.keys(), ev
        if ev["ph"] == "X":
            assert "dur" in ev and ev["dur"] >= 0, ev
    cats = Counter(ev.get("cat") for ev in events if ev["ph"] in ("X", "i"))
    want = expected_counts(WHOLE, whole_step2["s"], whole_step2["e"])
    assert cats["kernel"] == want["CUPTI_ACTIVITY_KIND_KERNEL"]
    assert cats["gpu_memcpy"] == want["CUPTI_ACTIVITY_KIND_MEMCPY"]
    assert cats["gpu_memset"] == want["CUPTI_ACTIVITY_KIND_MEMSET"]
    assert cats["cuda_runtime"] + cats["cuda_driver"] == want["CUPTI_ACTIVITY_KIND_RUNTIME"]
    assert cats["nvtx"] == want["nvtx_ranges"]
    assert whole_step2["chrome"].events["kernel"] == cats["kernel"]
    # names are resolved, tracks are named, every GPU event has its flow from the launch
    assert all(ev["name"] and not ev["name"].startswith("(") for ev in events if ev.get("cat") == "kernel")
    meta = {(ev["name"], ev["pid"], ev["tid"]): ev["args"] for ev in events if ev["ph"] == "M"}
    gpu_pids = {ev["pid"] for ev in events if ev.get("cat") == "kernel"}
    assert all(meta[("process_name", p, 0)]["name"].startswith("GPU ") for p in gpu_pids)
    assert sum(1 for ev in events if ev["ph"] == "s") == cats["kernel"] + cats["gpu_memcpy"] + cats["gpu_memset"]
    # absolute UTC clock, exact to the ns: the step range starts at utcEpochNs + start
    step = next(ev for ev in events if ev.get("cat") == "nvtx" and ev["name"] == "step")
    assert step["ts"] * 1000 == whole_step2["epoch"] + whole_step2["s"]
    assert step["dur"] * 1000 == whole_step2["e"] - whole_step2["s"]


def test_per_phase_kernel_time_from_chrome_equals_sql(whole_step2: dict) -> None:
    """Attribute kernels to NVTX ranges using only the JSON (launch by correlation, on the range's
    thread) and compare with the SQL projection of the source."""
    events = load_chrome(whole_step2["json"])["traceEvents"]
    launch = {(ev["pid"], ev["args"]["correlation"]): ev for ev in events
              if ev.get("cat") in ("cuda_runtime", "cuda_driver") and "args" in ev}
    per_thread = defaultdict(list)
    for ev in events:
        if ev.get("cat") == "kernel":
            api = launch[(ev["pid"] & (DIV - 1), ev["args"]["correlation"])]
            per_thread[(api["pid"], api["tid"])].append((api["ts"], ev["dur"]))
    got = {}
    epoch = whole_step2["epoch"]
    for ev in events:
        if ev.get("cat") == "nvtx" and ev["ph"] == "X":
            lo, hi = ev["ts"], ev["ts"] + ev["dur"]
            total = sum(d for t, d in per_thread[(ev["pid"], ev["tid"])] if lo <= t <= hi)
            if total:
                got[(ev["name"], int(ev["ts"] * 1000) - epoch)] = int(total * 1000)
    want = {k: v for k, v in phase_kernel_ns(WHOLE, whole_step2["s"], whole_step2["e"]).items() if v}
    assert got == want and len(want) >= 8


def test_chrome_with_bounds_equals_chrome_of_the_window(whole_step2: dict, tmp_path: Path) -> None:
    epoch, s, e = whole_step2["epoch"], whole_step2["s"], whole_step2["e"]
    direct = nsys_sqlite_to_chrome(WHOLE, tmp_path / "d.json.gz", epoch + s, epoch + e)
    assert direct.events == whole_step2["chrome"].events
    assert (tmp_path / "d.json.gz").read_bytes() == whole_step2["json"].read_bytes()  # deterministic
    assert sorted(p.name for p in tmp_path.iterdir()) == ["d.json.gz"]  # no temp left behind


def test_ray_capture_ranges_line_up_and_empty_windows_stay_valid(tmp_path: Path) -> None:
    r1, r2 = RAY / "worker_process_1983.1.sqlite", RAY / "worker_process_1983.2.sqlite"
    e2 = epoch_of(r2)
    s, e = step_bounds(r2, 1)  # capture range 2 holds step 2 only
    c = window_nsys_sqlite(r2, tmp_path / "r2.sqlite", e2 + s, e2 + e)
    want = expected_counts(r2, s, e)
    assert c.kernels == want["CUPTI_ACTIVITY_KIND_KERNEL"] > 0
    assert c.cuda_api == want["CUPTI_ACTIVITY_KIND_RUNTIME"]
    # the same absolute window lies after capture range 1 ended: nothing of range 1 is kept,
    # and the empty window is still a valid export that converts
    w1 = window_nsys_sqlite(r1, tmp_path / "r1.sqlite", e2 + s, e2 + e)
    assert w1.kernels == w1.cuda_api == w1.memset == 0
    validate_export(tmp_path / "r1.sqlite")
    with ro(tmp_path / "r1.sqlite") as con:
        assert con.execute("SELECT count(*) FROM NVTX_EVENTS WHERE eventType IN (59, 60)").fetchone()[0] == 0
    ch = nsys_sqlite_to_chrome(tmp_path / "r1.sqlite", tmp_path / "r1.json.gz")
    assert ch.events.get("kernel", 0) == 0
    assert load_chrome(tmp_path / "r1.json.gz")["traceEvents"] is not None


def test_make_window_traces_writes_the_bundle_layout(tmp_path: Path) -> None:
    src = RAY / "worker_process_1983.2.sqlite"
    epoch = epoch_of(src)
    s, e = step_bounds(src, 1)
    rel = "ray-continuous/worker_process_1983.2.sqlite"
    job = TraceJob("nsys", src, rel, tmp_path / "OUT", epoch + s, epoch + e)
    res = make_window_traces(job)
    json.dumps(res)  # JSON-safe, for the manifest
    assert res["outputs"] == {"sqlite": trace_sqlite_name(rel), "chrome": trace_file_name(rel)}
    assert trace_file_name(rel) == "traces/ray-continuous__worker_process_1983.2.trace.json.gz"
    assert (tmp_path / "OUT" / trace_sqlite_name(rel)).is_file()
    assert res["events"]["kernel"] == res["counts"]["sqlite"]["rows"]["CUPTI_ACTIVITY_KIND_KERNEL"] > 0


def test_rerun_replaces_output_and_input_is_untouched(whole_step2: dict, tmp_path: Path) -> None:
    src = tmp_path / "src.sqlite"
    shutil.copyfile(RAY / "worker_process_1983.3.sqlite", src)
    before = src.read_bytes()
    epoch = epoch_of(src)
    s, e = step_bounds(src, 1)
    dst = tmp_path / "out.sqlite"
    dst.write_bytes(b"stale")
    first = window_nsys_sqlite(src, dst, epoch + s, epoch + e)
    again = window_nsys_sqlite(src, dst, epoch + s, epoch + e)
    assert first.rows == again.rows and validate_export(dst)
    assert src.read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out.sqlite", "src.sqlite"]


def test_window_holds_the_gpu_work_launched_in_the_step_even_after_its_cpu_range(tmp_path: Path) -> None:
    """Windows by launch time (issue 21): a kernel launched inside the step that runs after the
    step's CPU range ends belongs to the step, in the summary and in the published window trace.

    Real case: in the emit_nvtx capture, `aten::zero_` op ranges end before the kernel they launch
    runs. With `--step-range` on two of them, the step is one such op. The kernels launched in it are
    found here by plain SQL (runtime launch inside the range on its thread, joined on correlationId);
    the summary must count exactly those, and the window SQLite and its Chrome JSON must hold them."""
    from testdata import data_path
    from verlprof.stages.summarize import SummarizeOptions
    from verlprof.stages.summarize.nsys import scan_nsys
    from verlprof.stages.summarize.projection import KIND_KERNEL
    from verlprof.stages.window import identity_from_path, run_window, window_spans
    from verlprof.stages.window.steps import nsys_source_steps

    src = data_path("gpu_captures/whole-emit-nvtx/whole_956.sqlite")
    step_range = r"^aten::zero_, op_id = (1043|1053)$"
    con = sqlite3.connect(f"file:{src}?mode=ro", uri=True)
    try:
        (epoch,) = con.execute("SELECT utcEpochNs FROM TARGET_INFO_SESSION_START_TIME").fetchone()
        lo, hi, gtid = con.execute(
            "SELECT n.start, n.end, n.globalTid FROM NVTX_EVENTS n "
            "WHERE n.text = 'aten::zero_, op_id = 1053'").fetchone()
        launched = con.execute(
            "SELECT k.correlationId, k.start, k.end FROM CUPTI_ACTIVITY_KIND_RUNTIME r "
            "JOIN CUPTI_ACTIVITY_KIND_KERNEL k ON k.correlationId = r.correlationId "
            "AND k.globalPid / ? = r.globalTid / ? WHERE r.globalTid = ? AND r.start BETWEEN ? AND ? "
            "ORDER BY k.start", (DIV, DIV, gtid, lo, hi)).fetchall()
    finally:
        con.close()
    assert launched and all(end > hi for _c, _s, end in launched), "the case: GPU work outlives the CPU range"

    ident = identity_from_path(src)
    steps = nsys_source_steps(src, ident, step_range=step_range)
    resolved, choice = run_window([steps], 2)
    spans = window_spans(resolved[0], choice.step)
    assert [(s.start_ns - epoch, s.end_ns - epoch) for s in spans] == [(lo, hi)]
    scan = scan_nsys(src, ident, SummarizeOptions(step=2, step_range=step_range), spans)
    ops = scan.projection.ops
    kern = ops["kind"] == KIND_KERNEL
    assert sorted(ops["start"][kern].tolist()) == [s for _c, s, _e in launched]

    win = tmp_path / "w.sqlite"
    counts = window_nsys_sqlite(src, win, spans[0].start_ns, spans[0].end_ns)
    wc = sqlite3.connect(f"file:{win}?mode=ro", uri=True)
    try:
        kept = set(wc.execute("SELECT correlationId, start, end FROM CUPTI_ACTIVITY_KIND_KERNEL").fetchall())
    finally:
        wc.close()
    assert set(launched) <= kept and counts.kernels == len(kept)
    js = tmp_path / "w.trace.json.gz"
    nsys_sqlite_to_chrome(win, js)
    events = json.loads(gzip.decompress(js.read_bytes()))["traceEvents"]
    in_json = {e["args"]["correlation"] for e in events if e.get("cat") == "kernel"}
    assert {c for c, _s, _e in launched} <= in_json
