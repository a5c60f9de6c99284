"""One cheap test before the scrub rules: could anything in this string be a finding?

Why: almost every string of a profile (kernel names, CUDA API names, NVTX phases) is clean, and the
rules of `Scrubber._apply` (provider shapes, assignments, host names, paths, decoders, entropy) cost
much more on first sight than one automaton pass (bench/README.md). `Prefilter.needs_rules(text)` is a
SUPERSET of the rules: whenever the rules would change a string it returns True (tests/
test_scrub_prefilter.py runs every must-catch example of every rule through it, and a Hypothesis
property checks that no string it passes is changed by the rules). It never decides what to
replace: a True only sends the string to the unchanged rules.

What it looks at, each a condition some rule needs before it can match (see `Prefilter.__init__`):
  1. literals, in ONE Aho-Corasick pass (pyahocorasick) over the lower-cased string: provider
     token prefixes, context anchors, argv tool names, `authorization`, `gpu-`, `-packages`, and
     the bundle's known secret values (plain and encoded), host and user names and GPU UUIDs;
  2. shapes no literal names, in ONE regex: a secret-named word right before `=`/`:` or inside a
     `--flag`, e-mail `x@y`, `.tld`, dotted quads, IPv6 candidates, cluster user roots
     (`/home/`, `/fsx/` ...), URL escapes `%XX`;
  3. runs of >= 16 base64/hex characters: random-looking (the entropy rule's own cached verdict) or
     decoding to text that itself needs the rules (the decoders' own forms, judged recursively).
Text that is not ASCII always goes to the rules: lower-casing it is not a per-character map that
regexes and case-insensitive matching agree with (`İ`, final sigma), and such names are rare.
"""
from __future__ import annotations

import re
from typing import Iterable, Mapping, Sequence

import ahocorasick

from .hidden import RUN_RE, EntropyRule, decoded_forms
from .personal import IPV6_CAND
from .personal import TLDS, USER_ROOTS

# Shapes on the LOWER-CASED ASCII text, each behind the one character it cannot match without.
# Each mirrors the part of a rule it must not miss:
_EMAIL = re.compile(r"[a-z0-9._%+\-]@[a-z0-9]")                                  # personal.EMAIL_RE
_DOTTED = re.compile(r"[a-z0-9]\.(?:" + TLDS + r")(?![a-z0-9\-])"             # personal.FQDN_RE's TLD
                     r"|[0-9]\.[0-9]{1,3}\.[0-9]{1,3}\.[0-9]")                   # personal.IPV4_RE
_USER_ROOT = re.compile(r"[/\\](?:" + "|".join(re.escape(r.lower()).replace("/", r"[/\\]") for r in USER_ROOTS)
                        + r")[/\\]")                                              # personal.USER_ROOT_RE
_URL_ESCAPE = re.compile(r"%[0-9a-f]{2}")                                          # hidden._URL_RUN
# After a secret-name word (found by the automaton): the rest of an assignment's name, then its
# operator (secrets._ASSIGN: `=`, `:` that is not C++ `::` nor a URL, `"name":`), or the rest of a
# flag's name, then a blank, `=` or a quote (secrets._FLAG, personal._ARGV_LIST / _FLAG_QUOTED).
_AFTER_NAME = re.compile(r"[a-z0-9_.\-]{0,81}(?:\s?=|:(?![:/])|\"[ \t]*:)")
_AFTER_FLAG_NAME = re.compile(r"[a-z0-9_.\-]{0,81}(?:\s?=|:(?![:/])|\"[ \t]*:|[ \t'\"])")


def _ipv6_candidate(low: str) -> bool:
    """personal.network_spans' own IPv6 candidates, with the digit `_ipv6` requires of them (C++
    scopes, `at::native::`, hold colons but no candidate)."""
    return any(any(c.isdigit() for c in m.group(1)) for m in IPV6_CAND.finditer(low))


class Prefilter:
    """`needs_rules(text)`: False only for strings the scrub rules leave unchanged (see module doc)."""

    CACHE_MAX = 200_000

    def __init__(self, literals: Iterable[str], name_words: Iterable[str], *, always: bool = False,
                 custom: Sequence[re.Pattern[str]] = (), entropy: EntropyRule | None = None,
                 decode: tuple[int, int, float, int] | None = None,
                 steps: Mapping[str, Iterable[str]] | None = None, allow: re.Pattern[str] | None = None) -> None:
        """`literals`: every literal some rule needs (matched lower-cased, so case-insensitive);
        `name_words`: the policy's secret-name words and suffixes; `always`: a rule with no literal
        (a context rule without hints) is enabled, so every string needs the rules; `custom`: the
        policy's own patterns, searched as they are; `entropy`: the Scrubber's entropy rule (its
        verdict cache is shared); `decode`: (min_base64, min_hex, min_printable, max_depth) when
        decode-then-scan is on; `steps`: literal -> the rules it lets run (`steps_in`); `allow`: the
        entropy allowlist (`hidden.compile_allow`), whose shapes both run rules leave alone."""
        # One automaton. A key's value: whether it decides alone (False for a secret-name word, which
        # decides only when an assignment or flag shape follows it), and the rules it lets run.
        words = {w.lower() for w in name_words if w}
        keys: dict[str, tuple[bool, set[str]]] = {w: (False, set()) for w in words}
        keys.update({x.lower(): (True, set()) for x in literals if x})
        for lit, st in (steps or {}).items():
            keys.setdefault(lit.lower(), (lit.lower() not in words, set()))[1].update(st)
        self._ac: ahocorasick.Automaton | None = None
        if keys:
            ac = ahocorasick.Automaton()
            for k, (decisive, st) in keys.items():
                ac.add_word(k, (decisive, frozenset(st)))
            ac.make_automaton()
            self._ac = ac
        self.always = always
        self._custom = tuple(custom)
        self._entropy = entropy
        self._decode = decode
        self._runs: dict[tuple[str, int], bool] = {}
        self._allow = allow

    def needs_rules(self, text: str, depth: int = 0) -> bool:
        """True when the rules might change `text` (`depth`: decodings already applied to it)."""
        if self.always or not text.isascii():
            return True
        low = text.lower()
        if self._ac is not None:
            after = _AFTER_FLAG_NAME if "-" in low else _AFTER_NAME
            for end, (decisive, _steps) in self._ac.iter(low):
                if decisive or after.match(low, end + 1) is not None:
                    return True
        if ("@" in low and _EMAIL.search(low) is not None) \
                or ("." in low and _DOTTED.search(low) is not None) \
                or (":" in low and _ipv6_candidate(low)) \
                or (("/" in low or "\\" in low) and _USER_ROOT.search(low) is not None) \
                or ("%" in low and _URL_ESCAPE.search(low) is not None):
            return True
        for rx in self._custom:
            if rx.search(text) is not None:
                return True
        if len(text) >= 16 and (self._entropy is not None or self._decode is not None):
            return self._runs_need_rules(text, depth)
        return False

    def steps_in(self, text: str) -> set[str]:
        """The rules (`steps` given to the constructor) whose literal `text` holds, any case."""
        out: set[str] = set()
        if self._ac is not None:
            for _end, (_decisive, steps) in self._ac.iter(text.lower()):
                out |= steps
        return out

    def needs_rules_many(self, texts: Sequence[str]) -> list[bool]:
        """`needs_rules` of each text (the batch form trace scrub and check use)."""
        return [self.needs_rules(t) for t in texts]

    def _runs_need_rules(self, text: str, depth: int) -> bool:
        allowed: list[tuple[int, int]] | None = None
        for m in RUN_RE.finditer(text):
            run = m.group(0)
            hit = self._runs.get((run, depth))
            if hit is None:         # judged once per run and depth: the same runs recur in many names
                hit = self._run_needs_rules(run, depth)
                if len(self._runs) >= self.CACHE_MAX:
                    self._runs.clear()
                self._runs[(run, depth)] = hit
            if hit:
                # both rules leave a run inside an allowlisted shape alone (a mangled C++ symbol):
                # the same spans, found the same way (hidden.encoded_runs, EntropyRule.spans)
                if self._allow is not None:
                    if allowed is None:
                        allowed = [x.span() for x in self._allow.finditer(text)]
                    a, b = m.span()
                    if any(x <= a and b <= y for x, y in allowed):
                        continue
                return True
        return False

    def _run_needs_rules(self, run: str, depth: int) -> bool:
        """The entropy rule finds `run` random, or one of its decoded forms needs the rules."""
        if self._entropy is not None and len(run.rstrip("=")) >= 20 and self._entropy.is_random(run):
            return True
        decode = self._decode
        if decode is None or depth >= decode[3]:
            return False
        return any(self.needs_rules(f, depth + 1) for f in decoded_forms(run, decode[0], decode[1], decode[2]))


__all__ = ["Prefilter"]
