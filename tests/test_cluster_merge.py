"""`collect --ray` merges the nodes' gather listings into one (pipeline/cluster.merge_gathers); a
local collect uses one listing as gathered. Both must report a corrupt file the same way (issue
34): under `--ray` the merge once dropped the unreadable candidates (`rejected`) and every node
without a readable artifact, so a corrupt `worker_process_4242.sqlite` was only named in the
closing line (exit 0) instead of being a failed artifact with its reason (exit 3).

No Ray needed here: the merge is plain code over real gather results of real folders. The real
cluster runs the same case in tests/test_ray.py.
"""
from __future__ import annotations

import dataclasses
import gzip
import random
import shutil
from pathlib import Path

from verlprof.pipeline.cluster import NodeRow, merge_gathers
from verlprof.stages.core.own_outputs import mark_work_dir
from verlprof.stages.gather import GatherResult, gather, unreadable

ROOT = Path(__file__).resolve().parents[1]
SAMPLE = ROOT / "samples" / "tiny_run"
GOOD_TRACE = next((SAMPLE / "outputs" / "profile").glob("*step2_rank0*.json.gz"))
CONFIG = next(SAMPLE.glob("outputs/*/*/.hydra/config.yaml"))
SALT = "test-salt"


def make_bad(folder: Path) -> dict[str, str]:
    """The issue's three corrupt candidates; name -> the reason a local gather gives."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "worker_process_4242.sqlite").write_bytes(random.Random(1).randbytes(5000))
    (folder / "notgzip.json.gz").write_bytes(b"\x00\x01" + random.Random(2).randbytes(3000))
    (folder / "words.json.gz").write_bytes(gzip.compress(b"plain text, not JSON\n" * 20))
    return {"worker_process_4242.sqlite": "not an SQLite database (bad header)",
            "notgzip.json.gz": "not gzip data (bad header)",
            "words.json.gz": "gzip of something that is not JSON"}


def test_one_nodes_listing_comes_back_equal_to_itself(tmp_path: Path) -> None:
    """Every field of GatherResult survives the merge: a field added later and forgotten there
    makes this fail (the fixture fills every one, so the comparison means something)."""
    run = tmp_path / "run"
    make_bad(run)
    shutil.copy(GOOD_TRACE, run)
    (run / ".hydra").mkdir()
    shutil.copy(CONFIG, run / ".hydra" / "config.yaml")
    (run / "notes.txt").write_text("not an artifact\n")
    mark_work_dir(run / "work")          # verlprof's own output inside the run: skipped, said once
    got = gather([run], with_hashes=False, host_salt=SALT)
    empty = [f.name for f in dataclasses.fields(GatherResult) if not getattr(got, f.name)]
    assert empty == [], f"the fixture leaves {empty} empty: the equality below would not test them"
    merged = merge_gathers([("node-1", got)], [], SALT)
    assert merged.gathered == got
    assert merged.node_of == {a.rel: "node-1" for a in got.artifacts}


def test_a_node_holding_only_corrupt_files_is_merged_and_counted(tmp_path: Path) -> None:
    expect = make_bad(tmp_path / "bad")
    good = tmp_path / "good"
    good.mkdir()
    shutil.copy(GOOD_TRACE, good)
    per_node = [("node-good", gather([good], with_hashes=False, host_salt=SALT)),
                ("node-bad", gather([tmp_path / "bad"], with_hashes=False, host_salt=SALT))]
    rows = [NodeRow("good", "ok", 1), NodeRow("bad", "ok", 3)]
    merged = merge_gathers(per_node, rows, SALT).gathered
    assert [a.rel for a in merged.artifacts] == [GOOD_TRACE.name]
    assert sorted(a.rel for a in merged.rejected) == sorted(expect)
    assert dict(merged.unreadable) == expect


def test_the_same_corrupt_name_on_two_nodes_is_kept_apart_everywhere(tmp_path: Path) -> None:
    """`<node>/<name>` for the artifact and for its skip reason alike, so collect still finds each
    rejected file's reason (pipeline/collect_survey.gather looks it up by rel)."""
    make_bad(tmp_path / "a")
    make_bad(tmp_path / "b")
    per_node = [(n, gather([tmp_path / n], with_hashes=False, host_salt=SALT)) for n in ("a", "b")]
    merged = merge_gathers(per_node, [], SALT).gathered
    rels = sorted(a.rel for a in merged.rejected)
    assert len(rels) == 6 and len(set(rels)) == 6
    assert all("/" in r for r in rels)
    assert sorted(rel for rel, _why in unreadable(merged.skipped)) == rels
