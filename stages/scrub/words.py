"""Deny by default for free text made of words (issue 33): an NVTX message, a thread name, a Kineto
annotation written by a person (`wk alice`, `job of bob smith`).

Why a rule of its own: a word has no shape (a person's name is spelt like any other word), so no
pattern finds it. The rule is reversed, as for paths (deny.py): a string that is code-shaped as a
whole (no blank, a signature with `::`, `<`, `##` or a call `f(`, a phase path `a > b`) is kept
whole; in any other string a blank-separated token holding anything but letters, `-` and `'` is code
(`gpu0`, `org/model`, `x_y`, `--flag`, `k=v`) and stays, and each word (>= 3 letters) of the other
tokens is kept only when it is camelCase or in the reviewed vocabulary (`vocabulary.txt`: the words
of the real kernel, op, range, thread and process names of tests/data, nsys's own vocabulary,
verlprof's own messages and a short list of common English and profiling words, built by
tests/build_scrub_vocabulary.py). Every other word becomes a stable pseudonym `w-<letters>`.

Word by word, not the whole string: `wk alice` -> `wk w-<letters>` keeps what the string is (a
worker thread, a stage message) readable for the person who reviews the bundle and keeps real
words of the same string (`rollout of w-<letters>`), while the name goes; a whole-string pseudonym
would hide the harmless half and make review lists unreadable.

Nothing here rewrites text: `word_spans` yields (start, end) of the words to replace; the Scrubber
replaces them (identities.fallback_pseudonym("w", ...), spelt in non-hex letters) and skips its own
pseudonyms, so a second scrub changes nothing and check of the output is clean whatever the salt.
"""
from __future__ import annotations

import re
from pathlib import Path
from typing import Iterator

from .deny import ENUM_VALUES, HYDRA_ROOTS, PACKAGES, STRUCTURE_WORDS, TOOLS
from .shapes import CODE_ROOTS, PSEUDONYM_RE, URL_WORDS

VOCABULARY_FILE = Path(__file__).with_name("vocabulary.txt")


def _load(path: Path) -> frozenset[str]:
    words: set[str] = set()
    for line in path.read_text(encoding="utf-8").splitlines():
        line = line.split("#", 1)[0].strip().lower()
        if line:
            words.add(line)
    return frozenset(words)


#: the reviewed vocabulary: lower-case words kept in free text (the file, and the words the path,
#: argv and URL rules already keep: enum values, packages, tools, structure words, code roots)
VOCABULARY: frozenset[str] = _load(VOCABULARY_FILE) | frozenset(
    w.lower() for w in (*ENUM_VALUES, *HYDRA_ROOTS, *PACKAGES, *STRUCTURE_WORDS, *TOOLS, *CODE_ROOTS, *URL_WORDS,
                        "REDACTED"))

# A token of free text (between blanks), its punctuation around it, and the plain words inside it: a
# token holding any other character than letters, `-` and `'` is code (`Module.method`, `ns::op`,
# `org/model`, `x_y`, `gpu0`, `$VAR`, `--flag`, `key=v`) and stays whole; in the others `-` and `'`
# separate words (`bob-smith`, `bob's`).
TOKEN_RE = re.compile(r"\S+")
_EDGE = "([{'\"`"
_TAIL = ")]}'\"`,.;:!?"
_PLAIN_RE = re.compile(r"[A-Za-z]+(?:['\-][A-Za-z]+)*")
WORD_RE = re.compile(r"[A-Za-z]{3,}")
_CAMEL = re.compile(r"[a-z][A-Z]")
# Signatures and code: a string holding one of these is code-shaped as a whole.
# (`"` and `{`: JSON or SQL text, whose strings are judged one by one where they are published)
_CODE_RE = re.compile(r"::|##|<|[\"{]|[A-Za-z0-9_\]>]\(|\x00|\bCREATE (?:UNIQUE )?(?:TABLE|INDEX|VIEW|TRIGGER)\b")


def is_code_shaped(text: str) -> bool:
    """A string kept whole whatever its words: no blank (an identifier, `ns::op`, `Module.method`,
    a number, a stage name), a signature or call (`void f<T>(int)`, `f(x)`, `## Call ... ##`),
    structured text (JSON: `"` or `{`; a `CREATE TABLE` statement), or a phase path of names
    (`step > gen > generate_sequences`)."""
    t = text.strip()
    if " " not in t or _CODE_RE.search(t) is not None:
        return True
    return " > " in t and all(" " not in p.strip() for p in t.split(" > "))


def _word_kept(word: str) -> bool:
    return word.lower() in VOCABULARY or _CAMEL.search(word) is not None


def word_spans(text: str) -> Iterator[tuple[int, int]]:
    """[start, end) of the words of free text that are neither code-shaped nor in the vocabulary."""
    if is_code_shaped(text):
        return
    for t in TOKEN_RE.finditer(text):
        tok = t.group(0)
        a, b = 0, len(tok)
        while a < b and tok[a] in _EDGE:
            a += 1
        while b > a and tok[b - 1] in _TAIL:
            b -= 1
        if b - a < 3 or _PLAIN_RE.fullmatch(tok, a, b) is None:
            continue                  # short, or code (scrub's own pseudonyms and redactions too)
        own = [(m.start(), m.end()) for m in PSEUDONYM_RE.finditer(tok, a, b)] if "-" in tok else ()
        for w in WORD_RE.finditer(tok, a, b):
            if not _word_kept(w.group(0)) and not any(x <= w.start() < y for x, y in own):
                yield t.start() + w.start(), t.start() + w.end()


def plain_words(text: str) -> Iterator[str]:
    """Every plain word `word_spans` judges in `text` (the vocabulary builder's view), lower case."""
    if is_code_shaped(text):
        return
    for t in TOKEN_RE.finditer(text):
        tok = t.group(0)
        a, b = 0, len(tok)
        while a < b and tok[a] in _EDGE:
            a += 1
        while b > a and tok[b - 1] in _TAIL:
            b -= 1
        if b - a >= 3 and _PLAIN_RE.fullmatch(tok, a, b) is not None:
            yield from (w.group(0).lower() for w in WORD_RE.finditer(tok, a, b))


class _Hint:
    """What the Prefilter must let through: a string with a word this rule replaces (the rule
    itself; it is cheap because a string without a blank returns at once)."""

    def search(self, t: str) -> bool | None:
        if " " not in t:
            return None
        for _ in word_spans(t):
            return True
        return None


HINT = _Hint()

# What the rule must replace and what it must leave alone (fake names), checked by tests.
EXAMPLES: tuple[tuple[str, ...], tuple[str, ...]] = (
    ("wk alice", "job of bob smith", "run by zorblax today", "rollout for jean-zorblax", "Qwertyuiop step"),
    ("generate_sequences", "step > gen > generate_sequences", "aten::mm", "Memcpy HtoD (Pageable -> Device)",
     "void f<float>(int)", "ProfilerStep#3", "torch.cuda.synchronize", "## Call CompiledFxGraph fabc ##",
     "wk w-ghjkmnpq", "rollout worker 3", "update actor", "python3 -m verl.trainer.main_ppo --tag p-ghjkmnpq",
     "myCustomThing and more", "Record Window End", "token [REDACTED] here"),
)

__all__ = ["word_spans", "plain_words", "is_code_shaped", "VOCABULARY", "VOCABULARY_FILE", "HINT", "EXAMPLES"]
