"""The Scrubber: replaces secrets and personal data in strings and counts what it replaced.

Why one class for scrub and check: `verlprof scrub` rewrites what `Scrubber.scrub` finds and
`verlprof check` reports what `Scrubber.findings` finds, through the same `_apply`, so whatever scrub
leaves behind check agrees is clean, and anything check flags scrub would remove. The rules live in
rules.py, hidden.py and personal.py; the pseudonym map in identities.py.

Order of the rules in `_apply`: companions of anchor tokens, known secret values (plain and
encoded), provider token shapes, secret-named assignments and argv values, e-mails/hosts/addresses,
GPU ids, user paths, known names, site-packages prefixes, decode-then-scan, entropy.
"""
from __future__ import annotations

import hashlib
import pickle
import re
from collections import Counter
from typing import Any, Iterable, Sequence

from ..core.errors import BadInputError
from .hidden import (
    CONTEXT_HINTS,
    CONTEXT_RULES,
    EntropyRule,
    EntropySettings,
    companion_spans,
    compile_allow,
    encoded_runs,
    encoded_value_forms,
)
from .identities import Pseudonyms, fallback_pseudonym, gpu_hash
from .personal import ARGV_HINTS, NETWORK_HINT, USER_ROOT_RE, argv_secret_spans, network_spans, user_components
from .policy import Policy
from .prefilter import Prefilter
from .shapes import GPU_SHORT_RE, PSEUDONYM_RE, host_spans, is_free_text, mac_spans, tilde_users, url_parts
from .shapes import HINT_RE as SHAPES_HINT
from .deny import HINT_RE as DENY_HINT
from .deny import deny_spans
from .provenance import KIND_USER_TEXT, Origin, UserTextGate, origin_of
from .rules import replace_spans
from .rules import (
    BARE_UUID_RE,
    GPU_UUID_RE,
    KIND_DENIED,
    KIND_EMAIL,
    KIND_ENTROPY,
    KIND_GPU,
    KIND_HARDWARE,
    KIND_HOME,
    KIND_HOST,
    KIND_NAME,
    KIND_PATH,
    KIND_SPLIT,
    KIND_URL,
    KIND_USER,
    KIND_VALUE,
    LEFT_EDGE,
    RIGHT_EDGE,
    NameRule,
    PATTERN_HINTS,
    PATTERN_IHINTS,
    PATTERN_RULES,
    PSEUDO_HOST_RE,
    PSEUDO_USER_RE,
    REDACTED,
    compile_patterns,
    context_kind,
    encoded_kind,
    hinted,
    is_placeholder,
    iter_assignments,
    name_words,
    pattern_kind,
    sub_pattern,
    unquote,
)

#: verdicts per (policy, known values) in this process: see `_shared_verdicts`
_VERDICTS: dict[bytes, tuple[dict, dict, dict]] = {}


def _shared_verdicts(policy: Policy, ps: Pseudonyms) -> tuple[dict, dict, dict]:
    """The verdict caches (per string, per adjacent pair, per decoded run) of every Scrubber in
    this process with the same rules and known values.

    Why: one collect job scrubs the summary rows, the window SQLite and then checks what it wrote,
    each with its own Scrubber; the same phase names, range texts and kernel names meet all three.
    A verdict depends only on the policy and the known values (`_apply` reads nothing else; the
    split halves a Scrubber is told to force are handled before its cache), so each distinct string
    is judged once per process and the verdict reused by the scrubbers and the checker alike."""
    key = hashlib.blake2b(pickle.dumps((policy, ps), protocol=pickle.HIGHEST_PROTOCOL), digest_size=16).digest()
    memo = _VERDICTS.get(key)
    if memo is None:
        if len(_VERDICTS) >= 4:          # a long-lived worker meets few rule sets; keep memory bounded
            _VERDICTS.clear()
        memo = _VERDICTS[key] = ({}, {}, {})
    return memo


class Scrubber:
    """Replaces secrets and personal data in strings; counts what it replaced per location.

    `scrub(text, location)` returns the cleaned string. `findings(text)` returns the kinds of what
    `scrub` would replace (never the values) and is what `verlprof check` reports. Results are
    cached per distinct string: traces repeat the same names millions of times.
    """

    CACHE_MAX = 300_000
    REVIEW_MAX = 20_000      # distinct kept free-text strings listed for review (then: counted only)
    NAMED_MAX = 2_000_000    # user-written originals published as pseudonyms: all listed for the owner

    def __init__(self, policy: Policy, pseudonyms: Pseudonyms | None = None) -> None:
        self.policy = policy
        self.ps = pseudonyms or Pseudonyms()
        self.is_secret_name = NameRule(policy)
        self.counts: Counter[tuple[str, str]] = Counter()
        self.review: dict[str, Counter[str]] = {}
        # user-written originals published as pseudonyms: original -> (pseudonym, where -> n)
        self.named: dict[str, tuple[str, Counter[str]]] = {}
        self.gate = UserTextGate(policy.approved_names, self.ps.salt)
        self._free_text: dict[str, bool] = {}
        self._cache, self._join_cache, self._decoded_cache = _shared_verdicts(policy, self.ps)
        self._forced: dict[str, str] = {}
        self._patterns = compile_patterns(policy)
        self._keep_users = frozenset(policy.keep_users)
        self._common = frozenset(w.lower() for w in policy.common_words)
        self._host_map = self.ps.host_map() if policy.pseudonymize_hosts else {}
        self._user_map = self.ps.user_map() if policy.pseudonymize_users else {}
        # Known secret values, plain and encoded (URL, hex, base64): one alternation, longest first.
        plain = [v for v in self.ps.secret_values if v]
        vals = sorted(set(plain) | {f for v in plain for f in encoded_value_forms(v)}, key=lambda v: (-len(v), v))
        self._values_rx = re.compile("|".join(re.escape(v) for v in vals)) if vals else None
        self._value_firsts = frozenset(v[:3] for v in vals)
        # Known hosts/users as free words (long, uncommon ones only) and as path components.
        free = [n for n in list(self._host_map) + list(self._user_map)
                if len(n) >= policy.min_free_text_length and n.lower() not in self._common]
        # whole tokens only (identifier boundaries: `_` joins words): USER=grace leaves `grace_hopper_kernel`
        self._free_rx = re.compile(r"(?<![A-Za-z0-9_])(" + "|".join(re.escape(n) for n in sorted(free, key=len, reverse=True))
                                   + r")(?![A-Za-z0-9_])") if free else None
        # known users and hosts as words of a file name (`_`, `-`, `.`, `+`, `@` separate them there)
        self._file_names = {n: p for n, p in list(self._host_map.items()) + list(self._user_map.items())
                            if len(n) >= 3 and n.lower() not in self._common and n not in self._keep_users
                            and "." not in n}
        self._file_rx = re.compile(LEFT_EDGE + "(" + "|".join(re.escape(n) for n in sorted(self._file_names, key=len, reverse=True))
                                   + ")" + RIGHT_EDGE) if self._file_names else None
        comp = [n for n in self._user_map if n not in self._keep_users]
        self._comp_rx = re.compile(r"(?<=[/\\])(" + "|".join(re.escape(n) for n in sorted(comp, key=len, reverse=True)) + r")(?=[/\\]|$|[\s\"':;,])") if comp else None
        ctx_hosts = list(self._host_map)
        self._host_ctx_rx = re.compile(
            r"(?:(?<=@)|(?<=//)|(?<=HOSTNAME=)|(?<=HOST=))(" + "|".join(re.escape(n) for n in sorted(ctx_hosts, key=len, reverse=True)) + r")(?![A-Za-z0-9\-])"
        ) if ctx_hosts else None
        self._gpu_known = frozenset(self.ps.gpu_uuids)
        self._host_keys = frozenset(k.lower() for k in policy.trace_host_keys)
        self._key_classes: dict[str, int] = {}
        hint_words = sorted(set(policy.name_words) | set(policy.name_suffixes), key=len, reverse=True)
        self._name_hint = re.compile("(?i)" + "|".join(re.escape(w) for w in hint_words)) if hint_words else None
        self._gpu_bare_rx = re.compile("(?i)" + "|".join(re.escape(u) for u in self.ps.gpu_uuids)) if self.ps.gpu_uuids else None
        # Secrets that do not look like themselves (hidden.py).
        known_ctx = {r.name: r for r in CONTEXT_RULES}
        for name in policy.context_rules:
            if name not in known_ctx:
                raise BadInputError(policy.source, f"unknown context rule {name!r} (known: {', '.join(known_ctx)})")
        self._context = [known_ctx[n] for n in policy.context_rules]
        self._allow_rx = compile_allow(policy.entropy_allow)
        self._entropy = EntropyRule(EntropySettings(
            policy.entropy_min_length, policy.entropy_base64_ratio, policy.entropy_hex_bits,
            policy.entropy_max_wordish), self._allow_rx) if policy.entropy_enabled else None
        self._entropy_keys = frozenset(k.lower() for k in policy.entropy_allow_keys)
        self._pre = Prefilter(
            self._prefilter_literals(vals), hint_words, steps=self._rule_steps(hint_words), allow=self._allow_rx,
            always=any(not CONTEXT_HINTS.get(r.name) for r in self._context),
            custom=[rx for name, rx, _g, _e in self._patterns if name not in PATTERN_RULES] + [SHAPES_HINT, DENY_HINT],
            entropy=self._entropy,
            decode=(policy.decode_min_base64, policy.decode_min_hex, policy.decode_min_printable,
                    policy.decode_max_depth) if policy.decode_enabled else None)
        if self.ps.split_values:     # halves of secrets split across op inputs (op_inputs.py, issue 39)
            self.force_redact(self.ps.split_values)

    def _prefilter_literals(self, values: list[str]) -> list[str]:
        """Every literal without which no rule of `_apply` can change a string (prefilter.py)."""
        lits: list[str] = list(values) + list(self.ps.gpu_uuids) + list(self._host_map) + list(self._user_map)
        for name, _rx, _g, _e in self._patterns:
            lits += PATTERN_HINTS.get(name, ()) + PATTERN_IHINTS.get(name, ())
        for rule in self._context:
            lits += CONTEXT_HINTS.get(rule.name, ())
        lits += list(ARGV_HINTS) + ["gpu-", "mig-"]
        if self.policy.trim_env_prefixes:
            lits.append("-packages")
        return lits

    def _rule_steps(self, hint_words: list[str]) -> dict[str, set[str]]:
        """Which keyword-driven rules of `_apply` each literal lets run (`_triggered`).

        Every literal a rule needs before it can match (provider prefixes, secret-name words,
        context anchors, argv tools, `authorization`) maps to that rule; rules without such a
        literal (custom patterns) always run. The rules themselves are unchanged: this only skips
        those that cannot match. The literals are found by the prefilter's one automaton."""
        steps: dict[str, set[str]] = {}
        self._always: set[str] = set()
        for name, _rx, _g, _e in self._patterns:
            hints = PATTERN_HINTS.get(name) or PATTERN_IHINTS.get(name)
            if hints is None:
                self._always.add("pattern:" + name)
                continue
            for h in hints:
                steps.setdefault(h.lower(), set()).add("pattern:" + name)
        for w in hint_words:
            steps.setdefault(w.lower(), set()).add("names")
        for rule in self._context:
            for h in CONTEXT_HINTS.get(rule.name, ()) or ("",):
                if h:
                    steps.setdefault(h.lower(), set()).add("context:" + rule.name)
                else:
                    self._always.add("context:" + rule.name)
        for h in ARGV_HINTS:
            steps.setdefault(h, set()).add("argv")
        return steps

    def _triggered(self, s: str) -> set[str]:
        return self._always | self._pre.steps_in(s)

    # -- public API ---------------------------------------------------------------------------
    def needs_rules(self, text: str) -> bool:
        """False only when `scrub(text)` would return `text` unchanged and `findings(text)` nothing
        (a few microseconds; a superset of the rules, see prefilter.py). For callers that skip
        clean strings in bulk (trace events whose every literal is clean)."""
        if self._forced and self._forced_re.search(text):
            return True
        return self._pre.needs_rules(text)

    def needs_rules_many(self, texts: Sequence[str]) -> list[bool]:
        """`needs_rules` of each of `texts`."""
        if self._forced:
            return [self.needs_rules(t) for t in texts]
        return self._pre.needs_rules_many(texts)

    def force_redact(self, texts: Iterable[str], kind: str = KIND_SPLIT) -> None:
        """Whole strings that are secret through context outside themselves (the halves of a value
        split across NVTX ranges, found by `sqlite.split_nvtx_texts` on a raw export): `scrub`
        replaces them and `findings` reports them, wherever they are met later (summary rows)."""
        for t in texts:
            if t:
                self._forced[t] = kind
        # Summary strings also hold them inside longer text (a phase path "a > b > <half>").
        self._forced_re = re.compile("|".join(re.escape(t) for t in sorted(self._forced, key=len, reverse=True)))

    def scrub(self, text: str, location: str, field: str | None = None) -> str:
        """`text` with every rule applied, then, when the field is user-written (`field`, else
        `location`, in provenance.FIELDS), published only when public, approved or structure, else
        as one whole-string pseudonym (counted `user_text`, noted for the owner's review list)."""
        if not text:
            return text
        origin = origin_of(field or location)
        if origin is not Origin.TOOLCHAIN:
            out = self._scrub_rules(text, location)
            pub, made = self.gate.judge(text, out, origin)
            if made:
                self.counts[(KIND_USER_TEXT, location)] += 1
                if location != "-":
                    for orig, pseudo in made:
                        self._note_named(orig, pseudo, location)
            self._note_published(pub, location)
            return pub
        out = self._scrub_rules(text, location)
        self._note_published(out, location)
        return out

    def _note_named(self, original: str, pseudo: str, location: str, n: int = 1) -> None:
        hit = self.named.get(original)
        if hit is None:
            if len(self.named) >= self.NAMED_MAX:
                return
            hit = self.named[original] = (pseudo, Counter())
        hit[1][location] += n

    def add_named(self, named: dict[str, tuple[str, dict[str, int]]]) -> None:
        """Merge another scrubber's `named_list()` (a worker's) into this one's."""
        for orig, (pseudo, where) in named.items():
            for location, n in where.items():
                self._note_named(orig, pseudo, location, n)

    def named_list(self) -> dict[str, tuple[str, dict[str, int]]]:
        """original -> (pseudonym, where -> n): the owner's review list (WORK only, never OUT)."""
        return {o: (p, dict(sorted(w.items()))) for o, (p, w) in sorted(self.named.items())}

    def user_text_findings(self, text: str, location: str, field: str | None = None) -> tuple[str, ...]:
        """`findings(text)`, plus `user_text` when the field is user-written and the text neither
        public, approved nor structure (what `scrub` would publish as a pseudonym)."""
        kinds = self.findings(text)
        origin = origin_of(field or location)
        if text and origin is not Origin.TOOLCHAIN and self.gate.judge(text, self._judged(text)[0], origin)[1]:
            kinds = tuple(sorted(set(kinds) | {KIND_USER_TEXT}))
        return kinds

    def scrub_rules(self, text: str, location: str) -> str:
        """The second net alone (credentials, patterns, values, identities, paths, URLs): what every
        field gets, whatever its origin. Toolchain fields get only this (`scrub`)."""
        return self._scrub_rules(text, location) if text else text

    def _scrub_rules(self, text: str, location: str) -> str:
        if self._forced:
            forced = self._forced.get(text)
            if forced is not None:
                self.counts[(forced, location)] += 1
                return REDACTED
            if self._forced_re.search(text):
                kinds = {self._forced[m.group(0)] for m in self._forced_re.finditer(text)}
                for k in kinds:
                    self.counts[(k, location)] += 1
                text = self._forced_re.sub(REDACTED, text)
        hit = self._judged(text)
        out, kinds = hit
        for k in kinds:
            self.counts[(k, location)] += 1
        return out

    def _note_published(self, out: str, location: str) -> None:
        """List free text that leaves as it is (scrub_report.json `kept_free_text`): what was
        published, after the provenance gate (`scrub`)."""
        if " " in out and location != "-":
            free = self._free_text.get(out)
            if free is None:
                free = self._free_text[out] = is_free_text(out)
                if len(self._free_text) >= self.CACHE_MAX:
                    self._free_text.clear()
            if free and not location.startswith("ENUM_"):
                # ("-": a probe, not a published value; ENUM_ tables: nsys's own vocabulary, an allowlist)
                self._note_kept(out, location)

    def _judged(self, text: str) -> tuple[str, list[str]]:
        """`_apply(text)` (the scrubbed text and its kinds), cached: a name repeats in every row."""
        hit = self._cache.get(text)
        if hit is None:
            hit = self._apply(text)
            if len(self._cache) >= self.CACHE_MAX:
                self._cache.clear()
            self._cache[text] = hit
        return hit

    def _note_kept(self, text: str, location: str, n: int = 1) -> None:
        where = self.review.get(text)
        if where is None:
            if len(self.review) >= self.REVIEW_MAX:
                return
            where = self.review[text] = Counter()
        where[location] += n

    def add_review(self, review: dict[str, dict[str, int]]) -> None:
        """Merge another scrubber's `review_list()` (a worker's summary rows) into this one's."""
        for text, where in review.items():
            for location, n in where.items():
                self._note_kept(text, location, n)

    def review_list(self) -> dict[str, dict[str, int]]:
        """Every distinct free-text string `scrub` kept (whole or with parts replaced), with where
        and how often it was met: what a person reads before sharing (issue 33). JSON-safe."""
        return {t: dict(sorted(w.items())) for t, w in sorted(self.review.items())}

    def findings(self, text: str) -> tuple[str, ...]:
        """Kinds of secret/personal content in `text` (cosmetic rules excluded)."""
        if not text:
            return ()
        if self._forced and self._forced_re.search(text):
            return tuple(sorted({self._forced[m.group(0)] for m in self._forced_re.finditer(text)}))
        hit = self._judged(text)
        return tuple(k for k in hit[1] if k != KIND_PATH)

    def findings_uncached(self, text: str) -> tuple[str, ...]:
        """`findings` for one-off large texts (raw-byte windows) that must not fill the cache.

        Raw windows join unrelated cells with binary record headers, so the entropy rule (which
        judges one string at a time) does not run on them."""
        return tuple(k for k in self._apply(text, use_entropy=False)[1] if k != KIND_PATH) if text else ()

    def joined_halves(self, a: str, b: str) -> tuple[bool, bool]:
        """Which of two adjacent RAW texts (NVTX ranges of one thread) hold part of a secret that
        only their concatenation shows, whatever text surrounds each half (`tok_part1 ghp_...`).

        The first half is involved when the joined text, scrubbed, no longer starts with the first
        half scrubbed alone; the second when the first half's own scrub followed by the second
        half, scrubbed, no longer ends with the second half scrubbed alone. So a half whose finding
        is its own (`update_actor api_key=...` before `next`) keeps its finer redaction and its
        neighbour stays. Shape rules only (values, patterns, names, context, decoders): the entropy
        rule would glue a phase name (`step`) to whatever random text follows it."""
        if not a or not b:
            return (False, False)
        key = (a, b)
        hit = self._join_cache.get(key)
        if hit is None:
            # the joined text first: almost every pair has no finding at all, and then neither
            # half's own scrub is needed (one rule pass per pair instead of three)
            out, kinds = self._apply(a + b, use_entropy=False, deny=False)
            if any(k != KIND_PATH for k in kinds):
                sa = self._apply(a, use_entropy=False, deny=False)[0]
                sb = self._apply(b, use_entropy=False, deny=False)[0]
                first = not out.startswith(sa)
                second = not self._apply(sa + b, use_entropy=False, deny=False)[0].endswith(sb)
                hit = (first, second)
            else:
                hit = (False, False)
            if len(self._join_cache) >= self.CACHE_MAX:
                self._join_cache.clear()
            self._join_cache[key] = hit
        return hit

    def key_class(self, key: str) -> int:
        """0 plain, 1 secret-named, 2 host key, 3 UUID key (cached: keys repeat)."""
        c = self._key_classes.get(key)
        if c is None:
            low = key.lower()
            c = (1 if self.is_secret_name(key) or low in _AUTH_KEYS else 2 if low in self._host_keys else 3 if low in _UUID_KEYS
                 else 4 if low in self._entropy_keys else 0)
            if len(self._key_classes) < 50_000:
                self._key_classes[key] = c
        return c

    def is_hash_key(self, key: Any) -> bool:
        """A key whose value is random by design (policy `[entropy] allow_keys`)."""
        return isinstance(key, str) and key.lower() in self._entropy_keys

    def scrub_keyed(self, key: str, value: str, location: str) -> str:
        """A value whose key/variable name is known: secret-named keys lose their whole value,
        host keys get the host pseudonym, UUID keys the salted GPU hash."""
        if not value:
            return value
        c = self.key_class(key)
        if c == 0:
            return self.scrub(value, location)
        if c == 1:
            if _is_clean_value(value):
                return value
            self.counts[(KIND_NAME, location)] += 1
            return REDACTED
        if c == 2:
            return value if self.is_clean_host(value) else self.host(value, location)
        if c == 4:
            out, kinds = self._apply(value, use_entropy=False)
            for k in kinds:
                self.counts[(k, location)] += 1
            return out
        if self.policy.hash_gpu_uuids and BARE_UUID_RE.match(_strip_gpu(value)):
            return self.gpu(value, location)
        return self.scrub(value, location)

    def keyed_findings(self, key: str, value: str) -> tuple[str, ...]:
        if not value:
            return ()
        if (self.is_secret_name(key) or key.lower() in _AUTH_KEYS) and not _is_clean_value(value):
            return (KIND_NAME,)
        low = key.lower()
        if low in self._host_keys and not self.is_clean_host(value):
            return (KIND_HOST,)
        if low in _UUID_KEYS and self.policy.hash_gpu_uuids and BARE_UUID_RE.match(_strip_gpu(value)):
            return (KIND_GPU,)
        if low in self._entropy_keys:
            return tuple(k for k in self._apply(value, use_entropy=False)[1] if k != KIND_PATH)
        return self.findings(value)

    def deny_value(self, value: str, location: str) -> str:
        """An option's value met as a list item of its own (`deny.denied_flag_items`): the rules
        first (a secret stays `[REDACTED]`), then a stable pseudonym for what they left."""
        out = self.scrub(value, location)
        if out != value and (out == REDACTED or PSEUDONYM_RE.fullmatch(out)):
            return out
        self.counts[(KIND_DENIED, location)] += 1
        return self._user_map.get(value) or self._host_map.get(value) or fallback_pseudonym("p", value, self.ps.salt)

    def deny_value_findings(self, value: str) -> tuple[str, ...]:
        """What `deny_value` would count for `value` (check's view of the same item)."""
        return tuple(sorted(set(self.findings(value)) | {KIND_DENIED}))

    def host(self, name: str, location: str) -> str:
        """Pseudonym of a value known to be a host name (host_name keys, Hostname rows)."""
        if not name or PSEUDO_HOST_RE.match(name) or not self.policy.pseudonymize_hosts:
            return name
        self.counts[(KIND_HOST, location)] += 1
        short = name.split(".")[0]
        return self._host_map.get(name) or self._host_map.get(short) or fallback_pseudonym("host", name, self.ps.salt)

    def is_clean_host(self, name: str) -> bool:
        return not name or bool(PSEUDO_HOST_RE.match(name)) or not self.policy.pseudonymize_hosts

    def gpu(self, uuid: str, location: str) -> str:
        if not uuid or not self.policy.hash_gpu_uuids:
            return uuid
        u = uuid.strip()
        bare = u[4:] if u.lower().startswith(("gpu-", "mig-")) else u
        if not BARE_UUID_RE.match(bare):
            return self.scrub(uuid, location)
        self.counts[(KIND_GPU, location)] += 1
        return "gpu-" + gpu_hash(bare, self.ps.salt)

    def report_counts(self) -> dict[str, dict[str, int]]:
        """{location: {kind: n}}: JSON-safe, no values."""
        out: dict[str, dict[str, int]] = {}
        for (kind, loc), n in sorted(self.counts.items(), key=lambda kv: (kv[0][1], kv[0][0])):
            out.setdefault(loc, {})[kind] = n
        return out

    # -- the rules ----------------------------------------------------------------------------
    def _apply(self, text: str, depth: int = 0, use_entropy: bool = True,
               deny: bool = True) -> tuple[str, tuple[str, ...]]:
        """(cleaned text, kinds replaced). `depth` counts decodings already applied to `text`;
        `deny=False` skips the deny-by-default step (split-value judgement: a path or option
        joined across two ranges is no secret split in two)."""
        if not self._pre.needs_rules(text, depth):
            return text, ()
        kinds: list[str] = []
        s = text
        on = self._triggered(s)      # the keyword-driven rules that can match at all
        # 0. companions of anchor tokens (before the anchors themselves are replaced)
        if self._context and any(k.startswith("context:") for k in on):
            s = self._sub_context(s, kinds)
        # 1. known secret values (plain and encoded), wherever they are
        if self._values_rx is not None and any(f in s for f in self._value_firsts):
            s, n = self._values_rx.subn(REDACTED, s)
            kinds += [KIND_VALUE] * n
        # 2. provider token shapes
        for name, rx, group, entropy in self._patterns:
            if "pattern:" + name not in on or not hinted(name, s):
                continue
            s = sub_pattern(rx, group, entropy, s, pattern_kind(name), kinds)
        # 3. secret-named assignments, and argv values in the spellings assignments miss
        if "names" in on and self._name_hint is not None and self._name_hint.search(s):
            s = self._sub_assignments(s, kinds)
        if "names" in on or "argv" in on:
            s = replace_spans(s, [(a, b) for a, b in argv_secret_spans(s, self.is_secret_name)
                                   if not _is_clean_value(s[a:b])], KIND_NAME, kinds)
        # 3b. e-mail addresses, host names and addresses (pseudonymised; kept hosts left alone)
        if ("." in s or ":" in s) and NETWORK_HINT.search(s):
            s = self._sub_network(s, kinds)
        # 4. personal data
        if "GPU-" in s or "MIG-" in s or "gpu-" in s or "mig-" in s:
            s = self._sub_gpu(s, kinds)
        if self._gpu_bare_rx is not None:
            s, n = self._gpu_bare_rx.subn(lambda m: "gpu-" + gpu_hash(m.group(0), self.ps.salt), s)
            kinds += [KIND_GPU] * n
        if "/" in s or "\\" in s:
            s = self._sub_home(s, kinds)
        if self._comp_rx is not None and ("/" in s or "\\" in s):
            s, n = self._comp_rx.subn(lambda m: self._user_map[m.group(1)], s)
            kinds += [KIND_USER] * n
        if self._host_ctx_rx is not None:
            s, n = self._host_ctx_rx.subn(lambda m: self._host_map[m.group(1)], s)
            kinds += [KIND_HOST] * n
        if self._free_rx is not None:
            s = self._sub_free_names(s, kinds)
        if self._file_names and "." in s:
            s = self._sub_file_names(s, kinds)
        if self.policy.trim_env_prefixes and "-packages" in s:
            s2 = _ENV_PREFIX.sub(r"\g<pk>", s)
            if s2 != s:
                kinds.append(KIND_PATH)
                s = s2
        # 5. encoded runs whose decoded form holds anything above
        if self.policy.decode_enabled and depth < self.policy.decode_max_depth and len(s) >= 8:
            s = self._sub_encoded(s, depth, kinds, use_entropy)
        # 5b. what has a shape but no fixed place: URLs (deny by default: after the decoders, which
        # name what an encoded query value hides), hosts by shape, MAC addresses, short GPU ids,
        # `~user` paths (shapes.py)
        if SHAPES_HINT.search(s):
            s = self._sub_shapes(s, kinds)
        # 5c. deny by default: path components outside known roots and packages, option values
        # outside the vocabulary (deny.py) -> stable pseudonyms
        if deny and DENY_HINT.search(s):
            s = self._sub_denied(s, kinds)
        # 6. random-looking runs no rule explained
        if use_entropy and self._entropy is not None and len(s) >= self.policy.entropy_min_length:
            s = replace_spans(s, self._entropy.spans(s), KIND_ENTROPY, kinds)
        return s, tuple(kinds)

    def _sub_context(self, s: str, kinds: list[str]) -> str:
        """Context rules: an anchor token (AWS key id, OAuth client id) redacts its companions."""
        for rule in self._context:
            if not any(h in s for h in CONTEXT_HINTS.get(rule.name, ())):
                continue
            s = replace_spans(s, companion_spans(rule, s), context_kind(rule.name), kinds)
        return s

    def _sub_encoded(self, s: str, depth: int, kinds: list[str], use_entropy: bool) -> str:
        """Decode-then-scan: a run whose URL/base64/hex-decoded form holds a finding is redacted whole."""
        pol = self.policy
        spans: list[tuple[int, int]] = []
        codecs: list[str] = []
        for run in encoded_runs(s, pol.decode_min_base64, pol.decode_min_hex, pol.decode_min_printable, self._allow_rx):
            if spans and spans[-1] == (run.start, run.end):
                continue
            key = (run.decoded, depth, use_entropy)
            hit = self._decoded_cache.get(key)
            if hit is None:       # decoded forms repeat across strings (the same run in many names)
                hit = any(k != KIND_PATH for k in self._apply(run.decoded, depth + 1, use_entropy)[1])
                if len(self._decoded_cache) >= self.CACHE_MAX:
                    self._decoded_cache.clear()
                self._decoded_cache[key] = hit
            if hit:
                spans.append((run.start, run.end))
                codecs.append(run.codec)
        if not spans:
            return s
        out: list[str] = []
        last = 0
        for (a, b), codec in zip(spans, codecs):
            if a < last:
                continue
            out.append(s[last:a])
            out.append(REDACTED)
            last = b
            kinds.append(encoded_kind(codec))
        out.append(s[last:])
        return "".join(out)

    def _sub_assignments(self, s: str, kinds: list[str]) -> str:
        spans: list[tuple[int, int]] = []
        cpp = "::" in s
        for name, value, a, b in iter_assignments(s):
            if not self.is_secret_name(name):
                continue
            if (cpp or _CPP_TYPE_RE.fullmatch(value.strip())) and _cpp_template_arg(s, s.rfind(name, 0, a)):
                continue
            if _is_clean_value(value):
                continue
            spans.append((a, b))
        return replace_spans(s, spans, KIND_NAME, kinds)

    def _sub_gpu(self, s: str, kinds: list[str]) -> str:
        if not self.policy.hash_gpu_uuids:
            return s

        def rep(m: re.Match[str]) -> str:
            kinds.append(KIND_GPU)
            return "GPU-" + gpu_hash(m.group("u"), self.ps.salt)

        return GPU_UUID_RE.sub(rep, s)

    def _sub_home(self, s: str, kinds: list[str]) -> str:
        """The person in a cluster path (`/home/<u>`, `/fsx/<u>`, `/lustre/<group>/<u>`) becomes
        their pseudonym, whoever they are (personal.USER_ROOT_RE)."""
        if not self.policy.pseudonymize_users:
            return s

        def rep(m: re.Match[str]) -> str:
            rest = m.group("rest")
            for a, b in user_components(rest):
                user = rest[a:b]
                if user in self._keep_users or PSEUDO_USER_RE.match(user):
                    return m.group(0)
                kinds.append(KIND_HOME)
                pseudo = self._user_map.get(user) or fallback_pseudonym("user", user, self.ps.salt)
                off = m.start("rest") - m.start(0)
                return m.group(0)[: off + a] + pseudo + m.group(0)[off + b:]
            return m.group(0)

        return USER_ROOT_RE.sub(rep, s)

    def _sub_network(self, s: str, kinds: list[str]) -> str:
        """E-mails -> [REDACTED]; host names and addresses -> the bundle's host pseudonym (numbered
        when the identity pass saw the host, else a salted hash: stable across the bundle)."""
        spans = sorted(network_spans(s))
        if not spans:
            return s
        out: list[str] = []
        last = 0
        for a, b, kind in spans:
            if a < last:
                continue
            out.append(s[last:a])
            if kind == KIND_EMAIL:
                out.append(REDACTED)
                kinds.append(KIND_EMAIL)
            else:
                name = s[a:b]
                if not self.policy.pseudonymize_hosts or PSEUDO_HOST_RE.match(name):
                    out.append(name)
                else:
                    out.append(self._host_pseudonym(name))
                    kinds.append(KIND_HOST)
            last = b
        out.append(s[last:])
        return "".join(out)

    def _host_pseudonym(self, name: str) -> str:
        return (self._host_map.get(name) or self._host_map.get(name.split(".")[0] if not name[0].isdigit() else name)
                or fallback_pseudonym("host", name.lower(), self.ps.salt))

    def _sub_shapes(self, s: str, kinds: list[str]) -> str:
        """URL parts, hosts by shape, MAC addresses, short GPU ids and `~user` -> pseudonyms."""
        salt = self.ps.salt
        reps: list[tuple[int, int, str, str]] = []
        if "://" in s:
            for a, b, what in url_parts(s):
                part = s[a:b]
                if what == "userinfo" or what == "value":
                    reps.append((a, b, REDACTED, KIND_URL))
                elif what == "host":
                    if self.policy.pseudonymize_hosts:
                        reps.append((a, b, self._host_pseudonym(part), KIND_HOST))
                else:
                    reps.append((a, b, self._user_map.get(part) or self._host_map.get(part)
                                 or fallback_pseudonym("p", part, salt), KIND_URL))
        if self.policy.pseudonymize_hosts:
            reps += [(a, b, self._host_pseudonym(s[a:b]), KIND_HOST) for a, b in host_spans(s)]
        reps += [(a, b, fallback_pseudonym("mac", s[a:b].lower().replace("-", ":"), salt), KIND_HARDWARE)
                 for a, b in mac_spans(s)]
        if self.policy.hash_gpu_uuids:
            reps += [(m.start(), m.end(), m.group("p") + "-" + gpu_hash(m.group("u"), salt), KIND_GPU)
                     for m in GPU_SHORT_RE.finditer(s)]
        if self.policy.pseudonymize_users:
            for a, b in tilde_users(s):
                user = s[a:b]
                if user not in self._keep_users and not PSEUDO_USER_RE.match(user):
                    reps.append((a, b, self._user_map.get(user) or fallback_pseudonym("user", user, salt), KIND_HOME))
        if not reps:
            return s
        out: list[str] = []
        last = 0
        for a, b, new, kind in sorted(reps):
            if a < last:
                continue
            out.append(s[last:a])
            out.append(new)
            kinds.append(kind)
            last = b
        out.append(s[last:])
        return "".join(out)

    def _sub_denied(self, s: str, kinds: list[str]) -> str:
        """Path parts and option values no allowlist keeps -> `p-<letters>` (known users and hosts
        keep their numbered pseudonym), so the same part reads the same everywhere in a bundle."""
        spans = deny_spans(s)
        if not spans:
            return s
        out: list[str] = []
        last = 0
        for a, b in spans:
            part = s[a:b]
            out.append(s[last:a])
            out.append(self._user_map.get(part) or self._host_map.get(part) or fallback_pseudonym("p", part, self.ps.salt))
            kinds.append(KIND_DENIED)
            last = b
        out.append(s[last:])
        return "".join(out)

    def _sub_file_names(self, s: str, kinds: list[str]) -> str:
        """A known user or host inside a file name (`trace_<user>_rank0.json.gz`, the names of the
        inputs): in a file name `_` separates words, so the name is replaced there, as it is not in
        a kernel name (`grace_hopper_kernel`)."""
        def name(m: re.Match[str]) -> str:
            kinds.append(KIND_USER)
            return self._file_names[m.group(1)]

        return _FILE_NAME_RE.sub(lambda m: self._file_rx.sub(name, m.group(0)), s)  # type: ignore[union-attr]

    def _sub_free_names(self, s: str, kinds: list[str]) -> str:
        def rep(m: re.Match[str]) -> str:
            name = m.group(1)
            if name in self._host_map:
                kinds.append(KIND_HOST)
                return self._host_map[name]
            kinds.append(KIND_USER)
            return self._user_map[name]

        return self._free_rx.sub(rep, s)  # type: ignore[union-attr]


_ENV_PREFIX = re.compile(r"(?<![A-Za-z0-9_.\-])(?:[A-Za-z]:)?(?:[/\\][^/\\\s\"'\x00:;,()\[\]]*)+?[/\\](?P<pk>(?:site|dist)-packages[/\\])")


def _cpp_template_arg(s: str, name_start: int) -> bool:
    """`KeyT=float` inside a C++ signature (`Kernel<KeyT=float>`) is a template argument, not a secret."""
    i = name_start - 1
    while i >= 0 and s[i] == " ":
        i -= 1
    return i >= 0 and (s[i] in "<,(" or s.endswith("with", 0, i + 1))


# The value of a template argument that is code (`Kernel<KeyT=float, ValueT=int>` without a `::`):
# a built-in or CUDA type, a number or a boolean, never a secret.
_CPP_TYPE_RE = re.compile(r"(?:const\s+)?(?:(?:un)?signed\s+)?(?:float|double|int|bool|half|char|long|short|void|size_t|"
                          r"u?int(?:8|16|32|64)_t|__half|__nv_bfloat16|__nv_fp8_e4m3|__nv_fp8_e5m2|bfloat16|float16|"
                          r"BFloat16|Half|c10::\w+|at::\w+)\s*[*&]*|(?:un)?signed|[+\-]?\d+[uUlL]*|true|false")
_UUID_KEYS = frozenset({"uuid", "gpu_uuid", "gpuuuid", "device_uuid"})
# A file name of a profile input or output (no blank, no separator), and what separates its words.
_FILE_NAME_RE = re.compile(r"(?<![^\s/\\\"'=:,;(\[])[A-Za-z0-9_.+@\-]+\.(?:json|gz|sqlite|nsys-rep|qdrep|qdstrm|pickle|pkl"
                           r"|parquet|html|yaml|log|txt|pt|xz|zst|tar)(?![A-Za-z0-9_\-])")
# HTTP headers whose whole value is a credential (`{"Authorization": "Basic <base64>"}` in a nested
# args dict): the value goes whatever its length, as under a secret-named key.
_AUTH_KEYS = frozenset({"authorization", "proxy-authorization", "cookie", "set-cookie", "x-api-key",
                        "x-auth-token", "www-authenticate"})


def _strip_gpu(value: str) -> str:
    v = value.strip()
    return v[4:] if v.lower().startswith(("gpu-", "mig-")) else v


def _is_clean_value(value: str) -> bool:
    """Already-scrubbed or harmless values next to a secret name: [REDACTED], empty, placeholders."""
    v = unquote(value.strip())
    if not v or not v.replace(REDACTED, "").strip(" ,;:"):
        return True
    return is_placeholder(v)




class LocationNames:
    """Interned `parent.key` location strings for scrub reports and findings.

    Why: walking a trace or snapshot asks for the same few locations millions of times; building the
    string once keeps the walk fast, and the cap keeps memory flat on adversarial inputs.
    """

    def __init__(self, cap: int = 50_000) -> None:
        self.cap = cap
        self._names: dict[tuple[str, str], str] = {}

    def child(self, parent: str, key: str) -> str:
        k = (parent, key)
        v = self._names.get(k)
        if v is None:
            v = f"{parent}.{key}"
            if len(self._names) < self.cap:
                self._names[k] = v
        return v


__all__ = ["Scrubber", "LocationNames"]
