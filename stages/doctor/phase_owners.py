"""Which process owns the phase being profiled: a role's profiler only sees its own worker's ranges.
"""
from __future__ import annotations

from .config import (
    ACTOR,
    CRITIC,
    REF,
    REWARD,
    ROLLOUT,
    ProfileConfig,
    enabled_roles,
    global_tool,
    is_discrete,
    profile_steps,
    ref_colocated,
    ref_needed,
    role_tool,
    rollout_in_worker,
    server_profiles,
    set_word,
    truthy,
)
from .findings import Finding

PHASES = {
    "actor": ("actor train/backward", ACTOR),
    "generation": ("generation", ROLLOUT),
    "ref": ("ref log-prob", REF),
    "reward": ("reward model", REWARD),
    "critic": ("critic", CRITIC),
}


def check_phase_owners(cfg: ProfileConfig) -> list[Finding]:
    """Each phase is profiled by the profiler of the process that owns it."""
    out: list[Finding] = []
    gtool = global_tool(cfg)
    steps = profile_steps(cfg)

    # generation: in the hybrid worker (its nsys capture holds it), or a separate server (torch/npu
    # only, discrete only)
    if truthy(cfg.get(f"{ROLLOUT}.enable")):
        explicit = cfg.explicit(f"{ROLLOUT}.enable") or "generation" in cfg.phases
        tool = role_tool(cfg, ROLLOUT)
        if tool not in ("torch", "npu", None) and rollout_in_worker(cfg):
            # hybrid engine: generation runs in the actor_rollout_ref worker, whose capture holds it
            if tool == "nsys" and truthy(cfg.get(f"{ACTOR}.enable")):
                out.append(Finding("phase-rollout-hybrid", "info",
                                   "generation runs inside the hybrid actor_rollout_ref worker (hybrid_engine): "
                                   "the worker's nsys capture holds it; the rollout server's own profiler "
                                   "(torch and npu only) is not used", "", f"{ROLLOUT}.tool"))
            elif tool == "nsys":
                out.append(Finding("phase-rollout-tool", "error" if explicit else "info",
                                   "generation is not profiled: it runs in the hybrid worker, whose nsys capture "
                                   f"follows the actor's profiler, and {ACTOR}.enable is off",
                                   f"{ACTOR}.enable=True", f"{ACTOR}.enable"))
            else:
                out.append(Finding("phase-rollout-tool", "error" if explicit else "info",
                                   f"generation is not profiled: the rollout profiler supports torch and npu "
                                   f"(and nsys in the hybrid worker), the tool is {tool}",
                                   f"{ROLLOUT}.tool=torch {ROLLOUT}.tool_config.torch.discrete=True", f"{ROLLOUT}.tool"))
        elif tool not in ("torch", "npu", None):
            out.append(Finding("phase-rollout-tool", "error" if explicit else "info",
                               f"generation is not profiled: the separate rollout server (hybrid_engine=False or "
                               f"fully-async) supports only torch and npu profilers, the tool is {tool}",
                               f"{ROLLOUT}.tool=torch {ROLLOUT}.tool_config.torch.discrete=True", f"{ROLLOUT}.tool"))
        elif tool in ("torch", "npu") and not is_discrete(cfg, ROLLOUT, tool):
            k = f"{ROLLOUT}.tool_config.{tool}.discrete"
            out.append(Finding("phase-rollout-continuous", "error" if explicit else "info",
                               "generation is not profiled: the rollout server rejects continuous mode "
                               f"({k} is false{'' if explicit else '; enable is inherited from the actor'})",
                               set_word(cfg, k, True), k))

    # reward model: its own rollout server, configured under reward.reward_model.rollout.profiler
    for wrong in ("reward.reward_model.profiler", "reward_model.profiler"):
        if truthy(cfg.get(f"{wrong}.enable")):
            out.append(Finding("phase-reward-misplaced", "error",
                               f"{wrong} is not read: the reward model is profiled by its rollout server",
                               f"{set_word(cfg, REWARD + '.enable', True)} "
                               f"{set_word(cfg, REWARD + '.tool_config.torch.discrete', True)}", wrong))
    if truthy(cfg.get(f"{REWARD}.enable")):
        if not truthy(cfg.get("reward.reward_model.enable")):
            out.append(Finding("phase-reward-disabled", "warning",
                               f"{REWARD}.enable is set but reward.reward_model.enable is false: there is no "
                               "reward model server to profile", "reward.reward_model.enable=True",
                               "reward.reward_model.enable"))
        tool = role_tool(cfg, REWARD)
        if tool not in ("torch", "npu") or not is_discrete(cfg, REWARD, tool):
            k = f"{REWARD}.tool_config.torch.discrete"
            out.append(Finding("phase-reward-continuous", "error",
                               f"the reward model is not profiled: its rollout server needs tool torch (or npu) in "
                               f"discrete mode (tool {tool}, discrete {is_discrete(cfg, REWARD, tool)})",
                               f"{set_word(cfg, REWARD + '.tool', 'torch')} {set_word(cfg, k, True)}", k))

    # ref log-prob: own profiler only when the ref worker is separate
    need = ref_needed(cfg)
    ref_on = truthy(cfg.get(f"{REF}.enable"))
    if ref_on and need is False:
        out.append(Finding("phase-ref-unused", "warning",
                           f"{REF}.enable is set but no reference policy runs (actor.use_kl_loss and "
                           "algorithm.use_kl_in_reward are false)",
                           "actor_rollout_ref.actor.use_kl_loss=True (or drop the ref profiler)", f"{REF}.enable"))
    elif ref_on and ref_colocated(cfg) and cfg.explicit(f"{REF}.enable"):
        actor_on = truthy(cfg.get(f"{ACTOR}.enable"))
        out.append(Finding("phase-ref-colocated", "warning" if actor_on else "error",
                           f"{REF} is ignored: the ref worker is colocated with the actor and follows the actor's "
                           f"profiler{'' if actor_on else ', which is off, so ref log-prob is not profiled'}",
                           f"{ACTOR}.enable=True", f"{REF}.enable"))
    elif need and not ref_colocated(cfg) and truthy(cfg.get(f"{ACTOR}.enable")) and not ref_on:
        out.append(Finding("phase-ref-separate", "info",
                           "ref log-prob runs in a separate ref worker (hybrid_engine=False) whose profiler is off",
                           f"{REF}.enable=True", f"{REF}.enable"))

    # phases the user said they want (--phase)
    for phase in cfg.phases:
        label, prefix = PHASES.get(phase, (phase, None))
        if prefix is None:
            out.append(Finding("phase-unknown", "error", f"unknown phase {phase!r}",
                               "use one of: " + ", ".join(PHASES), None))
            continue
        owner = prefix
        if phase == "ref" and ref_colocated(cfg):
            owner = ACTOR
        if phase == "ref" and need is False:
            out.append(Finding("phase-wanted", "error", "ref log-prob does not run: no reference policy is needed",
                               "actor_rollout_ref.actor.use_kl_loss=True", "actor_rollout_ref.actor.use_kl_loss"))
            continue
        if phase in ("generation", "reward"):
            ok = server_profiles(cfg, prefix) and (phase != "reward" or truthy(cfg.get("reward.reward_model.enable")))
            if ok:
                continue
            if truthy(cfg.get(f"{prefix}.enable")):
                continue  # already explained by the phase-rollout-*/phase-reward-* findings above
        elif truthy(cfg.get(f"{owner}.enable")):
            continue
        fix = f"{set_word(cfg, owner + '.enable', True)}"
        if phase in ("generation", "reward"):
            fix += f" {set_word(cfg, owner + '.tool_config.torch.discrete', True)}"
        out.append(Finding("phase-wanted", "error",
                           f"{label} is not profiled: it is owned by {owner}, which is not enabled", fix,
                           f"{owner}.enable"))

    # profiling asked for, but no role will write anything
    if steps and gtool and not enabled_roles(cfg) and not any(f.severity == "error" for f in out):
        out.append(Finding("phase-nothing-profiled", "error",
                           "global_profiler.steps is set but no role's profiler is enabled: the run profiles nothing",
                           f"{ACTOR}.enable=True", f"{ACTOR}.enable"))
    return out
