"""The file and folder names verl writes into its `save_path` are published as they are, while
what a person wrote around them still becomes a pseudonym (issue 39, `VERL_FILE_LAYOUTS` in
stages/scrub/provenance.py). The names come from verl's own functions where it has one; the oom
folder's strftime format is verl's (`TorchMemoryProfiler._attach_oom_observer`), applied here."""
from __future__ import annotations

import re
from datetime import datetime
from pathlib import Path

from verl.utils.profiler.config import ProfilerConfig, rollout_trace_dir
from verlprof.stages.scrub.provenance import Origin, UserTextGate

PSEUDO = r"name-[g-z]+"


def _publish(rel: str) -> tuple[str, tuple[tuple[str, str], ...]]:
    return UserTextGate([], "any salt").judge(rel, rel, Origin.FILE)


def test_verls_own_folders_and_files_stay_whole(tmp_path: Path) -> None:
    engine_dir = Path(rollout_trace_dir(ProfilerConfig(tool="torch", save_path=str(tmp_path / "profile")), 3))
    oom = f"oom_{datetime(2026, 12, 2, 8, 56, 30, 123456).strftime('%Y%m%d-%H%M%S-%f')}"
    for rel in (f"profile/{engine_dir.name}/1764660300.10-TP-0.trace.json.gz",
                f"profile/{oom}/torch_memory_oom_rank0_pid804.pickle",
                "profile/step2/torch_memory_rank1_pid90.pickle",
                "profile/rollout-replica1-globalrank3_1764660000.11-TP-1.trace.json.gz",
                "profile/rollout-replica0_3f9a2c-rank-0.1764660001000000000.pt.trace.json.gz"):
        assert _publish(rel) == (rel, ()), rel


def test_a_persons_words_in_verls_places_still_become_pseudonyms() -> None:
    # the engine's part after verl's relocation prefix is judged on its own: the prefix stays
    got, made = _publish("profile/rollout-replica1_amber_forest_run.trace.json.gz")
    assert re.fullmatch(rf"profile/rollout-replica1_{PSEUDO}\.trace\.json\.gz", got), got
    assert [orig for orig, _p in made] == ["amber_forest_run"]
    # a folder that only starts like verl's is the person's, whole
    for rel in ("oom_amberforest/torch_memory_rank0_pid1.pickle", "agent_loop_rollout_replica_x/a.json"):
        got, made = _publish(rel)
        assert re.fullmatch(rf"{PSEUDO}/[\w.]+", got) and len(made) == 1, (rel, got)
