"""What counts as secret or personal, and how to replace it: the detection rules of scrub and check.

Why one module: `verlprof scrub` rewrites what these rules find and `verlprof check` reports what
they find, through the same code path (`Scrubber.scrub` and `Scrubber.findings` share `_apply`). So
whatever scrub leaves behind, check agrees is clean, and anything check flags, scrub would remove.

Three axes of detection, all driven by a `Policy` (stages/scrub_policy.toml, overridable):
  1. by value: values of secret-named variables found in the artifacts' own environment blocks (and
     in the current environment) are replaced wherever they occur, also URL-, hex- and
     base64-encoded;
  2. by pattern: provider token shapes (Hugging Face, OpenAI, GitHub, AWS, Slack, W&B, JWT, ...),
     anchored on what may precede a token in URLs and escapes (`%3Dhf_...`), not on `\b`;
  3. by name: `NAME=value`, `"name": "value"`, `--name value` where NAME looks secret.
Then, for secrets that do not look like themselves (hidden.py): context rules (an AWS key id's
unlabelled secret key), decode-then-scan (a hit in the URL/base64/hex-decoded form of a run
redacts the run) and the entropy rule (random-looking runs outside an allowlist of harmless shapes).
Personal data (host names, user names, home paths) becomes stable pseudonyms (`host-1`, `user-1`)
shared by every artifact of one bundle through `Pseudonyms`; GPU UUIDs become salted hashes.
"""
from __future__ import annotations

import getpass
import hashlib
import os
import pickle
import re
import socket
import sys
from collections import Counter
from dataclasses import dataclass, field, fields
from importlib import resources
from pathlib import Path
from typing import Any, Callable, Iterable, Mapping, Sequence

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
from .personal import ARGV_HINTS as _ARGV_HINTS
from .prefilter import Prefilter
from .personal import NETWORK_HINT, USER_ROOT_RE, argv_secret_spans, ip_kept, network_spans, user_components

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


def encoded_kind(codec: str) -> str:
    return f"encoded:{codec}"


def context_kind(rule: str) -> str:
    return f"context:{rule}"


def pattern_kind(rule: str) -> str:
    return f"pattern:{rule}"


# --------------------------------------------------------------------------------------------
# Policy
# --------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Policy:
    """Every knob of scrub/check. Frozen and made of tuples, so it pickles to worker processes."""

    min_value_length: int = 8
    ignore_values: tuple[str, ...] = ()
    use_local_environment: bool = True
    name_words: tuple[str, ...] = ()
    name_suffixes: tuple[str, ...] = ()
    allow_names: tuple[str, ...] = ()
    patterns: tuple[str, ...] = ()
    custom_patterns: tuple[tuple[str, str], ...] = ()
    pseudonymize_hosts: bool = True
    pseudonymize_users: bool = True
    hash_gpu_uuids: bool = True
    keep_users: tuple[str, ...] = ()
    min_free_text_length: int = 5
    common_words: tuple[str, ...] = ()
    trim_env_prefixes: bool = True
    trace_keep_keys: tuple[str, ...] = ()
    trace_host_keys: tuple[str, ...] = ()
    trace_path_keys: tuple[str, ...] = ()
    gzip_level: int = 6
    decode_enabled: bool = True
    decode_min_base64: int = 16
    decode_min_hex: int = 16
    decode_min_printable: float = 0.85
    decode_max_depth: int = 2
    context_rules: tuple[str, ...] = ()
    join_adjacent_nvtx: bool = True
    entropy_enabled: bool = True
    entropy_min_length: int = 20
    entropy_base64_ratio: float = 0.8
    entropy_hex_bits: float = 3.0
    entropy_max_wordish: float = 0.5
    entropy_allow_keys: tuple[str, ...] = ()
    entropy_allow: tuple[tuple[str, str, tuple[str, ...]], ...] = ()   # (name, regex, examples)
    extra_values: tuple[str, ...] = ()   # known secrets given by the user (--values-file)
    source: str = "default"              # where the policy came from (for reports)


# TOML section/key -> Policy field
_POLICY_KEYS: dict[tuple[str, str], str] = {
    ("values", "min_length"): "min_value_length",
    ("values", "ignore"): "ignore_values",
    ("values", "use_local_environment"): "use_local_environment",
    ("names", "words"): "name_words",
    ("names", "suffixes"): "name_suffixes",
    ("names", "allow"): "allow_names",
    ("patterns", "enabled"): "patterns",
    ("patterns", "custom"): "custom_patterns",
    ("personal", "pseudonymize_hosts"): "pseudonymize_hosts",
    ("personal", "pseudonymize_users"): "pseudonymize_users",
    ("personal", "hash_gpu_uuids"): "hash_gpu_uuids",
    ("personal", "keep_users"): "keep_users",
    ("personal", "min_free_text_length"): "min_free_text_length",
    ("personal", "common_words"): "common_words",
    ("personal", "trim_env_prefixes"): "trim_env_prefixes",
    ("trace", "keep_keys"): "trace_keep_keys",
    ("trace", "host_keys"): "trace_host_keys",
    ("trace", "path_keys"): "trace_path_keys",
    ("output", "gzip_level"): "gzip_level",
    ("decode", "enabled"): "decode_enabled",
    ("decode", "min_base64"): "decode_min_base64",
    ("decode", "min_hex"): "decode_min_hex",
    ("decode", "min_printable"): "decode_min_printable",
    ("decode", "max_depth"): "decode_max_depth",
    ("context", "enabled"): "context_rules",
    ("context", "join_adjacent_nvtx"): "join_adjacent_nvtx",
    ("entropy", "enabled"): "entropy_enabled",
    ("entropy", "min_length"): "entropy_min_length",
    ("entropy", "base64_ratio"): "entropy_base64_ratio",
    ("entropy", "hex_bits"): "entropy_hex_bits",
    ("entropy", "max_wordish"): "entropy_max_wordish",
    ("entropy", "allow_keys"): "entropy_allow_keys",
    ("entropy", "allow"): "entropy_allow",
}


def _read_policy_file(path: Path) -> dict[str, Any]:
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise BadInputError(path, f"cannot read policy: {exc.strerror or exc}") from None
    try:
        if path.suffix.lower() in (".yaml", ".yml"):
            import yaml

            data = yaml.safe_load(text) or {}
        else:
            data = _toml_loads(text)
    except Exception as exc:  # noqa: BLE001 - any parse error becomes one line naming the file
        raise BadInputError(path, f"policy is not valid {'YAML' if path.suffix in ('.yaml', '.yml') else 'TOML'}: {exc}") from None
    if not isinstance(data, dict):
        raise BadInputError(path, "policy must be a table of sections")
    return data


def _toml_loads(text: str) -> dict[str, Any]:
    if sys.version_info >= (3, 11):
        import tomllib
    else:  # pragma: no cover - python 3.10
        import tomli as tomllib  # type: ignore[no-redef]
    return tomllib.loads(text)


def _apply_sections(base: dict[str, Any], data: Mapping[str, Any], origin: str) -> None:
    for section, table in data.items():
        if not isinstance(table, Mapping):
            raise BadInputError(origin, f"policy section [{section}] must be a table")
        for key, value in table.items():
            add = key.endswith("_add")
            name = key[:-4] if add else key
            fld = _POLICY_KEYS.get((section, name))
            if fld is None:
                raise BadInputError(origin, f"unknown policy key [{section}] {key}")
            if fld == "custom_patterns":
                if not isinstance(value, Mapping):
                    raise BadInputError(origin, "[patterns] custom must be a table of name = regex")
                items = tuple((str(k), str(v)) for k, v in value.items())
                for k, v in items:
                    try:
                        re.compile(v)
                    except re.error as exc:
                        raise BadInputError(origin, f"custom pattern {k!r} is not a valid regex: {exc}") from None
                base[fld] = (base.get(fld, ()) + items) if add else items
            elif fld == "entropy_allow":
                shapes = _allow_shapes(value, origin)
                base[fld] = (base.get(fld, ()) + shapes) if add else shapes
            elif isinstance(value, list):
                vals = tuple(str(v) for v in value)
                base[fld] = (tuple(base.get(fld, ())) + vals) if add else vals
            else:
                if add:
                    raise BadInputError(origin, f"[{section}] {key}: only lists can be extended")
                base[fld] = value


def _allow_shapes(value: Any, origin: str) -> tuple[tuple[str, str, tuple[str, ...]], ...]:
    """[entropy.allow.<name>] tables -> (name, regex, examples); each regex must cover its examples."""
    from .hidden import verify_allow_examples

    if not isinstance(value, Mapping):
        raise BadInputError(origin, "[entropy] allow must be tables of regex = ..., examples = [...]")
    shapes = []
    for name, table in value.items():
        if not isinstance(table, Mapping) or "regex" not in table:
            raise BadInputError(origin, f"[entropy.allow.{name}] needs regex = '...' and examples = [...]")
        try:
            re.compile(str(table["regex"]))
        except re.error as exc:
            raise BadInputError(origin, f"[entropy.allow.{name}] regex is not valid: {exc}") from None
        shapes.append((str(name), str(table["regex"]), tuple(str(e) for e in table.get("examples", ()))))
    problems = verify_allow_examples(tuple(shapes))
    if problems:
        raise BadInputError(origin, problems[0])
    return tuple(shapes)


def default_policy_data() -> dict[str, Any]:
    text = resources.files("verlprof.stages.scrub").joinpath("scrub_policy.toml").read_text(encoding="utf-8")
    return _toml_loads(text)


def load_policy(path: str | Path | None = None, **overrides: Any) -> Policy:
    """The default policy, updated by a TOML/YAML file and then by explicit keyword overrides."""
    base: dict[str, Any] = {}
    _apply_sections(base, default_policy_data(), "scrub_policy.toml")
    source = "default"
    if path is not None:
        p = Path(path)
        _apply_sections(base, _read_policy_file(p), str(p))
        source = p.name
    base.update({k: v for k, v in overrides.items() if v is not None})
    base["source"] = source
    known = {f.name for f in fields(Policy)}
    return Policy(**{k: v for k, v in base.items() if k in known})


def read_values_file(path: str | Path) -> tuple[str, ...]:
    """Extra known secret values, one per line (never on the command line, where shells log them)."""
    p = Path(path)
    try:
        lines = p.read_text(encoding="utf-8").splitlines()
    except OSError as exc:
        raise BadInputError(p, f"cannot read values file: {exc.strerror or exc}") from None
    return tuple(v.strip() for v in lines if v.strip() and not v.lstrip().startswith("#"))


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

_PLACEHOLDER = re.compile(
    r"""^(?:\[REDACTED\]|<[^<>]*>|\$\{?[A-Za-z_][A-Za-z0-9_]*\}?|\*+|x+|X+|\.+|-+|_+|0+|
         (?:your|my|the)[-_ ]?[a-z_ -]*(?:token|key|secret|password|passwd|pass|pwd|here|value|id)[a-z_ -]*|
         changeme|placeholder|example|redacted|dummy|none|null)$""",
    re.X | re.I,
)


def is_placeholder(value: str) -> bool:
    """Values that stand for a secret without being one (`hf_xxxx`, `<token>`, `$HF_TOKEN`)."""
    v = value.strip().strip("\"'")
    if not v or _PLACEHOLDER.match(v):
        return True
    # A token prefix followed by one repeated character: hf_xxxxxxxx, sk-****
    m = re.match(r"^[A-Za-z]{1,12}[_-](.+)$", v)
    body = m.group(1) if m else v
    return len(set(body)) <= 2 and len(body) >= 3


def _low_entropy(body: str) -> bool:
    """True for shapes real tokens never have: fewer than 6 distinct characters."""
    return len(set(body)) < 6


# --------------------------------------------------------------------------------------------
# Pattern rules (provider token shapes)
# --------------------------------------------------------------------------------------------

_B = r"(?<![A-Za-z0-9])"      # left boundary that lets `_`/`-` precede (MY_hf_... still matches)
_E = r"(?![A-Za-z0-9])"
# Where a provider token may start: after any non-alphanumeric character, and also right after a
# URL escape (`?token%3Dhf_...`), a C/JSON escape (`\nhf_`, `\x3dhf_`, `\u003dhf_`) whose last
# character is alphanumeric. `\b` would miss all of those (gitleaks anchors the same way).
_ESC = r"(?<=%[0-9A-Fa-f]{2})|(?<=\\[nrt])|(?<=\\x[0-9A-Fa-f]{2})|(?<=\\u[0-9A-Fa-f]{4})"
_T = r"(?:(?<![A-Za-z0-9])|" + _ESC + ")"

# name -> (regex, group to redact (0 = whole match), needs-entropy-check)
PATTERN_RULES: dict[str, tuple[str, int, bool]] = {
    "private_key": (r"-----BEGIN[A-Z0-9 ]*PRIVATE KEY(?: BLOCK)?-----(?:.|\n)*?(?:-----END[A-Z0-9 ]*PRIVATE KEY(?: BLOCK)?-----|\Z)", 0, False),
    "hf": (_T + r"(?:hf_|api_org_)[A-Za-z0-9]{30,}" + _E, 0, True),
    "anthropic": (_T + r"sk-ant-(?:api|admin|sid)\d{0,3}-[A-Za-z0-9_\-]{20,}", 0, True),
    "openai": (_T + r"sk-(?:proj-|svcacct-|admin-|None-)?[A-Za-z0-9_\-]{20,}", 0, True),
    "github": (_T + r"(?:gh[pousr]_[A-Za-z0-9]{30,}|github_pat_[A-Za-z0-9_]{22,})" + _E, 0, True),
    "gitlab": (_T + r"glpat-[A-Za-z0-9_\-]{20,}", 0, True),
    "aws_key_id": (r"(?:(?<![A-Z0-9])|" + _ESC + r")(?:AKIA|ASIA|ABIA|ACCA|AIDA|AROA)[A-Z0-9]{16}(?![A-Z0-9])", 0, True),
    "aws_secret": (r"(?i)aws.{0,24}?(?:secret|sk).{0,16}?[\"'=:\s]+([A-Za-z0-9/+]{40})(?![A-Za-z0-9/+])", 1, True),
    "slack": (_T + r"(?:xox[abposre]-[A-Za-z0-9\-]{10,}|https://hooks\.slack\.com/services/[A-Za-z0-9/_\-]+)", 0, False),
    "wandb": (r"(?i)wandb.{0,48}?(?<![0-9a-f])((?:local-)?[0-9a-f]{40})(?![0-9a-f])", 1, True),
    "jwt": (_T + r"eyJ[A-Za-z0-9_\-]{8,}\.eyJ[A-Za-z0-9_\-]{8,}\.[A-Za-z0-9_\-]{8,}", 0, False),
    "google_api_key": (_T + r"AIza[0-9A-Za-z_\-]{35}", 0, True),
    "stripe": (_T + r"(?:sk|rk|pk)_(?:live|test)_[A-Za-z0-9]{16,}", 0, True),
    "npm": (_T + r"npm_[A-Za-z0-9]{36}" + _E, 0, True),
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
_PATTERN_HINTS: dict[str, tuple[str, ...]] = {
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
_PATTERN_IHINTS: dict[str, tuple[str, ...]] = {
    "aws_secret": ("aws",),
    "wandb": ("wandb",),
    "bearer": ("bearer", "authorization"),
}


# --------------------------------------------------------------------------------------------
# Environment blocks and assignments
# --------------------------------------------------------------------------------------------

_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_.\-]*$")
_ENV_PIECE = re.compile(r"^([A-Za-z_][A-Za-z0-9_.\-]*)=")


def _unquote(value: str) -> str:
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
    return [(n, _unquote(v)) for n, v in pairs]


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
# Identities: what one artifact reveals about who/where it was recorded
# --------------------------------------------------------------------------------------------

_USER_VARS = frozenset({"USER", "LOGNAME", "USERNAME", "SUDO_USER", "PROCESS_0:USER_NAME", "EXPORT_USER"})
_HOST_VARS = frozenset({"HOSTNAME", "HOST", "NODENAME", "SLURMD_NODENAME", "DEVICE_DISPLAY_NAME", "EXPORT_HOST"})
_HOME_RE = re.compile(r"(?:/home|/Users|/export/home|\\\\Users|\\Users)[/\\]{1,2}(?P<u>[A-Za-z0-9_][A-Za-z0-9_.\-]{0,63})")
_GPU_UUID = re.compile(r"(?i)(?<![0-9a-z])(?P<p>GPU|MIG)-(?P<u>[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12})(?![0-9a-f])")
_BARE_UUID = re.compile(r"(?i)^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$")
_PSEUDO_USER = re.compile(r"^user-(?:\d+|[0-9a-f]{8})$")
# host-N / host-<hash> (scrub's pseudonyms) and the 12-hex salted hash of manifest `host` fields
_PSEUDO_HOST = re.compile(r"^(?:host-(?:\d+|[0-9a-f]{8})|[0-9a-f]{12})$")


_BULK_SECRET_NAME = re.compile(
    r"(?i)(?:token|secret|passw|pwd|apikey|api_key|access_key|credential|auth|cookie|session|private|bearer)"
    r"[A-Za-z0-9_.\-]*\"?\s*[=:]")
# user@host (ssh prompts, scp targets, e-mail addresses): both parts are personal.
_USER_AT_HOST = re.compile(r"(?<![\w.\-@])([a-z_][a-z0-9_.\-]{1,31})@([A-Za-z0-9][A-Za-z0-9\-]{0,62}(?:\.[A-Za-z0-9\-]{1,63})*)(?=[:\s/,;)\]\"']|$)")

_BULK_NAME_HINTS = ("token", "secret", "passw", "api_key", "apikey", "access_key", "credential", "bearer",
                    "cookie", "private")


def _hint_windows(text: str, hints: Iterable[str], before: int, after: int, limit: int = 200_000) -> list[tuple[int, int]]:
    """Merged [start, end) windows around every occurrence of any hint (found with str.find)."""
    spans: list[tuple[int, int]] = []
    n = len(text)
    for h in hints:
        i = text.find(h)
        while i != -1 and len(spans) < limit:
            spans.append((max(0, i - before), min(n, i + len(h) + after)))
            i = text.find(h, i + 1)
    if not spans:
        return []
    spans.sort()
    merged = [spans[0]]
    for a, b in spans[1:]:
        if a <= merged[-1][1]:
            if b > merged[-1][1]:
                merged[-1] = (merged[-1][0], b)
        else:
            merged.append((a, b))
    return merged


_BULK_HOST_KEY = re.compile(r"\"(?:host_name|hostname|host)\"\s*:\s*\"([^\"\\]{1,255})\"")


@dataclass
class Identities:
    """Names and secret values found in one artifact (or the local machine). Merged per bundle."""

    hosts: set[str] = field(default_factory=set)
    users: set[str] = field(default_factory=set)
    secret_values: set[str] = field(default_factory=set)
    gpu_uuids: set[str] = field(default_factory=set)

    def merge(self, other: "Identities") -> "Identities":
        self.hosts |= other.hosts
        self.users |= other.users
        self.secret_values |= other.secret_values
        self.gpu_uuids |= other.gpu_uuids
        return self

    def counts(self) -> dict[str, int]:
        return {"hosts": len(self.hosts), "users": len(self.users),
                "secret_values": len(self.secret_values), "gpu_uuids": len(self.gpu_uuids)}


class IdentityCollector:
    """Feeds strings (with their key/column context) and accumulates an `Identities`."""

    def __init__(self, policy: Policy) -> None:
        self.policy = policy
        self.is_secret_name = NameRule(policy)
        self.ids = Identities()
        self._keep_users = frozenset(policy.keep_users)
        self._patterns = _compile_patterns(policy)
        self._any_hint = _any_hint_gate(self._patterns)
        self._seen: set[int] = set()
        self._visited: set[int] = set()
        self._keepalive: list[Any] = []

    def add_value(self, value: str) -> None:
        v = value.strip()
        if (len(v) >= self.policy.min_value_length and not is_placeholder(v)
                and v.lower() not in self.policy.ignore_values and REDACTED not in v):
            self.ids.secret_values.add(v)

    def add_user(self, user: str) -> None:
        u = user.strip().strip("\"'")
        if u and u not in self._keep_users and not _PSEUDO_USER.match(u) and not _PLACEHOLDER.match(u) \
                and re.match(r"^[A-Za-z0-9_][A-Za-z0-9_.\-]{0,63}$", u):
            self.ids.users.add(u)

    def add_host(self, host: str) -> None:
        h = host.strip().strip("\"'")
        if re.match(r"^[0-9.]+$|^[0-9A-Fa-f:]+$", h) and ip_kept(h):
            return          # --host 0.0.0.0, 127.0.0.1, ::1 identify no machine
        if h and h.lower() not in ("localhost", "local (cli)", "") and not _PSEUDO_HOST.match(h) \
                and re.match(r"^[A-Za-z0-9][A-Za-z0-9_.\-]{0,253}$", h):
            self.ids.hosts.add(h)

    def add_gpu(self, uuid: str) -> None:
        u = uuid.strip().lower()
        if u.startswith(("gpu-", "mig-")):
            u = u[4:]
        if _BARE_UUID.match(u):
            self.ids.gpu_uuids.add(u)

    def add_pair(self, name: str, value: str) -> None:
        bare = name.lstrip("-")
        up = bare.upper()
        if up in _USER_VARS:
            self.add_user(value)
        elif up in _HOST_VARS:
            self.add_host(value)
        elif up == "HOME":
            for m in _HOME_RE.finditer(value):
                self.add_user(m.group("u"))
        if self.is_secret_name(bare):
            self.add_value(value)

    def feed(self, text: str, key: str | None = None) -> None:
        """Scan one string; `key` is its column/key name when known (e.g. `Hostname`, `uuid`)."""
        if not text:
            return
        if key is not None:
            k = key.lower()
            if k in ("hostname", "host_name", "host", "device_display_name", "export_host"):
                self.add_host(text)
            elif k in ("user_name", "export_user", "username", "user"):
                self.add_user(text)
            elif k == "uuid":
                self.add_gpu(text)
            elif self.is_secret_name(key):
                self.add_value(text)
        h = hash(text)
        if h in self._seen:
            return
        if len(self._seen) < 500_000:
            self._seen.add(h)
        if "=" in text or ":" in text or "-" in text:
            if looks_like_env_block(text):
                for n, v in parse_env_block(text):
                    self.add_pair(n, v)
            for n, v, _s, _e in iter_assignments(text):
                self.add_pair(n, _unquote(v))
        for m in _HOME_RE.finditer(text):
            self.add_user(m.group("u"))
        if "@" in text:
            for m in _USER_AT_HOST.finditer(text):
                self.add_user(m.group(1))
                if "." not in m.group(2):      # a prompt's host; not an e-mail domain
                    self.add_host(m.group(2))
        for m in _GPU_UUID.finditer(text):
            self.add_gpu(m.group("u"))
        if '"Uuid"' in text or "'Uuid'" in text:
            for m in re.finditer(r"(?i)[\"']uuid[\"']\s*:\s*[\"']([0-9a-f\-]{36})", text):
                self.add_gpu(m.group(1))
        if self._any_hint is not None and not self._any_hint(text):
            return
        for name, rx, group, entropy in self._patterns:
            if not _hinted(name, text):
                continue
            for m in rx.finditer(text):
                val = m.group(group)
                if val and not (entropy and _low_entropy(val)) and not is_placeholder(val):
                    self.ids.secret_values.add(val)

    def feed_bulk(self, text: str) -> None:
        """Scan a large raw text (a chunk of a JSON trace) without visiting every value in Python.

        Literal hints are located with `str.find` (C speed); only small windows around them go
        through the regexes, so a 400 MB trace is scanned at tens of MB/s.
        """
        text = text.replace("\\/", "/")
        low = text.lower()
        for a, b in _hint_windows(low, _BULK_NAME_HINTS, 96, 320):
            for n, v, _s, _e in iter_assignments(text[a:b]):
                self.add_pair(n, _unquote(v))
        for a, b in _hint_windows(low, ('"host',), 0, 300):
            for m in _BULK_HOST_KEY.finditer(text, a, b):
                self.add_host(m.group(1))
        for a, b in _hint_windows(text, ("/home/", "/Users/", "\\Users\\", "\\\\Users\\\\"), 16, 96):
            for m in _HOME_RE.finditer(text, a, b):
                self.add_user(m.group("u"))
        for a, b in _hint_windows(low, ("gpu-", "mig-"), 4, 64):
            for m in _GPU_UUID.finditer(text, a, b):
                self.add_gpu(m.group("u"))
        # Provider token shapes are not collected here: scrub and check find them by shape in
        # every artifact anyway, so propagating their values would only cost a pass per rule.

    def feed_obj(self, obj: Any, key: str | None = None, depth: int = 0) -> None:
        """Walk a decoded JSON/pickle structure: every key and string value (iterative-safe depth)."""
        if depth > 200:
            return
        if isinstance(obj, str):
            self.feed(obj, key)
            return
        if isinstance(obj, (dict, list, tuple)):
            # shared containers (pickle memo) are visited once
            if id(obj) in self._visited:
                return
            self._visited.add(id(obj))
            self._keepalive.append(obj)
        if isinstance(obj, dict):
            for k, v in obj.items():
                ks = k if isinstance(k, str) else None
                if ks:
                    self.feed(ks)
                self.feed_obj(v, ks, depth + 1)
        elif isinstance(obj, (list, tuple, set, frozenset)):
            for v in obj:
                self.feed_obj(v, key, depth + 1)

    def feed_argv(self, argv: list[str]) -> None:
        """`--token VALUE` as separate argv items (META_DATA_CAPTURE ARGUMENT_i rows)."""
        for i, a in enumerate(argv):
            if a.startswith("-") and "=" not in a and i + 1 < len(argv) and self.is_secret_name(a):
                self.add_value(argv[i + 1])
            elif a.startswith("-") and "=" in a:
                n, _, v = a.partition("=")
                self.add_pair(n, v)


def local_identities(policy: Policy) -> Identities:
    """What the current machine reveals: host and user names, secret-named environment values."""
    col = IdentityCollector(policy)
    try:
        col.add_host(socket.gethostname())
        col.add_host(socket.getfqdn())
    except OSError:
        pass
    try:
        col.add_user(getpass.getuser())
    except Exception:  # noqa: BLE001 - no user database (containers): nothing to add
        pass
    col.feed("HOME=" + str(Path.home()))
    for name, value in os.environ.items():
        col.add_pair(name, value)
    for v in policy.extra_values:
        col.ids.secret_values.add(v)
    return col.ids


# --------------------------------------------------------------------------------------------
# Pseudonyms: one consistent mapping per bundle
# --------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Pseudonyms:
    """Host/user pseudonyms, known secret values and the GPU-UUID salt of one bundle.

    Built once from the merged `Identities` of every artifact (sorted, so the numbering does not
    depend on which worker finished first) and passed to every worker: ranks on one node keep one
    `host-N` across all their files.
    """

    hosts: tuple[tuple[str, str], ...] = ()
    users: tuple[tuple[str, str], ...] = ()
    secret_values: tuple[str, ...] = ()
    gpu_uuids: tuple[str, ...] = ()
    salt: str = ""

    @classmethod
    def build(cls, identities: Iterable[Identities], salt: str, policy: Policy | None = None) -> "Pseudonyms":
        merged = Identities()
        for ids in identities:
            merged.merge(ids)
        if policy is not None:
            merged.secret_values |= set(policy.extra_values)
        hosts = sorted(merged.hosts, key=lambda s: (s.lower(), s))
        users = sorted(merged.users, key=lambda s: (s.lower(), s))
        numbered: dict[str, str] = {}
        host_map: dict[str, str] = {}
        for h in hosts:
            base = h if re.match(r"^[0-9.]+$", h) else h.split(".")[0]
            p = numbered.setdefault(base, f"host-{len(numbered) + 1}")
            host_map[h] = p
            host_map.setdefault(base, p)
        user_map = {u: f"user-{i}" for i, u in enumerate(users, 1)}
        values = sorted(merged.secret_values, key=lambda v: (-len(v), v))
        return cls(tuple(host_map.items()), tuple(user_map.items()), tuple(values),
                   tuple(sorted(merged.gpu_uuids)), salt)

    def host_map(self) -> dict[str, str]:
        return dict(self.hosts)

    def user_map(self) -> dict[str, str]:
        return dict(self.users)


def gpu_hash(uuid: str, salt: str) -> str:
    return hashlib.sha256(f"{salt}\0gpu\0{uuid.lower()}".encode()).hexdigest()[:12]


def fallback_pseudonym(kind: str, name: str, salt: str) -> str:
    """A pseudonym for a name the identity pass did not see (stable, but not numbered)."""
    return f"{kind}-" + hashlib.sha256(f"{salt}\0{kind}\0{name}".encode()).hexdigest()[:8]


# --------------------------------------------------------------------------------------------
# The scrubber
# --------------------------------------------------------------------------------------------

def sub_pattern(rx: re.Pattern[str], group: int, entropy: bool, s: str, kind: str, kinds: list[str]) -> str:
    """Replace every match of one pattern rule (its `group`) unless the value is a placeholder."""
    out: list[str] = []
    last = 0
    for m in rx.finditer(s):
        val = m.group(group)
        if not val or val == REDACTED or (entropy and _low_entropy(_token_body(val))) or is_placeholder(val):
            continue
        a, b = m.span(group)
        if a < last:
            continue
        out.append(s[last:a])
        out.append(REDACTED)
        last = b
        kinds.append(kind)
    if not out:
        return s
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
            if not _hinted(name, ex) or sub_pattern(comp, group, entropy, ex, name, kinds) == ex:
                problems.append(f"pattern {name!r} misses its example {ex!r}")
        for ex in fps:
            kinds = []
            if _hinted(name, ex) and sub_pattern(comp, group, entropy, ex, name, kinds) != ex:
                problems.append(f"pattern {name!r} flags its look-alike {ex!r}")
    return problems


_EXAMPLES_CHECKED: list[bool] = []


def _check_examples_once() -> None:
    if not _EXAMPLES_CHECKED:
        problems = verify_pattern_examples()
        if problems:
            raise BadInputError("stages/scrub/secrets.py", problems[0])
        _EXAMPLES_CHECKED.append(True)


def _compile_patterns(policy: Policy) -> list[tuple[str, re.Pattern[str], int, bool]]:
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


def _any_hint_gate(patterns: Sequence[tuple[str, Any, Any, bool]]) -> Callable[[str], bool] | None:
    """One C scan that is true when any pattern's hint occurs in a text (`_hinted` of every rule
    at once): most strings hold none, and then no rule needs to run. None when some rule has no
    hint (custom rules always run)."""
    plain: set[str] = set()
    folded: set[str] = set()
    for name, *_ in patterns:
        if name in _PATTERN_HINTS:
            plain.update(_PATTERN_HINTS[name])
        elif name in _PATTERN_IHINTS:
            folded.update(h.lower() for h in _PATTERN_IHINTS[name])
        else:
            return None
    def either(hints: set[str]) -> Any:
        return re.compile("|".join(re.escape(h) for h in sorted(hints, key=len, reverse=True))) if hints else None

    rx_plain, rx_folded = either(plain), either(folded)     # the folded ones on text.lower(), as _hinted

    def gate(text: str) -> bool:
        return bool((rx_plain is not None and rx_plain.search(text))
                    or (rx_folded is not None and rx_folded.search(text.lower())))
    return gate


def _hinted(rule: str, text: str) -> bool:
    hints = _PATTERN_HINTS.get(rule)
    if hints is not None:
        return any(h in text for h in hints)
    ihints = _PATTERN_IHINTS.get(rule)
    if ihints is not None:
        low = text.lower()
        return any(h in low for h in ihints)
    return True  # custom rules: always run


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

    def __init__(self, policy: Policy, pseudonyms: Pseudonyms | None = None) -> None:
        self.policy = policy
        self.ps = pseudonyms or Pseudonyms()
        self.is_secret_name = NameRule(policy)
        self.counts: Counter[tuple[str, str]] = Counter()
        self._cache, self._join_cache, self._decoded_cache = _shared_verdicts(policy, self.ps)
        self._forced: dict[str, str] = {}
        self._patterns = _compile_patterns(policy)
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
        self._free_rx = re.compile(_B + "(" + "|".join(re.escape(n) for n in sorted(free, key=len, reverse=True)) + ")" + _E) if free else None
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
            custom=[rx for name, rx, _g, _e in self._patterns if name not in PATTERN_RULES],
            entropy=self._entropy,
            decode=(policy.decode_min_base64, policy.decode_min_hex, policy.decode_min_printable,
                    policy.decode_max_depth) if policy.decode_enabled else None)

    def _prefilter_literals(self, values: list[str]) -> list[str]:
        """Every literal without which no rule of `_apply` can change a string (prefilter.py)."""
        lits: list[str] = list(values) + list(self.ps.gpu_uuids) + list(self._host_map) + list(self._user_map)
        for name, _rx, _g, _e in self._patterns:
            lits += _PATTERN_HINTS.get(name, ()) + _PATTERN_IHINTS.get(name, ())
        for rule in self._context:
            lits += CONTEXT_HINTS.get(rule.name, ())
        lits += list(_ARGV_HINTS) + ["gpu-", "mig-"]
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
            hints = _PATTERN_HINTS.get(name) or _PATTERN_IHINTS.get(name)
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
        for h in _ARGV_HINTS:
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

    def scrub(self, text: str, location: str) -> str:
        if not text:
            return text
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
        hit = self._cache.get(text)
        if hit is None:
            hit = self._apply(text)
            if len(self._cache) >= self.CACHE_MAX:
                self._cache.clear()
            self._cache[text] = hit
        out, kinds = hit
        for k in kinds:
            self.counts[(k, location)] += 1
        return out

    def findings(self, text: str) -> tuple[str, ...]:
        """Kinds of secret/personal content in `text` (cosmetic rules excluded)."""
        if not text:
            return ()
        if self._forced and self._forced_re.search(text):
            return tuple(sorted({self._forced[m.group(0)] for m in self._forced_re.finditer(text)}))
        hit = self._cache.get(text)
        if hit is None:
            hit = self._apply(text)
            if len(self._cache) >= self.CACHE_MAX:
                self._cache.clear()
            self._cache[text] = hit
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
            out, kinds = self._apply(a + b, use_entropy=False)
            if any(k != KIND_PATH for k in kinds):
                sa = self._apply(a, use_entropy=False)[0]
                sb = self._apply(b, use_entropy=False)[0]
                first = not out.startswith(sa)
                second = not self._apply(sa + b, use_entropy=False)[0].endswith(sb)
                hit = (first, second)
            else:
                hit = (False, False)
            if len(self._join_cache) >= self.CACHE_MAX:
                self._join_cache.clear()
            self._join_cache[key] = hit
        return hit

    def _key_class(self, key: str) -> int:
        """0 plain, 1 secret-named, 2 host key, 3 UUID key (cached: keys repeat)."""
        c = self._key_classes.get(key)
        if c is None:
            low = key.lower()
            c = (1 if self.is_secret_name(key) else 2 if low in self._host_keys else 3 if low in _UUID_KEYS
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
        c = self._key_class(key)
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
        if self.policy.hash_gpu_uuids and _BARE_UUID.match(_strip_gpu(value)):
            return self.gpu(value, location)
        return self.scrub(value, location)

    def keyed_findings(self, key: str, value: str) -> tuple[str, ...]:
        if not value:
            return ()
        if self.is_secret_name(key) and not _is_clean_value(value):
            return (KIND_NAME,)
        low = key.lower()
        if low in self._host_keys and not self.is_clean_host(value):
            return (KIND_HOST,)
        if low in _UUID_KEYS and self.policy.hash_gpu_uuids and _BARE_UUID.match(_strip_gpu(value)):
            return (KIND_GPU,)
        if low in self._entropy_keys:
            return tuple(k for k in self._apply(value, use_entropy=False)[1] if k != KIND_PATH)
        return self.findings(value)

    def host(self, name: str, location: str) -> str:
        """Pseudonym of a value known to be a host name (host_name keys, Hostname rows)."""
        if not name or _PSEUDO_HOST.match(name) or not self.policy.pseudonymize_hosts:
            return name
        self.counts[(KIND_HOST, location)] += 1
        short = name.split(".")[0]
        return self._host_map.get(name) or self._host_map.get(short) or fallback_pseudonym("host", name, self.ps.salt)

    def is_clean_host(self, name: str) -> bool:
        return not name or bool(_PSEUDO_HOST.match(name)) or not self.policy.pseudonymize_hosts

    def gpu(self, uuid: str, location: str) -> str:
        if not uuid or not self.policy.hash_gpu_uuids:
            return uuid
        u = uuid.strip()
        bare = u[4:] if u.lower().startswith(("gpu-", "mig-")) else u
        if not _BARE_UUID.match(bare):
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
    def _apply(self, text: str, depth: int = 0, use_entropy: bool = True) -> tuple[str, tuple[str, ...]]:
        """(cleaned text, kinds replaced). `depth` counts decodings already applied to `text`."""
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
            if "pattern:" + name not in on or not _hinted(name, s):
                continue
            s = self._sub_pattern(rx, group, entropy, s, pattern_kind(name), kinds)
        # 3. secret-named assignments, and argv values in the spellings assignments miss
        if "names" in on and self._name_hint is not None and self._name_hint.search(s):
            s = self._sub_assignments(s, kinds)
        if "names" in on or "argv" in on:
            s = _replace_spans(s, [(a, b) for a, b in argv_secret_spans(s, self.is_secret_name)
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
        if self.policy.trim_env_prefixes and "-packages" in s:
            s2 = _ENV_PREFIX.sub(r"\g<pk>", s)
            if s2 != s:
                kinds.append(KIND_PATH)
                s = s2
        # 5. encoded runs whose decoded form holds anything above
        if self.policy.decode_enabled and depth < self.policy.decode_max_depth and len(s) >= 8:
            s = self._sub_encoded(s, depth, kinds, use_entropy)
        # 6. random-looking runs no rule explained
        if use_entropy and self._entropy is not None and len(s) >= self.policy.entropy_min_length:
            s = _replace_spans(s, self._entropy.spans(s), KIND_ENTROPY, kinds)
        return s, tuple(kinds)

    def _sub_pattern(self, rx: re.Pattern[str], group: int, entropy: bool, s: str, kind: str, kinds: list[str]) -> str:
        return sub_pattern(rx, group, entropy, s, kind, kinds)

    def _sub_context(self, s: str, kinds: list[str]) -> str:
        """Context rules: an anchor token (AWS key id, OAuth client id) redacts its companions."""
        for rule in self._context:
            if not any(h in s for h in CONTEXT_HINTS.get(rule.name, ())):
                continue
            s = _replace_spans(s, companion_spans(rule, s), context_kind(rule.name), kinds)
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
            if cpp and _cpp_template_arg(s, s.rfind(name, 0, a)):
                continue
            if _is_clean_value(value):
                continue
            spans.append((a, b))
        return _replace_spans(s, spans, KIND_NAME, kinds)

    def _sub_gpu(self, s: str, kinds: list[str]) -> str:
        if not self.policy.hash_gpu_uuids:
            return s

        def rep(m: re.Match[str]) -> str:
            kinds.append(KIND_GPU)
            return "GPU-" + gpu_hash(m.group("u"), self.ps.salt)

        return _GPU_UUID.sub(rep, s)

    def _sub_home(self, s: str, kinds: list[str]) -> str:
        """The person in a cluster path (`/home/<u>`, `/fsx/<u>`, `/lustre/<group>/<u>`) becomes
        their pseudonym, whoever they are (personal.USER_ROOT_RE)."""
        if not self.policy.pseudonymize_users:
            return s

        def rep(m: re.Match[str]) -> str:
            rest = m.group("rest")
            for a, b in user_components(rest):
                user = rest[a:b]
                if user in self._keep_users or _PSEUDO_USER.match(user):
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
                if not self.policy.pseudonymize_hosts or _PSEUDO_HOST.match(name):
                    out.append(name)
                else:
                    out.append(self._host_map.get(name) or self._host_map.get(name.split(".")[0] if not name[0].isdigit() else name)
                               or fallback_pseudonym("host", name.lower(), self.ps.salt))
                    kinds.append(KIND_HOST)
            last = b
        out.append(s[last:])
        return "".join(out)

    def _sub_free_names(self, s: str, kinds: list[str]) -> str:
        def rep(m: re.Match[str]) -> str:
            name = m.group(1)
            if name in self._host_map:
                kinds.append(KIND_HOST)
                return self._host_map[name]
            kinds.append(KIND_USER)
            return self._user_map[name]

        return self._free_rx.sub(rep, s)  # type: ignore[union-attr]


def _replace_spans(s: str, spans: list[tuple[int, int]], kind: str, kinds: list[str]) -> str:
    """`s` with each (sorted, non-overlapping) span replaced by REDACTED, one `kind` per span."""
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


_ENV_PREFIX = re.compile(r"(?<![A-Za-z0-9_.\-])(?:[A-Za-z]:)?(?:[/\\][^/\\\s\"'\x00:;,()\[\]]*)+?[/\\](?P<pk>(?:site|dist)-packages[/\\])")


def _cpp_template_arg(s: str, name_start: int) -> bool:
    """`KeyT=float` inside a C++ signature (`Kernel<KeyT=float>`) is a template argument, not a secret."""
    i = name_start - 1
    while i >= 0 and s[i] == " ":
        i -= 1
    return i >= 0 and (s[i] in "<,(" or s.endswith("with", 0, i + 1))


_UUID_KEYS = frozenset({"uuid", "gpu_uuid", "gpuuuid", "device_uuid"})


def _strip_gpu(value: str) -> str:
    v = value.strip()
    return v[4:] if v.lower().startswith(("gpu-", "mig-")) else v


def _token_body(val: str) -> str:
    m = re.match(r"^(?:[A-Za-z][A-Za-z0-9]{0,11}[_\-]){1,3}(.+)$", val)
    return m.group(1) if m else val


def _is_clean_value(value: str) -> bool:
    """Already-scrubbed or harmless values next to a secret name: [REDACTED], empty, placeholders."""
    v = _unquote(value.strip())
    if not v or not v.replace(REDACTED, "").strip(" ,;:"):
        return True
    return is_placeholder(v)


__all__ = [
    "REDACTED", "Policy", "load_policy", "read_values_file", "NameRule", "name_words", "is_placeholder",
    "parse_env_block", "looks_like_env_block", "iter_assignments", "Identities", "IdentityCollector",
    "local_identities", "Pseudonyms", "gpu_hash", "Scrubber", "PATTERN_RULES",
]


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
