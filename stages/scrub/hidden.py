"""Secrets that do not look like themselves: encoded, unlabelled, glued to their neighbours.

Why a module of its own: the rules of `rules.py` match what a secret looks like (a provider shape,
a known value, a secret-named assignment). Real runs also write secrets that match none of those:
a token base64-encoded in an `Authorization: Basic ...` header logged as an NVTX range, a URL with
`?token%3Dhf_...`, a hex dump, an AWS secret key with no label next to its key id, a random API key
with no name at all. This module holds the pure helpers the `Scrubber` runs after its own rules:

- `encoded_runs(text)`: every candidate encoded run (base64 of >= 16 chars, hex of >= 16 chars,
  URL components holding `%XX`) with its decoded forms (all four base64 character offsets, so a run
  glued to the letters before it still decodes), found with ONE compiled regex as a cheap prefilter;
- `EntropyRule`: a run of >= 20 base64/hex characters whose Shannon entropy is above a documented
  threshold, unless a reviewed allowlist of harmless shapes (policy `[entropy.allow.*]`) covers it;
- `CONTEXT_RULES`: a token that pairs with another (AWS key id + secret, OAuth client id + secret)
  redacts its unlabelled companion within the same string.

Nothing here rewrites text; the `Scrubber` decides what to replace, so scrub and check agree.
"""
from __future__ import annotations

import binascii
import math
import re
import urllib.parse
from collections import Counter
from dataclasses import dataclass
from typing import Iterator

# One prefilter for every decoder: a base64/hex-alphabet run, or a URL component holding %XX.
# Two regexes, not one alternation: the URL branch backtracks over every identifier run of a
# string (O(n^2) on kernel names), so it runs only on strings holding a `%`.
_RUN = re.compile(r"[A-Za-z0-9+/_\-]{16,}={0,2}")
RUN_RE = _RUN        # the candidate runs of both the decoders and (at >= 20 characters) the entropy rule
_URL_RUN = re.compile(r"[A-Za-z0-9._~+\-]*(?:%[0-9A-Fa-f]{2}[A-Za-z0-9._~+\-]*)+")
_HEX_RUN = re.compile(r"^(?:[0-9a-fA-F]{2})+$")
_PRINTABLE = frozenset(range(0x20, 0x7F)) | {0x09, 0x0A, 0x0D}
_PRINTABLE_BYTES = bytes(sorted(_PRINTABLE))     # for bytes.translate: counts in C, not per byte in Python


@dataclass(frozen=True)
class EncodedRun:
    """One candidate encoded run of a string: [start, end), its codec and a decoded form."""

    start: int
    end: int
    codec: str          # base64 | hex | url
    decoded: str


def _printable_text(raw: bytes, min_printable: float) -> str | None:
    """The decoded bytes as text when they look like text (a wrong decode is ~37 % printable)."""
    if len(raw) < 6:
        return None
    good = len(raw) - len(raw.translate(None, _PRINTABLE_BYTES))
    if good < min_printable * len(raw):
        return None
    return raw.decode("utf-8", "replace") if not raw.isascii() else raw.decode("ascii")


def _b64_forms(run: str, min_printable: float) -> Iterator[str]:
    body = run.rstrip("=").replace("-", "+").replace("_", "/")
    for k in range(4):
        part = body[k:]
        part = part[: len(part) - len(part) % 4]
        if len(part) < 12:
            break
        try:
            raw = binascii.a2b_base64(part)
        except (binascii.Error, ValueError):
            continue
        text = _printable_text(raw, min_printable)
        if text is not None:
            yield text


def encoded_runs(text: str, min_base64: int = 16, min_hex: int = 16, min_printable: float = 0.85,
                 skip: re.Pattern[str] | None = None) -> Iterator[EncodedRun]:
    """Candidate encoded runs of `text` whose decoded form reads as text.

    `skip` (the entropy allowlist) exempts runs inside harmless shapes (mangled C++ symbols ...):
    they are not encodings, and skipping them keeps kernel-heavy strings cheap.
    """
    allowed: list[tuple[int, int]] | None = None      # computed when the first run is found
    found = list(_RUN.finditer(text))
    if "%" in text:
        found = sorted(found + list(_URL_RUN.finditer(text)), key=lambda m: (m.start(), -m.end()))
    for m in found:
        a, b = m.span()
        if allowed is None:
            allowed = [x.span() for x in skip.finditer(text)] if skip is not None else []
        if any(x <= a and b <= y for x, y in allowed):
            continue
        run = m.group(0)
        if "%" in run:
            dec = urllib.parse.unquote(run, errors="surrogateescape")
            if dec != run:
                yield EncodedRun(a, b, "url", dec)
            continue
        if len(run) >= min_hex and _HEX_RUN.match(run):
            t = _printable_text(bytes.fromhex(run), min_printable)
            if t is not None:
                yield EncodedRun(a, b, "hex", t)
                continue
        if len(run.rstrip("=")) >= min_base64:
            for t in _b64_forms(run, min_printable):
                yield EncodedRun(a, b, "base64", t)


def decoded_forms(run: str, min_base64: int = 16, min_hex: int = 16, min_printable: float = 0.85) -> tuple[str, ...]:
    """Every text `encoded_runs` can yield for one base64/hex-alphabet run (`_RUN`), hex and base64
    both (`encoded_runs` stops at the hex form): what the prefilter looks into, a superset."""
    out: list[str] = []
    if len(run) >= min_hex and _HEX_RUN.match(run):
        t = _printable_text(bytes.fromhex(run), min_printable)
        if t is not None:
            out.append(t)
    if len(run.rstrip("=")) >= min_base64:
        out.extend(_b64_forms(run, min_printable))
    return tuple(out)


def encoded_value_forms(value: str) -> list[str]:
    """How a known secret value looks when encoded: URL-quoted (partly and fully), hex, and the
    parts of its base64 (standard and URL-safe alphabets) that do not depend on what precedes or
    follows it in the encoded blob, for all three byte alignments. Short forms (< 8 chars) are
    dropped: they would match by chance."""
    raw = value.encode("utf-8", "surrogateescape")
    forms = {urllib.parse.quote(value, safe=""), "".join(f"%{c:02X}" for c in raw),
             "".join(f"%{c:02x}" for c in raw), raw.hex(), raw.hex().upper()}
    for k in range(3):
        enc = binascii.b2a_base64(b"\0" * k + raw, newline=False).decode("ascii")
        lead = 4 if k else 0                          # the first quad mixes in the unknown prefix
        tail = ((k + len(raw)) // 3) * 4              # quads made of value bytes only
        core = enc[lead:tail]
        if len(core) >= 8:
            forms.add(core)
            forms.add(core.replace("+", "-").replace("/", "_"))
    forms.discard(value)
    return sorted((f for f in forms if len(f) >= 8), key=len, reverse=True)


# --------------------------------------------------------------------------------------------
# High-entropy runs
# --------------------------------------------------------------------------------------------

_ENTROPY_RUN = re.compile(r"[A-Za-z0-9+/_\-]{20,}={0,2}")
_HEX_ONLY = re.compile(r"^(?:[0-9a-f]+|[0-9A-F]+)$")
# Dictionary-like parts of identifiers (`Backward`, `cuda`, `TILE`): random tokens rarely hold many.
_WORDISH = re.compile(r"[A-Z]?[a-z]{4,}|[A-Z]{4,}")
_WORDISH3 = re.compile(r"[A-Z]?[a-z]{3,}|[A-Z]{3,}")


def shannon(s: str) -> float:
    """Bits per character of `s`."""
    n = len(s)
    return -sum(c / n * math.log2(c / n) for c in Counter(s).values())


def _identifier_shaped(run: str) -> bool:
    """Names glued with `_` from short parts (`fmha_cutlassF_bf16_aligned_64x128_rf_sm80`,
    `cutlass_80_tensorop_bf16_s16816gemm_relu_128x128`): kernel and op names, not tokens. A random
    token rarely holds three `_` with no part longer than 12 characters."""
    parts = run.split("_")
    return len(parts) >= 4 and max(len(p) for p in parts) <= 12


def _vowel_poor(run: str, min_length: int) -> bool:
    """A letters-only piece of `run` (between `/`, `_`, `-`, `+`) of >= min_length letters that is
    poor in vowels and rich in distinct letters."""
    for piece in re.split(r"[^A-Za-z]+", run.lower()):
        if len(piece) >= min_length and len(set(piece)) >= 12 and sum(1 for c in piece if c in "aeiouy") < 0.22 * len(piece):
            return True
    return False


@dataclass(frozen=True)
class EntropySettings:
    """Thresholds of the entropy rule (policy `[entropy]`); see docs/scrub.md for why these."""

    min_length: int = 20
    base64_ratio: float = 0.8      # entropy / log2(length): random base62/64 text is ~0.9
    hex_bits: float = 3.0          # bits per char for pure hex runs (random hex of 20+ is >= 3.2)
    max_wordish: float = 0.5       # share of the run in word-like parts; identifiers are above


class EntropyRule:
    """Finds high-entropy runs in free text that no other rule explains."""

    def __init__(self, settings: EntropySettings, allow: re.Pattern[str] | None) -> None:
        self.s = settings
        self.allow = allow
        self._verdicts: dict[str, bool] = {}

    def is_random(self, run: str) -> bool:
        """True when `run` (a base64/hex-alphabet run) reads as random rather than as a name.
        Judged once per distinct run: the same identifiers recur across thousands of names."""
        hit = self._verdicts.get(run)
        if hit is None:
            hit = self._judge(run)
            if len(self._verdicts) >= 200_000:
                self._verdicts.clear()
            self._verdicts[run] = hit
        return hit

    def _judge(self, run: str) -> bool:
        n = len(run)
        if n < self.s.min_length:
            return False
        body = run.rstrip("=")
        if _HEX_ONLY.match(body):
            has_digit = any(c.isdigit() for c in body)
            return has_digit and not body.isdigit() and shannon(body) >= self.s.hex_bits
        if _identifier_shaped(body):
            return False
        digit = any(c.isdigit() for c in body)
        upper = any(c.isupper() for c in body)
        lower = any(c.islower() for c in body)
        if digit + upper + lower < 2:
            # one letter case, no digit (`qzkvbxwplrtjhgfdsmnc...`): random letters are far poorer
            # in vowels than names and words (about 19 % against 35-45 %)
            return (upper or lower) and _vowel_poor(body, self.s.min_length + 4)
        if not upper:
            # lower case and digits (base36 keys): judged per piece between separators, so a path
            # (`/fsx/user-0967c1a9/ckpt`) is not one run
            return any(len(pc) >= self.s.min_length and sum(c.isdigit() for c in pc) >= 3
                       and shannon(pc) >= self.s.base64_ratio * math.log2(min(len(pc), 36))
                       and sum(len(w) for w in _WORDISH.findall(pc)) < self.s.max_wordish * len(pc)
                       for pc in re.split(r"[/_\-+.]", body))
        # entropy against the best a run of this length can reach (capped: a 140-char base64 run
        # cannot reach log2(140) bits per char, so long tokens were never random before)
        if shannon(body) < self.s.base64_ratio * math.log2(min(len(body), 64)):
            return False
        # without digits, camelCase words of three letters count too (`getCpAsyncBulkGmemIndex`)
        wordish = sum(len(w) for w in (_WORDISH if digit else _WORDISH3).findall(body))
        return wordish < self.s.max_wordish * len(body)

    def spans(self, text: str) -> list[tuple[int, int]]:
        """[start, end) of every random-looking run of `text` outside the allowlisted shapes."""
        out: list[tuple[int, int]] = []
        allowed: list[tuple[int, int]] | None = None
        for m in _ENTROPY_RUN.finditer(text):
            if not self.is_random(m.group(0)):
                continue
            if allowed is None:
                allowed = [a.span() for a in self.allow.finditer(text)] if self.allow is not None else []
            a, b = m.span()
            if any(x <= a and b <= y for x, y in allowed):
                continue
            out.append((a, b))
        return out


def compile_allow(shapes: tuple[tuple[str, str, tuple[str, ...]], ...]) -> re.Pattern[str] | None:
    """One regex of every allowlisted shape (name, regex, examples)."""
    if not shapes:
        return None
    return re.compile("|".join(f"(?:{rx})" for _n, rx, _e in shapes))


def verify_allow_examples(shapes: tuple[tuple[str, str, tuple[str, ...]], ...]) -> list[str]:
    """Problems with the allowlist: an entry without examples, or an example in which its regex finds
    nothing (a reviewed list must show what each shape lets through)."""
    problems = []
    for name, rx, examples in shapes:
        if not examples:
            problems.append(f"allow shape {name!r} has no examples")
        comp = re.compile(rx)
        for ex in examples:
            if comp.search(ex) is None:
                problems.append(f"allow shape {name!r} does not match its example {ex!r}")
    return problems


# --------------------------------------------------------------------------------------------
# Context rules: a token that pairs with another redacts its unlabelled companion
# --------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class ContextRule:
    """`anchor` found in a string makes every `companion` match in the same string a secret."""

    name: str
    anchor: re.Pattern[str]
    companion: re.Pattern[str]
    needs_mixed: bool = True     # the companion must mix letters and digits (not a word)


CONTEXT_RULES: tuple[ContextRule, ...] = (
    # AWS: an access key id travels with its 40-char secret key (`aws configure` output, boto logs).
    ContextRule("aws_secret",
                re.compile(r"(?<![A-Z0-9])(?:AKIA|ASIA|ABIA|ACCA)[A-Z0-9]{16}(?![A-Z0-9])"),
                re.compile(r"(?<![A-Za-z0-9/+])[A-Za-z0-9/+]{40}(?![A-Za-z0-9/+=])")),
    # OAuth: a client id (Google's `*.apps.googleusercontent.com`, or one labelled client_id) travels
    # with its client secret (`GOCSPX-...` or any random token of >= 16 chars).
    ContextRule("oauth_client_secret",
                re.compile(r"(?i)client[_\-. ]?id|\.apps\.googleusercontent\.com"),
                re.compile(r"(?<![A-Za-z0-9_\-])(?:GOCSPX-[A-Za-z0-9_\-]{20,}|[A-Za-z0-9_\-]{16,})(?![A-Za-z0-9_\-])")),
)
CONTEXT_HINTS: dict[str, tuple[str, ...]] = {
    "aws_secret": ("AKIA", "ASIA", "ABIA", "ACCA"),
    "oauth_client_secret": ("client", "Client", "CLIENT", "googleusercontent"),
}


def companion_spans(rule: ContextRule, text: str) -> list[tuple[int, int]]:
    """Companions of `rule` in `text` (none unless its anchor is there)."""
    anchors = [m.span() for m in rule.anchor.finditer(text)]
    if not anchors:
        return []
    out = []
    for m in rule.companion.finditer(text):
        a, b = m.span()
        if any(x < b and a < y for x, y in anchors):
            continue                     # the anchor itself (its own rule handles it)
        tok = m.group(0)
        if rule.needs_mixed and not (any(c.isdigit() for c in tok) and any(c.isalpha() for c in tok)):
            continue
        if len(set(tok)) < 8:
            continue
        out.append((a, b))
    return out


__all__ = ["EncodedRun", "encoded_runs", "decoded_forms", "RUN_RE", "encoded_value_forms", "EntropySettings", "EntropyRule", "shannon",
           "compile_allow", "verify_allow_examples", "ContextRule", "CONTEXT_RULES", "CONTEXT_HINTS",
           "companion_spans"]
