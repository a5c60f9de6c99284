"""Every before-run check, in the order the report lists them.
"""
from __future__ import annotations

from .config import ProfileConfig
from .findings import Finding
from .nsys_capture import (
    check_capture_range_end,
    check_discard_environment,
    check_nsys_entrypoint,
    check_startup_step,
)
from .overrides import check_overrides
from .phase_owners import check_phase_owners
from .pins import check_pins
from .profiler_keys import check_profiler_keys

CONFIG_CHECKS = (
    check_pins,
    check_phase_owners,
    check_overrides,
    check_nsys_entrypoint,
    check_capture_range_end,
    check_startup_step,
    check_discard_environment,
    check_profiler_keys,
)


def config_checks(cfg: ProfileConfig) -> list[Finding]:
    out: list[Finding] = []
    for check in CONFIG_CHECKS:
        out.extend(check(cfg))
    return out
