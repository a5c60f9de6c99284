"""Where a run was recorded and by whom: host names, addresses, e-mails, user directories, argv.

Why a module of its own: `rules.py` knows what a secret looks like; this one knows what a
cluster writes about itself into traces (issue 22). Its rules need no list of known names, so they
hold "whoever the user is" and on whichever machine `collect` runs (often as root in a container):

- `network_spans`: FQDNs (a label list ending in a real or internal top-level domain), IPv4 and
  IPv6 addresses (loopback, unspecified and link-local kept; a reviewed list of well-known public
  hosts kept, e.g. `oauth2.googleapis.com`), e-mail addresses (any local part length);
- `USER_ROOT_RE`: the user directory of a cluster path (`/home/<u>`, `/fsx/<u>`, `/scratch/<u>`,
  `/lustre/<group>/<u>` ...), pseudonymised by the Scrubber;
- `argv_secret_spans`: a secret-named option's value in every spelling a log or a Python repr
  writes (`--x v`, `--x=v`, `--x 'v'`, `['--x', 'v']`), `-p v` after the tools that take a password
  that way, and `Authorization: Basic ...` of any length in header dicts.

Every rule ships what it must catch and what it must leave alone (`EXAMPLES`), checked by the
tests; nothing here rewrites text: the Scrubber decides the replacement (a pseudonym for hosts and
users, `[REDACTED]` for e-mails and secrets), so scrub and check agree.
"""
from __future__ import annotations

import ipaddress
import re
from typing import Callable, Iterator

# Top-level domains a host name in a trace ends with: generic, country codes common on clusters,
# and the private ones clusters use for themselves. A dotted Python/C++ name (`torch.nn.functional`)
# does not end with one.
TLDS = (
    "com|net|org|edu|gov|mil|int|io|ai|co|cloud|dev|app|info|biz|tech|science|systems|"
    "internal|local|lan|corp|intra|intranet|cluster|private|priv|home|localdomain|ec2|compute|"
    "us|uk|de|fr|ch|nl|se|fi|dk|es|pl|ie|ca|au|nz|jp|kr|cn|tw|hk|sg|il|br|eu"
    # not pt, in, it, at, be, no, so, sh, py: file extensions and words (`model.pt`, `setup.in`)
)
FQDN_RE = re.compile(
    r"(?<![A-Za-z0-9_\-.@])((?:[A-Za-z0-9](?:[A-Za-z0-9\-]{0,61}[A-Za-z0-9])?\.)+(?:" + TLDS + r"))"
    r"(?![A-Za-z0-9\-]|\.[A-Za-z0-9])", re.I)       # `_` may follow: `<fqdn>_rank0.trace.json`
IPV4_RE = re.compile(r"(?<![0-9.])((?:25[0-5]|2[0-4][0-9]|1?[0-9]{1,2})(?:\.(?:25[0-5]|2[0-4][0-9]|1?[0-9]{1,2})){3})(?![0-9]|\.[0-9])")
# `_` on either side makes it part of a C++ name (`c10d::_allgather_base_`), never an address.
IPV6_CAND = re.compile(r"(?<![0-9A-Za-z:._])((?:[0-9A-Fa-f]{0,4}:){2,7}(?:[0-9A-Fa-f]{1,4}|(?:[0-9]{1,3}\.){3}[0-9]{1,3})?)(?![0-9A-Za-z:_])")
EMAIL_RE = re.compile(r"(?<![A-Za-z0-9._%+\-])[A-Za-z0-9._%+\-]{1,64}@(?:[A-Za-z0-9](?:[A-Za-z0-9\-]{0,61}[A-Za-z0-9])?\.)+[A-Za-z]{2,24}(?![A-Za-z0-9\-])")

# Hosts whose name identifies nobody: public endpoints every ML stack talks to. A name is kept
# when it equals an entry or ends with "." + an entry marked with a leading "*.".
KEEP_HOSTS: tuple[str, ...] = (
    "localhost", "localhost.localdomain", "oauth2.googleapis.com", "*.googleapis.com", "accounts.google.com",
    "github.com", "api.github.com", "raw.githubusercontent.com", "objects.githubusercontent.com",
    "huggingface.co", "hf.co", "cdn-lfs.huggingface.co", "pypi.org", "files.pythonhosted.org",
    "download.pytorch.org", "pytorch.org", "api.wandb.ai", "wandb.ai", "nvidia.com", "developer.nvidia.com",
    "ngc.nvidia.com", "nvcr.io", "docker.io", "registry-1.docker.io", "ghcr.io", "anaconda.org",
    "conda.anaconda.org", "repo.anaconda.com", "api.openai.com", "api.anthropic.com", "example.com",
    "example.org", "example.net", "s3.amazonaws.com", "amazonaws.com", "sts.amazonaws.com",
    "ui.perfetto.dev", "perfetto.dev", "www.w3.org", "w3.org", "docs.nvidia.com", "docs.pytorch.org",
    "verl.readthedocs.io", "readthedocs.io", "cdn.jsdelivr.net", "unpkg.com", "www.google.com",
)


def host_kept(name: str, keep: tuple[str, ...] = KEEP_HOSTS) -> bool:
    low = name.lower().rstrip(".")
    for k in keep:
        if k.startswith("*."):
            if low.endswith(k[1:]):
                return True
        elif low == k:
            return True
    return False


def ip_kept(text: str) -> bool:
    """Addresses that identify no machine: loopback, unspecified, link-local, multicast, broadcast."""
    try:
        ip = ipaddress.ip_address(text.split("%")[0])
    except ValueError:
        return True
    return ip.is_loopback or ip.is_unspecified or ip.is_link_local or ip.is_multicast or str(ip) == "255.255.255.255"


def _ipv6(cand: str) -> bool:
    if cand.count(":") < 2 or not any(c.isdigit() for c in cand):
        return False
    if "::" not in cand and cand.count(":") != 7:
        return False
    try:
        ipaddress.IPv6Address(cand)
    except ValueError:
        return False
    return True


# Cheap test before `network_spans`: something that can start an e-mail, a host or an address.
NETWORK_HINT = re.compile(r"@|\.(?:" + TLDS + r")(?![A-Za-z0-9\-])|[0-9]\.[0-9]{1,3}\.[0-9]|[0-9A-Fa-f]:[0-9A-Fa-f]{0,4}:", re.I)


def network_spans(text: str, keep: tuple[str, ...] = KEEP_HOSTS) -> Iterator[tuple[int, int, str]]:
    """(start, end, kind) of every e-mail ("email") and host name or address ("host") in `text`
    that identifies someone; kept hosts and addresses are not yielded. Overlaps are the caller's."""
    if "@" in text:
        for m in EMAIL_RE.finditer(text):
            yield m.start(), m.end(), "email"
    if "." in text:
        for m in FQDN_RE.finditer(text):
            name = m.group(1)
            # a file name (`model.safetensors`) never matches; a bare two-label `a.io` needs a digit
            # or a hyphen to be taken for a host, like cluster names are (`gpu-17.local`)
            if not host_kept(name, keep) and (name.count(".") >= 2 or any(c.isdigit() or c == "-" for c in name)):
                yield m.start(1), m.end(1), "host"
        for m in IPV4_RE.finditer(text):
            if not ip_kept(m.group(1)):
                yield m.start(1), m.end(1), "host"
    if text.count(":") >= 2:
        for m in IPV6_CAND.finditer(text):
            c = m.group(1)
            if _ipv6(c) and not ip_kept(c):
                yield m.start(1), m.end(1), "host"


# ------------------------------------------------------------------------------------------------
# User directories of cluster file systems
# ------------------------------------------------------------------------------------------------

# Roots under which the next component is a person (or a group whose next component is): home
# directories and the shared file systems of HPC/cloud clusters.
USER_ROOTS = ("home", "Users", "export/home", "fsx", "scratch", "lustre", "gpfs", "nfs", "mnt", "data",
              "work", "workspace", "workspaces", "checkpoint", "checkpoints", "projects", "project",
              "shared", "storage", "global/homes", "global/home", "global/scratch", "net", "efs", "weka",
              "vast", "beegfs", "sharedfs", "cluster", "u", "p", "usr/people", "srv", "envs", "venvs",
              ".virtualenvs")
# Directory names under a root that are not a person: the component after them is looked at instead.
NOT_USERS = frozenset({"home", "homes", "users", "user", "shared", "public", "projects", "project", "groups",
                       "group", "scratch", "data", "datasets", "models", "checkpoints", "ckpt", "work", "team",
                       "teams", "common", "opt", "local", "share", "tmp", "cache", "apps", "software", "sw",
                       "root", "nobody", "ubuntu", "admin", "runner", "jovyan", "ec2-user", "venvs", "envs",
                       "virtualenvs", ".virtualenvs", "conda", "miniconda3", "anaconda3", "www"})
# A cluster root counts only at the start of a path (`/fsx/...`, not `.../utils/data/...`); a home
# directory counts anywhere (`/tmp/home/<u>`, `C:\\Users\\<u>`).
USER_ROOT_RE = re.compile(
    r"(?:(?<![A-Za-z0-9_.\-/\\])(?:[A-Za-z]:)?[/\\]{1,2}(?:" + "|".join(re.escape(r).replace("/", r"[/\\]") for r in USER_ROOTS)
    + r")|[/\\]{1,2}(?:home|Users|envs|venvs|\.virtualenvs))(?P<rest>(?:[/\\]{1,2}[A-Za-z0-9_][A-Za-z0-9_.\-]{0,63}){1,2})(?=[/\\\s\"':;,)\]}>|]|$)")


def user_components(rest: str) -> Iterator[tuple[int, int]]:
    """[start, end) in `rest` (the components after a user root) of the component that names a
    person: the first one, or the second when the first is a shared directory (`/fsx/shared/<u>`).
    A last component that holds a dot is a file (`/data/train.parquet`), not a person."""
    parts = [(m.start(), m.end()) for m in re.finditer(r"[A-Za-z0-9_][A-Za-z0-9_.\-]*", rest)]
    for i, (a, b) in enumerate(parts):
        name = rest[a:b]
        is_last = i == len(parts) - 1
        if is_last and "." in name and len(parts) > 1:
            return
        if name.lower() in NOT_USERS:
            continue
        if is_last and len(parts) == 1 and "." in name:
            return
        yield a, b
        return


# ------------------------------------------------------------------------------------------------
# argv secrets in every spelling
# ------------------------------------------------------------------------------------------------

_Q = r"""(?:'(?P<sq>[^'\x00\n]{1,4096})'|"(?P<dq>(?:[^"\\\x00\n]|\\.){1,4096})")"""
# ['--api-key', 'v'] / ("--api-key", "v") : a Python list/tuple repr of argv
_ARGV_LIST = re.compile(r"""(?P<q0>['"])(?P<name>--?[A-Za-z][A-Za-z0-9_.\-]{0,60})(?P=q0)\s*,\s*""" + _Q)
# --api-key 'v' / --api-key "v" / --api-key='v'
_FLAG_QUOTED = re.compile(r"""(?<![A-Za-z0-9_\-])(?P<name>--?[A-Za-z][A-Za-z0-9_.\-]{1,60})(?:[ \t]+|=)""" + _Q)
# Tools whose password option is not secret-named: mysql -p v / -pv, sshpass -p v, redis-cli -a v.
_TOOL_OPTS = {"mysql": "p", "mysqldump": "p", "mysqladmin": "p", "mariadb": "p", "sshpass": "p",
              "redis-cli": "a", "smbclient": "U", "mongo": "p", "mongosh": "p", "htpasswd": "b", "curl": "u"}
_TOOL_RE = re.compile(
    r"(?<![A-Za-z0-9_\-])(?P<tool>" + "|".join(re.escape(t) for t in sorted(_TOOL_OPTS, key=len, reverse=True))
    + r")(?![A-Za-z0-9_\-])(?P<args>[^|;&\n\x00]{0,400})")
# Literals (lower case) without which `argv_secret_spans` finds nothing but secret-named flags
# (those are gated by the secret-name words).
ARGV_HINTS: tuple[str, ...] = tuple(sorted(_TOOL_OPTS)) + ("authorization",)
# Authorization: Basic/Bearer/Token <credential> in headers and header dicts, of any length.
_AUTH_HEADER = re.compile(r"""(?i)authorization['"]?\s*[:=,]\s*['"]?(?:basic|bearer|token|digest|negotiate)\s+(?P<v>[A-Za-z0-9._~+/=\-:]{1,4096})""")


def argv_secret_spans(text: str, is_secret_name: Callable[[str], bool]) -> Iterator[tuple[int, int]]:
    """[start, end) of values `iter_assignments` (rules.py) cannot see: quoted flag values, argv
    list reprs, tool password options and auth headers."""
    if "-" in text:
        if "'" in text or '"' in text:
            for rx in (_ARGV_LIST, _FLAG_QUOTED):
                for m in rx.finditer(text):
                    if is_secret_name(m.group("name")):
                        g = "sq" if m.group("sq") is not None else "dq"
                        yield m.start(g), m.end(g)
        for m in _TOOL_RE.finditer(text):
            opt = _TOOL_OPTS[m.group("tool")]
            base = m.start("args")
            for o in re.finditer(r"(?<!\S)-" + opt + r"""(?:[ \t]*(?:'([^'\n]+)'|"([^"\n]+)")|[ \t]*([^\s'"\-][^\s]*))""", m.group("args")):
                g = next(i for i in (1, 2, 3) if o.group(i) is not None) if any(o.groups()) else None
                if g is not None:
                    yield base + o.start(g), base + o.end(g)
    low = text.lower()
    if "authorization" in low:
        for m in _AUTH_HEADER.finditer(text):
            yield m.start("v"), m.end("v")


# Each rule: what it must catch / what it must leave alone (FAKE values). Checked by the tests.
EXAMPLES: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {
    "host": (("ssh gpu-node-17.corp.example-ai.com", "master_addr=10.4.2.17", "bind [fd12:3456:789a::17]:29500",
              "node ip-10-0-0-12.ec2.internal up", "trainer.cluster.local"),
             ("torch.nn.functional.linear", "model.safetensors", "--host 0.0.0.0", "http://127.0.0.1:8265",
              "https://oauth2.googleapis.com/token", "at::native::vectorized_elementwise_kernel", "v1.2.3",
              "cutlass::gemm::GemmShape<128, 128, 32>", "::1")),
    "email": (("jane.doe@corp.example.com", "a@lab.org"), ("user@host:/path", "@torch.compile")),
    "user_root": (("/fsx/jdoe/ckpt/model.pt", "/scratch/jdoe/run", "/lustre/projects/jdoe/x.py", "/home/jdoe/.cache"),
                  ("/usr/lib/python3.10/site-packages/torch/nn/modules/module.py", "/data/train.parquet")),
    "argv": (("['--api-key', 'sk0123456789abcdef']", "--api-key 'sk0123456789abcdef'", "mysql -u root -p s3cretpw db",
              "sshpass -p 'hunter22x' ssh x", "{'Authorization': 'Basic dXM6cHc='}"),
             ("['--lr', '1e-4']", "--host '0.0.0.0'", "mysql -u root db")),
}
