"""Hydra override checks: against the config a user hands the doctor (`check_overrides`: the
`+key` on an existing key that Hydra rejects, `key=` on a missing one, duplicates), and the errors
Hydra raises on verl's own composed config (`composition_findings`, from `hydra_compose` or
`keytrees`).
"""
from __future__ import annotations

from typing import Optional

from .composition import Composition, OverrideProblem, did_you_mean
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
        if o.existed is None or cfg.existence_base is None:
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
        if d.words[-1] in cfg.appended:
            # given last after a launch script (its "$@"): the way to change a script's value, or an
            # earlier word, without editing anything, and how doctor's own fixes are applied
            out.append(Finding("override-duplicate", "info",
                               f"{d.key} is set {len(d.words)} times ({', '.join(d.words)}); `{d.winner}`, "
                               "given last after the script, wins", "", d.key))
            continue
        sev = "info" if len(values) == 1 else "warning"
        out.append(Finding("override-duplicate", sev,
                           f"{d.key} is set {len(d.words)} times ({', '.join(d.words)}); the last one wins: {d.winner}",
                           f"keep only `{d.winner}`", d.key))
    return out


# ---------------------------------------------------------------------------------------------
# findings from checking the overrides against verl's composed config (hydra_compose / keytrees)
# ---------------------------------------------------------------------------------------------

_CODES = {
    "append-existing": "override-plus-existing",
    "missing-key": "override-missing-key",
    "delete-missing": "override-delete-missing",
    "delete-value": "override-delete-value",
    "list-form": "override-list-form",
    "parse": "override-parse",
    "group-option": "override-group-option",
    "other": "override-hydra",
}


def _variant_hint(comp: Composition, key: str) -> Optional[str]:
    """The config-group choice under which ``key`` exists (``model_engine=megatron``), if any."""
    for choice, keys in comp.variants.items():
        if key in keys and key not in comp.keys:
            return choice
    return None


def _fix(comp: Composition, p: OverrideProblem) -> str:
    word, key = p.word, p.key or ""
    op = "++" if word.startswith("++") else "+" if word.startswith("+") else "~" if word.startswith("~") else ""
    value = word.split("=", 1)[1] if "=" in word else ""
    if p.kind == "append-existing":
        return word[1:]
    if p.kind in ("missing-key", "delete-missing"):
        hint = _variant_hint(comp, key)
        guess = did_you_mean(key, comp.keys)
        if hint:
            return f"{hint} {word}  ({key} exists with {hint})"
        if guess and p.kind == "missing-key":
            return f"did you mean {guess}? {guess}={value}  (or +{word} to add a new key)"
        if guess:
            return f"did you mean ~{guess}? (or drop `{word}`)"
        return f"+{word}" if p.kind == "missing-key" else f"drop `{word}`"
    if p.kind == "delete-value":
        return f"~{key}"
    if p.kind == "list-form":
        return f"{op}{key}=[{value}]  (a list; or {op}{key}='{value}' for one string)"
    if p.kind == "parse":
        if "=" not in word and not word.startswith("~"):
            return f"{word}=<value>, or drop it"
        if value.startswith("~"):
            return f"{word.split('=', 1)[0]}='{value}'  (quote it, or write the path out: Hydra does not expand ~)"
        return "quote the value: key='...'"
    if p.kind == "group-option":
        return "pick one of the options Hydra lists"
    return "see Hydra's message"


def composition_findings(comp: Composition, words: list[str]) -> list[Finding]:
    """One error per override Hydra refuses (Hydra's message, the fix), in launch order, plus a
    quoted list on a list key (Hydra reads a string, verl then gets a string) and a note naming the
    verl release and config the words were checked against."""
    order = {w: i for i, w in enumerate(words)}
    out: list[Finding] = []
    for p in sorted(comp.problems, key=lambda p: order.get(p.word, len(order))):
        out.append(Finding(_CODES[p.kind], "error",
                           f"`{p.word}` fails: \"{p.message}\" ({comp.release}, config '{comp.config_name}')",
                           _fix(comp, p), p.key))
    refused = {p.word for p in comp.problems}
    for w in words:
        if w in refused or "=" not in w or w.startswith("~"):
            continue
        key, value = w.lstrip("+").split("=", 1)
        quoted = len(value) >= 2 and value[0] in "'\"" and value[-1] == value[0]
        if quoted and value[1:2] == "[" and comp.keys.get(key) == "list":
            out.append(Finding("override-list-quoted", "error",
                               f"`{w}`: the quotes make Hydra read one string, not a list; {key} is a list "
                               f"in {comp.release}", f"{w.split('=', 1)[0]}={value[1:-1]}", key))
    for word, pkg in comp.unchecked:
        out.append(Finding("verl-config-partial", "info",
                           f"keys under {pkg} not checked: {comp.release} has no key tree composed with `{word}`",
                           "install that verl with hydra-core to compose it for real", pkg))
    out.append(Finding("verl-config", "info", f"overrides checked against {comp.describe()} ({comp.where})",
                       "pass --verl-release NAME to check against another shipped release"
                       if comp.via == "keytree" else "", None))
    return out
