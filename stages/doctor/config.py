"""The config doctor checks (`ProfileConfig`): loaders (the only I/O) and shared readings of verl's
profiler keys (which roles profile, which tool, which steps).
"""
from __future__ import annotations

import functools
import importlib.util
import os
import shutil
import subprocess
from dataclasses import asdict, dataclass, field
from typing import Any, Iterable, Literal, Optional

import yaml

from .config_tree import lookup
from .override_syntax import Duplicate, Override, parse_overrides

BaseKind = Literal["config", "verl-default", "composed-run", "none"]


@dataclass
class ProfileConfig:
    """What the config checks look at: a nested dict plus where its values came from."""

    data: dict
    base_kind: BaseKind = "none"
    overrides: list[Override] = field(default_factory=list)
    duplicates: list[Duplicate] = field(default_factory=list)
    entrypoint: Optional[str] = None
    phases: tuple[str, ...] = ()
    # None: unknown (nsys not found / not asked); True/False: what `nsys profile --help` says.
    nsys_supports_discard_env: Optional[bool] = None
    # Whether override keys were checked for existence against an authoritative config
    # ("config") or only against verl's stock config ("verl-default").
    existence_base: Optional[BaseKind] = None
    # The words given after a launch script (what its "$@" passes): they override the script's own
    # words on purpose, so a key set by both is the user's fix at work, not a slip.
    appended: tuple[str, ...] = ()

    # -- lookups ------------------------------------------------------------------------------
    def get(self, path: str, default: Any = None) -> Any:
        """The value at a dotted path with ``${...}`` interpolations resolved; default if absent."""
        found, value = lookup(self.data, path, resolve=True)
        return value if found else default

    def raw(self, path: str, default: Any = None) -> Any:
        found, value = lookup(self.data, path, resolve=False)
        return value if found else default

    def has(self, path: str) -> bool:
        return lookup(self.data, path, resolve=False)[0]

    def set_by_override(self, path: str) -> bool:
        for o in self.overrides:
            if o.op != "delete" and (o.key == path or path.startswith(o.key + ".")):
                return True
        return False

    def origin(self, path: str) -> Literal["override", "config", "default", "missing"]:
        if self.set_by_override(path):
            return "override"
        if not self.has(path):
            return "missing"
        return "default" if self.base_kind == "verl-default" else "config"

    def explicit(self, path: str) -> bool:
        """Set by the user (an override, or a literal in their config), not inherited via ``${}``."""
        if self.set_by_override(path):
            return True
        if self.base_kind == "verl-default":
            return False
        raw = self.raw(path)
        return self.has(path) and not (isinstance(raw, str) and "${" in raw)


def load_yaml(path: str) -> Any:
    with open(path, encoding="utf-8") as f:
        return yaml.safe_load(f)


def verl_reference_path(entrypoint: Optional[str] = None) -> Optional[str]:
    """verl's stock composed trainer config, if verl is installed (found without importing it)."""
    try:
        spec = importlib.util.find_spec("verl")
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.submodule_search_locations:
        return None
    name = "_generated_ppo_megatron_trainer.yaml" if entrypoint and "megatron" in entrypoint else "_generated_ppo_trainer.yaml"
    for loc in spec.submodule_search_locations:
        path = os.path.join(loc, "trainer", "config", name)
        if os.path.isfile(path):
            return path
    return None


@functools.lru_cache(maxsize=8)
def nsys_supports_discard_environment(nsys: Optional[str] = None) -> Optional[bool]:
    """Whether ``nsys profile`` knows ``--discard-environment``; None when no nsys is found."""
    exe = nsys or shutil.which("nsys")
    if not exe:
        return None
    try:
        proc = subprocess.run([exe, "profile", "--help"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.SubprocessError):
        return None
    return "discard-environment" in (proc.stdout + proc.stderr)


def build_profile_config(
    base: Optional[dict] = None,
    words: Iterable[str] = (),
    *,
    base_kind: BaseKind = "config",
    recorded_words: Iterable[str] = (),
    entrypoint: Optional[str] = None,
    phases: Iterable[str] = (),
    nsys_supports_discard_env: Optional[bool] = None,
    appended_words: Iterable[str] = (),
    check_existence: bool = True,
) -> ProfileConfig:
    """Apply override ``words`` on top of ``base``.

    ``base_kind``: ``config`` (a composed config the user starts from: override keys are checked
    against it), ``verl-default`` (verl's stock config stands in for one), ``composed-run`` (a
    run's own config, overrides already applied), or ``none``. ``recorded_words`` are overrides
    already applied to ``base`` (a run's ``.hydra/overrides.yaml``): only checked for duplicates.
    ``check_existence=False`` when the override keys were already checked against verl's composed
    config (`launch_check`): `check_overrides` then reports duplicates only.
    """
    if base is None:
        base_kind = "none"
    recorded = parse_overrides(recorded_words, None)
    checked = base_kind in ("config", "verl-default")
    parsed = parse_overrides(words, base if base_kind != "none" else None)
    if base_kind == "composed-run":
        # extra words on a run's config: the keys it has are known, so check them as a config
        checked = bool(parsed.overrides)
        base_kind = "config" if checked else base_kind
    ovs = [Override(**{**asdict(o), "existed": None}) for o in recorded.overrides] + parsed.overrides
    return ProfileConfig(
        data=parsed.config,
        base_kind=base_kind,
        overrides=ovs,
        duplicates=recorded.duplicates + parsed.duplicates,
        entrypoint=entrypoint or parsed.entrypoint or recorded.entrypoint,
        phases=tuple(phases),
        nsys_supports_discard_env=nsys_supports_discard_env,
        existence_base=base_kind if checked and check_existence else None,
        appended=tuple(appended_words),
    )


ACTOR = "actor_rollout_ref.actor.profiler"


ROLLOUT = "actor_rollout_ref.rollout.profiler"


REF = "actor_rollout_ref.ref.profiler"


CRITIC = "critic.profiler"


REWARD = "reward.reward_model.rollout.profiler"


NSYS = "global_profiler.global_tool_config.nsys"


WORKER_OPTS = f"{NSYS}.worker_nsight_options"


CONTROLLER_OPTS = f"{NSYS}.controller_nsight_options"


def truthy(v: Any) -> bool:
    """A config flag as Hydra users write it: `true`/`1`/`yes`/`on` strings count, like the bool."""
    if isinstance(v, str):
        return v.strip().lower() in ("true", "1", "yes", "on")
    return bool(v)


def profile_steps(cfg: ProfileConfig) -> Optional[list]:
    steps = cfg.get("global_profiler.steps")
    if steps is None:
        return None
    if isinstance(steps, (int, str)):
        steps = [steps]
    if not isinstance(steps, list):
        return None
    out = []
    for s in steps:
        try:
            out.append(int(s))
        except (TypeError, ValueError):
            out.append(s)
    return out


def int_steps(cfg: ProfileConfig) -> list[int]:
    """The integer steps of `global_profiler.steps`, sorted, once each (words like `all` left out)."""
    return sorted({s for s in (profile_steps(cfg) or []) if isinstance(s, int)})


def profiling_requested(cfg: ProfileConfig) -> bool:
    return bool(profile_steps(cfg)) or any(
        truthy(cfg.get(f"{p}.enable")) for p in (ACTOR, ROLLOUT, REF, CRITIC, REWARD)
    )


def global_tool(cfg: ProfileConfig) -> Optional[str]:
    t = cfg.get("global_profiler.tool")
    return str(t) if t else None


def role_tool(cfg: ProfileConfig, prefix: str) -> Optional[str]:
    t = cfg.get(f"{prefix}.tool")
    return str(t) if t else global_tool(cfg)


def nsys_discrete(cfg: ProfileConfig) -> bool:
    return truthy(cfg.get(f"{NSYS}.discrete", False))


def lora_enabled(cfg: ProfileConfig) -> bool:
    rank = cfg.get("actor_rollout_ref.model.lora.rank") or 0
    if not rank or int(rank) <= 0:
        rank = cfg.get("actor_rollout_ref.model.lora_rank") or 0
    try:
        rank = int(rank)
    except (TypeError, ValueError):
        rank = 0
    return rank > 0 or cfg.get("actor_rollout_ref.model.lora_adapter_path") is not None


def ref_needed(cfg: ProfileConfig) -> Optional[bool]:
    """verl runs a reference policy when the actor uses a KL loss or the reward uses KL."""
    kl_loss = cfg.get("actor_rollout_ref.actor.use_kl_loss")
    kl_reward = cfg.get("algorithm.use_kl_in_reward")
    if kl_loss is None and kl_reward is None:
        return None
    return truthy(kl_loss) or truthy(kl_reward)


def ref_colocated(cfg: ProfileConfig) -> bool:
    """The ref runs inside the actor's process: hybrid engine (verl's default) or LoRA ref-in-actor."""
    return truthy(cfg.get("actor_rollout_ref.hybrid_engine", True)) or lora_enabled(cfg)


def rollout_in_worker(cfg: ProfileConfig) -> bool:
    """Generation runs inside the actor's worker process (verl's `RolloutMode.HYBRID`: the hybrid
    engine fuses rollout and training engine in one process), so a capture of that worker (nsys)
    holds it. A separate rollout server (`hybrid_engine=False`: standalone replicas on their own
    GPUs; the fully-async trainer's `async_training` rollouter) is profiled only by its own
    profiler, which supports torch and npu alone."""
    if cfg.has("async_training"):
        return False
    return truthy(cfg.get("actor_rollout_ref.hybrid_engine", True))


def is_discrete(cfg: ProfileConfig, prefix: str, tool: Optional[str]) -> bool:
    """Whether role `prefix` profiles with `tool` in discrete mode (one trace per profiled step)."""
    if tool == "nsys":
        return nsys_discrete(cfg)
    return truthy(cfg.get(f"{prefix}.tool_config.{tool}.discrete", False))


def server_profiles(cfg: ProfileConfig, prefix: str) -> bool:
    """Whether a rollout-style server (generation, reward model) will actually write a trace."""
    tool = role_tool(cfg, prefix)
    return truthy(cfg.get(f"{prefix}.enable")) and tool in ("torch", "npu") and is_discrete(cfg, prefix, tool)


def enabled_roles(cfg: ProfileConfig) -> dict[str, str]:
    """Roles expected to write profiler output: role -> the profiler key that enables it."""
    roles: dict[str, str] = {}
    if truthy(cfg.get(f"{ACTOR}.enable")):
        roles["actor"] = ACTOR
    if server_profiles(cfg, ROLLOUT):
        roles["rollout"] = ROLLOUT
    if ref_needed(cfg) and not ref_colocated(cfg) and truthy(cfg.get(f"{REF}.enable")):
        roles["ref"] = REF
    if truthy(cfg.get(f"{CRITIC}.enable")) and (
        truthy(cfg.get("critic.enable")) or cfg.get("algorithm.adv_estimator") == "gae"
    ):
        roles["critic"] = CRITIC
    if truthy(cfg.get("reward.reward_model.enable")) and server_profiles(cfg, REWARD):
        roles["reward_model"] = REWARD
    return roles


def fmt_value(v: Any) -> str:
    """A config value as it is typed in a Hydra override (`null`, `True`, `[1,2]`), for messages."""
    if v is None:
        return "null"
    if isinstance(v, bool):
        return "True" if v else "False"
    if isinstance(v, list):
        return "[" + ",".join(fmt_value(x) for x in v) + "]"
    return str(v)


def set_word(cfg: ProfileConfig, key: str, value: Any) -> str:
    """The override to type for ``key``: ``key=v`` when it exists, else ``+key=v``."""
    exists = cfg.has(key) or cfg.base_kind == "none"
    return f"{'' if exists else '+'}{key}={fmt_value(value)}"
