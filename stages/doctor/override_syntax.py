"""Hydra override syntax: parse `key=v`, `+key=v`, `++key=v`, `~key` words (and spot duplicates).
"""
from __future__ import annotations

import copy
import re
from dataclasses import dataclass, field
from typing import Any, Iterable, Literal, Optional

from .config_tree import delete_key, lookup, parse_scalar, set_key


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
        existed = lookup(cfg, key, resolve=False)[0] if known else None
        value = parse_scalar(raw) if raw is not None else None
        if op == "delete":
            delete_key(cfg, key)
        elif op == "add" and existed:
            pass  # Hydra refuses; the config keeps its value
        else:
            set_key(cfg, key, value)
        ov = Override(index=i, word=word, op=op, key=key, value=value, raw_value=raw, existed=existed)
        out.overrides.append(ov)
        by_key.setdefault(key, []).append(ov)
        i += 1
    for key, ovs in by_key.items():
        if len(ovs) > 1:
            out.duplicates.append(Duplicate(key=key, words=tuple(o.word for o in ovs), winner=ovs[-1].word))
    return out
