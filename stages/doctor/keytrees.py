"""Key trees shipped for verl releases, and Hydra's override rules replayed over them.

Where verl (or Hydra) is not installed, the doctor still knows verl's config: every supported
release's entrypoint configs were composed with Hydra once, by ``keytrees/make_keytrees.py`` (its
docstring says how to regenerate them), and flattened to ``dotted key -> type``. Applying the
overrides here follows ``hydra._internal.config_loader_impl.ConfigLoaderImpl._apply_overrides_to_config``
(Hydra 1.3) rule by rule and produces the same message text, so a finding reads the same either way;
the finding names the release whose tree was used. Values are not in the trees, so ``~key=value``
is not compared and values are not checked.
"""
from __future__ import annotations

import functools
import gzip
import json
import os
import re
from collections.abc import Sequence
from dataclasses import dataclass

import yaml

from .composition import Composition, OverrideProblem, flat_keys
from .entrypoints import DEFAULT_ENTRYPOINT, module_path

KEYTREE_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "keytrees")


@dataclass(frozen=True)
class KeyTree:
    """One release's composed configs: label -> {keys, choices, used_by, overrides}, and its groups."""

    release: str  # file stem: verl-0.8.0, verl-omni-v0.2.0
    version: str
    source: str
    configs: dict
    groups: dict

    @property
    def family(self) -> str:
        return "verl-omni" if self.release.startswith("verl-omni") else "verl"


def _version_key(release: str) -> tuple:
    """Sort key: tagged releases by number; a branch snapshot (verl-omni-main-...) after them."""
    nums = re.findall(r"\d+", release.split("-main-")[0]) if "-main-" not in release else []
    return (0 if "-main-" in release else 1, tuple(int(n) for n in nums))


def shipped_releases() -> list[str]:
    """Release names of the shipped trees, oldest first within each family."""
    names = [f[: -len(".json.gz")] for f in os.listdir(KEYTREE_DIR) if f.endswith(".json.gz")]
    return sorted(names, key=lambda r: (r.startswith("verl-omni"), _version_key(r)))


@functools.lru_cache(maxsize=16)
def load_keytree(release: str) -> KeyTree:
    path = os.path.join(KEYTREE_DIR, f"{release}.json.gz")
    with gzip.open(path, "rt", encoding="utf-8") as f:
        data = json.load(f)
    return KeyTree(release, str(data.get("verl_version")), str(data.get("source", "")), data["configs"],
                   data.get("groups", {}))


def release_for(family: str, version: str | None = None) -> str | None:
    """The shipped tree for a verl version (exact, else the newest release not newer), or the newest."""
    names = [r for r in shipped_releases() if (r.startswith("verl-omni") == (family == "verl-omni"))]
    if not names:
        return None
    tagged = [r for r in names if "-main-" not in r]
    if version:
        exact = [r for r in names if r in (f"{family}-{version}", f"{family}-v{version}")]
        if exact:
            return exact[0]
        want = tuple(int(n) for n in re.findall(r"\d+", version)[:3])
        older = [r for r in tagged if _version_key(r)[1][:3] <= want]
        if older:
            return older[-1]
    return tagged[-1] if tagged else names[-1]


def config_for(tree: KeyTree, entrypoint: str | None, config_name: str | None) -> str | None:
    """The label of the config an entrypoint composes in ``tree`` (None: the tree does not have it)."""
    if config_name:
        name = config_name.removesuffix(".yaml")
        if name in tree.configs:
            return name
        hits = [label for label in tree.configs if label.rsplit("/", 1)[-1] == name and "[" not in label]
        return hits[0] if hits else None
    rel = module_path(entrypoint or DEFAULT_ENTRYPOINT)
    for label, entry in tree.configs.items():
        if "[" not in label and rel in (entry.get("used_by") or []):
            return label
    return None


def family_of(entrypoint: str | None) -> str:
    return "verl-omni" if (entrypoint or "").replace("/", ".").startswith("verl_omni") else "verl"


# ----------------------------------------------------------------------------------------------
# Hydra's rules over a flat key tree
# ----------------------------------------------------------------------------------------------

_KEY = r"[A-Za-z_$][\w$\-]*(?:\.[\w$\-]+)*"
_WORD = re.compile(rf"^(?P<op>~|\+\+|\+)?(?P<key>{_KEY}(?:@[\w.\-]+)?(?:/[\w.\-]+)*)(?P<eq>=?)(?P<value>.*)$", re.DOTALL)


def _top_level_comma(value: str) -> bool:
    """A comma outside quotes, brackets and ${...}: Hydra's unquoted a,b (a sweep)."""
    depth, quote = 0, None
    for ch in value:
        if quote:
            if ch == quote:
                quote = None
        elif ch in "'\"":
            quote = ch
        elif ch in "[{(":
            depth += 1
        elif ch in "]})":
            depth -= 1
        elif ch == "," and depth == 0:
            return True
    return False


def _parse_problem(word: str) -> str | None:
    """Hydra's override grammar, as far as the common mistakes go (the text Hydra prints)."""
    m = _WORD.match(word)
    if not m:
        return f"Error parsing override '{word}' | no viable alternative at input '{word}'"
    if not m.group("eq") and m.group("op") != "~":
        return f"Error parsing override '{word}' | missing EQUAL at '<EOF>'"
    value = m.group("value")
    if value.startswith("~"):
        return f"LexerNoViableAltException: {word} | See https://hydra.cc/docs/1.2/advanced/override_grammar/basic for details"
    return None


def _value_kind(value: str) -> str:
    v = value.strip()
    if v.startswith("[") and v.endswith("]"):
        return "list"
    if v.startswith("{") and v.endswith("}"):
        return "dict"
    if v.lower() in ("null", "~"):
        return "null"
    return "scalar"


def _dict_children(value: str, key: str) -> dict[str, str]:
    """Keys a ``key={a: 1, b: {c: 2}}`` value adds (read as YAML)."""
    try:
        data = yaml.safe_load(re.sub(r":(?=\S)", ": ", value))
    except yaml.YAMLError:
        return {}
    return flat_keys(data, key) if isinstance(data, dict) else {}


def apply_to_tree(tree: KeyTree, label: str, words: Sequence[str]) -> Composition:
    """Replay Hydra's override rules for ``words`` on the keys of ``tree.configs[label]``."""
    entry = tree.configs[label]
    name = label.rsplit("/", 1)[-1]
    choices: dict = dict(entry.get("choices") or {})
    comp = Composition(via="keytree", release=f"{tree.family} {tree.version} (shipped key tree {tree.release})",
                       config_name=name, where=f"keytrees/{tree.release}.json.gz", choices=choices)
    variants = {tuple(e.get("overrides") or ()): lab for lab, e in tree.configs.items()
                if lab.split("[", 1)[0] == label.split("[", 1)[0]}
    comp.variants = {",".join(k): tree.configs[v]["keys"] for k, v in variants.items() if k}
    value_words: list[tuple[str, str, str, str]] = []
    group_picks: list[str] = []
    for word in words:
        bad = _parse_problem(word)
        if bad:
            comp.problems.append(OverrideProblem(word, "parse", bad))
            continue
        m = _WORD.match(word)
        assert m
        op, key, value = m.group("op") or "", m.group("key"), m.group("value")
        if key == "hydra" or key.startswith(("hydra.", "hydra/")):
            continue  # Hydra's own settings: not part of the job's config tree
        if op != "~" and _top_level_comma(value):
            comp.problems.append(OverrideProblem(
                word, "list-form",
                f"Ambiguous value for argument '{word}' | 1. To use it as a list, use key=[value1,value2] | "
                "2. To use it as string, quote the value: key=\\'value1,value2\\' | "
                "3. To sweep over it, add --multirun to your command line", key))
            continue
        group = key.split("@", 1)[0]
        if group in tree.groups and _value_kind(value) != "dict" and op in ("", "+"):
            options = tree.groups[group]
            if value not in options:
                comp.problems.append(OverrideProblem(
                    word, "group-option",
                    f"In '{name}': Could not find '{group}/{value}' | Available options in '{group}': | "
                    + " | ".join(options), key))
                continue
            if op == "" and key not in choices:
                comp.problems.append(OverrideProblem(
                    word, "other", f"Could not override '{key}'. No match in the defaults list.", key))
                continue
            choices[key] = value
            group_picks.append(word)
            continue
        value_words.append((word, op, key, value))
    # the composed variant for the group choices made (model_engine=megatron); a choice without one
    # (engine=automodel) leaves the keys under its package unknown: not reported as missing
    defaults = entry.get("choices") or {}
    real = [w for w in group_picks if defaults.get(w.split("=", 1)[0]) != w.split("=", 1)[1]]
    variant_label, covered = label, set()
    if real:
        exact = variants.get(tuple(sorted(real)))
        if exact:
            variant_label, covered = exact, set(real)
        else:
            for k, lab in variants.items():
                if k and set(k) <= set(real) and len(k) > len(covered):
                    variant_label, covered = lab, set(k)
    for w in real:
        if w not in covered:
            key = w.split("=", 1)[0]
            comp.unchecked.append((w, key.split("@", 1)[1] if "@" in key else key.replace("/", ".")))
    keys: dict[str, str] = dict(tree.configs[variant_label]["keys"])
    comp.keys = dict(keys)
    for word, op, key, value in value_words:
        present = key in keys
        if not present and any(key == pkg or key.startswith(pkg + ".") for _, pkg in comp.unchecked):
            continue  # under a group choice whose keys the tree does not have
        ktype = keys.get(key)
        if op == "~":
            if not present or ktype == "null":
                comp.problems.append(OverrideProblem(
                    word, "delete-missing", f"Could not delete from config. '{key}' does not exist.", key))
                continue
            for k in [k for k in keys if k == key or k.startswith(key + ".")]:
                del keys[k]
            continue
        kind = _value_kind(value)
        if op == "+":
            if present and ktype not in ("null", "missing") and kind not in ("list", "dict"):
                comp.problems.append(OverrideProblem(
                    word, "append-existing",
                    f"Could not append to config. An item is already at '{key}'. | Either remove + prefix: "
                    f"'{word[1:]}' | Or add a second + to add or override '{key}': '+{word}'", key))
                continue
        elif op == "":
            parent = key.rsplit(".", 1)[0] if "." in key else ""
            if not present and not (parent and keys.get(parent) == "null"):
                comp.problems.append(OverrideProblem(
                    word, "missing-key",
                    f"Could not override '{key}'. | To append to your config use +{word}", key))
                continue
        # the key is (now) there: record it and its parents, and a dict value's children
        parts = key.split(".")
        for i in range(1, len(parts)):
            keys.setdefault(".".join(parts[:i]), "dict")
        keys[key] = {"list": "list", "dict": "dict", "null": "null"}.get(kind, ktype or "str")
        if kind == "dict":
            keys.update(_dict_children(value, key))
    return comp
