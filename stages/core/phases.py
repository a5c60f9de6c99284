"""verl range names -> canonical stages, so runs of different verl versions compare.

Why: verl renamed its ranges over time (`gen` vs `generate_sequences`, `old_log_prob` vs
`compute_log_prob` ...). Summaries keep verl's own name as `phase` and add `stage`, one of the
names below. Unknown names are kept and mapped to `other`, never dropped.
"""
from __future__ import annotations

import re
from functools import lru_cache

#: The phase of time inside a step that no stage range covers (summaries' `path`): one spelling,
#: shared by the summarizer and the scrub, which publishes it as verlprof's own name.
UNATTRIBUTED = "(unattributed)"
#: The phase of an untimed memory snapshot's row (a name no range has: parentheses, as above).
HISTORY_PHASE = "(recorded history)"

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


#: Stages of other frameworks' ranges (torch, Megatron, NeMo, vLLM, SGLang) where the meaning is
#: clear. Kept apart from STAGES (verl's step structure, which the HTML colours one by one):
#: consumers order them after STAGES.
FRAMEWORK_STAGES: tuple[str, ...] = ("forward", "backward", "optimizer", "collective")

# Other frameworks' range names -> stage: (lower-cased regex, stage), first match wins. Only names
# whose meaning is unambiguous; everything else stays `other`.
_FRAMEWORK_RULES: tuple[tuple[re.Pattern[str], str], ...] = tuple((re.compile(p), st) for p, st in (
    # collectives: torch emit_nvtx `nccl:all_reduce`, c10d, NCCL API names, Megatron timers
    (r"^(nccl:|c10d::|nccl(all|reduce|broadcast|send|recv|group))|all[-_]?reduce|all[-_]?gather|"
     r"reduce[-_]?scatter|grads?[-_]reduce|params?[-_]all|^record_param_comms$", "collective"),
    # optimizer: torch `Optimizer.step#AdamW.step`, Megatron `optimizer`, `optimizer-inner-step`
    (r"^optimizer([.#-]|$)|optimizer[-_.]?step|^(adam|adamw|sgd)\.step", "optimizer"),
    # backward: autograd's own ranges, Megatron `backward-compute`, NeMo `backward`
    (r"^autograd::engine::evaluate_function|backward[-_]?(compute|step|pass)?$|^backward|^\w+backward\d+$",
     "backward"),
    # forward: DDP/FSDP module forwards, Megatron `forward-compute`/`forward_step`, NeMo `forward`
    (r"(distributeddataparallel|fullyshardeddataparallel)\.forward$|^forward([-_ ]?(compute|step|pass))?$",
     "forward"),
    # generation: vLLM / SGLang engine steps
    (r"^(vllm[.:]?)?(llm_engine[.:])?(generate|execute_model|model_runner\.execute_model)$|"
     r"^forward_batch_generation$|^(sglang[.:])?(run_batch|decode_step|prefill_step)$", "generation"),
))


@lru_cache(maxsize=1 << 16)   # called per range (10^6 in range-heavy captures); names repeat
def verl_stage(phase: str, role: str | None = None) -> str:
    """verl's own range names -> canonical stage (exact names only); `other` for anything else.
    The window stage cuts step sequences from these alone."""
    name = phase.strip().lower()
    if name == "train_batch":
        return "critic_update" if (role or "").lower() == "critic" else "actor_update"
    return _ALIASES.get(name, "other")


@lru_cache(maxsize=1 << 16)   # names repeat by the thousand in a trace; the rules are regexes
def canonical_stage(phase: str, role: str | None = None) -> str:
    """Map a range name to its canonical stage: verl's names first (`train_batch` is an update on
    the critic), then other frameworks' names where the meaning is clear; `other` when unknown."""
    stage = verl_stage(phase, role)
    if stage != "other":
        return stage
    name = normalize_range_name(phase).lower()
    for pattern, st in _FRAMEWORK_RULES:
        if pattern.search(name):
            return st
    return "other"


# ------------------------------------------------------------------------------------------------
# Range names that group (issue 10)
# ------------------------------------------------------------------------------------------------
# Why: profilers append per-instance detail to range names. torch's `emit_nvtx` names every op
# `aten::mul, seq = 372, op_id = 314349` (and `, sizes = [[8, 64], []]` with shapes), record
# functions repeat as `ProfilerStep#7`, and Python reprs carry addresses. Summarised raw, every
# instance is its own phase and nothing groups or compares across steps or runs. Summaries use the
# normalised name; the trace windows keep the raw one.

_SUFFIX_FIELD = re.compile(r",\s*(?:seq|op_id|sizes|input_op_ids|stream|scope|dtype|shapes?)\s*=.*$", re.DOTALL)
_COUNTER = re.compile(r"#\d+$")
_ADDRESS = re.compile(r"\b0x[0-9a-fA-F]{6,}\b")
_OBJECT_AT = re.compile(r"<([\w.]+) object at 0x\?>")
_SEQ = re.compile(r",\s*seq\s*=\s*(\d+)")


@lru_cache(maxsize=1 << 16)
def normalize_range_name(name: str) -> str:
    """The name a range groups under: per-instance suffixes (`, seq = N`, `, op_id = N`,
    `, sizes = [...]`, ...), a trailing `#N` counter and hex addresses removed.

    `aten::mul, seq = 3, op_id = 314349` -> `aten::mul`; `ProfilerStep#7` -> `ProfilerStep`;
    `Optimizer.step#AdamW.step` is left alone (the `#` is not followed by a counter).
    """
    out = _SUFFIX_FIELD.sub("", name)
    out = _COUNTER.sub("", out.rstrip())
    out = _OBJECT_AT.sub(r"<\1>", _ADDRESS.sub("0x?", out))
    return out.strip() or name.strip()


def autograd_seq(name: str) -> int | None:
    """The autograd sequence number `emit_nvtx` writes into a range name (`, seq = N`), else None.
    A backward op carries the number of the forward op that made its autograd node."""
    m = _SEQ.search(name)
    return int(m.group(1)) if m else None


_PROFILER_STEP = re.compile(r"^ProfilerStep#(\d+)$")
_STEP_N = re.compile(r"^(?:train[_ ]?)?step[ _#-]?(\d+)$", re.IGNORECASE)


@lru_cache(maxsize=1 << 16)   # called per range by the window stage; names repeat
def step_marker(name: str) -> tuple[str, int | None] | None:
    """Whether a range marks one training step, and which: `(boundary, number or None)`.

    verl's `step` range (numbered by order) -> ("nvtx_step", None); torch's `ProfilerStep#N` (N
    counts `profiler.step()` calls from 0) -> ("profiler_step", N + 1); `step<N>` / `step_<N>` /
    `train_step <N>` -> ("step_name", N). Anything else -> None.
    """
    raw = name.strip()
    if verl_stage(raw) == "step":
        return "nvtx_step", None
    m = _PROFILER_STEP.match(raw)
    if m:
        return "profiler_step", int(m.group(1)) + 1
    m = _STEP_N.match(raw)
    if m:
        return "step_name", int(m.group(1))
    return None
