"""Build stages/scrub/public_names.txt.gz: the names public packages write (issue 39).

    .venv/bin/python tools/build_public_names.py [--cache DIR] [--out FILE] [--offline]

Why: scrub publishes a user-written string (an NVTX range, a thread or record_function name) as it
is only when a public source writes the same whole string; every other one becomes a pseudonym. This
script reads the sources of the pinned packages (PINS) and writes what they pass to the profiler and
naming APIs (tools/public_names_ast.py says which calls and how holes are typed), plus:

- torch's C++ names: autograd node names (`name() const override { return "X"; }` in the shipped
  headers), `RECORD_FUNCTION` / `RECORD_USER_SCOPE` literals, `aten::<op>` for every op of
  torchgen's packaged native_functions.yaml, and names read by pattern from torch's shared libraries
  (`c10d::*`, `gloo:*`, `pt_*` thread names, ...: BINARY_PATTERNS);
- the NCCL API names of nccl.h (NCCL's own NVTX ranges) and cuBLAS's (nsys's cuBLAS trace);
- names no shipped text writes, listed by hand in HAND with the file that writes them.

Downloads (`pip download --no-deps`, PyPI) are cached in `.cache/public_names/` (git-ignored); the
output is deterministic: sorted, gzip with mtime 0 and no file name, so two builds are byte-equal.
"""
from __future__ import annotations

import argparse
import gzip
import io
import os
import re
import subprocess
import sys
import tarfile
import time
import zipfile
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from public_names_ast import Found, scan_source  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "stages" / "scrub" / "public_names.txt.gz"
CACHE = ROOT / ".cache" / "public_names"
FORMAT = "verlprof-public-names/1"

# (distribution, version). Order is priority: a string several packages write is reported as the
# first one's (verl first: the runs this tool reads are verl's).
PINS: list[tuple[str, str]] = [
    ("verl", "0.9.1"),
    ("torch", "2.13.0"),
    ("vllm", "0.34.0"),
    ("sglang", "0.5.23"),
    ("megatron-core", "0.16.1"),
    ("transformers", "5.25.0"),
    ("accelerate", "1.16.0"),
    ("deepspeed", "0.19.8"),
    ("nvtx", "0.2.17"),
    ("ray", "2.60.0"),
    ("nvidia-nccl-cu12", "2.28.9"),
    ("torchrec", "1.9.2"),
]

# Names no shipped text writes as a literal, each with the file that writes it: "s" a string, "t" a
# template, "n" a thread or process name (also kept cut at COMM_LEN characters).
HAND: dict[str, list[tuple[str, str]]] = {
    "torch": [
        # torch/_dynamo/convert_frame.py: "Torch-Compiled Region: " + str(compile_id); CompileId.__str__
        # (torch/_guards.py) is "{frame_id}/{frame_compile_id}", "_{attempt}" after a restart, and
        # "!{compiled_autograd_id}/" before it under compiled autograd.
        ("t", "Torch-Compiled Region: {int}/{int}"),
        ("t", "Torch-Compiled Region: {int}/{int}_{int}"),
        ("t", "Torch-Compiled Region: !{int}/{int}/{int}"),
        ("t", "Torch-Compiled Region: !{int}/{int}/{int}_{int}"),
        ("t", "Torch-Compiled Region: !{int}/-/-"),
        ("s", "Torch-Compiled Region: Unknown"),
        # torch/csrc/dynamo/eval_frame_cpp.cpp (libtorch_python.so): the guard check of every call.
        ("s", "TorchDynamo Cache Lookup"),
        # torch/csrc/autograd/engine.cpp: every backward node under the profiler.
        ("t", "autograd::engine::evaluate_function: {public}"),
        # torch/csrc/autograd/function.h: a custom autograd.Function's node is "<class>Backward".
        ("t", "{=classes}Backward"),
        ("t", "{=classes}Backward{int}"),
        ("s", "torch::autograd::AccumulateGrad"),
        ("s", "torch::autograd::GraphRoot"),
        ("s", "torch::autograd::CopyBackwards"),
        ("s", "torch::autograd::CopySlices"),
        ("s", "torch::autograd::Error"),
        ("s", "torch::autograd::NotImplemented"),
        # torch/optim/optimizer.py: "Optimizer.step#{}.step".format(self.__class__.__name__)
        ("t", "Optimizer.step#{=classes}.step"),
        ("t", "Optimizer.zero_grad#{=classes}.zero_grad"),
        # torch/nn/modules/module.py (record_function of modules under with_modules / nn.Module:)
        ("t", "nn.Module: {=classes}"),
        ("t", "nn.Module: {=classes}_{int}"),
        # libkineto (output_json.cpp, CuptiActivityProfiler.cpp) inside libtorch: trace metadata
        # and the profiler's own events.
        ("t", "thread {int} ({public})"),
        ("t", "stream {int} "),
        ("t", "stream {int}"),
        ("t", "PyTorch Profiler ({int})"),
        ("s", "Iteration Start: PyTorch Profiler"),
        ("s", "Record Window End"),
        ("s", "Activity Buffer Request"),
        ("s", "Lazy Function Loading"),
        ("s", "Runtime Triggered Module Loading"),
        ("s", "CUPTI Overhead"),
        ("s", "ac2g"),
        ("s", "fwdbwd"),
        ("s", "[memory]"),
        ("s", "process_name"), ("s", "process_labels"), ("s", "process_sort_index"),
        ("s", "thread_name"), ("s", "thread_sort_index"),
        ("s", "python"),
        ("s", "Python"),
        ("s", "Trace"),
        ("s", "cuda_runtime"),
        ("s", "cuda_driver"),
        ("n", "CUPTI worker thread"),
        # torch/csrc/autograd/engine.cpp, torch/csrc/Module.cpp: thread names.
        ("n", "pt_main_thread"),
        ("t", "pt_autograd_{int}"),
        ("n", "pt_gloo_runloop"),
        ("n", "pt_nccl_watchdg"),
        ("n", "pt_nccl_heartbt"),
        ("n", "pt_tcpstore_uv"),
        ("n", "pt_elastic"),
        # torch/csrc/autograd/VariableTypeManual.cpp: detach's record_function names.
        ("s", "detach"),
        ("s", "detach_"),
        # torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp: profilingTitle of each collective (the CPU
        # wheel ships no NCCL library to read them from; the gloo ones are read from libtorch_cpu).
        ("t", "nccl:{=c10d_collectives}"),
        # torch/csrc/profiler/util.cpp getNvtxStr(): emit_nvtx's range names (templates below).
    ],
    "python": [
        # CPython Lib/threading.py and concurrent/futures/thread.py: default thread names.
        ("n", "MainThread"),
        ("t", "Thread-{int}"),
        ("t", "Thread-{int} ({public})"),
        ("t", "Dummy-{int}"),
        ("t", "ThreadPoolExecutor-{int}_{int}"),
        ("t", "asyncio_{int}"),
        ("n", "QueueFeederThread"),
        # the interpreter's executable names (process and Kineto thread names).
        ("n", "python3"),
        ("t", "python{int}"),
        ("t", "python{int}.{int}"),
    ],
    "nvidia-nccl-cu12": [("s", "NCCL")],
    # ray/_private/worker.py: a worker's process title is "ray::<actor class>" while it runs an actor.
    "ray": [("t", "ray::{=classes}")],
    # Nsight Systems' own threads and the trace domains it writes for the libraries it traces.
    "nsys": [
        ("n", "[NSys]"), ("n", "[NSys Comms]"), ("n", "QdstrmImporter"), ("n", "nsys"),
        ("n", "nsys-launcher"),
        ("s", "cuBLAS"), ("s", "cuBLASLt"), ("s", "cuDNN"), ("s", "MPI"), ("s", "OpenMP"), ("s", "OSRT"),
        ("t", "MPI Rank {int}"),
    ],
}
SETS = {
    "c10d_collectives": ("_all_gather_base", "_allgather_base", "_reduce_scatter_base", "all_gather",
                         "all_gather_into_tensor_coalesced", "all_reduce", "all_reduce_barrier",
                         "all_reduce_coalesced", "all_to_all", "all_to_allv", "allgather",
                         "allgather_coalesced",
                         "allgather_into_tensor_coalesced", "allreduce", "allreduce_coalesced", "alltoall",
                         "alltoall_base", "barrier", "broadcast", "coalesced", "gather", "recv",
                         "recvAnySource",
                         "reduce", "reduce_scatter", "reduce_scatter_tensor_coalesced", "scatter", "send"),
}
# Linux keeps 15 characters of a thread's name (TASK_COMM_LEN 16): nsys records them cut there.
COMM_LEN = 15

# emit_nvtx range names: torch/csrc/profiler/util.cpp getNvtxStr() writes
# "<op>[, seq = N][, op_id = N][, sizes = [[..]]][, input_op_ids = [(..)]]".
def _emit_nvtx_templates() -> list[str]:
    out = []
    for seq in ("", ", seq = {int}"):
        for op_id in ("", ", op_id = {int}"):
            for sizes in ("", ", sizes = {numlist}"):
                for ids in ("", ", input_op_ids = {numlist}"):
                    tail = seq + op_id + sizes + ids
                    if tail:
                        out.append("{public}" + tail)
    return out


# Printable strings of torch's shared libraries taken as names (whole-string patterns).
BINARY_PATTERNS = re.compile(
    r"(?:c10d|_c10d_functional|c10d_functional|_dtensor|profiler|prims|inductor|_inductor|quantized|"
    r"_quantized|aten|torch|cuda|autograd|_nested_tensor|symm_mem|fsdp|_fsdp)::[A-Za-z_][A-Za-z0-9_.]*"
    r"(?:::[A-Za-z_][A-Za-z0-9_.]*)*|torch\.distributed\.ddp\.reducer::[A-Za-z_]+"
    r"|torch::jit::\(anonymous namespace\)::[A-Za-z_]+"
    r"|(?:gloo|nccl|mpi|ucc|xccl):[a-z_]+[a-z0-9_]*|pt_[a-z_]+|record_param_comms|TorchDynamo Cache Lookup"
    r"|<(?:forward|backward) op>")
BINARIES = re.compile(r"^torch/lib/lib(?:torch_cpu|torch_python|c10|torch)\.so$")

CPP_PATTERNS = [
    re.compile(r'RECORD_(?:FUNCTION|USER_SCOPE|EDGE_SCOPE)\(\s*"([^"\\]+)"'),
    re.compile(r'RECORD_FUNCTION_WITH_SCOPE\(\s*[\w:]+\s*,\s*"([^"\\]+)"'),
    re.compile(r'name\(\)\s*const\s*override\s*\{\s*return\s*"([^"\\]+)"'),
    re.compile(r'(?:setThreadName|nvtxRangePushA|nvtxMarkA)\(\s*"([^"\\]+)"'),
]
NATIVE_FUNCTIONS = re.compile(r"^- func: ([A-Za-z_][A-Za-z0-9_]*)(?:\.[A-Za-z0-9_]+)?\(", re.M)
NCCL_API = re.compile(r"\bncclResult_t\s+(nccl[A-Z]\w*)\s*\(")
_SKIP_DIR = re.compile(r"(?:^|/)(?:tests?|testing|examples?|benchmarks?|docs?)/|(?:^|/)test_[^/]*\.py$")


def normalized(dist: str) -> str:
    return re.sub(r"[-_.]+", "_", dist).lower()


def archive_for(dist: str, version: str, cache: Path) -> Path | None:
    """The cached wheel or sdist of dist==version (a wheel's local tag, e.g. torch's +cpu, allowed)."""
    if not cache.is_dir():
        return None
    for p in sorted(cache.iterdir()):
        if p.name.endswith(".whl"):
            name, ver = p.name.split("-")[:2]
        elif p.name.endswith(".tar.gz"):
            name, _, ver = p.name[:-len(".tar.gz")].rpartition("-")
        else:
            continue
        if normalized(name) == normalized(dist) and ver.split("+")[0] == version:
            return p
    return None


def download(cache: Path, offline: bool) -> dict[tuple[str, str], Path]:
    """pip download --no-deps each pin into the cache (once); {pin: archive}."""
    cache.mkdir(parents=True, exist_ok=True)
    out = {}
    for dist, version in PINS:
        path = archive_for(dist, version, cache)
        if path is None and not offline:
            print(f"  downloading {dist}=={version}", file=sys.stderr, flush=True)
            subprocess.run([sys.executable, "-m", "pip", "download", "-q", "--no-deps",
                            "--no-build-isolation",
                            f"{dist}=={version}", "-d", str(cache)], check=True)
            path = archive_for(dist, version, cache)
        if path is None:
            raise SystemExit(f"{cache}: no archive of {dist}=={version} "
                             "(run without --offline to download it)")
        out[(dist, version)] = path
    return out


def members(archive: Path):
    """(member path, bytes reader) of a wheel or sdist, in name order."""
    if archive.name.endswith(".whl"):
        with zipfile.ZipFile(archive) as z:
            for name in sorted(z.namelist()):
                yield name, (lambda n=name: z.read(n))
    else:
        with tarfile.open(archive) as t:
            infos = sorted((m for m in t.getmembers() if m.isfile()), key=lambda m: m.name)
            for m in infos:
                yield m.name.split("/", 1)[-1], (lambda m=m: t.extractfile(m).read())


def scan_archive(dist: str, archive: Path) -> Found:
    """Everything one package publishes."""
    found = Found()
    for name, read in members(archive):
        if _SKIP_DIR.search(name):
            continue
        if name.endswith((".py", ".pyi")):
            scan_source(read().decode("utf-8", "replace"), found)
        elif name.endswith((".h", ".hpp", ".cuh", ".cpp", ".cu", ".cc")):
            text = read().decode("utf-8", "replace")
            for rx in CPP_PATTERNS:
                found.exact.update(m.group(1) for m in rx.finditer(text))
            if name.endswith("nccl.h"):
                found.exact.update(m.group(1) for m in NCCL_API.finditer(text))
        elif name.endswith("native_functions.yaml"):
            found.exact.update("aten::" + m.group(1) for m in NATIVE_FUNCTIONS.finditer(read().decode()))
        elif BINARIES.match(name):
            data = read()
            # Whole C strings only (NUL on both sides): a run of printable bytes inside machine code
            # ("aten::adH") is not a name.
            for m in re.finditer(rb"(?<=\x00)[\x20-\x7e]{4,}(?=\x00)", data):
                s = m.group(0).decode("ascii")
                if BINARY_PATTERNS.fullmatch(s):
                    found.exact.add(s)
    # torch/csrc/autograd/python_function.cpp: Function.apply records the class name (forward) and
    # the node is named "<class>Backward" (backward).
    for cls in found.autograd_functions:
        found.exact.update((cls, cls + "Backward"))
    add_comm_names(found)
    return found


def add_hand(found: Found, entries) -> None:
    """HAND's entries of one source."""
    for kind, text in entries:
        (found.templates if kind == "t" else found.exact).add(text)
        if kind == "n":
            found.threads.add(text)
    add_comm_names(found)


def add_comm_names(found: Found) -> None:
    """A thread name as Linux keeps it: its first COMM_LEN characters."""
    found.exact.update(t[:COMM_LEN] for t in found.threads if len(t) > COMM_LEN)


def render(pins: list[tuple[str, str]], per_source: list[tuple[str, Found]], classes: set[str]) -> bytes:
    """The corpus file's bytes: header, sets, then each source's entries, all sorted."""
    from verlprof.stages.scrub.public_names import escape_text
    seen_exact: set[str] = set()
    seen_templates: set[str] = set()
    sets: dict[str, tuple[str, ...]] = {"classes": tuple(sorted(classes))}
    sets.update({k: tuple(sorted(v)) for k, v in SETS.items()})
    lines = ["# " + FORMAT + " " + " ".join(f"{d}=={v}" for d, v in sorted(pins))]
    body: list[str] = []
    for source, found in per_source:
        exact = sorted(s for s in found.exact - seen_exact if _publishable(s))
        templates = sorted(found.templates - seen_templates)
        seen_exact.update(exact)
        seen_templates.update(templates)
        for t in templates:
            for name in re.findall(r"\{=(\w+)\}", t):
                if name not in sets:
                    sets[name] = found.sets[name]
        if not exact and not templates:
            continue
        body.append("@ " + source)
        body += ["s " + escape_text(s) for s in exact]
        body += ["t " + escape_text(t) for t in templates]
    for name in sorted(sets):
        lines.append("= " + "\t".join([name] + [escape_text(v) for v in sets[name]]))
    text = ("\n".join(lines + body) + "\n").encode("utf-8")
    buf = io.BytesIO()
    with gzip.GzipFile(filename="", mode="wb", fileobj=buf, mtime=0, compresslevel=9) as g:
        g.write(text)
    return buf.getvalue()


def _publishable(s: str) -> bool:
    """Names only: one line, printable, not blank, at most 200 characters."""
    return bool(s.strip()) and len(s) <= 200 and s.isprintable()


def build(cache: Path, offline: bool) -> tuple[bytes, dict]:
    archives = download(cache, offline)
    per_source: list[tuple[str, Found]] = []
    classes: set[str] = set()
    stats: dict = {"skipped": Counter()}
    for (dist, version), archive in archives.items():
        t0 = time.perf_counter()
        found = scan_archive(dist, archive)
        add_hand(found, HAND.get(dist, ()))
        if dist == "torch":
            found.templates.update(_emit_nvtx_templates())
        classes |= {c for c in found.classes if re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", c)}
        stats["skipped"].update(found.skipped)
        per_source.append((f"{dist} {version}", found))
        print(f"  {dist:18} {version:10} {len(found.exact):7} strings {len(found.templates):6} templates "
              f"{sum(found.skipped.values()):6} left out  {time.perf_counter() - t0:6.1f} s",
              file=sys.stderr, flush=True)
    for source, key in ((f"python {sys.version_info.major}", "python"), ("nsys", "nsys")):
        found = Found()
        add_hand(found, HAND[key])
        per_source.append((source, found))
    return render(list(archives), per_source, classes), stats


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--cache", type=Path, default=CACHE, help="download cache (default .cache/public_names)")
    ap.add_argument("--out", type=Path, default=OUT, help="corpus file to write")
    ap.add_argument("--offline", action="store_true", help="use the cache only; fail if a pin is missing")
    args = ap.parse_args(argv)
    t0 = time.perf_counter()
    data, stats = build(args.cache, args.offline)
    tmp = args.out.with_name(args.out.name + f".tmp{os.getpid()}")
    tmp.write_bytes(data)
    os.replace(tmp, args.out)
    left = stats["skipped"]
    print(f"wrote {args.out} ({len(data):,} bytes) in {time.perf_counter() - t0:.1f} s; "
          f"{sum(left.values())} name expressions left out (free-text holes): "
          + ", ".join(f"{k} {v}" for k, v in left.most_common(8)), file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
