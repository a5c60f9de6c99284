"""Check a launch's overrides against the config its verl entrypoint composes.

With verl (or verl-omni) and Hydra installed, the entrypoint's own config folder is composed with
Hydra (`hydra_compose`): every error Hydra would raise, in Hydra's words. Otherwise the key tree
shipped for the release (`keytrees`: the installed version's when verl is there but Hydra is not,
else ``--verl-release`` or the newest shipped) stands in, and the findings name it. Words whose
*key* holds a value the launch script does not set cannot be checked and are named instead.
"""
from __future__ import annotations

import importlib.metadata
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from .composition import Composition
from .entrypoints import entry_config
from .findings import Finding
from .hydra_compose import compose_overrides, hydra_version
from .keytrees import apply_to_tree, config_for, family_of, load_keytree, release_for, shipped_releases
from .overrides import composition_findings


@dataclass
class LaunchCheck:
    """What checking a launch found, and the composed config (values: Hydra mode only)."""

    findings: list[Finding] = field(default_factory=list)
    composition: Composition | None = None
    entrypoint: str | None = None


def installed_version(family: str) -> str | None:
    for dist in (family, family.replace("-", "_")):
        try:
            return importlib.metadata.version(dist)
        except importlib.metadata.PackageNotFoundError:
            continue
    return None


def _placeholder_in_key(word: str) -> bool:
    return "${" in word.lstrip("+~").split("=", 1)[0]


def _roots(name: str, why: Mapping[str, Sequence[str]], seen: frozenset = frozenset()) -> list[str]:
    """What an unknown variable comes from, followed down to what the script never sets."""
    if name in seen or name not in why:
        return [name]
    out: list[str] = []
    for src in why[name]:
        out.extend(_roots(src, why, seen | {name}))
    return list(dict.fromkeys(out))


def _describe(root: str, var: str) -> str:
    if root.startswith("$("):
        return f"the output of {root}"
    if root == "set inside if/case/loop":
        return f"{var} (set inside an if/case/loop)"
    return f"{root} (not set by the script)"


def unknown_findings(unknown: Mapping[str, Sequence[str]], why: Mapping[str, Sequence[str]]) -> list[Finding]:
    """One note per override whose value holds script variables that cannot be known here.

    ``unknown``: override word -> the ``$NAME``/``$(...)`` pieces it holds unexpanded; ``why``:
    ``$NAME`` -> what the script built it from. The value is named as unknown, never guessed.
    """
    out = []
    for word, names in unknown.items():
        key = word.lstrip("+~").split("=", 1)[0]
        causes = list(dict.fromkeys(_describe(r, n) for n in names for r in _roots(n, why)))
        out.append(Finding(
            "script-unknown-var", "info",
            f"{key}: its value uses {', '.join(names)}, which depends on {', '.join(causes)}; "
            "it is not known here, so not checked",
            f"pass {key}=... after the script to check a value", key))
    return out


def soften_unknown(findings: Sequence[Finding], unknown: Mapping[str, Sequence[str]]) -> list[Finding]:
    """Config-check findings on a key whose value the script leaves unknown become notes.

    ``trainer.total_training_steps=$STEPS`` with ``STEPS`` set in an ``if``: the pins check would
    read null and cry error; the honest finding is that the value is not known here.
    """
    by_key: dict[str, list[str]] = {}
    for word, names in unknown.items():
        by_key.setdefault(word.lstrip("+~").split("=", 1)[0], []).extend(names)
    out = []
    for f in findings:
        names = by_key.get(f.key or "")
        if names and f.severity != "info" and f.code.split("-", 1)[0] not in ("override", "script", "verl"):
            f = Finding(f.code, "info", f"(value unknown here: {', '.join(dict.fromkeys(names))}) {f.message}", f.fix, f.key)
        out.append(f)
    return out


def check_launch(words: Sequence[str], entrypoint: str | None = None, *, config_name: str | None = None,
                 config_path: str | None = None, release: str | None = None) -> LaunchCheck:
    """Apply ``words`` (override words only) to the entrypoint's verl config and report Hydra's errors.

    ``release`` forces a shipped key tree (``verl-0.8.0``). A word whose key holds an unexpanded
    script variable (``${NAME}``) is named, not checked.
    """
    words = list(words)
    out = LaunchCheck(entrypoint=entrypoint)
    checkable = [w for w in words if not _placeholder_in_key(w)]
    ec = entry_config(entrypoint, config_path, config_name)
    out.entrypoint = ec.entrypoint
    family = family_of(ec.entrypoint)
    comp: Composition | None = None
    version = installed_version(family) or "?"
    if release is None and ec.config_dir and ec.config_name and hydra_version():
        try:
            comp = compose_overrides(ec.config_dir, ec.config_name, checkable, f"{family} {version} (installed)")
        except Exception as e:  # noqa: BLE001 - the config itself does not compose: say so, use a key tree
            out.findings.append(Finding(
                "verl-config", "warning",
                f"Hydra cannot compose {ec.config_name} from {ec.config_dir} without overrides "
                f"({type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}); using a shipped key tree",
                "check the installed verl", None))
            release = release_for(family, version)
    if comp is not None:
        shipped = release_for(family, version)
        if shipped and shipped.endswith(version):
            tree = load_keytree(shipped)
            comp.variants = {",".join(e.get("overrides") or ()): e["keys"] for lab, e in tree.configs.items()
                             if lab.split("[", 1)[0] == ec.config_name and e.get("overrides")}
    else:
        if release is not None and release not in shipped_releases():
            out.findings.append(Finding("verl-config", "error",
                                        f"no shipped key tree named {release}",
                                        "one of: " + ", ".join(shipped_releases())))
            return out
        name = release or release_for(family, installed_version(family) if ec.module_file else None)
        tree = load_keytree(name) if name else None
        label = config_for(tree, ec.entrypoint, ec.config_name) if tree else None
        if tree is None or label is None:
            out.findings.append(Finding(
                "verl-config", "warning",
                f"no config known for {ec.entrypoint}" + (f" (--config-name {ec.config_name})" if ec.config_name else "")
                + (f" in {tree.release}" if tree else "") + ": overrides not checked against verl's keys",
                "install the package that provides it (with hydra-core), or pass --verl-release", None))
            return out
        comp = apply_to_tree(tree, label, checkable)
    out.composition = comp
    out.findings.extend(composition_findings(comp, checkable))
    for w in words:
        if _placeholder_in_key(w):
            out.findings.append(Finding("script-unknown-key", "warning",
                                        f"`{w}`: its key is built from a variable the script does not set; not checked",
                                        "spell the key out in the script", None))
    return out
