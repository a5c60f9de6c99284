"""Deny by default for the free text of paths and command lines (issue 33).

Why a rule of its own: the other rules replace what has a known shape (a secret, a host, a user
directory). Paths and command lines hold names of no fixed shape (`/lab7/proj-x/run.py`,
`trainer.experiment_name=secret-grpo`), so here the rule is reversed: a part is kept only when it
is structure (a known root, a package-relative part, a code-shaped file name) or a value from a
short vocabulary (numbers, booleans, known enum values, module names); every other part becomes
a stable pseudonym `p-<letters>`.

Nothing here rewrites text: `deny_spans` yields (start, end) of the parts to replace; the Scrubber
replaces them with salted pseudonyms spelt in non-hex letters (identities.fallback_pseudonym), which
this rule keeps when it meets them again, so scrub's output is clean to check whatever the salt.

Free text a person wrote (an NVTX message, a thread name) is judged by where it comes from
(provenance.py, issue 39): published only when a public source writes it or its owner approved it,
else as one whole-string pseudonym; this rule is its second net, as for every field.
"""
from __future__ import annotations

import re
from typing import Iterator

from .shapes import PSEUDONYM_RE, PUBLIC_MODEL_ORGS

# Path prefixes whose every component is the machine's, never a person's.
KEEP_ROOTS: tuple[str, ...] = (
    "/usr/", "/opt/conda/", "/opt/nvidia/", "/proc/", "/dev/", "/sys/", "/bin/", "/sbin/", "/lib/",
    "/lib64/", "/etc/", "/var/lib/", "/var/log/", "/run/", "/tmp/ray/", "/tmp/nvidia/", "/root/.cache/", "/opt/rocm/",
)
# Directories every install or cluster layout has: kept wherever they are.
STRUCTURE_WORDS = frozenset({
    "home", "Users", "tmp", "mnt", "srv", "opt", "usr", "var", "lib", "lib64", "bin", "sbin", "etc", "local",
    "share", "include", "src", "logs", "log", "ray", "session_latest", "runtime_resources", "envs", "venvs",
    "venv", ".venv", "env", "scratch", "fsx", "lustre", "workspace", "data", "outputs", "checkpoints", "ckpt",
    "models", "cache", ".cache", "huggingface", "hub", "wandb", "run", "runs", "profile", "profiles",
    "nsys", "traces", "trace", "results", "root", "app", "code", "shm", "dev", "proc", "sys", "site",
    "conda", "miniconda3", "anaconda3", "nvidia", "cuda", "python", "latest", "files", "config", "configs",
    "out", "output", "raw", "input", "inputs", "build", "dist", "scripts", "exp", "exps", "experiments",
    "artifacts", "export", "exports", "reports", "report", "work", "workdir", "jobs", "job", "shared",
    "common", "software", "apps", "modules", "projects", "users", "nfs", "torchinductor_root", "triton", "gcc", "clang", "llvm", "tiktoken_cache",
    "torch_cache", "hf_cache", "triton_cache", ".triton", "pip",
    "[REDACTED]",
})
# A component from which on the rest of the path is the package's own layout.
PACKAGES = frozenset({
    "site-packages", "dist-packages", "verl", "torch", "vllm", "sglang", "ray", "transformers", "megatron",
    "flash_attn", "triton", "apex", "accelerate", "deepspeed", "peft", "numpy", "hydra", "omegaconf",
    "tensordict", "nvtx", "cupy", "nccl", "trl", "xformers", "flashinfer", "datasets", "safetensors",
    "verlprof", "recipe", "examples", "tests",
})
_SESSION_RE = re.compile(r"session_\d{4}-\d{2}-\d{2}_\d{2}-\d{2}-\d{2}_\d+_\d+|python\d(?:\.\d+)?|cuda-\d+(?:\.\d+)?|\d+")
# A code-shaped file name: an identifier stem, a known-looking extension.
_FILE_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_+\-]*(?:\.[A-Za-z0-9_]{1,10}){1,3}(?:\(\d+\))?|[A-Za-z_][A-Za-z0-9_+\-]*")
# Programs a path ends with.
TOOLS = frozenset({"g++", "gcc", "c++", "cc", "clang", "clang++", "nvcc", "bash", "sh", "zsh", "env", "nsys",
                   "torchrun", "ray", "srun", "python", "pip", "uv", "conda", "verlprof", "ncu", "java", "node"})
# An absolute path: starts at `/` not preceded by a name (`irq/592-nvidia`, `a/b`, URLs are not).
PATH_RE = re.compile(r"(?<![A-Za-z0-9_.~:/\\\-@%<*])/(?=[A-Za-z0-9_.~\-\[])[^\s\x00\"'`,;()\[\]{}<>:=|]*(?:\[REDACTED\][^\s\x00\"'`,;(){}<>:=|]*)*")

# Values of argv/Hydra options that name nobody: verl's, torch's and the launchers' vocabulary.
ENUM_VALUES = frozenset({
    "true", "false", "none", "null", "yes", "no", "on", "off", "auto", "default",
    "bf16", "fp16", "fp32", "fp8", "bfloat16", "float16", "float32", "int8", "int4", "half", "float",
    "fsdp", "fsdp2", "megatron", "hf", "vllm", "sglang", "naive", "dp", "tp", "pp", "sp", "ep",
    "grpo", "gae", "ppo", "remax", "rloo", "reinforce_plus_plus", "reinforce_plus_plus_baseline", "opo",
    "gpg", "dapo", "grpo_passk", "low_var_kl", "kl", "abs", "mse", "full", "k1", "k2", "k3",
    "token-mean", "seq-mean-token-sum", "seq-mean-token-mean", "seq-mean-token-sum-norm", "fixed", "adaptive",
    "console", "wandb", "tensorboard", "mlflow", "swanlab", "vemlp_wandb", "file",
    "nccl", "gloo", "cuda", "cpu", "gpu", "mps", "sync", "async", "async_server", "spmd", "server",
    "nsys", "torch", "torch_memory", "npu", "dynamic", "static", "disable", "enable", "left", "right",
    "eager", "inductor", "cudagraph", "flash_attention_2", "sdpa", "flash_attn", "spawn", "fork",
    "cosine", "constant", "linear", "warmup", "adamw", "adam", "sgd", "gsm8k", "math", "geo3k",
    "sqlite", "json", "parquet", "html", "csv", "arrow", "text", "nsys-rep", "qdrep", "jsonl", "yaml",
    "python", "python3", "main", "train", "val", "test", "info", "debug", "warning", "error", "critical",
})
# Config roots of verl's Hydra tree (keys of `key=value` overrides).
HYDRA_ROOTS = frozenset({
    "trainer", "actor_rollout_ref", "data", "algorithm", "critic", "reward_model", "custom_reward_function",
    "ray_init", "ray_kwargs", "global_profiler", "hydra", "reward", "rollout", "actor", "ref", "model",
})
_MODEL_ID_RE = re.compile(r"(?P<org>[A-Za-z0-9][A-Za-z0-9_.\-]{0,95})/[A-Za-z0-9][A-Za-z0-9_.\-]{0,95}")
_NUMBER_RE = re.compile(r"[+\-]?(?:\d[\d_]*(?:\.\d*)?|\.\d+)(?:[eE][+\-]?\d+)?[kKmMgGbB%]?|0x[0-9a-fA-F]+")
_MODULE_RE = re.compile(r"(?:" + "|".join(sorted(PACKAGES - {"site-packages", "dist-packages"})) + r")(?:\.[A-Za-z_]\w*)+")
# `key=value` of an argv item or a command line: `--flag=v`, `-x=v`, Hydra `a.b.c=v`, `+a.b=v`, `++a.b=v`
ASSIGN_RE = re.compile(r"(?<![^\s\"'\[,])(?P<k>--?[A-Za-z][\w.\-]*|\+{0,2}(?P<root>[a-z_][a-z0-9_]*)(?:\.[A-Za-z0-9_]+)+)="
                       r"(?P<v>\[[^\]\s]*\]|[^\s\"',]+)")
# a command line: holds a launcher or interpreter (a message that names an option, `run
# nsys export --type sqlite`, is not one: there the word after an option is the tool's vocabulary)
COMMAND_RE = re.compile(r"(?:^|[\s(\"'])(?:\S*/)?(?:python[\d.]*|torchrun|srun|mpirun|mpiexec|ray|accelerate|"
                        r"deepspeed|bash|sh|uv|pytest|conda|sbatch)(?:\s|$)")
# `--flag value` inside one command line
FLAG_VALUE_RE = re.compile(r"(?<!\S)--[A-Za-z][\w\-]*[ ]+(?P<v>[^\s\-\"'][^\s\"']*)")
HINT_RE = re.compile(r"(?<![A-Za-z0-9_.~:/\\\-@%<*])/[A-Za-z0-9_.~\-]|(?<=[\w.\-])=[^\s=]|--[A-Za-z]")


def value_kept(value: str) -> bool:
    """A command-line value that names nobody: a number, a boolean or enum word, a module name,
    a pseudonym or redaction, a list of those."""
    v = value.strip("'\"")
    if (not v or v == "[REDACTED]" or PSEUDONYM_RE.fullmatch(v) or _NUMBER_RE.fullmatch(v)
            or re.fullmatch(r"[0-9a-fA-F.:]*[.:][0-9a-fA-F.:]*", v) or v == "localhost"):
        # (addresses and versions: judged by the network rule, which ran first)
        return True
    if v[0] == "[" and v[-1:] == "]":
        return all(value_kept(x.strip().strip("'\"")) for x in v[1:-1].split(",") if x.strip())
    m = _MODEL_ID_RE.fullmatch(v)
    if m is not None and m.group("org").lower() in PUBLIC_MODEL_ORGS:
        return True                 # a public Hugging Face model or dataset id
    return v.lower() in ENUM_VALUES or bool(_MODULE_RE.fullmatch(v)) or v.startswith("/")


def _component_kept(comp: str) -> bool:
    return (len(comp) <= 2 or comp in STRUCTURE_WORDS or comp in PACKAGES or bool(PSEUDONYM_RE.fullmatch(comp))
            or bool(_SESSION_RE.fullmatch(comp)) or comp in (".", "..", "~") or "[REDACTED]" in comp)


def path_spans(text: str) -> Iterator[tuple[int, int]]:
    """[start, end) of the path components to pseudonymise in every absolute path of `text`."""
    for m in PATH_RE.finditer(text):
        path = m.group(0)
        if any(path.startswith(r) or path + "/" == r for r in KEEP_ROOTS):
            continue
        comps = path.split("/")
        pos = m.start() + 1               # after the leading "/"
        last = len(comps) - 1
        for i, comp in enumerate(comps[1:], 1):
            if comp in PACKAGES:           # the package's own layout from here on
                break
            if comp and not _component_kept(comp):
                # a file name with an extension, or a tool (a directory without one is a name)
                file_ok = i == last and _FILE_RE.fullmatch(comp) and ("." in comp or comp in TOOLS)
                if not file_ok:
                    yield pos, pos + len(comp)
            pos += len(comp) + 1


def argv_spans(text: str) -> Iterator[tuple[int, int]]:
    """[start, end) of option values to pseudonymise: `--x=v`, Hydra `a.b=v` (known verl roots
    only: `KeyT=float` in a C++ signature is no option), `--x v` in one command line."""
    for m in ASSIGN_RE.finditer(text):
        root = m.group("root")
        if root is not None and root not in HYDRA_ROOTS:
            continue
        if not value_kept(m.group("v")):
            yield m.start("v"), m.end("v")
    for m in FLAG_VALUE_RE.finditer(text) if COMMAND_RE.search(text) else ():
        if not value_kept(m.group("v")):
            yield m.start("v"), m.end("v")


def denied_flag_items(items: list) -> set[int]:
    """Indices of list items that are the value of the option before them and name something
    outside the vocabulary: `["--run-name", "<value>"]` as separate items (argv lists, torch's
    `Concrete Inputs`); the Scrubber pseudonymises them (`Scrubber.deny_value`)."""
    out: set[int] = set()
    for i in range(len(items) - 1):
        a, b = items[i], items[i + 1]
        if (type(a) is str and type(b) is str and a[:2] == "--" and "=" not in a and len(a) <= 64
                and b and b[:1] != "-" and not value_kept(b)):
            out.add(i + 1)
    return out


def deny_spans(text: str) -> list[tuple[int, int]]:
    """Every span `deny` replaces in `text`, sorted, overlaps dropped (the first wins)."""
    if not HINT_RE.search(text):
        return []
    spans = sorted(set(argv_spans(text)) | set(path_spans(text)))
    out: list[tuple[int, int]] = []
    for a, b in spans:
        if out and a < out[-1][1]:
            continue
        out.append((a, b))
    return out


# What the rule must replace and what it must leave alone (fake values), checked by tests.
EXAMPLES: tuple[tuple[str, ...], tuple[str, ...]] = (
    ("/home/u/proj-x/run.py", "/lab7/team/cfg.yaml", "/opt/acme/.venv/bin/python3",
     "trainer.experiment_name=secret-grpo", "--run-name=secretrun", "--output-dir /lab7/x",
     "python3 -m verl.trainer.main_ppo --tag projectx", "actor_rollout_ref.model.path=qzuser/my-private-model"),
    ("/usr/lib/python3.10/site-packages/torch/nn/functional.py", "/proc/self/maps", "/dev/shm",
     "/tmp/ray/session_2025-01-02_03-04-05_123456_789/logs", "actor_rollout_ref.rollout.name=vllm",
     "trainer.total_epochs=15", "python -m sglang --host 0.0.0.0 --port 30000", "/root/out/raw/x.sqlite",
     "/tmp/torchinductor_root/qd/cqd2vhk5xjz3m4ab7wq9p2rdl6s8t0yvn1c5e7g3h.py", "--dtype=bf16", "Kernel<ValueT=int>", "torch/optim/adam.py(953): <genexpr>",
     "kworker/98:1-events", "<title>x</title></svg>", "TIKTOKEN_CACHE_DIR=/opt/tiktoken_cache", "irq/592-nvidia", "python3 -m verl.trainer.main_ppo", "tokens/s",
     "/home/user-3/verl/verl/trainer/main_ppo.py(12): main", "trainer.logger=['console','wandb']",
     "actor_rollout_ref.model.path=Qwen/Qwen2.5-7B-Instruct", "--model deepseek-ai/DeepSeek-R1 x", "data.train_files=gsm8k"),
)

__all__ = ["deny_spans", "denied_flag_items", "path_spans", "argv_spans", "value_kept", "HINT_RE", "EXAMPLES", "KEEP_ROOTS",
           "ENUM_VALUES", "HYDRA_ROOTS", "PACKAGES", "PUBLIC_MODEL_ORGS", "STRUCTURE_WORDS", "TOOLS"]
