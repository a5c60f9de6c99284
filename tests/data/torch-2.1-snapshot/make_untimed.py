"""Derive a torch-2.1-shaped memory snapshot from the real torch 2.11 one (see README.md).

Run from the repository root: `python tests/data/torch-2.1-snapshot/make_untimed.py`. Deterministic:
the same input gives the same bytes (pickle protocol 4, `xz -9`-level preset, no timestamps).
"""
from __future__ import annotations

import lzma
import pickle
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
SOURCE = HERE.parent / "h200-torch-2.11" / "step2" / "torch_memory_rank0_pid804.pickle.xz"
TARGET = HERE / "step2" / "torch_memory_rank0_pid804.pickle.xz"

#: what torch 2.1 did not write: times on trace entries (the point of this file), and the later
#: additions verlprof does not read
TOP_LEVEL_LATER = ("external_annotations", "allocator_settings")
ENTRY_LATER = ("time_us", "compile_context", "user_metadata")


def untimed(snap: dict[str, Any]) -> dict[str, Any]:
    """The snapshot with the keys above removed; segments, blocks, frames and entry order unchanged."""
    out = {k: v for k, v in snap.items() if k not in TOP_LEVEL_LATER}
    out["device_traces"] = [[{k: v for k, v in e.items() if k not in ENTRY_LATER} for e in trace]
                            for trace in snap["device_traces"]]
    return out


def main() -> None:
    snap = pickle.loads(lzma.decompress(SOURCE.read_bytes()))   # the project's own fixture: trusted
    TARGET.parent.mkdir(parents=True, exist_ok=True)
    TARGET.write_bytes(lzma.compress(pickle.dumps(untimed(snap), protocol=4), preset=9 | lzma.PRESET_EXTREME))


if __name__ == "__main__":
    main()
