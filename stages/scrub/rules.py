"""The detection rules of scrub and check: kinds, secret names, placeholders, provider token
shapes (each with the strings it must catch and the look-alikes it must leave alone), environment
blocks and assignments, and the shapes of personal data (home paths, GPU UUIDs, scrub's own
pseudonyms).

Why a module of rules apart from the Scrubber: the identity pass (identities.py), the Scrubber
(scrubber.py) and check (check.py) all judge with these same rules, so what one finds the others
find; the policy (policy.py) only says which of them run and with what thresholds.
"""
from __future__ import annotations

import re
from typing import Any, Callable, Iterable, Sequence

from ..core.errors import BadInputError
from .policy import Policy

REDACTED = "[REDACTED]"

# Kinds of findings/redactions. Reports count them per location; values are never recorded.
KIND_VALUE = "secret_value"
KIND_NAME = "secret_by_name"
KIND_HOST = "host_name"
KIND_USER = "user_name"
KIND_HOME = "home_path"
KIND_GPU = "gpu_uuid"
KIND_PATH = "env_path"          # cosmetic (site-packages prefix), never a finding
KIND_UNKNOWN = "unknown_metadata"
KIND_ENTROPY = "entropy"                 # a random-looking run no other rule explained
KIND_SPLIT = "split_value"               # a secret written across two adjacent NVTX ranges
KIND_EMAIL = "email"                     # an e-mail address (redacted whole)
KIND_URL = "url_part"                    # a URL's private host, path component or query value
KIND_DENIED = "denied_text"               # a path part or option value outside the allowlist (deny.py)
KIND_HARDWARE = "hardware_id"           # a MAC address


def encoded_kind(codec: str) -> str:
    return f"encoded:{codec}"


def context_kind(rule: str) -> str:
    return f"context:{rule}"


def pattern_kind(rule: str) -> str:
    return f"pattern:{rule}"


# --------------------------------------------------------------------------------------------
# Names
# --------------------------------------------------------------------------------------------

_CAMEL = re.compile(r"[A-Z]+(?![a-z])|[A-Z]?[a-z]+|\d+")


def name_words(name: str) -> list[str]:
    """Split a variable/key name into lower-case words: `hfApiToken` -> hf, api, token."""
    words: list[str] = []
    for part in re.split(r"[^A-Za-z0-9]+", name):
        if not part:
            continue
        if part.isupper() or part.islower() or part.isdigit():
            words.append(part.lower())
        else:
            words.extend(w.lower() for w in _CAMEL.findall(part))
    return words


class NameRule:
    """Decides whether a variable or key name is secret (cached: the same names recur)."""

    def __init__(self, policy: Policy) -> None:
        self.words = frozenset(w.lower() for w in policy.name_words)
        self.suffixes = tuple(s.lower() for s in policy.name_suffixes)
        self.allow = frozenset(a.upper() for a in policy.allow_names)
        self._cache: dict[str, bool] = {}
        # Every word `_decide` can match is a substring of the lower-cased name, so one C scan
        # for any of them rules out almost every name before it is split into words.
        needles = sorted({n for n in self.words | set(self.suffixes) if n}, key=len, reverse=True)
        self._any = re.compile("|".join(map(re.escape, needles))) if needles else None

    def __call__(self, name: str) -> bool:
        hit = self._cache.get(name)
        if hit is None:
            hit = self._decide(name)
            if len(self._cache) < 100_000:
                self._cache[name] = hit
        return hit

    def _decide(self, name: str) -> bool:
        bare = name.strip().strip("\"'").lstrip("-")
        if not bare or self._any is None or not self._any.search(bare.lower()) or bare.upper() in self.allow:
            return False
        words = name_words(bare)
        if len(words) > 1 and words[-1] in _WHERE_WORDS:
            return False        # token_uri, key_path, secret_file: where a secret is, not the secret
        for w in words:
            if w in self.words or (len(w) > 3 and w.endswith(self.suffixes)):
                return True
        return False


# A name ending with one of these holds a location or a size, never the secret itself; its value
# still goes through every free-text rule (a URL with credentials is caught by the URL rule).
_WHERE_WORDS = frozenset({"uri", "url", "urls", "endpoint", "path", "paths", "file", "files", "dir", "dirs",
                          "type", "types", "len", "length", "size", "count", "num", "limit", "ids"})


# --------------------------------------------------------------------------------------------
# Value checks
# --------------------------------------------------------------------------------------------

PLACEHOLDER_RE = re.compile(
    r"""^(?:\[REDACTED\]|<[^<>]*>|\$\{?[A-Za-z_][A-Za-z0-9_]*\}?|\*+|x+|X+|\.+|-+|_+|0+|
         (?:your|my|the)[-_ ]?[a-z_ -]*(?:token|key|secret|password|passwd|pass|pwd|here|value|id)[a-z_ -]*|
         changeme|placeholder|example|redacted|dummy|none|null)$""",
    re.X | re.I,
)


def is_placeholder(value: str) -> bool:
    """Values that stand for a secret without being one (`hf_xxxx`, `<token>`, `$HF_TOKEN`)."""
    v = value.strip().strip("\"'")
    if not v or PLACEHOLDER_RE.match(v):
        return True
    # A token prefix followed by one repeated character: hf_xxxxxxxx, sk-****
    m = re.match(r"^[A-Za-z]{1,12}[_-](.+)$", v)
    body = m.group(1) if m else v
    return len(set(body)) <= 2 and len(body) >= 3


def low_entropy(body: str) -> bool:
    """True for shapes real tokens never have: fewer than 6 distinct characters."""
    return len(set(body)) < 6


# --------------------------------------------------------------------------------------------
# Pattern rules (provider token shapes)
# --------------------------------------------------------------------------------------------

LEFT_EDGE = r"(?<![A-Za-z0-9])"      # left boundary that lets `_`/`-` precede (MY_hf_... still matches)
RIGHT_EDGE = r"(?![A-Za-z0-9])"
# Where a provider token may start: after any non-alphanumeric character, and also right after a
# URL escape (`?token%3Dhf_...`), a C/JSON escape (`\nhf_`, `\x3dhf_`, `\u003dhf_`) whose last
# character is alphanumeric. `\b` would miss all of those (gitleaks anchors the same way).
_ESC = r"(?<=%[0-9A-Fa-f]{2})|(?<=\\[nrt])|(?<=\\x[0-9A-Fa-f]{2})|(?<=\\u[0-9A-Fa-f]{4})"
_T = r"(?:(?<![A-Za-z0-9])|" + _ESC + ")"

# name -> (regex, group to redact (0 = whole match), needs-entropy-check)
PATTERN_RULES: dict[str, tuple[str, int, bool]] = {
    "private_key": (r"-----BEGIN[A-Z0-9 ]*PRIVATE KEY(?: BLOCK)?-----(?:.|\n)*?(?:-----END[A-Z0-9 ]*PRIVATE KEY(?: BLOCK)?-----|\Z)", 0, False),
    "hf": (_T + r"(?:hf_|api_org_)[A-Za-z0-9]{30,}" + RIGHT_EDGE, 0, True),
    "anthropic": (_T + r"sk-ant-(?:api|admin|sid)\d{0,3}-[A-Za-z0-9_\-]{20,}", 0, True),
    "openai": (_T + r"sk-(?:proj-|svcacct-|admin-|None-)?[A-Za-z0-9_\-]{20,}", 0, True),
    "github": (_T + r"(?:gh[pousr]_[A-Za-z0-9]{30,}|github_pat_[A-Za-z0-9_]{22,})" + RIGHT_EDGE, 0, True),
    "gitlab": (_T + r"glpat-[A-Za-z0-9_\-]{20,}", 0, True),
    "aws_key_id": (r"(?:(?<![A-Z0-9])|" + _ESC + r")(?:AKIA|ASIA|ABIA|ACCA|AIDA|AROA)[A-Z0-9]{16}(?![A-Z0-9])", 0, True),
    "aws_secret": (r"(?i)aws.{0,24}?(?:secret|sk).{0,16}?[\"'=:\s]+([A-Za-z0-9/+]{40})(?![A-Za-z0-9/+])", 1, True),
    "slack": (_T + r"(?:xox[abposre]-[A-Za-z0-9\-]{10,}|https://hooks\.slack\.com/services/[A-Za-z0-9/_\-]+)", 0, False),
    "wandb": (r"(?i)wandb.{0,48}?(?<![0-9a-f])((?:local-)?[0-9a-f]{40})(?![0-9a-f])", 1, True),
    "jwt": (_T + r"eyJ[A-Za-z0-9_\-]{8,}\.eyJ[A-Za-z0-9_\-]{8,}\.[A-Za-z0-9_\-]{8,}", 0, False),
    "google_api_key": (_T + r"AIza[0-9A-Za-z_\-]{35}", 0, True),
    "stripe": (_T + r"(?:sk|rk|pk)_(?:live|test)_[A-Za-z0-9]{16,}", 0, True),
    "npm": (_T + r"npm_[A-Za-z0-9]{36}" + RIGHT_EDGE, 0, True),
    "url_credentials": (r"(?i)\b[a-z][a-z0-9+.\-]{1,20}://([^/\s:@\"'\x00]{0,128}:[^/\s\"'\x00]{1,256})@(?=[A-Za-z0-9\[])", 1, False),
    "bearer": (r"(?i)\b(?:bearer|authorization:\s*(?:basic|token|digest))\s+([A-Za-z0-9._~+/=\-]{12,})", 1, False),
}

# Every rule ships the strings it must catch and the look-alikes it must leave alone (FAKE values);
# `verify_pattern_examples` checks them when the first Scrubber is built, and the tests run it too.
PATTERN_EXAMPLES: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {
    "private_key": (("-----BEGIN RSA PRIVATE KEY-----\nMIIEowIBAAKCAQEA\n-----END RSA PRIVATE KEY-----",),
                    ("-----BEGIN PUBLIC KEY-----", "private_key_path=/etc/k.pem")),
    "hf": (("hf_kQ7ZpLm2XvB9tR4sWc8YnD1eUfA6gHjK3o", "GET /m?token%3Dhf_kQ7ZpLm2XvB9tR4sWc8YnD1eUfA6gHjK3o&x=1",
            "log\\nhf_kQ7ZpLm2XvB9tR4sWc8YnD1eUfA6gHjK3o", "{\\u0022t\\u0022:\\u0022hf_kQ7ZpLm2XvB9tR4sWc8YnD1eUfA6gHjK3o",
            "MY_hf_kQ7ZpLm2XvB9tR4sWc8YnD1eUfA6gHjK3o"),
           ("hf_xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx", "shf_kQ7ZpLm2XvB9tR4sWc8YnD1eUfA6gHjK3o", "hf_hub_download")),
    "anthropic": (("sk-ant-api03-Zx9Yw8Vu7Ts6Rq5Po4Nm3Lk2Ji1Hg0Fe", "key%3Dsk-ant-api03-Zx9Yw8Vu7Ts6Rq5Po4Nm3Lk2Ji1Hg0Fe"),
                  ("sk-ant-api03-xxxxxxxxxxxxxxxxxxxxxxxx", "task-ant-colony")),
    "openai": (("sk-proj-Ab3dEf6hIj9kLm2nOp5qRs8tUv1wXy4z", "q=1%26k%3Dsk-proj-Ab3dEf6hIj9kLm2nOp5qRs8tUv1wXy4z"),
               ("risk-assessment-model-v2", "sk-xxxxxxxxxxxxxxxxxxxxxxxx", "desk-Ab3dEf6hIj9kLm2nOp5qRs8tUv1")),
    "github": (("ghp_Q1w2E3r4T5y6U7i8O9p0A1s2D3f4G5h6J7k8", "https://x%40ghp_Q1w2E3r4T5y6U7i8O9p0A1s2D3f4G5h6J7k8"),
               ("ghp_xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx", "laghp_Q1w2E3r4T5y6U7i8O9p0A1s2D3f4G5h6J7k8")),
    "gitlab": (("glpat-Xy7Zq2Wv9Ut4Rs6Po3Nm", "t%3Dglpat-Xy7Zq2Wv9Ut4Rs6Po3Nm"), ("glpat-xxxxxxxxxxxxxxxxxxxx",)),
    "aws_key_id": (("AKIAZ7Q3XK4M9P2L8N5R", "id%3DAKIAZ7Q3XK4M9P2L8N5R", "keyAKIAZ7Q3XK4M9P2L8N5R"),
                   ("AKIAXXXXXXXXXXXXXXXX", "XAKIAZ7Q3XK4M9P2L8N5R", "AKIAZ7Q3XK4M9P2L8N5R1")),
    "aws_secret": (("aws_secret_access_key = wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY",),
                   ("aws_region = us-east-1", "aws_secret_access_key = xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx")),
    "slack": (("xoxb-123456789012-abcdefGHIJKL", "h%3Dxoxb-123456789012-abcdefGHIJKL"), ("xox-tools",)),
    "wandb": (("wandb login 5f0c3e9a1b7d24e8c6a90f1b3d5e7a9c2b4d6f80",),
              ("commit 5f0c3e9a1b7d24e8c6a90f1b3d5e7a9c2b4d6f80", "wandb run 2")),
    "jwt": (("eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.dozjgNryP4J3jVmNHl0w5N_XgL0n3I9PlFUP0THsR8U",),
            ("eyJhbGciOiJIUzI1NiJ9",)),
    "google_api_key": (("AIzaSyD3x9Q7pL2mK8vN4bR6tY1uW5eI0oA7sF3", "key%3DAIzaSyD3x9Q7pL2mK8vN4bR6tY1uW5eI0oA7sF3"),
                       ("AIzaxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx",)),
    "stripe": (("sk_live_4eC39HqLyjWDarjtT1zdp7dc", "k%3Dsk_live_4eC39HqLyjWDarjtT1zdp7dc"), ("sk_live_xxxxxxxxxxxxxxxxxxxx", "disk_test_run")),
    "npm": (("npm_Ab3dEf6hIj9kLm2nOp5qRs8tUv1wXy4zAB12", "t%3Dnpm_Ab3dEf6hIj9kLm2nOp5qRs8tUv1wXy4zAB12"), ("npm_install_cache_dir",)),
    "url_credentials": (("https://bob:hunter22@example.com/x", "git+ssh://u:p4ss@host/repo", "redis://:s3cretpw@cache:6379/0",
                         "postgres://bob:p@ss@w0rd@db.example.com/x"),
                        ("https://example.com/a:b@c", "user@host:/path")),
    "bearer": (("Authorization: Bearer abcdefghijklmnop123", "authorization: basic dXNlcjpodW50ZXIyMg=="),
               ("bearer of bad news", "Authorization: Bearer <token>")),
}

# Cheap literal pre-checks per rule: most strings contain none, so most regexes never run.
PATTERN_HINTS: dict[str, tuple[str, ...]] = {
    "private_key": ("PRIVATE KEY",),
    "hf": ("hf_", "api_org_"),
    "anthropic": ("sk-ant-",),
    "openai": ("sk-",),
    "github": ("ghp_", "gho_", "ghu_", "ghs_", "ghr_", "github_pat_"),
    "gitlab": ("glpat-",),
    "aws_key_id": ("AKIA", "ASIA", "ABIA", "ACCA", "AIDA", "AROA"),
    "slack": ("xox", "hooks.slack.com"),
    "jwt": ("eyJ",),
    "google_api_key": ("AIza",),
    "stripe": ("_live_", "_test_"),
    "npm": ("npm_",),
    "url_credentials": ("://",),
}
# Rules whose hints are case-insensitive words.
PATTERN_IHINTS: dict[str, tuple[str, ...]] = {
    "aws_secret": ("aws",),
    "wandb": ("wandb",),
    "bearer": ("bearer", "authorization"),
}


# --------------------------------------------------------------------------------------------
# Environment blocks and assignments
# --------------------------------------------------------------------------------------------

_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_.\-]*$")
_ENV_PIECE = re.compile(r"^([A-Za-z_][A-Za-z0-9_.\-]*)=")


def unquote(value: str) -> str:
    v = value
    if len(v) >= 2 and v[0] == v[-1] and v[0] in "\"'":
        v = v[1:-1]
    return v


def parse_env_block(text: str) -> list[tuple[str, str]]:
    """`NAME=value` pairs of an environment block in any separator style nsys uses.

    NUL-separated (nsys 2022 `DeviceEnvironment`, env blocks in StringIds), `;`-separated (nsys
    2025 `DeviceEnvironment`), newline-separated, or one `NAME="value"` (META_DATA_CAPTURE). A
    piece that does not start with `NAME=` continues the previous value (LS_COLORS holds `;`).
    """
    if "=" not in text:
        return []
    sep: str | None
    if "\x00" in text:
        sep = "\x00"
    elif len(re.findall(r"(?:^|;)[A-Za-z_][A-Za-z0-9_]*=", text)) >= 2:
        sep = ";"
    elif "\n" in text:
        sep = "\n"
    else:
        sep = None
    pieces = text.split(sep) if sep else [text]
    pairs: list[list[str]] = []
    for piece in pieces:
        m = _ENV_PIECE.match(piece)
        if m:
            pairs.append([m.group(1), piece[m.end():]])
        elif pairs and sep is not None and piece:
            pairs[-1][1] += sep + piece
    return [(n, unquote(v)) for n, v in pairs]


def looks_like_env_block(text: str) -> bool:
    return len(text) > 20 and ("\x00" in text or ";" in text or "\n" in text) and len(
        re.findall(r"(?:^|[\x00;\n])[A-Za-z_][A-Za-z0-9_]*=", text)) >= 3


# Assignment shapes inside free text. The value group stops at separators that cannot be part of
# an unquoted value in env blocks, command lines, URLs and logs.
_VAL_UNQUOTED = r"[^\s\x00;,&\"'<>(){}\[\]|`]+"
_ASSIGN = re.compile(
    r"(?P<name>(?<![A-Za-z0-9_.\-:])-{0,2}[A-Za-z_][A-Za-z0-9_.\-]{0,80})"
    r"(?:"
    r"(?P<eq>\s?=\s?)|"                                   # NAME=value, --name=value
    r"(?P<col>(?<!:):(?![:/])[ \t]?)|"                    # name: value (not C++ ::, not URL)
    r"(?P<jq>\"[ \t]*:[ \t]*)(?=\")"                      # "name": "value" (name quoted, see below)
    r")"
    r"(?:\"(?P<dq>(?:[^\"\\\x00]|\\.){1,4096})\"|'(?P<sq>[^'\x00]{1,4096})'|(?P<bare>" + _VAL_UNQUOTED + r"))"
)
_FLAG = re.compile(r"(?<![A-Za-z0-9_\-])(?P<name>--?[A-Za-z][A-Za-z0-9_.\-]{1,60})[ \t]+(?P<bare>[^\s\x00\-\"'][^\s\x00\"']*)")


def iter_assignments(text: str) -> Iterable[tuple[str, str, int, int]]:
    """(name, value, value_start, value_end) for assignment-shaped parts of `text`."""
    for m in _ASSIGN.finditer(text):
        for g in ("dq", "sq", "bare"):
            if m.group(g) is not None:
                name = m.group("name")
                if m.group("jq") is not None:
                    # JSON: the name must itself be quoted: ..."api_key": "v"
                    start = m.start("name")
                    if start == 0 or text[start - 1] != '"':
                        break
                yield name, m.group(g), m.start(g), m.end(g)
                break
    for m in _FLAG.finditer(text):
        yield m.group("name"), m.group("bare"), m.start("bare"), m.end("bare")



# --------------------------------------------------------------------------------------------
# Shapes of personal data
# --------------------------------------------------------------------------------------------

HOME_RE = re.compile(r"(?:/home|/Users|/export/home|\\\\Users|\\Users)[/\\]{1,2}(?P<u>[A-Za-z0-9_][A-Za-z0-9_.\-]{0,63})")
GPU_UUID_RE = re.compile(r"(?i)(?<![0-9a-z])(?P<p>GPU|MIG)-(?:GPU-)?(?P<u>[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12})(?![0-9a-f])")
BARE_UUID_RE = re.compile(r"(?i)^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$")
PSEUDO_USER_RE = re.compile(r"^user-(?:\d+|[0-9a-f]{8}|[g-z]{8})$")
# host-N / host-<hash> (scrub's pseudonyms) and the 12-hex salted hash of manifest `host` fields
PSEUDO_HOST_RE = re.compile(r"^(?:host-(?:\d+|[0-9a-f]{8}|[g-z]{8})|[0-9a-f]{12})$")






def token_body(val: str) -> str:
    m = re.match(r"^(?:[A-Za-z][A-Za-z0-9]{0,11}[_\-]){1,3}(.+)$", val)
    return m.group(1) if m else val


def sub_pattern(rx: re.Pattern[str], group: int, entropy: bool, s: str, kind: str, kinds: list[str]) -> str:
    """Replace every match of one pattern rule (its `group`) unless the value is a placeholder."""
    spans = []
    for m in rx.finditer(s):
        val = m.group(group)
        if not val or val == REDACTED or (entropy and low_entropy(token_body(val))) or is_placeholder(val):
            continue
        spans.append(m.span(group))
    return replace_spans(s, spans, kind, kinds)


def replace_spans(s: str, spans: list[tuple[int, int]], kind: str, kinds: list[str]) -> str:
    """`s` with each span replaced by REDACTED, one `kind` per span (a span overlapping an earlier
    one is skipped): the one replacer of every rule."""
    if not spans:
        return s
    out: list[str] = []
    last = 0
    for a, b in sorted(spans):
        if a < last:
            continue
        out.append(s[last:a])
        out.append(REDACTED)
        last = b
        kinds.append(kind)
    out.append(s[last:])
    return "".join(out)


def verify_pattern_examples() -> list[str]:
    """Every rule against its own examples: each true positive redacted, each look-alike kept."""
    problems = []
    for name, (rx, group, entropy) in PATTERN_RULES.items():
        comp = re.compile(rx)
        tps, fps = PATTERN_EXAMPLES.get(name, ((), ()))
        if not tps:
            problems.append(f"pattern {name!r} has no true-positive examples")
        for ex in tps:
            kinds: list[str] = []
            if not hinted(name, ex) or sub_pattern(comp, group, entropy, ex, name, kinds) == ex:
                problems.append(f"pattern {name!r} misses its example {ex!r}")
        for ex in fps:
            kinds = []
            if hinted(name, ex) and sub_pattern(comp, group, entropy, ex, name, kinds) != ex:
                problems.append(f"pattern {name!r} flags its look-alike {ex!r}")
    return problems


_EXAMPLES_CHECKED: list[bool] = []


def _check_examples_once() -> None:
    if not _EXAMPLES_CHECKED:
        problems = verify_pattern_examples()
        if problems:
            raise BadInputError("stages/scrub/rules.py", problems[0])
        _EXAMPLES_CHECKED.append(True)


def compile_patterns(policy: Policy) -> list[tuple[str, re.Pattern[str], int, bool]]:
    _check_examples_once()
    out = []
    for name in policy.patterns:
        if name not in PATTERN_RULES:
            raise BadInputError(policy.source, f"unknown pattern rule {name!r} (known: {', '.join(PATTERN_RULES)})")
        rx, group, entropy = PATTERN_RULES[name]
        out.append((name, re.compile(rx), group, entropy))
    for name, rx in policy.custom_patterns:
        out.append((name, re.compile(rx), 0, False))
    return out


def any_hint_gate(patterns: Sequence[tuple[str, Any, Any, bool]]) -> Callable[[str], bool] | None:
    """One C scan that is true when any pattern's hint occurs in a text (`hinted` of every rule
    at once): most strings hold none, and then no rule needs to run. None when some rule has no
    hint (custom rules always run)."""
    plain: set[str] = set()
    folded: set[str] = set()
    for name, *_ in patterns:
        if name in PATTERN_HINTS:
            plain.update(PATTERN_HINTS[name])
        elif name in PATTERN_IHINTS:
            folded.update(h.lower() for h in PATTERN_IHINTS[name])
        else:
            return None
    def either(hints: set[str]) -> Any:
        return re.compile("|".join(re.escape(h) for h in sorted(hints, key=len, reverse=True))) if hints else None

    rx_plain, rx_folded = either(plain), either(folded)     # the folded ones on text.lower(), as hinted

    def gate(text: str) -> bool:
        return bool((rx_plain is not None and rx_plain.search(text))
                    or (rx_folded is not None and rx_folded.search(text.lower())))
    return gate


def hinted(rule: str, text: str) -> bool:
    hints = PATTERN_HINTS.get(rule)
    if hints is not None:
        return any(h in text for h in hints)
    ihints = PATTERN_IHINTS.get(rule)
    if ihints is not None:
        low = text.lower()
        return any(h in low for h in ihints)
    return True  # custom rules: always run
