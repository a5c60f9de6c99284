"""nsys options of a verl run: entrypoint, capture ranges and their end, the start-up step,
whether the environment is kept in the reports.
"""
from __future__ import annotations

import re
from typing import Optional

from .config import (
    CONTROLLER_OPTS,
    WORKER_OPTS,
    ProfileConfig,
    global_tool,
    int_steps,
    nsys_discrete,
    profile_steps,
    truthy,
)
from .findings import Finding
from .pins import recommended_words


def _opts(cfg: ProfileConfig, path: str) -> dict:
    v = cfg.get(path)
    return v if isinstance(v, dict) else {}


def check_nsys_entrypoint(cfg: ProfileConfig) -> list[Finding]:
    """Step-scoped controller capture is driven by verl_omni's main_diffusion, not main_diffusion_v1."""
    if global_tool(cfg) != "nsys" or not profile_steps(cfg):
        return []
    ctrl = _opts(cfg, CONTROLLER_OPTS)
    if str(ctrl.get("capture-range", "")).strip() != "cudaProfilerApi":
        return []
    key = f"{CONTROLLER_OPTS}.capture-range"
    ep = cfg.entrypoint or ""
    if ep.endswith("main_diffusion_v1") or ep.endswith("main_diffusion_v1.py"):
        return [Finding("nsys-controller-capture", "error",
                        f"{ep} does not drive step-scoped controller capture (capture-range=cudaProfilerApi on "
                        "the controller): the controller report stays empty",
                        f"python -m verl_omni.trainer.main_diffusion ... (or ~{key})", key)]
    if not ep:
        return [Finding("nsys-controller-capture", "info",
                        "controller capture-range=cudaProfilerApi is only driven by "
                        "verl_omni.trainer.main_diffusion; pass --entrypoint to check yours",
                        "verlprof doctor --entrypoint verl_omni.trainer.main_diffusion ...", key)]
    return []


def _capture_ranges(cfg: ProfileConfig) -> Optional[int]:
    """Capture ranges one worker opens in the run; None when it cannot be counted (discrete)."""
    steps = int_steps(cfg)
    if not steps or nsys_discrete(cfg):
        return None
    if truthy(cfg.get("global_profiler.profile_continuous_steps", False)):
        groups = 1 + sum(1 for a, b in zip(steps, steps[1:]) if b != a + 1)
        return groups
    return len(steps)


_END_RE = re.compile(r"^(none|stop|stop-shutdown|repeat|repeat-shutdown)(?::(\d+))?$")


def check_capture_range_end(cfg: ProfileConfig) -> list[Finding]:
    """``capture-range-end`` against the number of capture ranges the run opens."""
    if global_tool(cfg) != "nsys" or not profile_steps(cfg):
        return []
    out: list[Finding] = []
    ranges = _capture_ranges(cfg)
    steps = int_steps(cfg)
    for who, path in (("worker", WORKER_OPTS), ("controller", CONTROLLER_OPTS)):
        opts = _opts(cfg, path)
        if str(opts.get("capture-range", "")).strip() != "cudaProfilerApi":
            continue
        key = f"{path}.capture-range-end"
        end = opts.get("capture-range-end")
        note = ""
        if end is None:
            if who == "worker":
                end, note = f"repeat-shutdown:{6 * len(steps)}", " (verl's default, 6 x len(steps))"
            else:
                end, note = "stop-shutdown", " (nsys's default)"
        m = _END_RE.match(str(end).strip())
        if not m:
            continue
        mode, n = m.group(1), int(m.group(2)) if m.group(2) else None
        want = ranges if ranges is not None else None
        fix_word = f"++{key}=repeat-shutdown:{want}" if want else None
        if mode == "repeat-shutdown" and n is not None and want is not None:
            if n > want:
                out.append(Finding("nsys-capture-range-end", "warning",
                                   f"{who} capture-range-end={end}{note} but the run opens {want} capture range(s): "
                                   "reports finalize only at process exit (a killed run leaves .qdstrm)",
                                   fix_word, key))
            elif n < want:
                out.append(Finding("nsys-capture-range-end", "error",
                                   f"{who} capture-range-end={end}{note} but the run opens {want} capture ranges: "
                                   f"nsys shuts down after {n}, the later profiled steps are lost", fix_word, key))
        elif mode == "repeat-shutdown" and n is not None and n < len(steps):
            out.append(Finding("nsys-capture-range-end", "error",
                               f"{who} capture-range-end={end}{note} is fewer than the {len(steps)} profiled steps: "
                               "nsys shuts down before the last ones", f"++{key}=repeat-shutdown:{6 * len(steps)}",
                               key))
        elif mode == "repeat" and n is not None and want is not None and n < want:
            out.append(Finding("nsys-capture-range-end", "error",
                               f"{who} capture-range-end={end}{note} honors {n} of the {want} capture ranges: "
                               "the later profiled steps are not captured", f"++{key}=repeat:{want}", key))
        elif mode in ("stop", "stop-shutdown") and (want or len(steps)) > 1:
            out.append(Finding("nsys-capture-range-end", "error",
                               f"{who} capture-range-end={end}{note} captures only the first capture range, the "
                               f"run opens {want or 'several'}", fix_word or f"++{key}=repeat", key))
        elif mode == "none":
            out.append(Finding("nsys-capture-range-end", "warning",
                               f"{who} capture-range-end=none: capture runs until process exit, so the report "
                               "finalizes only then", fix_word or f"++{key}=repeat", key))
    return out


def check_startup_step(cfg: ProfileConfig) -> list[Finding]:
    """Continuous nsys captures of step 1 only: say that collect will summarize a warm-up step (a
    note: the lightest footprint is a fair choice), and what gives the steady-state step instead."""
    if global_tool(cfg) != "nsys" or nsys_discrete(cfg):
        return []
    if sorted(set(int_steps(cfg))) != [1]:
        return []
    return [Finding("nsys-startup-step", "info",
                    "step 2 is not profiled, so collect summarizes step 1, a warm-up step: it carries profiler "
                    "start-up (CUDA/NVTX init, first-touch allocations). Fine for the lightest footprint; for "
                    "the steady-state step 2, profile [1,2,3]",
                    recommended_words(cfg), "global_profiler.steps")]


def check_discard_environment(cfg: ProfileConfig) -> list[Finding]:
    """nsys reports embed the process environment unless ``discard-environment`` is set and supported."""
    if global_tool(cfg) != "nsys" or not profile_steps(cfg):
        return []
    unset, setw = [], []
    for who, path in (("worker", WORKER_OPTS), ("controller", CONTROLLER_OPTS)):
        if not cfg.has(path) and cfg.base_kind != "none":
            continue
        opts = _opts(cfg, path)
        (setw if truthy(opts.get("discard-environment", False)) else unset).append((who, path))
    out: list[Finding] = []
    if unset:
        whos = " and ".join(w for w, _ in unset)
        fix = " ".join(f"++{p}.discard-environment=true" for _, p in unset)
        if cfg.nsys_supports_discard_env is False:
            fix = "upgrade nsys, or scrub before sharing (verlprof collect does)"
        unsupported = " (and the nsys in use does not support it)" if cfg.nsys_supports_discard_env is False else ""
        out.append(Finding("nsys-environment", "warning",
                           f"discard-environment is not set on the {whos} nsys options{unsupported}: the reports "
                           "embed the environment (tokens, keys); scrub before sharing (verlprof collect does)",
                           fix, f"{unset[0][1]}.discard-environment"))
    if setw and cfg.nsys_supports_discard_env is False:
        out.append(Finding("nsys-environment", "warning",
                           "discard-environment is set, but the nsys in use does not support it: the reports embed "
                           "the environment; scrub before sharing (verlprof collect does)",
                           "use an nsys that lists --discard-environment in `nsys profile --help`",
                           f"{setw[0][1]}.discard-environment"))
    return out
