"""verlprof doctor: find the traps that make a verl profiling run fail silently.

Two families of checks:

* before a run, over a parsed config (``ProfileConfig``): the one-step pins, which process owns the
  phase being profiled, Hydra override syntax (``+key`` vs ``key``, duplicates), and nsys options;
* after a run, over the artifacts a run folder holds (``after_run_checks``): unfinished ``.qdstrm``
  reports, empty ``.nsys-rep`` files, profiled roles that wrote nothing, stale reports.

Everything here is a pure function over plain records (dicts, dataclasses); the only I/O lives in
the clearly named loaders (``load_yaml``, ``scan_run_folder``, ``load_run_folder``,
``load_verl_reference``, ``nsys_supports_discard_environment``). The CLI is in
``verlprof.pipeline.commands.doctor_cmd``. Key names follow verl 0.9.1's
``verl/trainer/config/_generated_ppo_trainer.yaml`` and ``verl/utils/profiler/config.py``.
"""

from __future__ import annotations

import copy
import functools
import os
import re
import shutil
import subprocess
from dataclasses import asdict, dataclass, field
from typing import Any, Iterable, Literal, Optional

import yaml

Severity = Literal["error", "warning", "info"]
SEVERITY_ORDER = {"error": 0, "warning": 1, "info": 2}

# ---------------------------------------------------------------------------------------------
# records
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Finding:
    """One thing wrong (or worth knowing), said in one line, with what to type instead."""

    code: str
    severity: Severity
    message: str
    fix: str
    key: Optional[str] = None

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass(frozen=True)
class Override:
    """One Hydra override word as the shell passed it, and what applying it met."""

    index: int  # position among the words (0-based)
    word: str
    op: Literal["set", "add", "force", "delete"]  # key=v, +key=v, ++key=v, ~key
    key: str
    value: Any = None
    raw_value: Optional[str] = None
    # Whether the key was present when this override was applied (None: no base config to tell).
    existed: Optional[bool] = None


@dataclass(frozen=True)
class Duplicate:
    """A key set by more than one override; Hydra applies them in order, so the last one wins."""

    key: str
    words: tuple[str, ...]
    winner: str


@dataclass
class ParsedOverrides:
    config: dict
    overrides: list[Override] = field(default_factory=list)
    duplicates: list[Duplicate] = field(default_factory=list)
    ignored: list[str] = field(default_factory=list)  # words that are not overrides (python3, -m, ...)
    entrypoint: Optional[str] = None  # module or script found in the words (python -m X / X.py)


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

    # -- lookups ------------------------------------------------------------------------------
    def get(self, path: str, default: Any = None) -> Any:
        """The value at a dotted path with ``${...}`` interpolations resolved; default if absent."""
        found, value = _lookup(self.data, path, resolve=True)
        return value if found else default

    def raw(self, path: str, default: Any = None) -> Any:
        found, value = _lookup(self.data, path, resolve=False)
        return value if found else default

    def has(self, path: str) -> bool:
        return _lookup(self.data, path, resolve=False)[0]

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


# ---------------------------------------------------------------------------------------------
# dict helpers and a small OmegaConf-style interpolation resolver (no omegaconf/hydra needed)
# ---------------------------------------------------------------------------------------------

_MISSING = object()


def _lookup(root: Any, path: str, resolve: bool, _depth: int = 0) -> tuple[bool, Any]:
    node = root
    for part in path.split(".") if path else []:
        if resolve:
            node = _resolve(root, node, _depth)
        if isinstance(node, dict) and part in node:
            node = node[part]
        elif isinstance(node, list) and part.isdigit() and int(part) < len(node):
            node = node[int(part)]
        else:
            return False, None
    if resolve:
        node = _resolve(root, node, _depth)
    return True, node


def _split_top(text: str, sep: str = ",") -> list[str]:
    """Split on ``sep`` outside of ``${}``/``[]``/``{}`` nesting and quotes."""
    parts, depth, buf, quote = [], 0, [], None
    for ch in text:
        if quote:
            buf.append(ch)
            if ch == quote:
                quote = None
            continue
        if ch in "'\"":
            quote = ch
        elif ch in "{[(":
            depth += 1
        elif ch in "}])":
            depth -= 1
        elif ch == sep and depth == 0:
            parts.append("".join(buf))
            buf = []
            continue
        buf.append(ch)
    parts.append("".join(buf))
    return parts


def _find_interpolations(text: str) -> list[tuple[int, int]]:
    """Spans (start, end) of the top-level ``${...}`` expressions in ``text``."""
    spans, i = [], 0
    while True:
        start = text.find("${", i)
        if start < 0:
            return spans
        depth, j = 0, start
        while j < len(text):
            if text.startswith("${", j):
                depth += 1
                j += 2
                continue
            if text[j] == "}":
                depth -= 1
                if depth == 0:
                    break
            j += 1
        if depth != 0:
            return spans
        spans.append((start, j + 1))
        i = j + 1


def _eval_interpolation(root: Any, expr: str, depth: int) -> Any:
    """Evaluate the inside of ``${...}``: a dotted path, ``oc.select:path,default``; else None."""
    expr = expr.strip()
    if ":" in expr.split(",", 1)[0] and not expr.startswith("."):
        name, _, args = expr.partition(":")
        parts = _split_top(args)
        if name == "oc.select":
            path = parts[0].strip()
            found, value = _lookup(root, path, resolve=True, _depth=depth + 1)
            if found and value != "???":
                return value
            if len(parts) > 1:
                return _resolve(root, _parse_scalar(",".join(parts[1:]).strip()), depth + 1)
            return None
        # oc.env, oc.decode, custom resolvers: deliberately not evaluated (no environment reads).
        if name == "oc.env" and len(parts) > 1:
            return _resolve(root, _parse_scalar(",".join(parts[1:]).strip()), depth + 1)
        return None
    if expr.startswith("."):  # relative interpolation: not tracked
        return None
    found, value = _lookup(root, expr, resolve=True, _depth=depth + 1)
    return value if found else None


def _resolve(root: Any, value: Any, depth: int = 0) -> Any:
    if not isinstance(value, str) or "${" not in value or depth > 32:
        return value
    spans = _find_interpolations(value)
    if not spans:
        return value
    if len(spans) == 1 and spans[0] == (0, len(value)):
        return _eval_interpolation(root, value[2:-1], depth)
    out, last = [], 0
    for s, e in spans:
        out.append(value[last:s])
        v = _eval_interpolation(root, value[s + 2 : e - 1], depth)
        out.append("" if v is None else str(v))
        last = e
    out.append(value[last:])
    return "".join(out)


def _set(root: dict, path: str, value: Any) -> None:
    node = root
    parts = path.split(".")
    for part in parts[:-1]:
        nxt = node.get(part)
        if not isinstance(nxt, dict):
            nxt = {}
            node[part] = nxt
        node = nxt
    node[parts[-1]] = value


def _delete(root: dict, path: str) -> bool:
    node = root
    parts = path.split(".")
    for part in parts[:-1]:
        node = node.get(part) if isinstance(node, dict) else None
        if not isinstance(node, dict):
            return False
    if isinstance(node, dict) and parts[-1] in node:
        del node[parts[-1]]
        return True
    return False


def _parse_scalar(text: str) -> Any:
    """A Hydra override value, read as YAML: ``1``, ``true``, ``null``, ``[1,2]``, ``{a:1}``, strings."""
    if text == "":
        return ""
    if text.startswith("{") and text.endswith("}"):
        text = re.sub(r":(?=\S)", ": ", text)  # Hydra's {a:1} is YAML's {a: 1}
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError:
        return text


# ---------------------------------------------------------------------------------------------
# Hydra overrides
# ---------------------------------------------------------------------------------------------

_KEY_RE = re.compile(r"^[A-Za-z_$][\w$\-./@]*$")


def _split_word(word: str) -> Optional[tuple[str, str, Optional[str]]]:
    """(op, key, raw_value) for an override word, None for anything else."""
    if word.startswith("~"):
        key, eq, raw = word[1:].partition("=")
        return ("delete", key, raw if eq else None) if _KEY_RE.match(key) else None
    if word.startswith("++"):
        op, rest = "force", word[2:]
    elif word.startswith("+"):
        op, rest = "add", word[1:]
    else:
        op, rest = "set", word
    key, eq, raw = rest.partition("=")
    if not eq or not _KEY_RE.match(key):
        return None
    return op, key, raw


def _is_group_override(key: str) -> bool:
    """``model_engine=megatron``, ``actor@actor_rollout_ref.actor=x``: defaults-list selections."""
    return "@" in key or "/" in key


def parse_overrides(words: Iterable[str], base: Optional[dict] = None) -> ParsedOverrides:
    """Apply Hydra-style override words to a copy of ``base`` the way Hydra would, in order.

    ``key=v`` sets, ``+key=v`` adds, ``++key=v`` adds-or-sets, ``~key`` deletes. Values are read as
    YAML scalars/lists. Each override records whether its key was there when it was applied
    (``existed``; None when there is no base to tell), so a ``+key`` on a present key, or a
    ``key=`` on an absent one, can be reported. Keys set more than once are listed in
    ``duplicates`` with the winning (last) word. Words that are not overrides (``python3``,
    ``-m``, ``--config-name=x``) are kept in ``ignored``; ``-m module`` / ``*.py`` give the
    entrypoint. ``hydra.*`` keys configure Hydra itself, not the job, and are not applied.
    """
    words = list(words)
    known = base is not None
    cfg: dict = copy.deepcopy(base) if base is not None else {}
    out = ParsedOverrides(config=cfg)
    by_key: dict[str, list[Override]] = {}
    i = 0
    while i < len(words):
        word = words[i]
        if word == "-m" and i + 1 < len(words):
            out.entrypoint = words[i + 1]
            out.ignored.extend(words[i : i + 2])
            i += 2
            continue
        parsed = None if word.startswith("-") else _split_word(word)
        if parsed is None:
            if word.endswith(".py") and out.entrypoint is None:
                out.entrypoint = word
            out.ignored.append(word)
            i += 1
            continue
        op, key, raw = parsed
        if key == "hydra" or key.startswith("hydra.") or _is_group_override(key):
            out.ignored.append(word)
            i += 1
            continue
        existed = _lookup(cfg, key, resolve=False)[0] if known else None
        value = _parse_scalar(raw) if raw is not None else None
        if op == "delete":
            _delete(cfg, key)
        elif op == "add" and existed:
            pass  # Hydra refuses; the config keeps its value
        else:
            _set(cfg, key, value)
        ov = Override(index=i, word=word, op=op, key=key, value=value, raw_value=raw, existed=existed)
        out.overrides.append(ov)
        by_key.setdefault(key, []).append(ov)
        i += 1
    for key, ovs in by_key.items():
        if len(ovs) > 1:
            out.duplicates.append(Duplicate(key=key, words=tuple(o.word for o in ovs), winner=ovs[-1].word))
    return out


# ---------------------------------------------------------------------------------------------
# loaders (the only I/O)
# ---------------------------------------------------------------------------------------------


def load_yaml(path: str) -> Any:
    with open(path, encoding="utf-8") as f:
        return yaml.safe_load(f)


def verl_reference_path(entrypoint: Optional[str] = None) -> Optional[str]:
    """verl's stock composed trainer config, if verl is installed (found without importing it)."""
    import importlib.util

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


def load_verl_reference(entrypoint: Optional[str] = None) -> Optional[dict]:
    path = verl_reference_path(entrypoint)
    if path is None:
        return None
    data = load_yaml(path)
    return data if isinstance(data, dict) else None


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
) -> ProfileConfig:
    """Apply override ``words`` on top of ``base``.

    ``base_kind``: ``config`` (a composed config the user starts from: override keys are checked
    against it), ``verl-default`` (verl's stock config stands in for one), ``composed-run`` (a
    run's own config, overrides already applied), or ``none``. ``recorded_words`` are overrides
    already applied to ``base`` (a run's ``.hydra/overrides.yaml``): only checked for duplicates.
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
        existence_base=base_kind if checked else None,
    )


# ---------------------------------------------------------------------------------------------
# shared readings of the config
# ---------------------------------------------------------------------------------------------

ACTOR = "actor_rollout_ref.actor.profiler"
ROLLOUT = "actor_rollout_ref.rollout.profiler"
REF = "actor_rollout_ref.ref.profiler"
CRITIC = "critic.profiler"
REWARD = "reward.reward_model.rollout.profiler"
NSYS = "global_profiler.global_tool_config.nsys"
WORKER_OPTS = f"{NSYS}.worker_nsight_options"
CONTROLLER_OPTS = f"{NSYS}.controller_nsight_options"


def _truthy(v: Any) -> bool:
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


def _int_steps(cfg: ProfileConfig) -> list[int]:
    return sorted({s for s in (profile_steps(cfg) or []) if isinstance(s, int)})


def profiling_requested(cfg: ProfileConfig) -> bool:
    return bool(profile_steps(cfg)) or any(
        _truthy(cfg.get(f"{p}.enable")) for p in (ACTOR, ROLLOUT, REF, CRITIC, REWARD)
    )


def global_tool(cfg: ProfileConfig) -> Optional[str]:
    t = cfg.get("global_profiler.tool")
    return str(t) if t else None


def role_tool(cfg: ProfileConfig, prefix: str) -> Optional[str]:
    t = cfg.get(f"{prefix}.tool")
    return str(t) if t else global_tool(cfg)


def nsys_discrete(cfg: ProfileConfig) -> bool:
    return _truthy(cfg.get(f"{NSYS}.discrete", False))


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
    return _truthy(kl_loss) or _truthy(kl_reward)


def ref_colocated(cfg: ProfileConfig) -> bool:
    """The ref runs inside the actor's process: hybrid engine (verl's default) or LoRA ref-in-actor."""
    return _truthy(cfg.get("actor_rollout_ref.hybrid_engine", True)) or lora_enabled(cfg)


def _discrete(cfg: ProfileConfig, prefix: str, tool: Optional[str]) -> bool:
    if tool == "nsys":
        return nsys_discrete(cfg)
    return _truthy(cfg.get(f"{prefix}.tool_config.{tool}.discrete", False))


def server_profiles(cfg: ProfileConfig, prefix: str) -> bool:
    """Whether a rollout-style server (generation, reward model) will actually write a trace."""
    tool = role_tool(cfg, prefix)
    return _truthy(cfg.get(f"{prefix}.enable")) and tool in ("torch", "npu") and _discrete(cfg, prefix, tool)


def enabled_roles(cfg: ProfileConfig) -> dict[str, str]:
    """Roles expected to write profiler output: role -> the profiler key that enables it."""
    roles: dict[str, str] = {}
    if _truthy(cfg.get(f"{ACTOR}.enable")):
        roles["actor"] = ACTOR
    if server_profiles(cfg, ROLLOUT):
        roles["rollout"] = ROLLOUT
    if ref_needed(cfg) and not ref_colocated(cfg) and _truthy(cfg.get(f"{REF}.enable")):
        roles["ref"] = REF
    if _truthy(cfg.get(f"{CRITIC}.enable")) and (
        _truthy(cfg.get("critic.enable")) or cfg.get("algorithm.adv_estimator") == "gae"
    ):
        roles["critic"] = CRITIC
    if _truthy(cfg.get("reward.reward_model.enable")) and server_profiles(cfg, REWARD):
        roles["reward_model"] = REWARD
    return roles


def _fmt(v: Any) -> str:
    if v is None:
        return "null"
    if isinstance(v, bool):
        return "True" if v else "False"
    if isinstance(v, list):
        return "[" + ",".join(_fmt(x) for x in v) + "]"
    return str(v)


def _set_word(cfg: ProfileConfig, key: str, value: Any) -> str:
    """The override to type for ``key``: ``key=v`` when it exists, else ``+key=v``."""
    exists = cfg.has(key) or cfg.base_kind == "none"
    return f"{'' if exists else '+'}{key}={_fmt(value)}"


# ---------------------------------------------------------------------------------------------
# before-run checks
# ---------------------------------------------------------------------------------------------


def check_pins(cfg: ProfileConfig) -> list[Finding]:
    """One-step profile pins: total_training_steps, save_freq, test_freq, resume_mode, steps."""
    if not profiling_requested(cfg):
        return []
    out: list[Finding] = []
    steps = profile_steps(cfg)
    ints = _int_steps(cfg)
    last = max(ints) if ints else 1

    # global_profiler.steps
    key = "global_profiler.steps"
    if not steps:
        sev: Severity = "warning" if cfg.origin(key) == "missing" and cfg.base_kind == "none" else "error"
        out.append(Finding("pin-profile-steps", sev,
                           "global_profiler.steps is not set: no step is profiled, the run finishes with empty traces",
                           _set_word(cfg, key, [1]), key))
    else:
        bad = [s for s in steps if not isinstance(s, int) or s < 1]
        if bad:
            out.append(Finding("pin-profile-steps", "error",
                               f"global_profiler.steps names {_fmt(bad)}: steps count from 1, so these never run",
                               _set_word(cfg, key, [s for s in ints if s >= 1] or [1]), key))
    if not global_tool(cfg):
        sev = "warning" if cfg.base_kind == "none" else "error"
        out.append(Finding("profiler-tool", sev,
                           "global_profiler.tool is not set: every role's profiler is a no-op",
                           _set_word(cfg, "global_profiler.tool", "nsys") + " (or torch)", "global_profiler.tool"))

    # trainer.total_training_steps
    key = "trainer.total_training_steps"
    total, origin = cfg.get(key), cfg.origin(key)
    if origin == "missing" and cfg.base_kind == "none":
        out.append(Finding("pin-total-steps", "warning",
                           f"{key} is not pinned: the run trains for all of trainer.total_epochs",
                           _set_word(cfg, key, last), key))
    elif total is None:
        out.append(Finding("pin-total-steps", "error",
                           f"{key} is null: the run trains every epoch and ends long after the profiled step",
                           _set_word(cfg, key, last), key))
    else:
        try:
            total_i = int(total)
        except (TypeError, ValueError):
            total_i = None
        if total_i is not None and ints and total_i < last:
            never = [s for s in ints if s > total_i]
            out.append(Finding("pin-profile-steps", "error",
                               f"global_profiler.steps names {_fmt(never)} but the run stops at step {total_i}: "
                               "those steps never run",
                               f"{key}={last}", "global_profiler.steps"))
        elif total_i is not None and total_i > last:
            out.append(Finding("pin-total-steps", "warning",
                               f"{key}={total_i} runs {total_i - last} step(s) past the last profiled step {last}",
                               f"{key}={last}", key))

    # save_freq / test_freq: the last step forces a save / a validation when > 0
    for key, code, what in (("trainer.save_freq", "pin-save-freq",
                             "the last step saves a checkpoint (inside the profiled window), and the next launch "
                             "auto-resumes from it past the profiled step, so profiling is silently skipped"),
                            ("trainer.test_freq", "pin-test-freq",
                             "the last step forces a validation pass, which lands inside the profiled window")):
        v, origin = cfg.get(key), cfg.origin(key)
        try:
            positive = v is not None and int(v) > 0
        except (TypeError, ValueError):
            positive = False
        if positive:
            out.append(Finding(code, "error", f"{key}={v}: {what}", f"{key}=-1", key))
        elif origin == "missing":
            out.append(Finding(code, "warning", f"{key} is not pinned; if the trainer config sets it > 0, {what}",
                               _set_word(cfg, key, -1), key))
        elif origin == "default":
            out.append(Finding(code, "info", f"{key} is not pinned; verl's default {_fmt(v)} applies, "
                               "a recipe config may differ", f"{key}=-1", key))

    key = "trainer.resume_mode"
    v, origin = cfg.get(key), cfg.origin(key)
    if origin == "missing" and cfg.base_kind == "none":
        out.append(Finding("pin-resume-mode", "warning",
                           f"{key} is not pinned: verl defaults to auto, which resumes from a leftover checkpoint "
                           "past the profiled step", _set_word(cfg, key, "disable"), key))
    elif v != "disable":
        out.append(Finding("pin-resume-mode", "error",
                           f"{key}={_fmt(v)}: a leftover checkpoint resumes the run past the profiled step, so "
                           "profiling is silently skipped", f"{key}=disable", key))
    return out


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

    # generation: a separate server, torch/npu only, discrete only
    if _truthy(cfg.get(f"{ROLLOUT}.enable")):
        explicit = cfg.explicit(f"{ROLLOUT}.enable") or "generation" in cfg.phases
        tool = role_tool(cfg, ROLLOUT)
        if tool not in ("torch", "npu", None):
            out.append(Finding("phase-rollout-tool", "error" if explicit else "info",
                               f"generation is not profiled: the rollout server supports only torch and npu "
                               f"profilers, the tool is {tool}",
                               f"{ROLLOUT}.tool=torch {ROLLOUT}.tool_config.torch.discrete=True", f"{ROLLOUT}.tool"))
        elif tool in ("torch", "npu") and not _discrete(cfg, ROLLOUT, tool):
            k = f"{ROLLOUT}.tool_config.{tool}.discrete"
            out.append(Finding("phase-rollout-continuous", "error" if explicit else "info",
                               "generation is not profiled: the rollout server rejects continuous mode "
                               f"({k} is false{'' if explicit else '; enable is inherited from the actor'})",
                               _set_word(cfg, k, True), k))

    # reward model: its own rollout server, configured under reward.reward_model.rollout.profiler
    for wrong in ("reward.reward_model.profiler", "reward_model.profiler"):
        if _truthy(cfg.get(f"{wrong}.enable")):
            out.append(Finding("phase-reward-misplaced", "error",
                               f"{wrong} is not read: the reward model is profiled by its rollout server",
                               f"{_set_word(cfg, REWARD + '.enable', True)} "
                               f"{_set_word(cfg, REWARD + '.tool_config.torch.discrete', True)}", wrong))
    if _truthy(cfg.get(f"{REWARD}.enable")):
        if not _truthy(cfg.get("reward.reward_model.enable")):
            out.append(Finding("phase-reward-disabled", "warning",
                               f"{REWARD}.enable is set but reward.reward_model.enable is false: there is no "
                               "reward model server to profile", "reward.reward_model.enable=True",
                               "reward.reward_model.enable"))
        tool = role_tool(cfg, REWARD)
        if tool not in ("torch", "npu") or not _discrete(cfg, REWARD, tool):
            k = f"{REWARD}.tool_config.torch.discrete"
            out.append(Finding("phase-reward-continuous", "error",
                               f"the reward model is not profiled: its rollout server needs tool torch (or npu) in "
                               f"discrete mode (tool {tool}, discrete {_discrete(cfg, REWARD, tool)})",
                               f"{_set_word(cfg, REWARD + '.tool', 'torch')} {_set_word(cfg, k, True)}", k))

    # ref log-prob: own profiler only when the ref worker is separate
    need = ref_needed(cfg)
    ref_on = _truthy(cfg.get(f"{REF}.enable"))
    if ref_on and need is False:
        out.append(Finding("phase-ref-unused", "warning",
                           f"{REF}.enable is set but no reference policy runs (actor.use_kl_loss and "
                           "algorithm.use_kl_in_reward are false)",
                           "actor_rollout_ref.actor.use_kl_loss=True (or drop the ref profiler)", f"{REF}.enable"))
    elif ref_on and ref_colocated(cfg) and cfg.explicit(f"{REF}.enable"):
        actor_on = _truthy(cfg.get(f"{ACTOR}.enable"))
        out.append(Finding("phase-ref-colocated", "warning" if actor_on else "error",
                           f"{REF} is ignored: the ref worker is colocated with the actor and follows the actor's "
                           f"profiler{'' if actor_on else ', which is off, so ref log-prob is not profiled'}",
                           f"{ACTOR}.enable=True", f"{REF}.enable"))
    elif need and not ref_colocated(cfg) and _truthy(cfg.get(f"{ACTOR}.enable")) and not ref_on:
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
            ok = server_profiles(cfg, prefix) and (phase != "reward" or _truthy(cfg.get("reward.reward_model.enable")))
            if ok:
                continue
            if _truthy(cfg.get(f"{prefix}.enable")):
                continue  # already explained by the phase-rollout-*/phase-reward-* findings above
        elif _truthy(cfg.get(f"{owner}.enable")):
            continue
        fix = f"{_set_word(cfg, owner + '.enable', True)}"
        if phase in ("generation", "reward"):
            fix += f" {_set_word(cfg, owner + '.tool_config.torch.discrete', True)}"
        out.append(Finding("phase-wanted", "error",
                           f"{label} is not profiled: it is owned by {owner}, which is not enabled", fix,
                           f"{owner}.enable"))

    # profiling asked for, but no role will write anything
    if steps and gtool and not enabled_roles(cfg) and not any(f.severity == "error" for f in out):
        out.append(Finding("phase-nothing-profiled", "error",
                           "global_profiler.steps is set but no role's profiler is enabled: the run profiles nothing",
                           f"{ACTOR}.enable=True", f"{ACTOR}.enable"))
    return out


_HYDRA_PLUS_MSG = "Could not append to config. An item is already at '{key}'"
_HYDRA_SET_MSG = "Could not override '{key}'. To append to your config use +{word}"


def check_overrides(cfg: ProfileConfig) -> list[Finding]:
    """``+key`` on a present key, ``key=`` on an absent one, ``~key`` of nothing, duplicates."""
    out: list[Finding] = []
    against = {"config": "the given config", "verl-default": "verl's stock ppo_trainer config"}.get(
        cfg.existence_base or "", "")
    for o in cfg.overrides:
        if o.existed is None:
            continue
        if o.op == "add" and o.existed:
            out.append(Finding("override-plus-existing", "error",
                               f"`{o.word}` fails: \"{_HYDRA_PLUS_MSG.format(key=o.key)}\" ({o.key} is in {against})",
                               f"{o.key}={o.raw_value}", o.key))
        elif o.op == "set" and not o.existed and "." in o.key:
            # (a dot-less key may be a config-group selection such as model_engine=megatron)
            sev: Severity = "error" if cfg.existence_base == "config" else "warning"
            out.append(Finding("override-missing-key", sev,
                               f"`{o.word}` fails: \"{_HYDRA_SET_MSG.format(key=o.key, word=o.word)}\" "
                               f"({o.key} is not in {against})", f"+{o.word}", o.key))
        elif o.op == "delete" and not o.existed:
            sev = "error" if cfg.existence_base == "config" else "warning"
            out.append(Finding("override-delete-missing", sev,
                               f"`{o.word}` fails: Could not delete from config. '{o.key}' does not exist",
                               f"drop `{o.word}`", o.key))
    for d in cfg.duplicates:
        values = {w.partition("=")[2] for w in d.words}
        sev = "info" if len(values) == 1 else "warning"
        out.append(Finding("override-duplicate", sev,
                           f"{d.key} is set {len(d.words)} times ({', '.join(d.words)}); the last one wins: {d.winner}",
                           f"keep only `{d.winner}`", d.key))
    return out


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
    steps = _int_steps(cfg)
    if not steps or nsys_discrete(cfg):
        return None
    if _truthy(cfg.get("global_profiler.profile_continuous_steps", False)):
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
    steps = _int_steps(cfg)
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
    """Continuous nsys captures: step 1 carries profiler start-up; profile 1-2, summarize 2."""
    if global_tool(cfg) != "nsys" or nsys_discrete(cfg):
        return []
    steps = _int_steps(cfg)
    if 1 not in steps or 2 in steps:
        return []
    return [Finding("nsys-startup-step", "warning",
                    "step 1 of a continuous nsys capture carries profiler start-up (CUDA/NVTX init, first-touch "
                    "allocations), so it is not a representative step",
                    "global_profiler.steps=[1,2] trainer.total_training_steps=2, then summarize step 2",
                    "global_profiler.steps")]


def check_discard_environment(cfg: ProfileConfig) -> list[Finding]:
    """nsys reports embed the process environment unless ``discard-environment`` is set and supported."""
    if global_tool(cfg) != "nsys" or not profile_steps(cfg):
        return []
    unset, setw = [], []
    for who, path in (("worker", WORKER_OPTS), ("controller", CONTROLLER_OPTS)):
        if not cfg.has(path) and cfg.base_kind != "none":
            continue
        opts = _opts(cfg, path)
        (setw if _truthy(opts.get("discard-environment", False)) else unset).append((who, path))
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


CONFIG_CHECKS = (
    check_pins,
    check_phase_owners,
    check_overrides,
    check_nsys_entrypoint,
    check_capture_range_end,
    check_startup_step,
    check_discard_environment,
)


def config_checks(cfg: ProfileConfig) -> list[Finding]:
    out: list[Finding] = []
    for check in CONFIG_CHECKS:
        out.extend(check(cfg))
    return out


# ---------------------------------------------------------------------------------------------
# after-run checks
# ---------------------------------------------------------------------------------------------

ARTIFACT_KINDS = ("nsys_report", "nsys_qdstrm", "nsys_sqlite", "torch_trace", "memory_snapshot", "hydra_config")
REPORT_KINDS = ("nsys_report", "nsys_qdstrm", "torch_trace", "memory_snapshot")
STALE_SECONDS = 600.0
_SESSION_RE = re.compile(r"session_(\d{4}-\d{2}-\d{2}_\d{2}-\d{2}-\d{2}_\d+_\d+)")


@dataclass(frozen=True)
class Artifact:
    kind: str
    rel: str
    size: int
    mtime: float
    role: Optional[str] = None

    @classmethod
    def from_dict(cls, d: dict) -> "Artifact":
        return cls(kind=str(d["kind"]), rel=str(d["rel"]), size=int(d.get("size") or 0),
                   mtime=float(d.get("mtime") or 0.0), role=d.get("role"))


def artifact_kind(name: str, rel: str = "") -> Optional[str]:
    low = name.lower()
    parts = rel.replace("\\", "/").split("/")
    if low == "config.yaml" and len(parts) >= 2 and parts[-2] == ".hydra":
        return "hydra_config"
    if low.endswith(".qdstrm"):
        return "nsys_qdstrm"
    if low.endswith(".nsys-rep") or low.endswith(".qdrep"):
        return "nsys_report"
    if low.endswith(".sqlite"):
        return "nsys_sqlite"
    if low.endswith(".json.gz") or low.endswith(".pt.trace.json") or (
        low.endswith(".json") and ("trace" in low or re.search(r"rank\d+", low))
    ):
        return "torch_trace"
    if (low.endswith(".pickle") or low.endswith(".pkl")) and ("snapshot" in low or "memory" in low):
        return "memory_snapshot"
    return None


_ROLE_RES = (
    ("rollout", re.compile(r"(^|[/_.-])(agent_loop_rollout_replica|rollout-replica)", re.I)),
    ("reward_model", re.compile(r"(^|[/_.-])reward", re.I)),
    ("ref", re.compile(r"(^|/)ref[_.-]", re.I)),
    ("critic", re.compile(r"(^|/)(critic|value_model)[_.-]", re.I)),
    ("actor", re.compile(r"(^|/)actor(_rollout(_ref)?)?[_.-]", re.I)),
)


def infer_role(rel: str) -> Optional[str]:
    """The verl role a file name encodes (verl prefixes traces with the worker role), or None."""
    for role, pat in _ROLE_RES:
        if pat.search(rel):
            return role
    return None


def scan_run_folder(root: str) -> list[dict]:
    """Artifacts under a run folder, as the dicts ``after_run_checks`` takes (os.walk, no symlinks)."""
    out = []
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames.sort()
        for name in sorted(filenames):
            full = os.path.join(dirpath, name)
            rel = os.path.relpath(full, root).replace(os.sep, "/")
            kind = artifact_kind(name, rel)
            if kind is None:
                continue
            try:
                st = os.stat(full)
            except OSError:
                continue
            out.append({"kind": kind, "rel": rel, "size": st.st_size, "mtime": st.st_mtime,
                        "role": infer_role(rel) if kind != "hydra_config" else None})
    return out


def _roles_of(a: Artifact) -> set[str]:
    role = (a.role or infer_role(a.rel) or "").lower()
    if not role:
        return set()
    if role.startswith("actor_rollout_ref"):
        return {"actor", "ref"}
    if role.startswith("actor"):
        return {"actor"}
    if role.startswith("rollout") or role == "generation":
        return {"rollout"}
    if role.startswith("reward"):
        return {"reward_model"}
    return {role}


def _examples(items: list[str], n: int = 3) -> str:
    shown = ", ".join(items[:n])
    return shown + (f" (+{len(items) - n} more)" if len(items) > n else "")


def after_run_checks(artifacts: list[dict], cfg: Optional[dict] = None,
                     stale_seconds: float = STALE_SECONDS) -> list[Finding]:
    """Checks over what a run left behind.

    ``artifacts``: dicts with ``kind`` (one of ``ARTIFACT_KINDS``), ``rel``, ``size``, ``mtime``,
    ``role`` (str or None). ``cfg``: the run's composed config as a nested dict (or None).
    """
    arts = [Artifact.from_dict(a) for a in artifacts]
    pc = ProfileConfig(data=cfg, base_kind="composed-run") if isinstance(cfg, dict) else None
    out: list[Finding] = []

    qd = [a for a in arts if a.kind == "nsys_qdstrm"]
    if qd:
        stems = {a.rel.rsplit(".", 1)[0] for a in arts if a.kind == "nsys_report" and a.size > 0}
        orphan = [a.rel for a in qd if a.rel.rsplit(".", 1)[0] not in stems]
        if orphan:
            out.append(Finding("after-qdstrm", "error",
                               f"{len(orphan)} nsys report(s) never finalized, still .qdstrm: {_examples(orphan)} "
                               "(nsys was killed, or capture-range-end=repeat-shutdown:N waited for ranges that "
                               "never opened)",
                               "QdstrmImporter -i <file>.qdstrm to convert; next run set capture-range-end="
                               "repeat-shutdown:<number of profiled steps> and let the run exit cleanly",
                               f"{WORKER_OPTS}.capture-range-end"))
    empty = [a.rel for a in arts if a.kind == "nsys_report" and a.size == 0]
    if empty:
        out.append(Finding("after-empty-report", "error",
                           f"{len(empty)} empty .nsys-rep report(s): {_examples(empty)} (no capture range opened "
                           "in that process, or nsys died while writing)",
                           "profile a step that runs (global_profiler.steps) with capture-range=cudaProfilerApi "
                           "on the process that does the work", None))

    if pc is not None:
        tool = global_tool(pc)
        kinds = {"nsys": ("nsys_report", "nsys_qdstrm"), "torch": ("torch_trace",),
                 "torch_memory": ("memory_snapshot",)}.get(tool or "", REPORT_KINDS)
        reports = [a for a in arts if a.kind in kinds]
        roles = enabled_roles(pc) if profile_steps(pc) else {}
        if roles and not reports:
            out.append(Finding("after-no-reports", "error",
                               f"profiling was configured ({tool}, steps {_fmt(profile_steps(pc))}, roles "
                               f"{', '.join(sorted(roles))}) but the run left no {tool or 'profiler'} output here",
                               "run `verlprof doctor` on the config; for nsys look under "
                               "/tmp/ray/session_latest/logs/nsight or set global_profiler.relocate_results=True",
                               "global_profiler.steps"))
        elif roles:
            seen: set[str] = set()
            for a in reports:
                seen |= _roles_of(a)
            if seen:  # only when file names say which role wrote them (nsys worker_process_* do not)
                for role, prefix in sorted(roles.items()):
                    if role not in seen:
                        out.append(Finding("after-role-silent", "warning",
                                           f"{role} was profiled ({prefix}.enable) but produced no output",
                                           f"check the {role} worker's log; `verlprof doctor` its config",
                                           f"{prefix}.enable"))

    # stale: older than the run's config, or from an earlier Ray session
    reports = [a for a in arts if a.kind in REPORT_KINDS or a.kind == "nsys_sqlite"]
    stale: dict[str, str] = {}
    configs = [a for a in arts if a.kind == "hydra_config"]
    if configs:
        started = max(a.mtime for a in configs)
        for a in reports:
            if a.mtime and a.mtime < started - stale_seconds:
                stale[a.rel] = f"{(started - a.mtime) / 60:.0f} min older than the run's config"
    sessions = sorted({m.group(1) for a in reports for m in [_SESSION_RE.search(a.rel)] if m})
    if len(sessions) > 1:
        for a in reports:
            m = _SESSION_RE.search(a.rel)
            if m and m.group(1) != sessions[-1]:
                stale.setdefault(a.rel, f"from earlier Ray session {m.group(1)}")
    if stale:
        rels = sorted(stale)
        out.append(Finding("after-stale-report", "warning",
                           f"{len(rels)} report(s) from an earlier run: {_examples([f'{r} ({stale[r]})' for r in rels], 2)}"
                           " (a reused session_latest or save_path keeps old reports)",
                           "delete them or collect into a fresh folder; clear /tmp/ray/session_latest/logs/nsight "
                           "before the next run", None))
    return out


# ---------------------------------------------------------------------------------------------
# run folders
# ---------------------------------------------------------------------------------------------


@dataclass
class RunFolder:
    root: str
    config: Optional[dict]
    config_path: Optional[str]
    overrides: list[str]
    entrypoint: Optional[str]
    artifacts: list[dict]


def load_run_folder(root: str) -> RunFolder:
    """A run folder: its ``.hydra/config.yaml`` (shallowest), ``overrides.yaml``, job name, artifacts."""
    artifacts = scan_run_folder(root)
    cfgs = sorted((a for a in artifacts if a["kind"] == "hydra_config"), key=lambda a: (a["rel"].count("/"), a["rel"]))
    config = config_path = entrypoint = None
    overrides: list[str] = []
    if cfgs:
        config_path = os.path.join(root, cfgs[0]["rel"])
        data = load_yaml(config_path)
        config = data if isinstance(data, dict) else None
        hydra_dir = os.path.dirname(config_path)
        ov_path = os.path.join(hydra_dir, "overrides.yaml")
        if os.path.isfile(ov_path):
            ov = load_yaml(ov_path)
            if isinstance(ov, list):
                overrides = [str(w) for w in ov]
        hy_path = os.path.join(hydra_dir, "hydra.yaml")
        if os.path.isfile(hy_path):
            try:
                hy = load_yaml(hy_path)
                entrypoint = ((hy or {}).get("hydra") or {}).get("job", {}).get("name")
            except yaml.YAMLError:
                entrypoint = None
    return RunFolder(root=root, config=config, config_path=config_path, overrides=overrides,
                     entrypoint=entrypoint, artifacts=artifacts)


def sort_findings(findings: Iterable[Finding]) -> list[Finding]:
    return sorted(findings, key=lambda f: SEVERITY_ORDER.get(f.severity, 9))


def has_errors(findings: Iterable[Finding]) -> bool:
    return any(f.severity == "error" for f in findings)
