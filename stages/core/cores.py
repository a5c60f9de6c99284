"""How many CPU cores this process may really use: affinity and the cgroup's CPU quota.

Why not `os.cpu_count()`: it counts the host's cores. A job on a shared login node, in a container
or under a batch scheduler is given fewer (a CPU set, a cgroup quota); a pool sized by the host's
count runs more workers than there are cores to run them, and a pool sized by a user's typo runs
thousands. pipeline/workers.py caps every pool by this number; the gather stage's hashing threads
use it too (stages never import pipeline/, so it lives in core).
"""
from __future__ import annotations

import math
import os
from pathlib import Path

_CGROUP = Path("/sys/fs/cgroup")


def _affinity_cores() -> int:
    try:
        return len(os.sched_getaffinity(0)) or 1
    except (AttributeError, OSError):   # not Linux
        return os.cpu_count() or 1


def _cgroup_quota_cores(root: Path = _CGROUP) -> int | None:
    """Cores the cgroup's CPU quota allows (rounded up), or None when there is no quota.

    cgroup v2: `cpu.max` is "<quota> <period>" or "max <period>"; v1: cpu.cfs_quota_us (-1: none)
    over cpu.cfs_period_us."""
    try:
        quota, period = (root / "cpu.max").read_text().split()[:2]
        if quota != "max" and int(period) > 0:
            return max(1, math.ceil(int(quota) / int(period)))
        return None
    except (OSError, ValueError):
        pass
    try:
        quota_us = int((root / "cpu" / "cpu.cfs_quota_us").read_text())
        period_us = int((root / "cpu" / "cpu.cfs_period_us").read_text())
    except (OSError, ValueError):
        return None
    return max(1, math.ceil(quota_us / period_us)) if quota_us > 0 and period_us > 0 else None


def usable_cores() -> int:
    """The cores this process may run on: its CPU affinity, capped by the cgroup's CPU quota."""
    cores = _affinity_cores()
    quota = _cgroup_quota_cores()
    return max(1, min(cores, quota) if quota else cores)
