"""verl's newest profiler keys, and what each does to the files a run leaves (verl 0.9).

Why: these keys change where files land and what a trace holds, so a user who set one (or left it
on through inheritance) must know what verlprof will find. Each key is read only where the config
has it (older releases lack them; an override naming a key the release lacks is the overrides
check's business):
- `<role>.profiler.relocate_results`: nsys reports leave Ray's session folder for `save_path` as
  `[<role>_]<host>_worker_process_<pid>[.<k>].nsys-rep`; rollout engine traces leave
  `agent_loop_rollout_replica_<R>/` as `rollout-replica<R>[-globalrank<G>]_<name>`.
- `<role>.profiler.finish_hook_cmd`: a shell command run once when profiling finishes (after the
  relocation); a hook that moves, compresses or deletes traces decides what collect can read.
- `<role>.profiler.tool_config.torch.schedule` (`wait`/`warmup`/`active`/`repeat`/`skip_first`): the
  torch trace of a step holds only the scheduled mini-batches of the update (verl steps the
  profiler once per mini-batch), not the whole step.
- rollout `tool_config.<tool>.profile_token_start/end`: the engine profiles those response tokens
  only (decode iterations start..end): its trace is a window of generation, not all of it.
"""
from __future__ import annotations

from typing import Any

from .config import ACTOR, CRITIC, REF, ROLLOUT, ProfileConfig, role_tool, truthy
from .findings import Finding

_ROLES = (ACTOR, ROLLOUT, REF, CRITIC)


def _set(v: Any) -> bool:
    return v is not None and v != "" and v != [] and v != {}


def check_profiler_keys(cfg: ProfileConfig) -> list[Finding]:
    """Notes on relocate_results, finish hooks, torch schedules and token windows where set."""
    out: list[Finding] = []
    on = [p for p in _ROLES if truthy(cfg.get(f"{p}.enable"))]
    reloc = [p for p in on if cfg.has(f"{p}.relocate_results") and truthy(cfg.get(f"{p}.relocate_results"))]
    if reloc:
        out.append(Finding(
            "profiler-relocate", "info",
            f"{reloc[0]}.relocate_results is on: nsys reports move from Ray's session folder to save_path as "
            "[<role>_]<host>_worker_process_<pid>[.<k>].nsys-rep, rollout engine traces to "
            "rollout-replica<R>[-globalrank<G>]_<name>; collect save_path (verlprof reads both layouts)",
            "", f"{reloc[0]}.relocate_results"))
    hooks = [p for p in on if cfg.has(f"{p}.finish_hook_cmd") and _set(cfg.get(f"{p}.finish_hook_cmd"))]
    if hooks:
        out.append(Finding(
            "profiler-finish-hook", "warning",
            f"{hooks[0]}.finish_hook_cmd runs when profiling finishes: if it moves, compresses or deletes the "
            "traces, collect reads only what it leaves; point collect at the hook's output",
            "", f"{hooks[0]}.finish_hook_cmd"))
    for p in on:
        if role_tool(cfg, p) != "torch":
            continue
        key = f"{p}.tool_config.torch.schedule"
        sched = cfg.get(key) if cfg.has(key) else None
        if isinstance(sched, dict) and _set(sched.get("active")):
            parts = ", ".join(f"{k} {sched[k]}" for k in ("skip_first", "wait", "warmup", "active", "repeat")
                              if sched.get(k) is not None)
            out.append(Finding(
                "torch-schedule", "info",
                f"{key} is set ({parts}): a step's torch trace holds only the scheduled mini-batches of the "
                "update, not the whole step; the window is what the trace holds", "", key))
    tool = role_tool(cfg, ROLLOUT)
    if tool:
        a_key = f"{ROLLOUT}.tool_config.{tool}.profile_token_start"
        b_key = f"{ROLLOUT}.tool_config.{tool}.profile_token_end"
        a = cfg.get(a_key) if cfg.has(a_key) else None
        b = cfg.get(b_key) if cfg.has(b_key) else None
        if _set(a) or _set(b):
            out.append(Finding(
                "rollout-token-window", "info",
                f"the rollout engine profiles response tokens {a if _set(a) else 'from the first'} to "
                f"{b if _set(b) else 'the last'} only ({a_key}/_end): its trace is a window of generation; "
                "verlprof's window line says so", "", a_key))
    return out
