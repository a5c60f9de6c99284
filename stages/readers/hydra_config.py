"""Read the run's Hydra config (`.hydra/config.yaml`) into the profiler facts verlprof needs.

Why: file names alone cannot say which RL steps were profiled, by which tool, in discrete or
continuous mode, or which roles had profiling on; the composed Hydra config of the run can. Hydra
saves the config *unresolved*, so verl's `${oc.select:global_profiler.tool,null}`-style
interpolations are still strings; a tiny resolver below handles the forms verl uses (absolute
keys, relative `${.key}` and `oc.select` with a default) without importing OmegaConf and without
ever reading the environment (`oc.env` resolves to None).

Keys mirrored from verl 0.9.1 `trainer/config/_generated_ppo_trainer.yaml`:
`global_profiler.{tool, steps, profile_continuous_steps, save_path,
global_tool_config.nsys.discrete}`, per role `<role path>.profiler.{enable, tool, all_ranks, ranks,
tool_config.<tool>.discrete}` with role paths `actor_rollout_ref.{actor,ref,rollout}`, `critic`,
`reward_model` / `reward.*`, and `trainer.total_training_steps`. Older verl (<= 0.5) kept
`trainer.profile_steps` and `<role>.profiler.discrete`; those are read as a fallback.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from ..core.errors import BadInputError
from .naming import normalize_role

#: Hydra's metadata files that sit beside config.yaml in a run's `.hydra/` folder.
HYDRA_SIBLINGS = ("overrides.yaml", "hydra.yaml")

_MAX_BYTES = 16 << 20       # a composed verl config is ~50 KB; refuse absurd files early
_INTERP = re.compile(r"^\$\{(?P<body>[^${}]+)\}$")
_MISSING = object()

#: Config paths of per-role profiler blocks -> role. Anything else found under a known role tree
#: is mapped by its first path component that names a role.
_ROLE_PATHS: dict[tuple[str, ...], str] = {
    ("actor_rollout_ref", "actor"): "actor",
    ("actor_rollout_ref", "ref"): "ref",
    ("actor_rollout_ref", "rollout"): "rollout",
    ("actor_rollout_ref",): "actor_rollout_ref",   # verl <= 0.5: one profiler for the worker
    ("critic",): "critic",
    ("reward_model",): "reward",
    ("reward",): "reward",
}


@dataclass
class RunConfig:
    """Profiler facts of one verl run, read from its Hydra config.

    `path` is local (never written to shared outputs); `rel` is its name relative to the source
    root. `raw` is the whole parsed YAML and may hold secrets: keep it out of bundles.
    """

    path: Path
    rel: str
    tool: str | None = None
    steps: tuple[int, ...] | None = None
    profile_continuous_steps: bool = False
    save_path: str | None = None
    discrete: bool | None = None                          # global_tool_config.nsys.discrete
    enabled_roles: tuple[str, ...] = ()
    role_tools: dict[str, str | None] = field(default_factory=dict)
    role_discrete: dict[str, bool] = field(default_factory=dict)   # per enabled role (its tool's)
    role_ranks: dict[str, tuple[int, ...] | None] = field(default_factory=dict)  # None = all ranks
    total_training_steps: int | None = None
    legacy: bool = False                                  # read from verl <= 0.5 keys
    # GPUs one rollout replica spans (tp x dp x pp, verl's RolloutReplica.world_size), when the
    # config says: a replica's engine traces are ranks replica x this + tp rank.
    rollout_world_size: int | None = None
    # The rollout engine's token window (`profile_token_start`/`_end` of the rollout profiler's
    # tool config, verl >= 0.9): it profiles response tokens start..end only. None when unset.
    rollout_token_window: tuple[int | None, int | None] | None = None
    warnings: tuple[str, ...] = ()
    raw: dict[str, Any] = field(default_factory=dict, repr=False)

    def step_groups(self) -> list[tuple[int, int]]:
        """The (first, last) steps of each profiling window, in capture order.

        One window per step, or with `profile_continuous_steps` one per run of consecutive steps
        (verl: `[1,2,5]` -> `[1,2]` in one, `[5]` in another).
        """
        if not self.steps:
            return []
        ordered = sorted(set(self.steps))
        if not self.profile_continuous_steps:
            return [(s, s) for s in ordered]
        groups: list[tuple[int, int]] = []
        start = prev = ordered[0]
        for s in ordered[1:]:
            if s != prev + 1:
                groups.append((start, prev))
                start = s
            prev = s
        groups.append((start, prev))
        return groups

    def capture_range_steps(self, k: int) -> tuple[int, int] | None:
        """Steps held by nsys capture range `k` (1-based) of a worker report, when knowable.

        Only in continuous nsys mode does each `cudaProfilerStart/Stop` pair wrap one window
        (discrete mode opens one range per stage); beyond the known windows it says None.
        """
        if self.tool != "nsys" or self.discrete or any(self.role_discrete.values()):
            return None
        groups = self.step_groups()
        return groups[k - 1] if 1 <= k <= len(groups) else None

    def to_manifest(self) -> dict[str, Any]:
        """JSON-safe facts for the manifest: no raw config, no absolute paths."""
        save = self.save_path if self.save_path and not Path(self.save_path).is_absolute() else None
        return {
            "rel": self.rel,
            "tool": self.tool,
            "steps": list(self.steps) if self.steps is not None else None,
            "profile_continuous_steps": self.profile_continuous_steps,
            "save_path": save,
            "discrete": self.discrete,
            "enabled_roles": list(self.enabled_roles),
            "role_tools": dict(self.role_tools),
            "role_discrete": dict(self.role_discrete),
            "role_ranks": {r: (list(v) if v is not None else None) for r, v in self.role_ranks.items()},
            "total_training_steps": self.total_training_steps,
            "legacy": self.legacy,
        }


# ----------------------------------------------------------------------------------------------
# Finding configs
# ----------------------------------------------------------------------------------------------


def is_hydra_config(path: Path) -> bool:
    """`.hydra/config.yaml`, or a `config.yaml` lying beside Hydra's overrides.yaml/hydra.yaml."""
    if path.name != "config.yaml":
        return False
    if path.parent.name == ".hydra":
        return True
    return any((path.parent / s).is_file() for s in HYDRA_SIBLINGS)


def find_config_near(source: Path, max_up: int = 3) -> Path | None:
    """Find the Hydra config of the run whose profiler wrote into `source`, outside `source`.

    Hydra puts its run folder at `outputs/<date>/<time>/.hydra` while verl's profiler writes to
    `outputs/profile` (both relative to the launch folder), so the config is a cousin of the
    profile folder. Checks, in order: `.hydra/config.yaml` in `source` or up to `max_up`
    ancestors; then `<parent>/*/*/.hydra/config.yaml` and `<parent>/*/.hydra/config.yaml`
    (newest first) whose `global_profiler.save_path` resolves to `source` from the launch folder.
    Read-only; unreadable candidates are passed over.
    """
    try:
        src = source.resolve()
    except OSError:
        return None
    if not src.is_dir():
        return None
    for anc in [src, *list(src.parents)[:max_up]]:
        cand = anc / ".hydra" / "config.yaml"
        if cand.is_file():
            return cand
    parent = src.parent
    try:
        cands = list(parent.glob("*/*/.hydra/config.yaml")) + list(parent.glob("*/.hydra/config.yaml"))
    except OSError:
        return None

    def mtime(p: Path) -> float:
        try:
            return p.stat().st_mtime
        except OSError:
            return 0.0

    launch = parent.parent
    for cand in sorted(cands, key=mtime, reverse=True):
        try:
            cfg = load_run_config(cand, rel=cand.name)
        except BadInputError:
            continue
        if cfg.save_path:
            sp = Path(cfg.save_path)
            target = sp if sp.is_absolute() else launch / sp
            try:
                if target.resolve() == src:
                    return cand
            except OSError:
                continue
    return None


# ----------------------------------------------------------------------------------------------
# Reading
# ----------------------------------------------------------------------------------------------


class _NoAliasLoader(yaml.SafeLoader):
    """SafeLoader that refuses YAML aliases: Hydra never writes them, and a self-referencing or
    exponentially aliased document would make `raw` cyclic or huge for whoever walks it later."""

    def compose_node(self, parent: Any, index: Any) -> Any:  # noqa: D102 - yaml API
        if self.check_event(yaml.events.AliasEvent):
            event = self.peek_event()
            raise yaml.composer.ComposerError(None, None, "YAML aliases are not allowed",
                                              event.start_mark)
        return super().compose_node(parent, index)


def load_run_config(path: str | Path, rel: str | None = None) -> RunConfig:
    """Parse a Hydra config file; BadInputError (one line, names the file) if it is not one."""
    p = Path(path)
    try:
        size = p.stat().st_size
        if size > _MAX_BYTES:
            raise BadInputError(p, f"Hydra config is {size} bytes, larger than any verl config")
        text = p.read_bytes().decode("utf-8")
    except OSError as exc:
        raise BadInputError(p, f"cannot read Hydra config: {exc.strerror or exc}") from None
    except UnicodeDecodeError:
        raise BadInputError(p, "Hydra config is not UTF-8 text") from None
    if not text.strip():
        raise BadInputError(p, "empty Hydra config")
    try:
        raw = yaml.load(text, Loader=_NoAliasLoader)  # noqa: S506 - a SafeLoader subclass
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}" if mark is not None else ""
        problem = getattr(exc, "problem", None) or type(exc).__name__
        raise BadInputError(p, f"bad YAML in Hydra config{where}: {problem}") from None
    except RecursionError:
        raise BadInputError(p, "bad YAML in Hydra config: nested too deeply") from None
    if not isinstance(raw, dict):
        raise BadInputError(p, f"Hydra config is a YAML {type(raw).__name__}, not a mapping")
    return parse_run_config(raw, p, rel if rel is not None else p.name)


class _Resolver:
    """Resolves verl's interpolations inside one config dict (no env, no custom resolvers)."""

    def __init__(self, raw: dict[str, Any]) -> None:
        self.raw = raw

    def lookup(self, dotted: tuple[str, ...] | str, depth: int = 0) -> Any:
        keys = tuple(dotted.split(".")) if isinstance(dotted, str) else dotted
        node: Any = self.raw
        for i, k in enumerate(keys):
            if isinstance(node, dict) and k in node:
                node = node[k]
            elif isinstance(node, list) and k.isdigit() and int(k) < len(node):
                node = node[int(k)]
            else:
                return _MISSING
            node = self.value(node, keys[: i + 1], depth)
        return node

    def value(self, v: Any, where: tuple[str, ...], depth: int = 0) -> Any:
        """Resolve `v` found at key path `where` if it is a whole-string interpolation."""
        if not isinstance(v, str) or depth > 16:
            return v
        m = _INTERP.match(v.strip())
        if not m:
            return v
        body = m["body"].strip()
        if body.startswith("oc.select:"):
            arg = body[len("oc.select:"):]
            key, _, default = arg.partition(",")
            got = self._ref(key.strip(), where, depth + 1)
            if got is _MISSING or got is None:
                return yaml.safe_load(default) if default.strip() else None
            return got
        if ":" in body:             # oc.env, oc.decode, custom resolvers: never evaluated
            return None
        got = self._ref(body, where, depth + 1)
        return None if got is _MISSING else got

    def _ref(self, key: str, where: tuple[str, ...], depth: int) -> Any:
        if key.startswith("."):
            ups = len(key) - len(key.lstrip("."))
            base = where[: max(len(where) - ups, 0)]
            rest = key.lstrip(".")
            return self.lookup(base + tuple(rest.split(".")) if rest else base, depth)
        return self.lookup(key, depth)


def _as_bool(v: Any) -> bool | None:
    if isinstance(v, bool):
        return v
    if isinstance(v, str) and v.strip().lower() in ("true", "false"):
        return v.strip().lower() == "true"
    if isinstance(v, int):
        return bool(v)
    return None


def _as_int(v: Any) -> int | None:
    if isinstance(v, bool):
        return None
    if isinstance(v, int):
        return v
    if isinstance(v, str) and v.strip().lstrip("-").isdigit():
        return int(v)
    return None


def _profiler_blocks(raw: dict[str, Any]) -> list[tuple[tuple[str, ...], str]]:
    """Key paths of every `profiler` mapping under a role tree, with the role each belongs to."""
    out: list[tuple[tuple[str, ...], str]] = []

    def walk(node: Any, path: tuple[str, ...], depth: int) -> None:
        if not isinstance(node, dict) or depth > 6:
            return
        for k, v in node.items():
            if not isinstance(k, str):
                continue
            if k == "profiler" and isinstance(v, dict) and path:
                role = _ROLE_PATHS.get(path)
                if role is None:
                    role = next((r for p in path if (r := normalize_role(p))), None)
                if role is not None:
                    out.append((path + (k,), role))
            elif k not in ("global_profiler", "trainer", "data", "skip"):
                walk(v, path + (k,), depth + 1)

    walk(raw, (), 0)
    return out


def parse_run_config(raw: dict[str, Any], path: Path, rel: str) -> RunConfig:
    """Read profiler facts from an already parsed config (verl >= 0.6 keys, else <= 0.5 keys)."""
    r = _Resolver(raw)
    warnings: list[str] = []

    def get(dotted: str) -> Any:
        v = r.lookup(dotted)
        return None if v is _MISSING else v

    gp = get("global_profiler")
    legacy = not isinstance(gp, dict)
    if legacy:
        tool = "nsys" if get("trainer.profile_steps") is not None else None
        steps_v = get("trainer.profile_steps")
        continuous = False
        save_path = None
        discrete = None
    else:
        tool_v = get("global_profiler.tool")
        tool = str(tool_v) if tool_v is not None else None
        steps_v = get("global_profiler.steps")
        continuous = bool(_as_bool(get("global_profiler.profile_continuous_steps")))
        sp = get("global_profiler.save_path")
        save_path = str(sp) if sp is not None else None
        discrete = _as_bool(get("global_profiler.global_tool_config.nsys.discrete"))

    steps: tuple[int, ...] | None = None
    if steps_v is not None:
        if isinstance(steps_v, (list, tuple)) and all(_as_int(s) is not None for s in steps_v):
            steps = tuple(int(_as_int(s)) for s in steps_v)  # type: ignore[arg-type]
        elif _as_int(steps_v) is not None:
            steps = (int(_as_int(steps_v)),)  # type: ignore[arg-type]
        else:
            warnings.append(f"profiled steps not a list of integers: {steps_v!r}")

    enabled: list[str] = []
    role_tools: dict[str, str | None] = {}
    role_discrete: dict[str, bool] = {}
    role_ranks: dict[str, tuple[int, ...] | None] = {}
    for keys, role in _profiler_blocks(raw):
        block = r.lookup(keys)
        if not isinstance(block, dict):
            continue
        dotted = ".".join(keys)
        all_ranks = bool(_as_bool(r.lookup(keys + ("all_ranks",))))
        ranks_v = r.lookup(keys + ("ranks",))
        ranks = tuple(int(x) for x in ranks_v if _as_int(x) is not None) if isinstance(ranks_v, list) else ()
        if "enable" in block:
            on = bool(_as_bool(r.lookup(keys + ("enable",))))
        else:                   # verl <= 0.5: a role profiles when it names ranks
            on = all_ranks or bool(ranks)
        if not on or role in enabled:
            continue
        enabled.append(role)
        rtool_v = r.lookup(keys + ("tool",))
        rtool = str(rtool_v) if rtool_v not in (None, _MISSING) else tool
        role_tools[role] = rtool
        d = _MISSING
        if rtool:
            d = r.lookup(keys + ("tool_config", rtool, "discrete"))
            if d is _MISSING and rtool == "nsys":
                d = r.lookup(keys + ("tool_config", "nsight", "discrete"))
        if d is _MISSING:
            d = r.lookup(keys + ("discrete",))
        if d is _MISSING and rtool == "nsys":
            d = discrete
        # verl's DistProfiler: `getattr(tool_config, "discrete", False)`, so absent means False
        role_discrete[role] = bool(_as_bool(d)) if d is not _MISSING else False
        role_ranks[role] = None if all_ranks else (ranks or (0,))
        if rtool and tool and rtool != tool:
            warnings.append(f"{dotted}.tool is {rtool!r} while global_profiler.tool is {tool!r}")

    if legacy and discrete is None and role_discrete:
        discrete = any(role_discrete.values())
    tts = _as_int(get("trainer.total_training_steps"))
    sizes = [_as_int(get(f"actor_rollout_ref.rollout.{k}")) for k in
             ("tensor_model_parallel_size", "data_parallel_size", "pipeline_model_parallel_size")]
    world = None
    if sizes[0] is not None:
        world = 1
        for n in sizes:
            world *= n if n else 1
    rtool = role_tools.get("rollout") or tool
    window = None
    if rtool:
        a = _as_int(get(f"actor_rollout_ref.rollout.profiler.tool_config.{rtool}.profile_token_start"))
        b = _as_int(get(f"actor_rollout_ref.rollout.profiler.tool_config.{rtool}.profile_token_end"))
        window = (a, b) if a is not None or b is not None else None
    return RunConfig(path=path, rel=rel, tool=tool, steps=steps, profile_continuous_steps=continuous,
                     save_path=save_path, discrete=discrete, enabled_roles=tuple(enabled),
                     role_tools=role_tools, role_discrete=role_discrete, role_ranks=role_ranks,
                     total_training_steps=tts, legacy=legacy, warnings=tuple(warnings), raw=raw,
                     rollout_world_size=world, rollout_token_window=window)
