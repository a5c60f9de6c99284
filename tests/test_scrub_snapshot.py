"""Scrub of torch CUDA memory snapshots: paths in every frame, allocator settings, annotations;
hostile pickles are refused before anything runs."""
from __future__ import annotations

import os
import pickle
import re
from pathlib import Path

import pytest
from provenance_expect import published_ok
from testdata import fixtures_dir
from verlprof.stages.core.errors import BadInputError
from verlprof.stages.readers.memory_snapshot import load_snapshot
from verlprof.stages.scrub.check import check_paths
from verlprof.stages.scrub.policy import load_policy
from verlprof.stages.scrub.rules import REDACTED
from verlprof.stages.scrub.tasks import ScrubTask, build_options, find_identities, scrub_artifact

FIXTURES = fixtures_dir()
SNAP = FIXTURES / "h200-torch-2.11" / "step2" / "torch_memory_rank0_pid804.pickle"
POLICY = load_policy(use_local_environment=False)


def scrub(src: Path, dst: Path):
    ids = find_identities(src, "memory_snapshot", POLICY)
    opts = build_options([ids], POLICY, salt="t", include_local=False)
    return scrub_artifact(ScrubTask(str(src), str(dst), "memory_snapshot", src.name), opts), opts


@pytest.fixture(scope="module")
def planted(tmp_path_factory: pytest.TempPathFactory) -> Path:
    snap = load_snapshot(SNAP)
    snap["allocator_settings"]["PYTORCH_CUDA_ALLOC_CONF"] = "expandable_segments:True,api_token=SnapAllocSecret31"
    snap["external_annotations"][0]["name"] = "update_actor hf_SnapAnnotation0123456789abcdefghijk"
    snap["device_traces"][0][0]["user_metadata"] = "frank@gpu-node-frank-09:/home/frank/run password=SnapMetaSecret12"
    p = tmp_path_factory.mktemp("snap") / "planted.pickle"
    p.write_bytes(pickle.dumps(snap, protocol=4))
    return p


def test_fixture_snapshot_paths_are_pseudonymised(tmp_path: Path) -> None:
    assert b"/tmp/home/alice/" in SNAP.read_bytes()
    out = tmp_path / "mem.pickle"
    res, opts = scrub(SNAP, out)
    data = out.read_bytes()
    assert b"alice" not in data and b"/opt/torch/.venv" not in data
    assert check_paths([out], POLICY, known=opts.pseudonyms) == []
    a, b = load_snapshot(SNAP), pickle.loads(data)     # builtins only: plain pickle opens it
    assert len(a["segments"]) == len(b["segments"])
    assert len(a["device_traces"][0]) == len(b["device_traces"][0])
    assert [e["size"] for e in a["device_traces"][0]] == [e["size"] for e in b["device_traces"][0]]
    assert [len(e["frames"]) for e in a["device_traces"][0]] == [len(e["frames"]) for e in b["device_traces"][0]]
    files = {f["filename"] for e in b["device_traces"][0] for f in e["frames"]}
    # a frame outside installed packages is the user's own file (issue 39): each folder and the
    # file's stem a pseudonym (or the second net's `user-<n>` / `p-<letters>`), its extension kept
    assert any(re.fullmatch(r"(?:/(?:name|user|p)-[g-z0-9]+)+/name-[g-z]{8}\.py", f) for f in files), sorted(files)[:20]
    assert not any("rlproj" in f for f in files)
    assert "site-packages/torch/nn/modules/module.py" in files
    # annotations are user-written: each public one unchanged, any other one whole pseudonym (issue 39)
    assert [x["stage"] for x in b["external_annotations"]] == [x["stage"] for x in a["external_annotations"]]
    assert all(published_ok(x["name"], y["name"], res.named, op=True)
               for x, y in zip(a["external_annotations"], b["external_annotations"]))
    assert abs(len(data) - SNAP.stat().st_size) < SNAP.stat().st_size * 0.1  # sharing kept: same size
    assert res.counts["snapshot.device_traces[].frames[].filename"]["home_path"] > 0


def test_planted_snapshot_fields_are_scrubbed(planted: Path, tmp_path: Path) -> None:
    out = tmp_path / "p.pickle"
    _res, opts = scrub(planted, out)
    data = out.read_bytes()
    for v in (b"SnapAllocSecret31", b"hf_SnapAnnotation", b"SnapMetaSecret12", b"frank"):
        assert v in planted.read_bytes() and v not in data, v
    b = pickle.loads(data)
    assert b["allocator_settings"]["PYTORCH_CUDA_ALLOC_CONF"] == f"expandable_segments:True,api_token={REDACTED}"
    # user-written and not public: one pseudonym for the whole string (the secret is gone either way)
    assert re.fullmatch(r"name-[g-z]{8}", b["external_annotations"][0]["name"])
    assert check_paths([out], POLICY, known=opts.pseudonyms) == []


class _Boom:
    def __reduce__(self):
        return (os.system, ("touch /tmp/verlprof_pwned_marker",))


@pytest.mark.parametrize("case", ["hostile", "truncated", "empty", "not_snapshot", "garbage"])
def test_bad_or_hostile_pickles_are_refused(tmp_path: Path, case: str) -> None:
    marker = Path("/tmp/verlprof_pwned_marker")
    marker.unlink(missing_ok=True)
    src = tmp_path / "bad.pickle"
    src.write_bytes({
        "hostile": pickle.dumps({"segments": [_Boom()]}),
        "truncated": SNAP.read_bytes()[:100000],
        "empty": b"",
        "not_snapshot": pickle.dumps({"a": 1}),
        "garbage": b"\x80\x04" + os.urandom(200),
    }[case])
    dst = tmp_path / "out" / "bad.pickle"
    with pytest.raises(BadInputError) as ei:
        scrub(src, dst)
    assert "bad.pickle" in str(ei.value) and "\n" not in str(ei.value)
    assert not marker.exists(), "a hostile pickle must never execute"
    assert not dst.exists()
    if case == "hostile":
        kinds = {f.kind for f in check_paths([src], POLICY)}
        assert kinds == {"unsafe_pickle"} and not marker.exists()
