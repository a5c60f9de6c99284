"""The check and the merged trace run per source, in pass 2 (issue 24): the run-level step only
re-reads what was not checked there, and the merged trace is the pieces' bytes put together.

Real checker, real windows: a real collect of four real exports, then the pieces checked where
they were made, a secret planted in a piece found there, and a checked file whose bytes changed
read again by the run-level check.
"""
from __future__ import annotations

import gzip
import json
import shutil
from pathlib import Path

import pytest
from testdata import data_dir
from verlprof.pipeline import collect
from verlprof.pipeline.collect_tasks import check_written
from verlprof.pipeline.merged_trace import MARK_CAT, NAME, make_piece, write_alone, write_merged_trace
from verlprof.pipeline.progress import NoProgress
from verlprof.stages.core.errors import RefusedError
from verlprof.stages.core.hashing import sha256_file
from verlprof.stages.scrub import build_options, load_policy

SECRET = "HF_TOKEN=hf_kQ7ZpLm2XvB9tR4sWc8YnD1eUfA6gHjK3o"


@pytest.fixture(scope="module")
def bundle(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, collect.CollectResult]:
    root = tmp_path_factory.mktemp("pcheck")
    src = root / "run"
    shutil.copytree(data_dir("gloo_ranks/nsys"), src)
    res = collect.run_collect(collect.CollectOptions(sources=[src], out=root / "out", work_dir=root / "work", jobs=2))
    assert res.exit_code == 0
    return root / "out", res


def _events(path: Path) -> list[dict]:
    return json.loads(gzip.open(path).read())["traceEvents"]


def test_merged_trace_is_every_window_renamed(bundle) -> None:
    out, res = bundle
    man = res.manifest
    merged = _events(out / man["merged_trace"])
    names = [e["args"]["name"] for e in merged if e.get("name") == "process_name"]
    assert len(names) == len(set(names))
    windows = [_events(out / t["outputs"]["chrome"]) for t in man["traces"]]
    skip = ("process_name", "process_sort_index", "process_labels")
    want = sorted(json.dumps({k: v for k, v in e.items() if k not in ("pid", "id")}, sort_keys=True)
                  for evs in windows for e in evs if e.get("name") not in skip)
    got = sorted(json.dumps({k: v for k, v in e.items() if k not in ("pid", "id")}, sort_keys=True)
                 for e in merged if e.get("name") not in skip and e.get("cat") != MARK_CAT)
    assert got == want
    # each file's pids stay apart (two hosts may reuse a pid), flow ids too
    pids = [{e["pid"] for e in evs} for evs in windows]
    merged_pids = {e["pid"] for e in merged}
    assert len(merged_pids) >= sum(len(p) for p in pids)
    ids = [e["id"] for e in merged if "id" in e]
    flows = sum(1 for evs in windows for e in evs if "id" in e)
    assert len(ids) == flows


def test_a_secret_in_a_piece_is_found_where_the_piece_is_made(bundle, tmp_path: Path) -> None:
    out, res = bundle
    t = res.manifest["traces"][0]
    evs = _events(out / t["outputs"]["chrome"])
    evs.append({"ph": "i", "name": SECRET, "pid": evs[-1].get("pid", 1), "tid": 0, "ts": 1})
    bad = tmp_path / "bad.trace.json.gz"
    bad.write_bytes(gzip.compress(json.dumps({"traceEvents": evs}).encode()))
    opts = build_options([], load_policy(), salt="")
    piece = make_piece(bad, 0, t["source"], [])
    found = check_written({f"traces/{NAME}": write_alone(tmp_path / "piece.json.gz", piece.body)}, opts)
    assert found and all(f.path.startswith(f"traces/{NAME}") for f in found)
    # the merged trace of that piece and a clean one holds the same finding: the check of the
    # pieces stands for the check of the whole
    clean = make_piece(out / res.manifest["traces"][1]["outputs"]["chrome"], 1, res.manifest["traces"][1]["source"], [])
    b = tmp_path / "b"
    (b / "traces").mkdir(parents=True)
    rel, sha, head = write_merged_trace(b, [piece, clean], lambda files: check_written(files, opts), tmp_path)
    assert head == [] and sha256_file(b / rel) == sha
    whole = check_written({rel: b / rel}, opts)
    assert {f.kind for f in whole} == {f.kind for f in found}


def test_run_level_check_trusts_only_the_bytes_checked(tmp_path: Path) -> None:
    staging = tmp_path / "staging"
    (staging / "traces").mkdir(parents=True)
    f = staging / "traces" / "w.trace.json.gz"
    f.write_bytes(gzip.compress(json.dumps({"traceEvents": [{"name": SECRET}]}).encode()))
    # checked in pass 2 with what it found: refused without reading it again
    found = check_written({"traces/w.trace.json.gz": f}, build_options([], load_policy(), salt=""))
    assert found
    with pytest.raises(RefusedError, match="traces/w.trace.json.gz"):
        collect.verify(staging, NoProgress(), checked={"traces/w.trace.json.gz": sha256_file(f)}, findings=found)
    # a pass-2 verdict holds only for the bytes it was given: changed bytes are read again
    with pytest.raises(RefusedError, match="traces/w.trace.json.gz"):
        collect.verify(staging, NoProgress(), checked={"traces/w.trace.json.gz": "0" * 64}, findings=[])


def test_a_window_that_fails_after_it_is_written_is_checked_at_run_level(tmp_path: Path,
                                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    """Only what pass 2 checked to the end is trusted: a window whose piece could not be made
    keeps no piece in the merged trace and is read by the run-level check."""
    import verlprof.pipeline.merged_trace as merged
    import verlprof.stages.scrub as scrub

    src = tmp_path / "run"
    shutil.copytree(data_dir("gloo_ranks/nsys"), src)

    def broken(chrome: Path, index: int, *args, **kwargs):
        if index == 0:
            raise OSError("disk gone")
        return real_piece(chrome, index, *args, **kwargs)

    seen: list[str] = []
    at_run_level = [False]

    def recording(paths, *args, **kwargs):
        if at_run_level[0]:
            seen.extend(str(p) for p in paths)
        return real_check(paths, *args, **kwargs)

    def run_level_check(*args, **kwargs):
        at_run_level[0] = True
        return real_run_check(*args, **kwargs)

    real_piece, real_check, real_run_check = merged.make_piece, scrub.check_paths, collect.check
    monkeypatch.setattr(merged, "make_piece", broken)
    monkeypatch.setattr(scrub, "check_paths", recording)
    monkeypatch.setattr(collect, "check", run_level_check)
    res = collect.run_collect(collect.CollectOptions(sources=[src], out=tmp_path / "out", work_dir=tmp_path / "work",
                                                     jobs=1))
    assert res.exit_code == 3
    failed = [o for o in res.outcomes if o.stage == "traces" and o.status == "failed"]
    assert len(failed) == 1 and "disk gone" in failed[0].detail
    windows = [p for p in seen if "/traces/" in p]
    assert len(windows) == 2 and all(Path(p).name.startswith(failed[0].artifact.split(".")[0]) for p in windows), seen
    merged_events = _events(tmp_path / "out" / res.manifest["merged_trace"])
    assert len({e["pid"] // merged.PID_BLOCK for e in merged_events}) == 3


def test_the_window_sqlite_checked_while_it_is_converted_reports_as_one_check(tmp_path: Path,
                                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    """The scrubbed window SQLite is checked on a thread while it is converted: a secret planted in
    it (after its scrub, before its conversion, so the Chrome JSON holds it too) is found in both
    files, in the order one checker over both files reports them, and the bundle is refused."""
    import sqlite3

    import verlprof.stages.traces as traces

    src = tmp_path / "run"
    src.mkdir()
    shutil.copy(next(data_dir("gloo_ranks/nsys").glob("*.sqlite")), src)
    token = "ghp_" + "A1b2C3d4E5f6G7h8I9j0K1l2M3n4O5p6Q7r8"    # FAKE, a GitHub token's shape

    def planting(item, scrub, flows=True, on_scrubbed=None):
        def plant(name: str) -> None:
            con = sqlite3.connect(item[0].out_dir / name)
            con.execute("UPDATE StringIds SET value = ? WHERE id = (SELECT textId FROM NVTX_EVENTS "
                        "WHERE textId IS NOT NULL LIMIT 1)", (token,))
            con.commit()
            con.close()
            on_scrubbed(name)
        return real(item, scrub, flows, plant)

    real = traces.publish_window
    monkeypatch.setattr(traces, "publish_window", planting)
    with pytest.raises(RefusedError) as err:
        collect.run_collect(collect.CollectOptions(sources=[src], out=tmp_path / "out", work_dir=tmp_path / "work",
                                                   jobs=1))
    found = str(err.value).split("in the bundle: ", 1)[1].split("; ")
    stem = next(src.glob("*.sqlite")).stem
    assert [f.split()[0] for f in found] == [f"traces/{stem}.sqlite", f"traces/{stem}.trace.json.gz!{stem}.trace.json"]
    assert all("pattern:github" in f for f in found) and token not in str(err.value)
