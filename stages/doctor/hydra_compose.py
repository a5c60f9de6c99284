"""Apply a launch's overrides to verl's own config with Hydra, and collect every error Hydra raises.

A launch fails at its first bad override; the doctor wants all of them in one go. So the words go
through Hydra's own pieces in Hydra's order (Hydra 1.3, ``ConfigLoaderImpl._load_configuration_impl``):
each word is parsed by Hydra's override parser and checked for sweep syntax on its own; the config
group selections (``model_engine=megatron``) are composed with ``hydra.compose``; then every value
override is applied to that composed config one at a time with Hydra's
``ConfigLoaderImpl._apply_overrides_to_config``, in struct mode as Hydra does, so a refused word is
reported and the next is still tried. A last ``compose`` of every word that passed confirms Hydra
accepts the whole line; anything it still refuses is reported as is.

Hydra and verl are imported only here and only when installed; `keytrees` covers their absence.
"""
from __future__ import annotations

import functools
import os
from collections.abc import Sequence

from .composition import Composition, OverrideProblem, ProblemKind, flat_keys


@functools.lru_cache(maxsize=1)
def hydra_version() -> str | None:
    """Hydra's version when it imports *and* its override parser works, else None.

    The parser check matters: hydra-core 1.3's generated parser fails under an antlr4 runtime
    other than 4.9 ("Could not deserialize ATN"), which a mixed environment can have.
    """
    try:
        import hydra
        from hydra.core.override_parser.overrides_parser import OverridesParser

        OverridesParser.create().parse_overrides(["a.b=[1,2]"])
    except Exception:  # noqa: BLE001 - any failure means: Hydra is not usable here
        return None
    return str(hydra.__version__)


def _one_line(text: str) -> str:
    lines = [ln.strip() for ln in str(text).splitlines() if ln.strip()]
    keep = []
    for ln in lines:
        if ln.startswith(("Config search path", "provider=")):
            break  # Hydra appends its search path: local folders, not needed to fix the word
        keep.append(ln)
    return " | ".join(keep)


def _kind(message: str) -> ProblemKind:
    if message.startswith("Could not append to config. An item is already at"):
        return "append-existing"
    if message.startswith("Could not override '") and "To append to your config use" in message:
        return "missing-key"
    if message.startswith("Could not delete from config.") and "does not exist" in message:
        return "delete-missing"
    if message.startswith("Could not delete from config. The value of"):
        return "delete-value"
    if message.startswith("Ambiguous value for argument"):
        return "list-form"
    if "Could not find '" in message:
        return "group-option"
    return "other"


def compose_overrides(config_dir: str, config_name: str, words: Sequence[str], release: str) -> Composition:
    """Every Hydra error ``words`` meet on ``config_name`` in ``config_dir`` (see module docstring)."""
    from hydra import compose, initialize_config_dir
    from hydra._internal.config_loader_impl import ConfigLoaderImpl
    from hydra.core.global_hydra import GlobalHydra
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from hydra.errors import HydraException
    from hydra.types import RunMode
    from omegaconf import OmegaConf, open_dict
    from omegaconf.errors import OmegaConfBaseException

    comp = Composition(via="hydra", release=release, config_name=config_name, where=config_dir)
    parser = OverridesParser.create()
    parsed: list[tuple[str, object]] = []
    for word in words:
        try:
            ov = parser.parse_overrides([word])[0]
            ConfigLoaderImpl.validate_sweep_overrides_legal([ov], run_mode=RunMode.RUN, from_shell=True)
        except HydraException as e:
            msg = _one_line(e)
            comp.problems.append(OverrideProblem(word, "parse" if "parsing" in msg or "Lexer" in msg else _kind(msg),
                                                 msg, word.lstrip("+~").split("=", 1)[0]))
            continue
        parsed.append((word, ov))

    GlobalHydra.instance().clear()
    try:
        with initialize_config_dir(config_dir=os.path.abspath(config_dir), version_base=None):
            loader = GlobalHydra.instance().config_loader()
            _, repo = loader._parse_overrides_and_create_caching_repo(config_name, [])
            groups = [(w, o) for w, o in parsed
                      if not isinstance(o.value(), dict) and repo.group_exists(o.key_or_group)]
            values = [(w, o) for w, o in parsed if (w, o) not in groups]
            picked = [w for w, _ in groups]
            try:
                cfg = compose(config_name=config_name, overrides=picked, return_hydra_config=True)
            except HydraException:
                picked = []
                for word, _ in groups:  # few: each composed to know which one Hydra refuses
                    try:
                        compose(config_name=config_name, overrides=[*picked, word])
                        picked.append(word)
                    except HydraException as e:
                        msg = _one_line(e)
                        comp.problems.append(OverrideProblem(word, _kind(msg), msg,
                                                             word.lstrip("+~").split("=", 1)[0]))
                cfg = compose(config_name=config_name, overrides=picked, return_hydra_config=True)
            comp.choices = {str(k): (None if v is None else str(v)) for k, v in cfg.hydra.runtime.choices.items()
                            if not str(k).startswith("hydra/")}
            base = OmegaConf.to_container(cfg, resolve=False)
            base.pop("hydra", None)
            comp.base = base
            comp.keys = flat_keys(base)
            for word, ov in values:
                try:
                    ConfigLoaderImpl._apply_overrides_to_config([ov], cfg)
                except (HydraException, OmegaConfBaseException) as e:
                    msg = _one_line(e)
                    if e.__cause__ is not None and _kind(msg) == "other":
                        msg += " | " + _one_line(e.__cause__).split(" | ")[0]
                    comp.problems.append(OverrideProblem(word, _kind(msg), msg, ov.key_or_group))
            refused = {p.word for p in comp.problems}
            passed = [w for w in words if w not in refused]
            try:
                compose(config_name=config_name, overrides=passed)
            except HydraException as e:
                comp.problems.append(OverrideProblem(" ".join(passed[-1:]), "other", _one_line(e)))
            with open_dict(cfg):
                del cfg["hydra"]
    finally:
        GlobalHydra.instance().clear()
    return comp
