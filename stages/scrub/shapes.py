"""Personal data that has a shape but no fixed place (issue 33): URLs, hosts by shape, hardware ids,
`~user` paths, and secret-named flags whose value is the next list item.

Why a module of its own: personal.py finds what a cluster writes about itself in fixed forms (FQDNs
ending in a known top-level domain, addresses, e-mails, cluster user roots); these rules judge by
shape, so an internal `build01.team` or `db.lab:5432`, the host after `user:pass@` and the values
of a URL's query are found whatever the domain. Deny by default inside a URL: the scheme, a public
host (personal.KEEP_HOSTS), the port, and path components from a short vocabulary are kept; every
other part becomes a stable pseudonym or `[REDACTED]` (query and fragment values).

Nothing here rewrites text by itself: each rule yields spans with what they hold, and the Scrubber
chooses the replacement (a pseudonym from the bundle's map), so scrub and check agree. Every rule
ships what it must catch and what it must leave alone (`EXAMPLES`), checked by the tests.
"""
from __future__ import annotations

import re
from typing import Callable, Iterator

from .personal import host_kept, ip_kept

# Labels a dotted code name starts with (`torch.ops.c10d`, `c10d.allreduce`): never a host.
CODE_ROOTS = frozenset({
    "torch", "aten", "c10", "c10d", "prim", "prims", "verl", "vllm", "sglang", "nccl", "triton", "cuda",
    "cudnn", "cublas", "cublaslt", "cutlass", "cute", "thrust", "cub", "nvtx", "np", "numpy", "ray",
    "megatron", "transformers", "te", "transformer_engine", "flash_attn", "apex", "deepspeed", "os", "sys",
    "std", "at", "inductor", "ops", "fx", "jit", "nn", "py", "python", "python3", "sm", "fp8", "bf16",
    "fp16", "fp32", "tf32", "int8", "int4", "gemm", "mma", "wgmma", "ampere", "hopper", "blackwell",
})
# Last labels that make a dotted name a file, never a host (`model-00001.safetensors`, `x.py:42`).
FILE_EXTENSIONS = frozenset({
    "py", "pyc", "pyx", "pyi", "cpp", "cc", "cxx", "c", "h", "hh", "hpp", "cu", "cuh", "so", "a", "o",
    "json", "gz", "xz", "zst", "bz2", "tar", "tgz", "zip", "whl", "egg", "pt", "pth", "bin", "ckpt",
    "safetensors", "onnx", "engine", "plan", "ptx", "cubin", "fatbin", "txt", "log", "md", "rst", "yaml",
    "yml", "toml", "ini", "cfg", "conf", "csv", "tsv", "parquet", "arrow", "sqlite", "db", "rep", "qdrep",
    "qdstrm", "pkl", "pickle", "npz", "npy", "h5", "hdf5", "html", "htm", "js", "css", "png", "jpg",
    "jpeg", "svg", "pdf", "sh", "bash", "ipynb", "lock", "out", "err", "trace", "nsys", "tmp", "bak",
    "mp4", "wav", "jsonl", "model", "vocab", "tiktoken", "proto", "pb", "mlir", "ll", "ttir", "ttgir",
    "llir", "hsaco", "exe", "dll", "lib", "mjs", "cjs", "ts", "tsx", "jsx", "wasm", "map", "glsl", "wgsl",
})
# Path components of a URL kept as they are: structure, not content.
URL_WORDS = frozenset({
    "api", "apis", "runs", "run", "resolve", "main", "master", "blob", "tree", "raw", "files", "file",
    "models", "model", "datasets", "dataset", "spaces", "score", "scores", "health", "healthz", "metrics",
    "generate", "predict", "chat", "completions", "embeddings", "upload", "download", "static", "index",
    "graphql", "v", "latest", "stable", "releases", "release", "docs", "status", "reward", "rewards",
    "judge", "infer", "inference", "tokenize", "detokenize", "ping", "ready", "live", "update", "weights",
    "artifacts", "reports", "sweeps", "projects", "project", "logs", "log", "simple", "whl", "nightly",
    "token", "tokens", "auth", "oauth", "oauth2", "authorize", "callback", "userinfo", "search", "query",
    "items", "list", "info", "config", "services", "hooks", "webhook", "webhooks", "storage", "objects",
    "buckets", "bucket", "repos", "users", "user", "org", "orgs", "groups", "public", "private", "refs",
    "heads", "tags", "commit", "commits", "archive", "packages", "package", "pypi", "torch", "verl",
})
# Public hosts whose path names a person or their work (`wandb.ai/<entity>/<project>`): their path
# components are judged like a private host's; other public hosts keep their path (`www.w3.org/2000/svg`).
PERSONAL_PATH_HOSTS = frozenset({"wandb.ai", "api.wandb.ai", "github.com", "gitlab.com", "huggingface.co", "hf.co",
                                 "raw.githubusercontent.com", "bitbucket.org", "docker.io", "hub.docker.com"})
# Organisations on the Hugging Face Hub whose model and dataset ids are public (`Qwen/Qwen2.5-7B-Instruct`
# as `actor_rollout_ref.model.path=` stays; `<user>/<private-model>` becomes a pseudonym). Reviewed:
# the labs and companies that publish the open models verl recipes train (lower case).
PUBLIC_MODEL_ORGS = frozenset({
    "qwen", "meta-llama", "deepseek-ai", "mistralai", "google", "microsoft", "thudm", "zai-org", "openai",
    "nvidia", "allenai", "huggingfaceh4", "huggingfacetb", "tiiuae", "bigcode", "eleutherai", "facebook",
    "01-ai", "internlm", "baichuan-inc", "moonshotai", "openbmb", "ibm-granite", "stabilityai", "bigscience",
    "openai-community", "gpt2", "lmsys", "teknium", "nousresearch", "ai2", "apple", "salesforce",
    "openrlhf", "volcengine", "bytedance-seed", "agentica-org", "open-r1", "gsm8k", "openai_humaneval",
    "hiyouga", "llava-hf", "opengvlab", "unsloth", "intel", "amd", "xai-org", "cohereforai", "minimaxai",
})
# Hub hosts whose path starts with an org: a public org's path stays (`huggingface.co/Qwen/Qwen2.5-7B`)
HUB_HOSTS = frozenset({"huggingface.co", "hf.co"})
# Scrub's own pseudonyms and redactions: a second pass leaves them as they are.
PSEUDONYM_RE = re.compile(r"(?:host|user|name|mac|gpu|GPU|MIG|p|w)-(?:\d+|[0-9a-f]{8}|[0-9a-f]{12}|[g-z]{8}|[g-z]{12})")

_LABEL = r"[A-Za-z0-9](?:[A-Za-z0-9\-]{0,61}[A-Za-z0-9])?"
URL_RE = re.compile(
    r"(?<![A-Za-z0-9+.\-])(?P<scheme>[A-Za-z][A-Za-z0-9+.\-]{1,20})://"
    r"(?P<userinfo>(?:\[REDACTED\]|[^/\s@\"'<>\x00\[\]]{0,256})@)?"
    r"(?P<host>\[[0-9A-Fa-f:.]{2,45}\]|[A-Za-z0-9\-._~%]{1,253})"
    r"(?P<port>:[0-9]{1,5})?"
    r"(?P<rest>[/?#][^\s\"'<>\x00`]*)?")
# A dotted name that is a host by its shape: its first label holds a digit or a hyphen next to
# letters (`build01`, `gpu-17`, `node-3a`) and its last label is alphabetic (`.team`, `.lab`).
# A word of its own: blanks, quotes or separators on both sides (not the operators of code).
SHAPED_HOST_RE = re.compile(
    r"(?:^|(?<=[\s\"'=,;(\[{@]))(?P<h>(?P<first>" + _LABEL + r")(?:\." + _LABEL + r")*\.(?P<last>[A-Za-z]{2,24}))"
    r"(?=$|[\s\"',;)\]}:])")
# A dotted name followed by a port, at the start of a word (`db.lab:5432`, `svc.corp.x:8000`; not
# the `a?b.c:80` of minified JavaScript).
PORTED_HOST_RE = re.compile(
    r"(?:^|(?<=[\s\"'=,;\[{]))(?P<h>" + _LABEL + r"(?:\." + _LABEL + r")*\.(?P<last>[A-Za-z]{2,24}))"
    r":[0-9]{2,5}(?![0-9])")
MAC_RE = re.compile(r"(?<![0-9A-Fa-f:\-.])(?P<m>[0-9A-Fa-f]{2}(?P<s>[:\-])(?:[0-9A-Fa-f]{2}(?P=s)){4}[0-9A-Fa-f]{2})"
                    r"(?![0-9A-Fa-f:\-])")
# A GPU's short id (`nvidia-smi -L`: `GPU-bf8e6e3d`) and a MIG device (`MIG-GPU-<uuid>/1/0`).
GPU_SHORT_RE = re.compile(r"(?i)(?<![0-9a-z\-])(?P<p>GPU|MIG)-(?P<u>[0-9a-f]{8})(?![0-9a-z\-])")
TILDE_USER_RE = re.compile(r"(?<![A-Za-z0-9_~$])~(?P<u>[A-Za-z_][A-Za-z0-9_.\-]{0,31})(?=[/\\])")
# netrc `login <user>` / `machine <host>`; kubeconfig `users:` then `- name: <user>`.
NETRC_RE = re.compile(r"(?<![A-Za-z0-9_])(?P<k>login|machine)[ \t]+(?P<v>[A-Za-z0-9_][A-Za-z0-9_.@\-]{0,63})")
KUBE_USER_RE = re.compile(r"users:\s*\n\s*-\s*name:\s*['\"]?(?P<v>[A-Za-z0-9_][A-Za-z0-9_.@\-]{0,63})")

_MAC_HINT = re.compile(r"[0-9A-Fa-f]{2}[:\-][0-9A-Fa-f]{2}[:\-][0-9A-Fa-f]{2}")
_GPU_HINT = re.compile(r"(?i:gpu|mig)-[0-9A-Fa-f]{8}")
_HOST_HINT = re.compile(r"[a-z0-9]\.[a-z]{2,24}:[0-9]{2}|[a-z][0-9\-][a-z0-9\-]*\.[a-z]{2,24}")


class _Hint:
    """What the Prefilter must let through: a superset of every rule above (`search(text)`, as a
    compiled pattern answers). Each regex runs only behind a character its rule cannot match
    without: one regex over every string cost more than all the other prefilter checks together."""

    def search(self, t: str) -> bool | None:
        """True when a rule may match, else None (a pattern's "no match": callers test `is not None`)."""
        if "://" in t or "~" in t or "users:" in t or "login" in t or "machine" in t:
            return True
        colon, dash = ":" in t, "-" in t
        if (colon or dash) and _MAC_HINT.search(t) is not None:
            return True
        if dash and ("PU-" in t or "pu-" in t or "IG-" in t or "ig-" in t) and _GPU_HINT.search(t) is not None:
            return True
        return True if "." in t and _HOST_HINT.search(t) is not None else None


HINT_RE = _Hint()


_HOST_FIRST = re.compile(r"[a-z]{3,}(?:[0-9]+[a-z]?|(?:-[a-z0-9]{2,}|-[0-9]+)+)|[a-z]{2}[0-9]+")


def _is_host(name: str, last: str, ported: bool) -> bool:
    """A dotted name found by shape is a host unless it is a file, a code name, kept or a version:
    lower case (code names are camel case: `X8.lineGroupStyle`, `i-Math.floor`), and without a
    port its first label reads as a machine's (`build01`, `gpu-17`, `db7`; not `k1t.exports`)."""
    low = name.lower()
    if low != name:
        return False
    labels = low.split(".")
    if last.lower() in FILE_EXTENSIONS or labels[0] in CODE_ROOTS or host_kept(low) or PSEUDONYM_RE.fullmatch(name):
        return False
    if ported:
        return True
    return bool(_HOST_FIRST.fullmatch(labels[0]))


def host_spans(text: str) -> Iterator[tuple[int, int]]:
    """[start, end) of host names found by shape (outside URLs; `url_parts` handles those)."""
    if ":" in text:
        for m in PORTED_HOST_RE.finditer(text):
            if _is_host(m.group("h"), m.group("last"), True):
                yield m.start("h"), m.end("h")
    if "." in text:
        for m in SHAPED_HOST_RE.finditer(text):
            if _is_host(m.group("h"), m.group("last"), False):
                yield m.start("h"), m.end("h")


_LOCAL_SCHEMES = frozenset({"chrome", "about", "edge", "brave", "file", "data", "javascript", "view-source",
                            "devtools", "blob"})


def url_parts(text: str) -> Iterator[tuple[int, int, str]]:
    """(start, end, what) of the parts of each URL that leave as pseudonyms: "userinfo" (redacted),
    "host" (the host pseudonym), "path" (one path component), "value" (a query or fragment value).
    Kept: scheme, public hosts and addresses that identify nobody, port, URL_WORDS, numbers,
    `[REDACTED]` and scrub's own pseudonyms."""
    for m in URL_RE.finditer(text):
        ui = m.group("userinfo")
        if ui and ui[:-1] not in ("", "[REDACTED]"):
            yield m.start("userinfo"), m.end("userinfo") - 1, "userinfo"
        host = m.group("host")
        bare = host.strip("[]")
        is_ip = bool(re.fullmatch(r"[0-9.]+|[0-9A-Fa-f:.]+", bare)) and (bare.count(".") == 3 or ":" in bare)
        # a single label without a port names no machine by its shape (`chrome://tracing`, `about:`);
        # a learned host name is replaced wherever it is anyway
        public = host_kept(bare) or (is_ip and ip_kept(bare)) or bool(PSEUDONYM_RE.fullmatch(bare)) \
            or bare == "[REDACTED]" or ("." not in bare and not is_ip and not m.group("port")) \
            or m.group("scheme").lower() in _LOCAL_SCHEMES
        if not public:
            yield m.start("host"), m.end("host"), "host"
        rest = m.group("rest")
        if not rest:
            continue
        keep_path = public and (bare.lower() not in PERSONAL_PATH_HOSTS or (
            bare.lower() in HUB_HOSTS and rest[:1] == "/" and "?" not in rest and "#" not in rest
            and rest.split("/")[1].lower() in PUBLIC_MODEL_ORGS))
        base = m.start("rest")
        path, _, tail = rest.partition("?") if "?" in rest.split("#", 1)[0] else (rest.partition("#")[0], "", "")
        frag_at = rest.find("#")
        for c in re.finditer(r"[^/]+", path):
            comp = c.group(0)
            if keep_path or _path_word_kept(comp):
                continue
            stem_end = c.end()
            dot = comp.rfind(".")
            if dot > 0 and comp[dot + 1:].lower() in FILE_EXTENSIONS:
                stem_end = c.start() + dot
            yield base + c.start(), base + stem_end, "path"
        if "?" in rest.split("#", 1)[0]:
            q0 = rest.index("?") + 1
            q1 = frag_at if frag_at >= 0 else len(rest)
            for kv in re.finditer(r"[^&;]+", rest[q0:q1]):
                name, eq, value = kv.group(0).partition("=")
                if eq and value and value != "[REDACTED]":
                    a = base + q0 + kv.start() + len(name) + 1
                    yield a, a + len(value), "value"
                elif not eq and not _path_word_kept(name):
                    yield base + q0 + kv.start(), base + q0 + kv.end(), "value"
        if frag_at >= 0 and rest[frag_at + 1:] and rest[frag_at + 1:] != "[REDACTED]":
            yield base + frag_at + 1, base + len(rest), "value"


def _path_word_kept(comp: str) -> bool:
    low = comp.lower()
    stem = low.rsplit(".", 1)[0] if "." in low and low.rsplit(".", 1)[1] in FILE_EXTENSIONS else low
    return (len(stem) <= 2 or stem in URL_WORDS or bool(re.fullmatch(r"v?[0-9][0-9.]*|[0-9a-f]{0,6}", stem))
            or comp == "[REDACTED]" or bool(PSEUDONYM_RE.fullmatch(comp)))


_CODE_MARKS = ("(", "<", "::", "##", "[REDACTED]")


def is_free_text(text: str) -> bool:
    """Words a person wrote (`run by <user> today`), as opposed to a code-shaped name: a name
    without blanks (identifiers, `ns::op`, `Module.method`, `ProfilerStep#3`, numbers, verl's stage
    names) or a signature (`void f<T>(int)`, `## Call CompiledFxGraph <key> ##`). Free text is kept
    only after every rule ran, and listed in the scrub report for a person to read (issue 33)."""
    if " " not in text.strip() or any(m in text for m in _CODE_MARKS):
        return False
    if " > " in text and all(" " not in p.strip() for p in text.split(" > ")):
        return False            # a phase path of names (`step > gen > generate_sequences`)
    return sum(1 for w in text.split() if len(w) >= 2 and w[0].isalpha()) >= 2


def mac_spans(text: str) -> Iterator[tuple[int, int]]:
    """[start, end) of MAC addresses (all-zero and broadcast ones identify nothing and stay)."""
    for m in MAC_RE.finditer(text):
        digits = re.sub(r"[:\-]", "", m.group("m")).lower()
        if digits not in ("000000000000", "ffffffffffff"):
            yield m.start("m"), m.end("m")


def tilde_users(text: str) -> Iterator[tuple[int, int]]:
    """[start, end) of the user in `~user/` paths."""
    for m in TILDE_USER_RE.finditer(text):
        yield m.start("u"), m.end("u")


def flag_value_items(items: list, is_secret_name: Callable[[str], bool]) -> set[int]:
    """Indices of list items that are the value of the secret-named flag before them:
    `["--api-key", "<value>"]` as separate items (torch's `Concrete Inputs`, argv lists)."""
    out: set[int] = set()
    for i in range(len(items) - 1):
        a, b = items[i], items[i + 1]
        if (type(a) is str and type(b) is str and a[:1] == "-" and "=" not in a and len(a) <= 64
                and b and b[:1] != "-" and is_secret_name(a)):
            out.add(i + 1)
    return out


# What each rule must catch and must leave alone (fake values), checked by tests/test_scrub_issue33.py.
EXAMPLES: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {
    "url": (("amqp://user:pass@broker.corp.example.com:5672", "http://svc.corp.x.com:8000/score?token=abc123",
             "https://wandb.ai/hopperx/verl-grpo/runs/abc", "https://build01.team/x",
             "https://huggingface.co/hopperx/private-7b"),
            ("https://pypi.org/simple", "http://localhost:8000/health", "http://127.0.0.1:8265/api",
             "https://huggingface.co/Qwen/Qwen2.5-7B-Instruct/resolve/main/config.json")),
    "host": (("ssh build01.team", "db.lab:5432", "gpu-17.local", "node-3.cluster.lab"),
             ("c10d.allreduce", "model-00001-of-00004.safetensors", "torch.cuda.amp", "main_ppo.py:42",
              "verl.trainer.ppo", "python3.10", "v1.2")),
    "mac": (("mac 00:1A:2B:3C:4D:5E here", "ether 3c-ec-ef-01-02-03"), ("00:00:00:00:00:00", "12:30:45")),
    "gpu_short": (("GPU-bf8e6e3d", "MIG-1a2b3c4d"), ("GPU-0", "gpu-kernel")),
    "tilde": (("~hopperx/projects", "cd ~alice/x"), ("~/x", "a~b/c")),
}


__all__ = ["PUBLIC_MODEL_ORGS", "is_free_text", "URL_RE", "HINT_RE", "PSEUDONYM_RE", "host_spans", "url_parts", "mac_spans", "tilde_users",
           "flag_value_items", "NETRC_RE", "KUBE_USER_RE", "GPU_SHORT_RE", "EXAMPLES"]
