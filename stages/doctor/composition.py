"""What checking a launch's overrides against verl's config tree yields, whichever way it was done.

Two ways fill the same record: `hydra_compose` (Hydra's own compose API over the installed verl
config folder: Hydra's messages, exactly) and `keytrees` (a key tree shipped for a verl release,
used when verl or Hydra is not installed: Hydra's rules replayed over the keys). The doctor turns
a `Composition` into findings in `overrides.composition_findings`.
"""
from __future__ import annotations

import difflib
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Literal

ProblemKind = Literal[
    "parse",  # Hydra cannot parse the word
    "list-form",  # a,b without brackets: Hydra reads a sweep and refuses it in a run
    "append-existing",  # +key on a key that is there
    "missing-key",  # key= on a key that is not there
    "delete-missing",  # ~key of nothing
    "delete-value",  # ~key=v where the value differs
    "group-option",  # group=option that the config group does not have
    "other",  # any other compose error (Hydra's message says what)
]


@dataclass(frozen=True)
class OverrideProblem:
    """One override Hydra refuses, with Hydra's message (or the same text, replayed offline)."""

    word: str
    kind: ProblemKind
    message: str  # Hydra's message, lines joined with " | "
    key: str | None = None


@dataclass
class Composition:
    """The result of applying a launch's overrides to the entrypoint's verl config."""

    via: Literal["hydra", "keytree"]
    release: str  # "verl 0.9.1 (installed)", "verl 0.8.0 (shipped key tree verl-0.8.0)"
    config_name: str
    where: str  # the config folder composed from, or the key tree file
    problems: list[OverrideProblem] = field(default_factory=list)
    keys: dict[str, str] = field(default_factory=dict)  # dotted key -> type, before the value overrides
    choices: dict[str, str | None] = field(default_factory=dict)  # config group -> option used
    base: dict | None = None  # the composed config before value overrides (hydra only: values)
    variants: dict[str, dict[str, str]] = field(default_factory=dict)  # "model_engine=megatron" -> keys
    # (group choice word, config package) whose keys a key tree does not have: not checked
    unchecked: list[tuple[str, str]] = field(default_factory=list)

    def describe(self) -> str:
        return f"{self.release}, config '{self.config_name}' via {'Hydra compose' if self.via == 'hydra' else 'key tree'}"


def flat_keys(node: object, prefix: str = "", out: dict[str, str] | None = None) -> dict[str, str]:
    """Dotted key -> type name of a plain nested dict (lists are leaves), like the shipped trees."""
    out = {} if out is None else out
    if not isinstance(node, dict):
        return out
    for k, v in node.items():
        dotted = f"{prefix}.{k}" if prefix else str(k)
        if isinstance(v, dict):
            out[dotted] = "dict"
            flat_keys(v, dotted, out)
        elif v is None:
            out[dotted] = "null"
        elif v == "???":
            out[dotted] = "missing"
        elif isinstance(v, bool):
            out[dotted] = "bool"
        elif isinstance(v, int):
            out[dotted] = "int"
        elif isinstance(v, float):
            out[dotted] = "float"
        elif isinstance(v, list):
            out[dotted] = "list"
        else:
            out[dotted] = "str"
    return out


def did_you_mean(key: str, keys: Iterable[str]) -> str | None:
    """The key the user most likely meant: the closest sibling under the deepest parent that exists."""
    keys = set(keys)
    parts = key.split(".")
    for depth in range(len(parts) - 1, -1, -1):
        parent = ".".join(parts[:depth])
        if parent and parent not in keys:
            continue
        prefix = parent + "." if parent else ""
        children = {k[len(prefix):].split(".", 1)[0] for k in keys if k.startswith(prefix) and k != parent}
        close = difflib.get_close_matches(parts[depth], sorted(children), n=1, cutoff=0.75)
        if close:
            guess = ".".join(parts[:depth] + [close[0]] + parts[depth + 1:])
            if guess in keys:
                return guess
            # the typo is above the leaf: the guess only helps when the rest exists under it
            rest = difflib.get_close_matches(guess, sorted(k for k in keys if k.startswith(prefix + close[0])),
                                             n=1, cutoff=0.8)
            return rest[0] if rest else None
        return None
    return None
