"""Hydra override syntax: parse `key=v`, `+key=v`, `++key=v`, `~key` words and check them
against the config they apply to (the `+key` on an existing key that Hydra rejects, duplicates).
"""
from __future__ import annotations

from .config import ProfileConfig
from .findings import Finding, Severity

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
