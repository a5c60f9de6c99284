"""verl range names -> canonical stages, so runs of different verl versions compare.

Why: verl renamed its ranges over time (`gen` vs `generate_sequences`, `old_log_prob` vs
`compute_log_prob` ...). Summaries keep verl's own name as `phase` and add `stage`, one of the
names below. Unknown names are kept and mapped to `other`, never dropped.
"""
from __future__ import annotations

STAGES: tuple[str, ...] = (
    "step", "generation", "reward", "old_log_prob", "ref_log_prob", "values", "advantage",
    "actor_update", "critic_update", "weight_sync", "checkpoint", "validation", "other",
)

# verl range name -> canonical stage. Lower-cased lookup.
_ALIASES: dict[str, str] = {
    "step": "step",
    "gen": "generation", "generate_sequences": "generation", "generation": "generation",
    "rollout": "generation", "gen_max": "generation",
    "reward": "reward", "compute_rm_score": "reward", "reward_model": "reward",
    "old_log_prob": "old_log_prob", "actor_compute_log_prob": "old_log_prob",
    "compute_log_prob": "old_log_prob", "infer_actor_batch": "old_log_prob",
    "ref": "ref_log_prob", "ref_compute_log_prob": "ref_log_prob",
    "compute_ref_log_prob": "ref_log_prob", "infer_ref_batch": "ref_log_prob",
    "values": "values", "compute_values": "values",
    "adv": "advantage", "advantage": "advantage", "compute_advantage": "advantage",
    "update_actor": "actor_update", "actor_update": "actor_update", "update_policy": "actor_update",
    "update_critic": "critic_update", "critic_update": "critic_update",
    "update_weights": "weight_sync", "sync_weights": "weight_sync",
    "save_checkpoint": "checkpoint",
    "testing": "validation", "validate": "validation",
}

# Names that make a step unrepresentative of steady state (window warns about them).
UNSTEADY_STAGES = frozenset({"checkpoint", "validation"})


def canonical_stage(phase: str, role: str | None = None) -> str:
    """Map a verl range name to its canonical stage; `train_batch` is an update on the critic."""
    name = phase.strip().lower()
    if name == "train_batch":
        return "critic_update" if (role or "").lower() == "critic" else "actor_update"
    return _ALIASES.get(name, "other")
