"""The nsys summary reads only what its step window can depend on, and gets the full read's rows.

Why: a 1 GB export of hundreds of steps is summarized for one step (issues 21 and 24: "the nsys reader
reads only the window it is asked for"); `projection._narrow` bounds the API calls by the selected
ranges' span and the GPU operations by the correlation ids of the calls read. This compares, on real
multi-step captures, every phases and kernels row with a read of the whole export, and checks that
the narrowed read was taken (and that it reads fewer rows)."""
from __future__ import annotations

import math
import sys
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).parent))
from testdata import data_path  # noqa: E402
from verlprof.stages.summarize import SummarizeOptions  # noqa: E402
from verlprof.stages.summarize import projection  # noqa: E402
from verlprof.stages.summarize.nsys import scan_nsys  # noqa: E402
from verlprof.stages.window import identity_from_path  # noqa: E402

CAPTURES = [
    "h200-nsys-2025.3/whole/whole_1873.sqlite",        # verl step ranges, 3 steps, H200 kernels
    "gpu_captures/whole-emit-nvtx/whole_956.sqlite",   # emit_nvtx: backward launched on autograd's thread
    "gloo_ranks/nsys/worker_process_30976.sqlite",     # a 4-rank gloo run (CPU only), one rank
]


def _rows(rows: list[dict[str, Any]]) -> list[str]:
    def clean(v: Any) -> Any:
        return None if isinstance(v, float) and math.isnan(v) else v
    return sorted(repr(sorted((k, clean(v)) for k, v in r.items())) for r in rows)


@pytest.mark.parametrize("rel", CAPTURES)
def test_narrowed_read_equals_the_full_read(rel: str, monkeypatch: pytest.MonkeyPatch) -> None:
    path = data_path(rel)
    ident = identity_from_path(path)
    taken: list[Any] = []
    real = projection._narrow
    monkeypatch.setattr(projection, "_narrow", lambda *a, **k: taken.append(real(*a, **k)) or taken[-1])
    narrowed = scan_nsys(path, ident, SummarizeOptions())
    assert any(t is not None for t in taken), "the step window did not narrow the read"
    monkeypatch.setattr(projection, "_narrow", lambda *a, **k: None)
    full = scan_nsys(path, ident, SummarizeOptions())
    assert narrowed.rows["phases"] and _rows(narrowed.rows["phases"]) == _rows(full.rows["phases"])
    assert _rows(narrowed.rows["kernels"]) == _rows(full.rows["kernels"])
    calls = (narrowed.projection.api_calls_in_ranges, full.projection.api_calls_in_ranges)
    assert calls[0] < calls[1] or calls == (0, 0)   # the CPU-only gloo run launches nothing
