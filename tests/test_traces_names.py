"""Bundle names of window traces: stable, flat, safe on every file system, never hidden."""
from __future__ import annotations

import pytest
from verlprof.stages.traces.jobs import trace_file_name, trace_sqlite_name, trace_stem


@pytest.mark.parametrize("rel, stem", [
    ("whole/whole_1873.sqlite", "whole__whole_1873"),
    ("ray-continuous/worker_process_1983.2.sqlite", "ray-continuous__worker_process_1983.2"),
    ("actor_train_step2_rank0-of-1_pid754_2026.json.gz", "actor_train_step2_rank0-of-1_pid754_2026"),
    ("logs/nsight/worker_process_12.nsys-rep", "logs__nsight__worker_process_12"),
    ("a b/c:d?.pt.trace.json", "a_b__c_d_"),
    ("../../.hidden/.x.json", "hidden__x"),
    ("", "trace"),
])
def test_trace_stem(rel: str, stem: str) -> None:
    assert trace_stem(rel) == stem
    assert trace_file_name(rel) == f"traces/{stem}.trace.json.gz"
    assert trace_sqlite_name(rel) == f"traces/{stem}.sqlite"
    assert "/" not in stem and not stem.startswith(".") and ".." not in stem.split("__")
