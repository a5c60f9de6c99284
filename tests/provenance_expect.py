"""What a test may expect of a user-written string after scrub (issue 39), whatever the corpus holds.

Why a helper: the corpus of public names grows as packages are added (stages/scrub/public_names.py),
so a test of a real capture cannot hard-code which of its range names are public. What it can
assert is the rule itself: a public, approved or structural string leaves as it is; any other leaves
as ONE whole-string pseudonym `name-<letters>`, and the review list maps that pseudonym back to it.
"""
from __future__ import annotations

import re
from typing import Any, Mapping

from verlprof.stages.scrub.provenance import is_structure, is_toolchain_name, is_toolchain_op
from verlprof.stages.scrub.public_names import public_names

NAME_RE = re.compile(r"name-[g-z]{8}")


def leaves_as_is(text: str) -> bool:
    """A user-written string the rule publishes unchanged without approval: public, structure, or a
    name toolchain C++ writes (Kineto's thread rows, `python3`)."""
    return public_names().is_public(text) or is_structure(text) or is_toolchain_name(text)


def published_ok(original: str, published: str, named: Mapping[str, Any], approved: frozenset[str] = frozenset(),
                 op: bool = False) -> bool:
    """True when `published` is what the provenance rule publishes for user-written `original`."""
    if leaves_as_is(original) or original in approved or (op and is_toolchain_op(original)):
        return published == original
    hit = named.get(original)
    return bool(NAME_RE.fullmatch(published)) and hit is not None and hit[0] == published
