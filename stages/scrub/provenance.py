"""Where each published string comes from, and what may leave of it (issue 39).

Why provenance and not words: a person's name, handle or project is spelt with ordinary words and
identifiers, so no vocabulary can tell it from a phase name. What CAN be told is who wrote the
field: CUPTI writes kernel and CUDA API names, torch writes `aten::` ops, python frames of installed
packages are the package's own; a person writes NVTX range names, record_function labels, thread
and process names, argv, Kineto args values, snapshot annotations, the folders holding the traces.

`FIELDS` is the one declared table (an allowlist by structure): each published location pattern ->
an `Origin`. The Scrubber runs every rule (credentials, patterns, values, identities) on every
class; then, for user-written text only, `UserTextGate` publishes the string as it is when

- a public package writes the same whole string or its typed template (`public_names().is_public`),
- the owner approved it (`--keep-names FILE`, policy `approved_names`), or
- it is safe structure: numbers, separators, scrub's own pseudonyms and `[REDACTED]`, booleans,

and otherwise replaces the WHOLE string with one stable pseudonym `name-<letters>` (salted hash
spelt in non-hex letters: a second scrub keeps it, check is clean for any salt). A verl stage path
(`step > gen > generate_sequences`) is judged part by part, so analysis still groups by its public
stages. A file name keeps its extensions and is judged on its stem, token by token.
"""
from __future__ import annotations

import re
import sys
from dataclasses import dataclass
from enum import Enum
from pathlib import Path
from typing import Iterable

from ..core import atomic
from ..core.errors import BadInputError
from ..core.phases import HISTORY_PHASE, UNATTRIBUTED
from ..readers.naming import ROLE_ALIASES
from .identities import fallback_pseudonym
from .public_names import escape_text, public_names, unescape_text
from .rules import REDACTED
from .shapes import PSEUDONYM_RE

KIND_USER_TEXT = "user_text"      # user-written text no public source writes and the owner did not approve


class Origin(str, Enum):
    TOOLCHAIN = "toolchain"   # written by CUDA/CUPTI/nsys/torch/verlprof: kept (second net only)
    USER = "user"             # written by a person: public, approved or structure, else `name-<letters>`
    OP = "op"                 # a cpu_op name: toolchain when torch's (`aten::mm`, `detach`), else user
    OP_NAMED = "op_named"     # a record_function name: toolchain only in torch's own shapes (`ProfilerStep#3`)
    FRAME = "frame"           # a python/C++ frame: toolchain inside installed packages, else user
    FILE = "file"             # a file or folder name: extensions kept, the stem judged as user text


@dataclass(frozen=True)
class Field:
    pattern: str              # a location (or a `traceEvents[<cat>].name` field); `*` matches anything
    origin: Origin
    why: str

    def matches(self, location: str) -> bool:
        rx = _PATTERNS.get(self.pattern)
        if rx is None:
            rx = _PATTERNS[self.pattern] = re.compile(".*".join(map(re.escape, self.pattern.split("*"))), re.S)
        return rx.fullmatch(location) is not None


_PATTERNS: dict[str, re.Pattern[str]] = {}


T, U, OP, FR, FI = Origin.TOOLCHAIN, Origin.USER, Origin.OP, Origin.FRAME, Origin.FILE

#: The one declared table: first match wins; a location no entry names is user-written.
FIELDS: tuple[Field, ...] = (
    # -- keys of structures: the writing tool's own names (values below them are judged apart) -
    Field("snapshot*user_metadata*", U, "the user's own metadata, keys included"),
    Field("*.<key>", T, "keys of events, args, metadata and snapshot records"),
    # -- nsys SQLite exports (location `<table>.<column>`) -----------------------------------
    Field("CUPTI_ACTIVITY_KIND_*", T, "CUPTI records: kernel, runtime, driver, memcpy ... (names via StringIds)"),
    Field("ENUM_*", T, "nsys's own enumerations"),
    Field("TARGET_INFO_*", T, "devices, streams, driver and OS versions written by nsys"),
    Field("META_DATA_EXPORT.*", T, "export version rows written by nsys"),
    Field("EXPORT_META_DATA.*", T, "export version rows written by nsys"),
    Field("OSRT_API.*", T, "OS runtime API names"),
    Field("CUBLAS_EVENTS.*", T, "cuBLAS API names"),
    Field("CUDNN_EVENTS.*", T, "cuDNN API names"),
    Field("CUDA_GPU_MEMORY_USAGE_EVENTS.*", T, "CUDA memory events"),
    Field("StringIds.value", T, "strings referenced by toolchain columns (kernel, API names)"),
    Field("StringIds.value[user]", U, "strings only NVTX text/domains or thread names reference"),
    Field("NVTX_EVENTS.*", U, "NVTX range text, domains and JSON payloads"),
    Field("ThreadNames.*", U, "OS thread names"),
    Field("PROCESSES.*", U, "process names and argv"),
    # -- chrome / Kineto traces: event names by category (`traceEvents[<cat>].name`) ----------
    Field("traceEvents[ph:M].name", T, "metadata event names Kineto writes (process_name, thread_name)"),
    Field("traceEvents[verlprof.culprit].name", T, "verlprof's culprit and victim marks (merged trace)"),
    Field("traceEvents[kernel].name", T, "CUDA kernel names"),
    Field("traceEvents[gpu_memcpy].name", T, "CUPTI memcpy names"),
    Field("traceEvents[gpu_memset].name", T, "CUPTI memset names"),
    Field("traceEvents[cuda_runtime].name", T, "CUDA runtime API names"),
    Field("traceEvents[cuda_driver].name", T, "CUDA driver API names"),
    Field("traceEvents[cuda_sync].name", T, "CUDA synchronization names"),
    Field("traceEvents[ac2g].name", T, "Kineto flow arrows"),
    Field("traceEvents[fwdbwd].name", T, "Kineto forward-backward links"),
    Field("traceEvents[Trace].name", T, "Kineto's own trace markers"),
    Field("traceEvents[overhead].name", T, "Kineto overhead markers"),
    Field("traceEvents[cpu_instant_event].name", OP, "torch instant events"),
    Field("traceEvents[cpu_op].name", OP, "torch ops: `aten::`/`c10d::` are toolchain, the rest user"),
    Field("traceEvents[python_function].name", FR, "python frames: installed packages are toolchain"),
    Field("traceEvents[user_annotation].name", Origin.OP_NAMED, "record_function: torch's own (`Optimizer.step#...`) or the user's"),
    Field("traceEvents[gpu_user_annotation].name", Origin.OP_NAMED, "the same names on the GPU rows"),
    Field("traceEvents[*].name", U, "any other category"),
    Field("traceEvents[]*.<key>", T, "keys: Kineto's own argument names"),
    Field("traceEvents[].args.Concrete Inputs", U, "values the user's code passed to an op"),
    Field("traceEvents[].args.kwargs", U, "keyword values the user's code passed to an op"),
    Field("traceEvents[].args.Input type", T, "dtypes torch writes"),
    Field("traceEvents[].args.kind", T, "memcpy kinds CUPTI writes"),
    Field("traceEvents[].args.labels", T, "process labels the profiler (or verlprof's converter) writes"),
    Field("traceEvents[].args.statement", T, "verlprof's culprit statements (merged trace), from published values"),
    Field("traceEvents[].args.*", U, "process/thread names, labels and any other argument value"),
    Field("traceEvents[].cat", T, "Kineto categories"),
    Field("traceEvents[].ph", T, "chrome trace phases"),
    Field("traceEvents[].pid", T, "Kineto's process ids (`Spans`, device rows)"),
    Field("traceEvents[].tid", T, "Kineto's thread and stream ids (`stream 7`)"),
    Field("traceEvents[].id", T, "flow ids"),
    Field("traceEvents[].bp", T, "flow binding points"),
    Field("traceEvents[].s", T, "instant event scopes"),
    Field("traceEvents[].cname", T, "chrome colour names"),
    Field("traceEvents[]*", U, "any other event value"),
    Field("$.<key>", T, "top-level keys (unknown ones lose their values anyway)"),
    Field("$.traceName", FI, "the path torch wrote the trace to: a file name"),
    Field("$.deviceProperties*", T, "GPU properties torch writes"),
    Field("$.schemaVersion", T, "Kineto schema"),
    Field("$.otherData*", T, "verlprof's converter: producer and clock of a window trace"),
    Field("$.displayTimeUnit", T, "Kineto unit"),
    Field("$.*", U, "distributedInfo and other metadata"),
    # -- memory snapshots --------------------------------------------------------------------
    Field("snapshot*.<key>", T, "snapshot keys"),
    Field("snapshot.frame[toolchain]*", T, "frames of installed packages, the stdlib and torch's C++"),
    Field("snapshot.frame[user].filename", FI, "the user's own files: the extension stays"),
    Field("snapshot.frame[user]", U, "frames of the user's own files (name and file)"),
    Field("snapshot*frames[].filename", FR, "frame files: installed packages are toolchain"),
    Field("snapshot*external_annotations[].name", Origin.OP_NAMED, "record_function names: torch's own shapes are toolchain"),
    Field("snapshot*.allocator_settings*", T, "allocator settings torch writes"),
    Field("snapshot*.action", T, "allocator actions"),
    Field("snapshot*.stage", T, "annotation stages (START, END)"),
    Field("snapshot*.state", T, "block states"),
    Field("snapshot*.segment_type", T, "segment types"),
    Field("snapshot*", U, "annotations, user_metadata, compile_context and the rest"),
    # -- what collect publishes from memory ----------------------------------------------------
    Field("summaries.kernels.kernel*", T, "kernel names"),
    Field("summaries.kernels.category", T, "verlprof's kernel categories"),
    Field("summaries.*.source", FI, "the input's file name"),
    Field("summaries.*.source_kind", T, "verlprof's artifact kinds"),
    Field("summaries.*.rank_source", T, "verlprof's own"),
    Field("summaries.*.mem_scope", T, "verlprof's own"),
    Field("summaries.steps.reason", T, "verlprof's own"),
    Field("summaries.steps.boundary", T, "verlprof's own"),
    Field("summaries.ranks.*", T, "verlprof's rank tables, built from scrubbed rows"),
    Field("summaries.*.stage", T, "verlprof's stage of a phase (its own mapping, docs/summaries.md)"),
    Field("summaries.*.role", T, "verlprof's role of a source: verl's role names normalised by readers/naming.py, or `trainer`"),
    Field("summaries.metadata*", T, "verlprof's statements (step choice, tools) built from numbers and versions"),
    Field("summaries.*", U, "phase, stage, role and step labels: range names"),
    Field("manifest.names", FI, "artifact and trace file names"),
    Field("file name", FI, "output file names"),
    Field("manifest*", T, "verlprof's manifest"),
    Field("-", U, "a probe: the strictest class"),
)

#: Kineto categories whose event names are toolchain symbols (a category this names nowhere is user)
_OP_NAMESPACE_RE = re.compile(r"(?:aten|c10d|prim|prims|quantized|torch|torchvision|cuda|cudnn|mkldnn|xla|triton|inductor|"
                              r"fbgemm|_c10d_functional|c10d_functional|_dtensor|profiler|vllm|sglang|_C|nccl|"
                              r"autograd|torch_c10d|record_param_comms|fb|fbgemm_gpu|torchrec|torch\.distributed(?:\.\w+)*)::\S")
# torch's own names without a namespace: autograd nodes and compile markers keep their shapes
_TORCH_OP_RE = re.compile(r"(?:autograd::engine::evaluate_function: )?[A-Z][A-Za-z0-9]*Backward\d*|"
                          r"ProfilerStep#\d+|## Call CompiledFxGraph \w+ ##|cudaStream\w*|cuda\w+|nccl\w+|"
                          r"record_param_comms|Optimizer\.\w+#\w+\.\w+|Memcpy \w+|Memset \w+|<(?:forward|backward) op>")
_STDLIB_RE = re.compile(r"(?:^|[/\\])(?:site-packages|dist-packages)[/\\]|^/usr/(?:local/)?lib/python\d|"
                        r"^/opt/conda/lib/python\d|^<frozen |^<built-in|^<string>$|^\?\?$|^$|"
                        r"^(?:/opt/pytorch|/pytorch|/opt/conda/conda-bld|/usr/include|/usr/local/cuda)/|"
                        r"^[\w.\-]+\.(?:cpp|cc|cu|cuh|c|h|hpp)$")
# a python frame as Kineto names it: `path/file.py(12): function`
_PY_FRAME_RE = re.compile(r"(?P<file>.*?\.py)\(\d+\): \S+$")
_BOOLISH = re.compile(r"\b(?:True|False|None|true|false|null|nan|inf|NaN|Infinity)\b")
_FILE_EXT_RE = re.compile(r"(?:\.(?:pt|trace|json|gz|xz|zst|sqlite|nsys-rep|qdrep|qdstrm|pickle|pkl|parquet|"
                          r"html|yaml|yml|log|txt|tar|csv|npz|py))+$")
#: structure words profilers write into file names (torch's `<host>_<pid>.<ms>.pt.trace.json`,
#: verl's `<role>_<phase>_step<N>_rank<R>-of-<W>_pid<P>_<time>`, nsys's `report<N>`)
FILE_NAME_WORDS = frozenset({"rank", "of", "pid", "step", "tid", "trace", "pt", "report", "profile", "worker",
                             "node", "gpu", "device", "memory", "snapshot", "torch", "nsys", "train", "actor",
                             "rollout", "ref", "critic", "reward", "window", "merged", "summary", "summaries",
                             "traces", "ranks", "phases", "kernels", "steps", "cuda", "step", "whole", "golden",
                             # nsys report names Ray and verl configure (`worker_process_%p`), their folders
                             "process", "nsight", "logs", "session", "ray", "outputs", "timeline", "export"})
_FILE_TOKEN_RE = re.compile(r"[A-Za-z]+|\d+|[^A-Za-z\d]+")
#: whole folder and file names verl writes into its `save_path` (verl 0.9.1), kept as structure: the
#: words inside (`oom`, `replica`, `globalrank`) are verl's, not a person's. A `rest` group is the
#: engine's own file name after verl's prefix, judged as a file name on its own.
VERL_FILE_LAYOUTS: tuple[tuple[str, str], ...] = (
    (r"oom_\d{8}-\d{6}-\d{6}", "verl/utils/profiler/torch_memory_profile.py `_attach_oom_observer`: "
                               "sub_dir `oom_<%Y%m%d-%H%M%S-%f>`"),
    (r"torch_memory(?:_oom)?_rank\d+_pid\d+", "verl/utils/memory_utils.py `dump_memory_snapshot`: "
                                           "`<tag>_rank<R>_pid<P>.pickle` (tag `torch_memory`, `torch_memory_oom`)"),
    (r"agent_loop_rollout_replica_\d+", "verl/utils/profiler/config.py `rollout_trace_dir`: an engine's trace folder"),
    (r"rollout-replica\d+(?:-globalrank\d+)?_(?P<rest>.+)",
     "verl/utils/profiler/config.py `relocate_rollout_traces`: `rollout-replica<r>[-globalrank<g>]_<engine's name>`"),
)
_VERL_FILE_RE = re.compile("|".join(f"(?:{rx})" for rx, _why in VERL_FILE_LAYOUTS))


#: Names written by toolchain C++ (libkineto, the CUDA driver, the interpreter), which no python
#: source of the corpus holds: (regex, why). An `inner*` group is a user-written part (a thread's
#: own name inside Kineto's `thread 801 (<name>)`), judged as user text on its own; a `file*` group
#: a file name, judged as one.
TOOLCHAIN_TEMPLATES: tuple[tuple[str, str], ...] = (
    (r"stream \d+ ?", "Kineto's GPU stream rows"),
    (r"(?:GPU|CPU|XPU|MTIA)(?: \d+)?", "Kineto's device labels"),
    (r"thread \d+ \((?P<inner>.*)\)", "Kineto's thread rows: `thread <tid> (<OS thread name>)`"),
    (r"Iteration Start: PyTorch Profiler|Record Window End|PyTorch Profiler \(\d+\)|Spans|Traces", "libkineto markers"),
    (r"python\d*(?:\.\d+)?|pt_autograd_\d+|pt_main_thread|pt_elastic|cuda-EvtHandlr|cuda0?\d*|"
     r"ray::IDLE|ray::core_worker(?:\.\w+)?", "interpreter, torch, CUDA and Ray thread/process names"),
    (r"culprit: lost -?[\d.]+ ms here|victim: waited for rank \d+", "verlprof's culprit marks"),
    # verlprof's merged trace composes names of values it already published (docs/traces.md)
    (r"(?P<file3>[^·]+) · (?P<inner4>.+)|(?P<inner2>[^·]+) (?:rank|pid) -?\d+|process -?\d+|pid (?:-?\d+|Spans|Traces)",
     "verlprof's merged trace: `<role> rank <r>`, `<owner file> · <process>`"),
)
_TOOLCHAIN_RE = re.compile("|".join(f"(?:{rx})" for rx, _why in TOOLCHAIN_TEMPLATES))
_NUMBER_RE = re.compile(r"[-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?")

_ORIGINS: dict[str, Origin] = {}
_OWN: list[frozenset[str]] = []


def verlprof_names() -> frozenset[str]:
    """Names verlprof itself writes into what it publishes (a public package too): its role names
    (readers/naming.py), `trainer`, the `(unattributed)` phase and an untimed snapshot's
    `(recorded history)` row (summarize/memory_history.py). Until the corpus holds verlprof's own
    source, they are listed here from the code that writes them."""
    if not _OWN:
        _OWN.append(frozenset(ROLE_ALIASES.values()) | {"trainer", UNATTRIBUTED, HISTORY_PHASE})
    return _OWN[0]


def origin_of(location: str) -> Origin:
    """The class of a published location (first matching entry of `FIELDS`; user when none)."""
    hit = _ORIGINS.get(location)
    if hit is None:
        hit = next((f.origin for f in FIELDS if f.matches(location)), Origin.USER)
        if len(_ORIGINS) < 20_000:
            _ORIGINS[location] = hit
    return hit


def event_name_field(cat: object, ph: object = None) -> str:
    """The field of an event's `name`, by its Kineto category (metadata events: Kineto's own keys)."""
    if ph == "M":
        return "traceEvents[ph:M].name"
    return f"traceEvents[{cat if isinstance(cat, str) else ''}].name"


def is_toolchain_op(text: str, bare: bool = False) -> bool:
    """`aten::mm`, `c10d::allreduce_`, `FooBackward0`, `ProfilerStep#3`: ops torch itself names.
    `bare`: also a lower-case identifier (`detach`, `empty_like`): in a `cpu_op` event such a
    name comes from torch's own RECORD_FUNCTION macros; user code names a cpu_op only through a
    custom op, which is namespaced (`mylib::op`, judged as user text unless its namespace is a
    public package's)."""
    return (bool(_OP_NAMESPACE_RE.match(text)) or bool(_TORCH_OP_RE.fullmatch(text))
            or (bare and _BARE_OP_RE.fullmatch(text) is not None))


_BARE_OP_RE = re.compile(r"[a-z_][a-z0-9_]*(?:\.[a-z_][a-z0-9_]*)?")


def is_toolchain_frame(text: str) -> bool:
    """A frame (file, or Kineto's `file.py(12): fn`) of an installed package, the standard library
    or torch's C++ build tree; any other file is the user's."""
    m = _PY_FRAME_RE.fullmatch(text)
    path = m.group("file") if m else text
    if "/" in path and not path.startswith("/") and path.split("/", 1)[0] in _FRAME_PACKAGES:
        return True            # Kineto writes a package's frames relative to site-packages
    if "/" not in path and path.endswith(".py") and path[:-3] in sys.stdlib_module_names:
        return True            # ... and the standard library's by their module file (`typing.py`)
    return bool(_STDLIB_RE.search(path)) or bool(PSEUDONYM_RE.fullmatch(path))


from .deny import PACKAGES as _PACKAGES  # noqa: E402  (package roots known to the path rule)

#: first components of a relative frame path that are installed packages (not a project's own
#: `tests/`, `examples/`, `recipe/` folders, which the path rule also names)
_FRAME_PACKAGES = frozenset(_PACKAGES - {"recipe", "examples", "tests", "site-packages", "dist-packages"})


def is_toolchain_name(text: str) -> bool:
    """A name toolchain C++ writes (`TOOLCHAIN_TEMPLATES`) with no user-written part inside."""
    m = _TOOLCHAIN_RE.fullmatch(text)
    return m is not None and not any(m.groupdict().values())


def is_structure(text: str) -> bool:
    """Numbers, separators, booleans, scrub's own pseudonyms and `[REDACTED]`: nothing a person
    could be named by."""
    rest = PSEUDONYM_RE.sub("", text.replace(REDACTED, "")) if ("-" in text or "[" in text) else text
    if any(c.isalpha() for c in rest):
        rest = _BOOLISH.sub("", _NUMBER_RE.sub("", rest))
    return not any(c.isalpha() for c in rest)


class UserTextGate:
    """What of a user-written string may leave: itself when public, approved or structure, else one
    whole-string pseudonym. Verdicts are cached per string; `named` remembers every original that
    became a pseudonym (for the owner's review list, in WORK only)."""

    CACHE_MAX = 300_000

    def __init__(self, approved: Iterable[str], salt: str) -> None:
        self.approved = frozenset(approved)
        self.salt = salt
        self._names = public_names()
        self._cache: dict[tuple[str, Origin], str] = {}

    def keeps(self, text: str) -> bool:
        return (is_structure(text) or text in self.approved or self._names.is_public(text)
                or text in verlprof_names())

    def judge(self, original: str, scrubbed: str, origin: Origin) -> tuple[str, tuple[tuple[str, str], ...]]:
        """(what is published for a field of class `origin` whose rules produced `scrubbed`, the
        (original, pseudonym) pairs it made: one, or one per stage of a path)."""
        key = (original, origin)
        hit = self._cache.get(key)
        if hit is None:
            made: list[tuple[str, str]] = []
            hit = (self._judge(original, scrubbed, origin, made), tuple(made))
            if len(self._cache) >= self.CACHE_MAX:
                self._cache.clear()
            self._cache[key] = hit
        return hit

    def _judge(self, original: str, scrubbed: str, origin: Origin, made: list[tuple[str, str]]) -> str:
        if origin is Origin.TOOLCHAIN:
            return scrubbed
        if origin is Origin.OP and is_toolchain_op(original, bare=True):
            return scrubbed
        if origin is Origin.OP_NAMED and is_toolchain_op(original):
            return scrubbed
        if origin is Origin.FRAME and (is_toolchain_frame(original) or is_toolchain_frame(scrubbed)):
            return scrubbed
        if origin is Origin.FILE:
            return self._file(original, scrubbed, made)
        if self.keeps(original) or (scrubbed != original and self.keeps(scrubbed)):
            return scrubbed
        m = _TOOLCHAIN_RE.fullmatch(original)
        if m is not None and original == scrubbed:
            out, last = [], 0          # each user-written hole judged on its own
            for g in sorted((k for k, v in m.groupdict().items() if v), key=m.start):
                a, b = m.span(g)
                kind = Origin.FILE if g.startswith("file") else Origin.USER
                out += [original[last:a], self._judge(original[a:b], original[a:b], kind, made)]
                last = b
            return "".join(out) + original[last:]
        if " > " in original and original.count(" > ") == scrubbed.count(" > "):   # a verl stage path
            return " > ".join(self._judge(a, b, Origin.USER, made)
                              for a, b in zip(original.split(" > "), scrubbed.split(" > ")))
        pseudo = fallback_pseudonym("name", original, self.salt)
        made.append((original, pseudo))
        return pseudo

    def _file(self, original: str, scrubbed: str, made: list[tuple[str, str]]) -> str:
        """A file or folder name: its extensions stay; its stem stays when each token is a number, a
        separator, a pseudonym, a profiler's file-name word or public; else `name-<letters>`."""
        if self.keeps(original) or self.keeps(scrubbed):
            return scrubbed
        if "/" in original and original.count("/") == scrubbed.count("/"):     # a relative path: by folder
            return "/".join(self._file(a, b, made) if a else a for a, b in zip(original.split("/"), scrubbed.split("/")))
        ext = _FILE_EXT_RE.search(scrubbed)
        stem = scrubbed[:ext.start()] if ext else scrubbed
        layout = _VERL_FILE_RE.fullmatch(scrubbed) or _VERL_FILE_RE.fullmatch(stem)
        if layout is not None and original == scrubbed:        # a name verl writes (VERL_FILE_LAYOUTS)
            rest = layout.group("rest")
            if rest is None:
                return scrubbed
            cut = layout.start("rest")
            return scrubbed[:cut] + self._file(rest, rest, made)
        rest = PSEUDONYM_RE.sub("0", stem)
        if all(not t[0].isalpha() or len(t) <= 2 or t.lower() in FILE_NAME_WORDS or t in verlprof_names()
               or self._names.is_public(t)
               for t in _FILE_TOKEN_RE.findall(rest)):
            return scrubbed
        tail = ext.group(0) if ext else ""
        base = original[:len(original) - len(tail)] if tail and original.endswith(tail) else original
        pseudo = fallback_pseudonym("name", base, self.salt)
        made.append((base, pseudo))
        return pseudo + tail


# ------------------------------------------------------------------------------------------------
# The owner's review list (WORK only) and approved names (--keep-names FILE)
# ------------------------------------------------------------------------------------------------

REVIEW_NAME = "names_review.txt"
_COMMENT = "\t# "


def read_keep_names(path: str | Path) -> tuple[str, ...]:
    """The approved strings of FILE: one a line (`\\`, TAB and newline written `\\\\`, `\\t`, `\\n`);
    what follows a TAB and `#` is a comment, so a review list edited down is a valid FILE."""
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise BadInputError(p, f"cannot read the approved names: {getattr(exc, 'strerror', None) or exc}") from None
    out = []
    for line in text.splitlines():
        body = line.split("\t#", 1)[0]
        if body:
            out.append(unescape_text(body))
    return tuple(sorted(set(out)))


def review_lines(named: dict[str, tuple[str, dict[str, int]]]) -> list[str]:
    """Lines of the review list: `original<TAB># pseudonym  N x  where, ...`, most frequent first."""
    head = [_COMMENT + "user-written names published as pseudonyms (this file stays in WORK: it holds the originals)",
            _COMMENT + "keep the lines you approve and pass this file with --keep-names; delete the others",
            _COMMENT + "format: original<TAB># pseudonym  count  where"]
    rows = sorted(named.items(), key=lambda kv: (-sum(kv[1][1].values()), kv[0]))
    return head + [f"{escape_text(orig)}{_COMMENT}{pseudo}  {sum(where.values())}x  {', '.join(sorted(where))[:300]}"
                   for orig, (pseudo, where) in rows]


def merge_named(into: dict[str, tuple[str, dict[str, int]]], part: dict[str, tuple[str, dict[str, int]]],
                prefix: str = "") -> dict[str, tuple[str, dict[str, int]]]:
    """Add a scrubber's `named_list()` to `into` (locations prefixed with the artifact's name)."""
    for orig, (pseudo, where) in part.items():
        slot = into.setdefault(orig, (pseudo, {}))[1]
        for loc, n in where.items():
            key = f"{prefix}{loc}"
            slot[key] = slot.get(key, 0) + n
    return into


def write_review(work_dir: str | Path, named: dict[str, tuple[str, dict[str, int]]]) -> Path:
    """WORK/names_review.txt (atomically): the owner's list of originals and their pseudonyms."""
    path = Path(work_dir) / REVIEW_NAME
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic.write_text(path, "\n".join(review_lines(named)) + "\n")
    return path


def closing_line(n: int, review: Path | str) -> str:
    """The one line collect and scrub end with (issue 39)."""
    one = n == 1
    return (f"{n} user-written name{'' if one else 's'} published as {'a pseudonym' if one else 'pseudonyms'}; "
            f"review {'it' if one else 'them'} in {review}; keep the ones you approve with --keep-names FILE")


def read_review_map(path: str | Path) -> dict[str, str]:
    """pseudonym -> original from a review list (`summarize --names`)."""
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise BadInputError(p, f"cannot read the names list: {getattr(exc, 'strerror', None) or exc}") from None
    out: dict[str, str] = {}
    for line in text.splitlines():
        body, sep, comment = line.partition(_COMMENT)
        if body and sep and PSEUDONYM_RE.match(comment.split(" ", 1)[0] or ""):
            out[comment.split(" ", 1)[0]] = unescape_text(body)
    return out


def reveal(text: str, names: dict[str, str]) -> str:
    """`text` with every pseudonym of `names` replaced by the owner's original (their own report)."""
    if not names or "name-" not in text:
        return text
    return PSEUDONYM_RE.sub(lambda m: names.get(m.group(0), m.group(0)), text)


__all__ = ["Origin", "Field", "FIELDS", "origin_of", "event_name_field", "is_toolchain_op", "is_toolchain_frame",
           "is_structure", "is_toolchain_name", "UserTextGate", "KIND_USER_TEXT", "REVIEW_NAME", "read_keep_names", "review_lines",
           "read_review_map", "reveal", "FILE_NAME_WORDS", "merge_named", "write_review", "closing_line"]
