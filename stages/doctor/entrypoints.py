"""Which config a verl entrypoint composes: read from its ``@hydra.main`` without importing it.

``python3 -m verl.trainer.main_ppo`` composes ``ppo_trainer`` from ``verl/trainer/config``;
``--config-path`` / ``--config-name`` on the launch line replace what ``@hydra.main`` says (a
relative ``--config-path`` is relative to the entrypoint's file, as in Hydra). Importing the module
would import torch, ray and the rest of verl, so the source is read as text instead.
"""
from __future__ import annotations

import ast
import importlib.util
import os
import re
from dataclasses import dataclass

DEFAULT_ENTRYPOINT = "verl.trainer.main_ppo"

_HYDRA_MAIN = re.compile(r"@hydra\.main\((?P<args>[^)]*)\)")


@dataclass(frozen=True)
class EntryConfig:
    """The config an entrypoint composes: folder and name, and the file that said so."""

    entrypoint: str
    module_file: str | None  # None when the entrypoint is not installed here
    config_dir: str | None
    config_name: str | None


def module_path(entrypoint: str) -> str:
    """``verl.trainer.main_ppo`` or ``verl/trainer/main_ppo.py`` -> ``verl/trainer/main_ppo.py``."""
    ep = entrypoint.strip()
    if ep.endswith(".py"):
        ep = ep[:-3].lstrip("./").replace("/", ".")
    return ep.replace(".", "/") + ".py"


def find_module_file(entrypoint: str) -> str | None:
    """The source file of an installed module (or an existing ``*.py`` path) without importing it."""
    if entrypoint.endswith(".py") and os.path.isfile(entrypoint):
        return os.path.abspath(entrypoint)
    rel = module_path(entrypoint)
    top = rel.split("/", 1)[0]
    try:
        spec = importlib.util.find_spec(top)
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.submodule_search_locations:
        return None
    for loc in spec.submodule_search_locations:
        path = os.path.join(os.path.dirname(loc), rel)
        if os.path.isfile(path):
            return path
    return None


def read_hydra_main(path: str) -> tuple[str | None, str | None]:
    """(config_path, config_name) of the first ``@hydra.main(...)`` in a Python file."""
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            text = f.read()
    except OSError:
        return None, None
    for m in _HYDRA_MAIN.finditer(text):
        try:
            call = ast.parse("f(" + m.group("args") + ")", mode="eval").body
        except SyntaxError:
            continue
        kwargs = {kw.arg: kw.value.value for kw in call.keywords if isinstance(kw.value, ast.Constant)}
        if kwargs.get("config_name"):
            return kwargs.get("config_path"), str(kwargs["config_name"])
    return None, None


def entry_config(entrypoint: str | None, config_path: str | None = None,
                 config_name: str | None = None) -> EntryConfig:
    """Resolve the config folder and name the launch composes, as far as the installed files tell."""
    ep = entrypoint or DEFAULT_ENTRYPOINT
    path = find_module_file(ep)
    cp, cn = read_hydra_main(path) if path else (None, None)
    cp = config_path or cp
    cn = config_name or cn
    if cn and cn.endswith(".yaml"):
        cn = cn[: -len(".yaml")]
    cdir = None
    if path and cp:
        cdir = cp if os.path.isabs(cp) else os.path.normpath(os.path.join(os.path.dirname(path), cp))
        cdir = cdir if os.path.isdir(cdir) else None
    return EntryConfig(ep, path, cdir, cn)
