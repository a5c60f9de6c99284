"""Identities: what the artifacts of one bundle (and the local machine) reveal about who and where
they were recorded, and the one pseudonym map built from them.

Why apart from the Scrubber: the identity pass reads every input first (all tables, not only the
kept ones) and its merged result numbers the pseudonyms of the whole bundle, so ranks on one node
keep one `host-N` across all their files; the Scrubber only applies the map.
"""
from __future__ import annotations

import getpass
import hashlib
import os
import re
import socket
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable

import yaml

from ..core.errors import BadInputError
from .personal import NOT_USERS, ip_kept
from .shapes import KUBE_USER_RE, NETRC_RE
from .policy import Policy
from .rules import (
    BARE_UUID_RE,
    GPU_UUID_RE,
    HOME_RE,
    NameRule,
    PLACEHOLDER_RE,
    PSEUDO_HOST_RE,
    PSEUDO_USER_RE,
    REDACTED,
    any_hint_gate,
    compile_patterns,
    hinted,
    is_placeholder,
    iter_assignments,
    looks_like_env_block,
    low_entropy,
    parse_env_block,
    unquote,
)

_USER_VARS = frozenset({"USER", "LOGNAME", "USERNAME", "SUDO_USER", "PROCESS_0:USER_NAME", "EXPORT_USER",
                        "SLURM_JOB_USER", "PBS_O_LOGNAME", "LSB_USERNAME", "GIT_AUTHOR_NAME", "GIT_COMMITTER_NAME",
                        "WANDB_ENTITY", "WANDB_USERNAME", "AUTHOR", "HF_USER"})
_EMAIL_VARS = frozenset({"EMAIL", "GIT_AUTHOR_EMAIL", "GIT_COMMITTER_EMAIL", "WANDB_EMAIL"})
# Keys (the last part of a dotted name: `trainer.experiment_name`, `+wandb.entity`) whose value names
# a person or their work: learned like user names, replaced as whole tokens wherever they occur.
_NAME_KEYS = frozenset({"user", "username", "user_name", "export_user", "entity", "wandb_entity", "author",
                        "experiment_name", "project_name", "login", "owner"})
_HOST_VARS = frozenset({"HOSTNAME", "HOST", "NODENAME", "SLURMD_NODENAME", "DEVICE_DISPLAY_NAME", "EXPORT_HOST",
                        "MASTER_ADDR", "SLURM_SUBMIT_HOST"})
# user@host (ssh prompts, scp targets, e-mail addresses): both parts are personal.
_USER_AT_HOST = re.compile(r"(?<![\w.\-@])([a-z_][a-z0-9_.\-]{1,31})@([A-Za-z0-9][A-Za-z0-9\-]{0,62}(?:\.[A-Za-z0-9\-]{1,63})*)(?=[:\s/,;)\]\"']|$)")

def hint_windows(text: str, hints: Iterable[str], before: int, after: int, limit: int = 200_000) -> list[tuple[int, int]]:
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


@dataclass
class Identities:
    """Names and secret values found in one artifact (or the local machine). Merged per bundle."""

    hosts: set[str] = field(default_factory=set)
    users: set[str] = field(default_factory=set)
    secret_values: set[str] = field(default_factory=set)
    gpu_uuids: set[str] = field(default_factory=set)
    # halves of a secret written across the inputs of consecutive ops (op_inputs.py): redacted
    # whole wherever they appear in the bundle (kind `split_value`)
    split_values: set[str] = field(default_factory=set)

    def merge(self, other: "Identities") -> "Identities":
        self.hosts |= other.hosts
        self.users |= other.users
        self.secret_values |= other.secret_values
        self.gpu_uuids |= other.gpu_uuids
        self.split_values |= other.split_values
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
        self._patterns = compile_patterns(policy)
        self._any_hint = any_hint_gate(self._patterns)
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
        if not u or u in self._keep_users or PSEUDO_USER_RE.match(u) or PLACEHOLDER_RE.match(u) or REDACTED in u:
            return
        if re.match(r"^[A-Za-z0-9_][A-Za-z0-9_.\-]{0,63}$", u):
            self.ids.users.add(u)
        elif re.match(r"^[A-Za-z][A-Za-z.'\-]*(?: [A-Za-z][A-Za-z.'\-]*){1,3}$", u) and len(u) <= 64:
            self.ids.users.add(u)       # a full name (git author `Grace Hopper`): replaced as a whole

    def add_host(self, host: str) -> None:
        h = host.strip().strip("\"'")
        if re.match(r"^[0-9.]+$|^[0-9A-Fa-f:]+$", h) and ip_kept(h):
            return          # --host 0.0.0.0, 127.0.0.1, ::1 identify no machine
        if h and h.lower() not in ("localhost", "local (cli)", "") and not PSEUDO_HOST_RE.match(h) \
                and re.match(r"^[A-Za-z0-9][A-Za-z0-9_.\-]{0,253}$", h):
            self.ids.hosts.add(h)

    def add_gpu(self, uuid: str) -> None:
        u = uuid.strip().lower()
        if u.startswith(("gpu-", "mig-")):
            u = u[4:]
        if BARE_UUID_RE.match(u):
            self.ids.gpu_uuids.add(u)

    def add_pair(self, name: str, value: str) -> None:
        bare = name.lstrip("-+~")
        up = bare.upper()
        if up in _USER_VARS or bare.rsplit(".", 1)[-1].lower() in _NAME_KEYS:
            self.add_user(value)
        elif up in _HOST_VARS:
            self.add_host(value)
        elif up in _EMAIL_VARS and "@" in value:
            self.add_user(value.split("@", 1)[0])
        elif up == "HOME":
            for m in HOME_RE.finditer(value):
                self.add_user(m.group("u"))
            last = value.rstrip("/\\").replace("\\", "/").rsplit("/", 1)[-1]
            if last and last.lower() not in NOT_USERS:
                self.add_user(last)
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
            elif k.rsplit(".", 1)[-1] in _NAME_KEYS:
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
                self.add_pair(n, unquote(v))
        for m in HOME_RE.finditer(text):
            self.add_user(m.group("u"))
        if "login" in text or "machine" in text:      # a .netrc
            for m in NETRC_RE.finditer(text):
                (self.add_user if m.group("k") == "login" else self.add_host)(m.group("v"))
        if "users:" in text:                             # a kubeconfig
            for m in KUBE_USER_RE.finditer(text):
                self.add_user(m.group("v"))
        if "@" in text:
            for m in _USER_AT_HOST.finditer(text):
                self.add_user(m.group(1))
                if "." not in m.group(2):      # a prompt's host; not an e-mail domain
                    self.add_host(m.group(2))
        for m in GPU_UUID_RE.finditer(text):
            self.add_gpu(m.group("u"))
        if '"Uuid"' in text or "'Uuid'" in text:
            for m in re.finditer(r"(?i)[\"']uuid[\"']\s*:\s*[\"']([0-9a-f\-]{36})", text):
                self.add_gpu(m.group(1))
        if self._any_hint is not None and not self._any_hint(text):
            return
        for name, rx, group, entropy in self._patterns:
            if not hinted(name, text):
                continue
            for m in rx.finditer(text):
                val = m.group(group)
                if val and not (entropy and low_entropy(val)) and not is_placeholder(val):
                    self.ids.secret_values.add(val)

    _KEY_HOSTS = frozenset({"hostname", "host_name", "host", "device_display_name", "export_host"})

    def pairable(self, key: str) -> bool:
        """True when a string, as a key, gives its value a meaning (`LOGNAME`, `hostname`,
        `wandb_entity`, `uuid`, a secret name): the value is learned with it (`feed_tree`)."""
        bare = key.lstrip("-+~")
        up = bare.upper()
        low = bare.lower()
        return (up in _USER_VARS or up in _HOST_VARS or up in _EMAIL_VARS or up == "HOME"
                or low.rsplit(".", 1)[-1] in _NAME_KEYS or low in self._KEY_HOSTS or low == "uuid"
                or self.is_secret_name(bare))

    def feed_tree(self, obj: Any, key: str | None = None, depth: int = 0) -> None:
        """Walk one decoded JSON value (a trace event, its header): every key and string value,
        each value also as `key=value` (`"LOGNAME": "v"` in Kineto args or kwargs). No bookkeeping
        of visited containers: JSON shares none, and events are walked one at a time."""
        if depth > 200:
            return
        if isinstance(obj, str):
            self.feed(obj, key)
            if key is not None:
                self.add_pair(key, obj)
        elif isinstance(obj, dict):
            for k, v in obj.items():
                ks = k if isinstance(k, str) else None
                if ks:
                    self.feed(ks)
                self.feed_tree(v, ks, depth + 1)
        elif isinstance(obj, list):
            for v in obj:
                self.feed_tree(v, key, depth + 1)

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
    split_values: tuple[str, ...] = ()      # halves of split secrets (Identities.split_values)

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
                   tuple(sorted(merged.gpu_uuids)), salt, tuple(sorted(merged.split_values)))

    def host_map(self) -> dict[str, str]:
        return dict(self.hosts)

    def user_map(self) -> dict[str, str]:
        return dict(self.users)


# Salted hashes are spelt in 16 letters that are not hex digits: whatever the salt, a pseudonym can
# neither continue an address (`host-...` next to `.5.6.7` or `:1:2`) nor a hex run, so the verdict
# of `check` on a bundle does not depend on the salt (issue 33).
_LETTERS = str.maketrans("0123456789abcdef", "ghjkmnpqrstvwxyz")


def _letters(digest: str) -> str:
    return digest.translate(_LETTERS)


def gpu_hash(uuid: str, salt: str) -> str:
    return _letters(hashlib.sha256(f"{salt}\0gpu\0{uuid.lower()}".encode()).hexdigest()[:12])


def fallback_pseudonym(kind: str, name: str, salt: str) -> str:
    """A pseudonym for a name the identity pass did not see (stable, but not numbered)."""
    return f"{kind}-" + _letters(hashlib.sha256(f"{salt}\0{kind}\0{name}".encode()).hexdigest()[:8])


def find_config_identities(path: Path, policy: Policy) -> Identities:
    """Secret values of the run's own config (`.hydra/config.yaml`: `judge_api_key: ...`): the run
    repeats them unlabelled in range names and arguments, so they become known values, replaced
    wherever they appear in the bundle. The config itself is never published."""
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8", errors="replace"))
    except (OSError, yaml.YAMLError) as exc:
        raise BadInputError(path, f"cannot read the run's config: {' '.join(str(exc).split())[:200]}") from None
    col = IdentityCollector(policy)
    col.feed_obj(data)
    return col.ids


def owner_identities(path: str | Path, policy: Policy) -> Identities:
    """The owner of an input file as a user name (issue 33: the account that wrote a profile names a
    person). System accounts (uid below 1000) and unknown uids name nobody."""
    col = IdentityCollector(policy)
    try:
        import pwd

        uid = Path(path).stat().st_uid
        if uid >= 1000:
            col.add_user(pwd.getpwuid(uid).pw_name)
    except (OSError, KeyError, ImportError):
        pass
    return col.ids
