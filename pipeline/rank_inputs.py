"""The pandas-free part of ranks.parquet: what it needs of each profiled step's phase rows, cut
where the rows are made, and the noise floor (collect's `--noise-floor`).

Why a module of its own, without pandas: collect's pass-2 workers cut the other profiled steps'
rows down to what pipeline/ranks.py reads (`step_phase_rows`), the CLI checks `--noise-floor`
before a run, and neither may pay pandas' import (a few tenths of a second of every collect's
serial start-up, issue 30); ranks.py re-exports these names.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Iterable

from ..stages.core import formats
from ..stages.core.phases import UNATTRIBUTED   # the catch-all phase of a process's time outside every range

#: Phases deeper than this are kept in ranks.parquet only with a known stage (or enclosing one).
MAX_DEPTH = 2


@dataclass(frozen=True)
class NoiseFloor:
    """Below this, nobody is named: an excess (or a wait) must exceed both `fraction` of the
    phase's median wall and `min_ns`; a culprit's loss must also exceed `step_fraction` of the
    step. Why all three: 5% of a 2 ms phase is timer noise, 1 ms of a 10 s phase is jitter, and a
    5% loss in a phase of 6 ms is 0.3% of a 100 ms step, which nobody would act on (issue 42: the
    sample named a rank for 1.3 ms of a 96 ms step)."""

    fraction: float = 0.05
    min_ns: int = 1_000_000
    step_fraction: float = 0.05

    def of(self, median_wall: float) -> float:
        return max(self.fraction * float(median_wall), float(self.min_ns))

    def of_step(self, step_wall: float) -> float:
        """The floor a culprit's loss must pass in a step of `step_wall` ns."""
        return self.step_fraction * float(step_wall)

    def text(self) -> str:
        return (f"{100 * self.fraction:g}% of the phase and {self.min_ns / 1e6:g} ms, "
                f"{100 * self.step_fraction:g}% of the step")


DEFAULT_FLOOR = NoiseFloor()


def parse_noise_floor(text: str) -> NoiseFloor:
    """`5%,1ms` / `0.1,500us` / `10%` / `5%,1ms,10%` -> NoiseFloor (the option's value: a share of
    the phase, a time, and a second share: of the step); a bad one raises ValueError with the
    accepted form."""
    frac, min_ns, step = DEFAULT_FLOOR.fraction, DEFAULT_FLOOR.min_ns, DEFAULT_FLOOR.step_fraction
    shares = 0
    for part in (p.strip() for p in str(text).split(",") if p.strip()):
        m = re.fullmatch(r"([0-9.]+)\s*(%|ns|us|µs|ms|s)?", part)
        if not m:
            raise ValueError(f"noise floor {text!r}: expected e.g. '5%,1ms' or '5%,1ms,5%' "
                             "(a share of the phase, a time, a share of the step)")
        v, unit = float(m.group(1)), m.group(2)
        if unit == "%" or unit is None:
            share = v / 100 if unit == "%" or v > 1 else v
            if shares == 0:
                frac = share
            else:
                step = share
            shares += 1
        else:
            min_ns = int(v * {"ns": 1, "us": 1e3, "µs": 1e3, "ms": 1e6, "s": 1e9}[unit])
    return NoiseFloor(frac, min_ns, step)


STEP_COLUMNS = ("source", "source_kind", "role", "rank", "pid", "step", "phase", "stage", "parent", "depth",
                "start_ns", "wall_ns", "comm_ns", "gpu_busy_ns", "gpu_busy_inherited_ns", "kernel_ns", "path",
                "launch_span_ns")


def step_phase_rows(phases: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    """What ranks.parquet needs of another profiled step's phase rows (collect's per-step pass):
    depth <= 2, a known stage or a collective, and the columns read here; the rest is dropped in
    the worker so the other steps of a 10,000-op capture cost little memory."""
    rows = [r for r in phases if r.get("phase") != UNATTRIBUTED and r.get("source_kind") not in formats.untimed_kinds()]
    kept = {r.get("path") for r in rows if (r.get("depth") or 0) <= MAX_DEPTH
            or (isinstance(r.get("stage"), str) and r.get("stage") != "other")}
    kept |= {" > ".join(q.split(" > ")[:i]) for q in kept if isinstance(q, str) for i in range(1, q.count(" > ") + 1)}
    return [{k: r.get(k) for k in STEP_COLUMNS} for r in rows if r.get("path") in kept]
