"""Step-level memory figures of a snapshot whose allocation history carries no times (torch < 2.2).

Why: torch 2.1's `torch.cuda.memory._snapshot()` writes `device_traces` entries (alloc,
free_requested, free_completed, segment_alloc, segment_free, ...) without `time_us`, and no
`external_annotations`. Without times no allocation can be placed inside a phase, so per-phase
peaks would be invented. What the snapshot does say, honestly, is:

- the peak allocated and the peak reserved bytes over its recorded history: the entries are in
  the order the allocator recorded them, so replaying them gives every level the process went
  through (alloc adds, free_requested subtracts, as torch counts `memory_allocated`;
  segment_alloc / segment_map add, segment_free / segment_unmap subtract, as it counts
  `memory_reserved`), anchored on the state at the end so a wrapped history (`max_entries`) is
  still right;
- the segments' state when the snapshot was taken: reserved (`total_size`), allocated
  (`allocated_size`) and active (`active_size`) bytes.

These become one phases row per device, flagged `mem_scope = "recorded_history"` (schema.py): the
figures of the snapshot's whole recorded history, which may reach back before the step.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..core.phases import HISTORY_PHASE

__all__ = ["HistoryFigures", "HISTORY_PHASE", "HISTORY_SCOPE", "is_untimed", "history_figures"]

#: `mem_scope` of the row: its mem_* figures cover the snapshot's recorded history, not a phase
HISTORY_SCOPE = "recorded_history"

_ALLOCATED = {"alloc": 1, "free_requested": -1}
_RESERVED = {"segment_alloc": 1, "segment_map": 1, "segment_free": -1, "segment_unmap": -1}


@dataclass(frozen=True)
class HistoryFigures:
    """One device's memory figures from an untimed snapshot (bytes)."""

    device: int
    peak_allocated: int
    peak_reserved: int
    reserved: int        # segments' total_size at snapshot time
    allocated: int       # segments' allocated_size at snapshot time
    active: int          # segments' active_size at snapshot time
    entries: int         # alloc / free / segment entries replayed
    negative: bool       # the replay went below zero: history and final state disagree


def _entries(snap: dict[str, Any]) -> list[list[dict[str, Any]]]:
    return [[e for e in (t or []) if isinstance(e, dict)] for t in snap.get("device_traces") or []]


def is_untimed(snap: dict[str, Any]) -> bool:
    """True when the snapshot records allocations but none of them carries `time_us`."""
    seen = False
    for trace in _entries(snap):
        for e in trace:
            if e.get("action") in _ALLOCATED or e.get("action") in _RESERVED:
                if isinstance(e.get("time_us"), (int, float)):
                    return False
                seen = True
    return seen


def _int(v: Any) -> int:
    return v if isinstance(v, int) and not isinstance(v, bool) else 0


def _replay(trace: list[dict[str, Any]], signs: dict[str, int], final: int) -> tuple[int, bool]:
    """The peak level of one counter over the entries, in their recorded order, anchored on `final`."""
    deltas = [signs[e["action"]] * _int(e.get("size")) for e in trace if e.get("action") in signs]
    level = final - sum(deltas)
    peak, low = level, level
    for d in deltas:
        level += d
        peak, low = max(peak, level), min(low, level)
    return peak, low < 0


def history_figures(snap: dict[str, Any]) -> list[HistoryFigures]:
    """Per device (that has segments or recorded entries): the figures above, by device number."""
    state: dict[int, list[int]] = {}
    for seg in snap.get("segments") or []:
        if not isinstance(seg, dict):
            continue
        s = state.setdefault(_int(seg.get("device")), [0, 0, 0])
        s[0] += _int(seg.get("total_size"))
        s[1] += _int(seg.get("allocated_size"))
        s[2] += _int(seg.get("active_size"))
    traces = _entries(snap)
    devices = sorted(set(state) | {d for d, t in enumerate(traces) if t})
    out = []
    for dev in devices:
        trace = traces[dev] if dev < len(traces) else []
        reserved, allocated, active = state.get(dev, [0, 0, 0])
        peak_a, neg_a = _replay(trace, _ALLOCATED, allocated)
        peak_r, neg_r = _replay(trace, _RESERVED, reserved)
        n = sum(1 for e in trace if e.get("action") in _ALLOCATED or e.get("action") in _RESERVED)
        out.append(HistoryFigures(dev, peak_a, peak_r, reserved, allocated, active, n, neg_a or neg_r))
    return out
