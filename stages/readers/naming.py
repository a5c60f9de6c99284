"""Recognise verl / Ray / torch profiler output by file name alone.

Why: the gather stage must sort thousands of files into reports, exports, traces and snapshots
without opening them, and must read identity (role, rank, pid, host, capture range, step) from
names verl wrote. Each naming convention is one `NamePattern`: a compiled regex, a builder that
turns its match into a `NameInfo`, and examples it must match plus look-alikes it must not (checked
by tests, like gitleaks rules), so a new convention is one more entry in `PATTERNS`.

Names mirrored from verl 0.9.1:
- `verl/utils/profiler/nvtx_profile.py`: Ray writes `worker_process_<pid>[.<k>].nsys-rep` (plus
  `.qdstrm` while importing) into `<ray temp>/session_latest/logs/nsight`; `relocate_results`
  moves them to `save_path/[<role>_]<host>_worker_process_<pid>[.<k>].nsys-rep`.
- `verl/utils/profiler/torch_profile.py` (`build_trace_basename`):
  `[prefix_][scope_][step<N>_]rank<R>[-of-<W>][_tp..-pp..-dp..-cp..]_pid<P>_<ts>[_mb<a>[-<b>]|_part<i>].json.gz`
  where every part is sanitised (`[^0-9A-Za-z.=+-]+` -> `-`, so `actor_rollout_ref` becomes
  `actor-rollout-ref`); verl 0.8 wrote `<scope>/[prefix_]prof_rank-<r>_<pid>_<ts>.json.gz`, verl 0.7
  `[prefix_]prof_rank-<r>.json.gz` (docs/verl_outputs.md lists every name with its writer).
- `verl/utils/profiler/config.py`: rollout engines write into `agent_loop_rollout_replica_<r>/`,
  relocated as `rollout-replica<r>[-globalrank<g>]_<engine name>`.
- `verl/utils/profiler/torch_memory_profile.py` + `memory_utils.py`:
  `save_path/{step<N>|steps<a>-<b>|oom_<ts>|<YYYYmmdd-HHMM>}/<tag>_rank<R>_pid<P>.pickle`.
- Roles (`verl/trainer/ppo/utils.py` Role, `engine_workers.py`): actor, rollout, ref,
  actor_rollout, actor_rollout_ref, critic, rm, teacher; TrainingWorker prefixes use the model
  type (language_model / value_model).
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Callable

from ..core.model import ArtifactKind

# ----------------------------------------------------------------------------------------------
# Roles
# ----------------------------------------------------------------------------------------------

#: verl worker-role spellings (after lower-casing and `-` -> `_`) -> the role verlprof reports.
#: Composite colocated roles are kept as they are: one process plays several roles.
ROLE_ALIASES: dict[str, str] = {
    "actor": "actor",
    "rollout": "rollout",
    "ref": "ref", "ref_policy": "ref", "refpolicy": "ref", "reference": "ref",
    "critic": "critic", "value_model": "critic",
    "reward": "reward", "rm": "reward", "reward_model": "reward", "rewardmodel": "reward",
    "actor_rollout": "actor_rollout",
    "actor_rollout_ref": "actor_rollout_ref",
    "teacher": "teacher", "teacher_model": "teacher",
    "async_rollout": "rollout", "rollouter": "rollout",
}

#: Prefix tokens verl writes that name a model but not a role (TrainingWorker model_type):
#: they are recognised as prefixes, and the role then comes from the scope (stage) instead.
_NEUTRAL_PREFIXES = frozenset({"language_model"})

#: Scope (stage label) -> the role that ran it, for discrete-mode traces.
_SCOPE_ROLES: dict[str, str] = {
    "actor_update": "actor", "update_actor": "actor", "actor_compute_log_prob": "actor",
    "compute_log_prob": "actor", "old_log_prob": "actor",
    "ref_compute_log_prob": "ref", "compute_ref_log_prob": "ref",
    "compute_values": "critic", "update_critic": "critic", "critic_update": "critic",
    "compute_rm_score": "reward",
    "generate_sequences": "rollout", "rollout": "rollout", "async_rollout": "rollout",
}


def _norm(token: str) -> str:
    return token.strip().lower().replace("-", "_")


def normalize_role(token: str | None) -> str | None:
    """Map a verl role spelling (`actor-rollout-ref`, `rm`, `value_model` ...) to a role, else None."""
    if not token:
        return None
    return ROLE_ALIASES.get(_norm(token))


def role_of_scope(scope: str | None) -> str | None:
    """The role a stage label belongs to (`actor-update` -> actor), else None (`train`, `e2e`)."""
    if not scope:
        return None
    return _SCOPE_ROLES.get(_norm(scope))


def _is_prefix_token(token: str) -> bool:
    """Whether a lone name token is a save_file_prefix (a role/model) rather than a scope."""
    return _norm(token) in ROLE_ALIASES or _norm(token) in _NEUTRAL_PREFIXES


def _role(prefix: str | None, scope: str | None) -> str | None:
    return normalize_role(prefix) or role_of_scope(scope)


# ----------------------------------------------------------------------------------------------
# Result record and pattern type
# ----------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class NameInfo:
    """What a file name says about a file. Fields are None when the name does not tell."""

    kind: ArtifactKind
    naming: str                      # id of the NamePattern that matched
    role: str | None = None
    prefix: str | None = None        # raw save_file_prefix token as written
    scope: str | None = None         # torch trace scope (train, actor-update, e2e ...)
    rank: int | None = None
    world_size: int | None = None
    pid: int | None = None
    host: str | None = None
    capture_range: int | None = None
    step: int | None = None
    steps: tuple[int, int] | None = None
    replica: int | None = None       # rollout replica index
    timestamp: str | None = None
    notes: tuple[str, ...] = ()
    needs_sniff: bool = False        # name alone is not enough: peek at the content
    host_span: tuple[int, int] | None = None   # where `host` sits in the base name (for masking)
    tp_rank: int | None = None       # a rollout engine trace's GPU within its replica (tensor-parallel rank)


@dataclass(frozen=True)
class NamePattern:
    """One naming convention: regex, builder, and its own positive and negative examples."""

    id: str
    regex: re.Pattern[str]
    build: Callable[[re.Match[str]], NameInfo]
    examples: tuple[tuple[str, dict[str, object]], ...] = ()   # name -> expected NameInfo fields
    not_examples: tuple[str, ...] = ()                        # look-alikes this regex must reject
    doc: str = ""


def _span_in_base(m: re.Match[str], group: str) -> tuple[int, int]:
    """The span of `group` relative to the last path component of the matched string."""
    base = m.string.rfind("/") + 1
    return m.start(group) - base, m.end(group) - base


def _int(s: str | None) -> int | None:
    return int(s) if s is not None and s != "" else None


_NSYS_EXT = {"nsys-rep": ArtifactKind.NSYS_REPORT, "qdstrm": ArtifactKind.NSYS_QDSTRM,
             "sqlite": ArtifactKind.NSYS_SQLITE}

# ----------------------------------------------------------------------------------------------
# Patterns (order matters: the first match wins)
# ----------------------------------------------------------------------------------------------

_HYDRA = re.compile(r"(?:^|/)\.hydra/config\.yaml$")


def _b_hydra(m: re.Match[str]) -> NameInfo:
    return NameInfo(ArtifactKind.HYDRA_CONFIG, "hydra_config")


_RAY_WORKER = re.compile(
    r"(?:^|/)worker_process_(?P<pid>\d+)(?:\.(?P<k>\d+))?\.(?P<ext>nsys-rep|qdstrm|sqlite)$")


def _b_ray_worker(m: re.Match[str]) -> NameInfo:
    return NameInfo(_NSYS_EXT[m["ext"]], "ray_worker", pid=int(m["pid"]), capture_range=_int(m["k"]))


# [<role>_]<host>_worker_process_<pid>[.<k>].ext ; hosts carry no '_', so the last '_' before
# the host splits the role prefix (which may itself hold '_', e.g. actor_rollout_ref).
_RELOCATED = re.compile(
    r"(?:^|/)(?:(?P<prefix>[^/]+)_)?(?P<host>[A-Za-z0-9][A-Za-z0-9.-]*)"
    r"_worker_process_(?P<pid>\d+)(?:\.(?P<k>\d+))?\.(?P<ext>nsys-rep|qdstrm|sqlite)$")


def _b_relocated(m: re.Match[str]) -> NameInfo:
    prefix = m["prefix"]
    return NameInfo(_NSYS_EXT[m["ext"]], "ray_worker_relocated", role=normalize_role(prefix),
                    prefix=prefix, host=m["host"], pid=int(m["pid"]), capture_range=_int(m["k"]),
                    host_span=_span_in_base(m, "host"))


_NSYS_USER = re.compile(r"(?:^|/)(?P<stem>[^/]+)\.(?P<ext>nsys-rep|qdstrm)$")


_REPEAT_K = re.compile(r"\.(\d{1,6})$")


def _repeat_k(stem: str) -> int | None:
    """nsys numbers the reports of `--capture-range-end=repeat` `<name>.<k>` whatever `-o` said:
    a hint of the capture order (the reports' own content decides, stages/window/steps.py)."""
    m = _REPEAT_K.search(stem)
    return int(m.group(1)) if m else None


def _b_nsys_user(m: re.Match[str]) -> NameInfo:
    return NameInfo(_NSYS_EXT[m["ext"]], "nsys_user", capture_range=_repeat_k(m["stem"]))


_SQLITE_USER = re.compile(r"(?:^|/)(?P<stem>[^/]+)\.sqlite$")


def _b_sqlite_user(m: re.Match[str]) -> NameInfo:
    return NameInfo(ArtifactKind.NSYS_SQLITE, "nsys_sqlite_user", capture_range=_repeat_k(m["stem"]))


_MEMORY_VERL = re.compile(
    r"(?:^|/)(?:(?:step(?P<step>\d+)|steps(?P<a>\d+)-(?P<b>\d+)|oom_(?P<oom>\d{8}-\d{6}-\d+)"
    r"|(?P<minute>\d{8}-\d{4}))/)?"
    r"(?P<tag>[A-Za-z0-9]+(?:_[A-Za-z0-9]+)*?)_rank(?P<rank>\d+)_pid(?P<pid>\d+)\.pickle$")


def _b_memory_verl(m: re.Match[str]) -> NameInfo:
    notes: list[str] = []
    steps = (int(m["a"]), int(m["b"])) if m["a"] is not None else None
    if m["oom"] is not None or "oom" in m["tag"].lower().split("_"):
        notes.append("oom")
    return NameInfo(ArtifactKind.MEMORY_SNAPSHOT, "memory_snapshot_verl", rank=int(m["rank"]),
                    pid=int(m["pid"]), step=_int(m["step"]), steps=steps,
                    timestamp=m["oom"] or m["minute"], notes=tuple(notes))


_MEMORY_OTHER = re.compile(r"(?:^|/)[^/]*(?:snapshot|memory|mem_)[^/]*\.(?:pickle|pkl)$", re.IGNORECASE)


def _b_memory_other(m: re.Match[str]) -> NameInfo:
    return NameInfo(ArtifactKind.MEMORY_SNAPSHOT, "memory_snapshot_other")


# Rollout-engine traces inside a replica folder (vLLM `<worker>.<ms>.pt.trace.json.gz`, SGLang
# `<id>-TP-<tp>.trace.json.gz`, ...). The engine names are not verl's, so only the folder counts.
_REPLICA_DIR = re.compile(
    r"(?:^|/)agent_loop_rollout_replica_(?P<replica>\d+)/(?:[^/]+/)*(?P<name>[^/]+\.json(?:\.gz)?)$")
_TP_RANK = (re.compile(r"(?:^|[-_.])TP-(\d+)", re.IGNORECASE),
            re.compile(r"(?:^|[-_.])rank[-_]?(\d+)", re.IGNORECASE))
_HOST_PID_WORKER = re.compile(r"^(?P<host>[A-Za-z0-9][A-Za-z0-9.-]*)_(?P<pid>\d+)\.\d+\.pt\.trace\.json(?:\.gz)?$")


#: SGLang adds these only when that parallel size is > 1: then the GPU's index within the replica is
#: not the tp rank, and (as verl's `rollout_trace_local_rank`) no rank is guessed.
_MULTI_DIM = re.compile(r"(?:^|[-_.])(?:DP|PP|EP)-\d+", re.IGNORECASE)


def _engine_fields(name: str) -> dict[str, object]:
    """tp rank / host / pid that engine trace names carry (vLLM old: `<host>_<pid>.<ms>.pt.trace`),
    read as verl reads them (`verl/utils/profiler/config.py: rollout_trace_local_rank`)."""
    out: dict[str, object] = {}
    hp = _HOST_PID_WORKER.match(name)
    if hp:
        out["host"], out["pid"], out["host_span"] = hp["host"], int(hp["pid"]), hp.span("host")
    elif not _MULTI_DIM.search(name):
        for rx in _TP_RANK:
            t = rx.search(name)
            if t:
                out["tp_rank"] = int(t.group(1))
                break
    return out


def _name_offset(m: re.Match[str], group: str) -> int:
    """Where `group` starts inside the last path component of the matched string."""
    return m.start(group) - (m.string.rfind("/") + 1)


def _shift(span: object, by: int) -> tuple[int, int] | None:
    return (span[0] + by, span[1] + by) if isinstance(span, tuple) else None


def _b_replica_dir(m: re.Match[str]) -> NameInfo:
    f = _engine_fields(m["name"])
    notes = (f"tp_rank={f['tp_rank']}",) if "tp_rank" in f else ()
    return NameInfo(ArtifactKind.TORCH_TRACE, "rollout_replica", role="rollout", scope="rollout",
                    replica=int(m["replica"]), host=f.get("host"), pid=f.get("pid"),  # type: ignore[arg-type]
                    notes=notes, host_span=_shift(f.get("host_span"), _name_offset(m, "name")),
                    tp_rank=f.get("tp_rank"))  # type: ignore[arg-type]


_REPLICA_RELOCATED = re.compile(
    r"(?:^|/)rollout-replica(?P<replica>\d+)(?:-globalrank(?P<g>\d+))?_(?P<name>[^/]+\.json(?:\.gz)?)$")


def _b_replica_relocated(m: re.Match[str]) -> NameInfo:
    f = _engine_fields(m["name"])
    notes = (f"tp_rank={f['tp_rank']}",) if "tp_rank" in f else ()
    return NameInfo(ArtifactKind.TORCH_TRACE, "rollout_replica_relocated", role="rollout",
                    scope="rollout", replica=int(m["replica"]), rank=_int(m["g"]),
                    host=f.get("host"), pid=f.get("pid"), notes=notes,  # type: ignore[arg-type]
                    host_span=_shift(f.get("host_span"), _name_offset(m, "name")),
                    tp_rank=f.get("tp_rank"))  # type: ignore[arg-type]


# verl 0.9 build_trace_basename. Tokens cannot hold '_' (sanitised), and a token may not look
# like the step/rank parts that follow, so `train_step2_rank0` never reads `step2` as a scope.
_TOK = r"(?!step\d+_|rank\d)[0-9A-Za-z.=+-]+"
_TORCH_VERL = re.compile(
    rf"(?:^|/)(?:(?P<t1>{_TOK})_)?(?:(?P<t2>{_TOK})_)?(?:step(?P<step>\d+)_)?"
    r"rank(?P<rank>\d+)(?:-of-(?P<world>\d+))?"
    r"(?:_(?P<par>(?:tp|pp|dp|cp)\d+(?:-(?:tp|pp|dp|cp)\d+)*))?"
    r"_pid(?P<pid>\d+)_(?P<ts>\d{14,20})(?:_(?P<win>mb\d+(?:-\d+)?|part\d+))?\.json(?:\.gz)?$")


def _b_torch_verl(m: re.Match[str]) -> NameInfo:
    t1, t2 = m["t1"], m["t2"]
    if t1 is not None and t2 is not None:
        prefix, scope = t1, t2
    elif t1 is not None:
        prefix, scope = (t1, None) if _is_prefix_token(t1) else (None, t1)
    else:
        prefix, scope = None, None
    notes: list[str] = []
    if m["par"]:
        notes.append(f"parallel={m['par']}")
    if m["win"]:
        notes.append(f"window={m['win']}")
    return NameInfo(ArtifactKind.TORCH_TRACE, "torch_verl", role=_role(prefix, scope), prefix=prefix,
                    scope=scope, rank=int(m["rank"]), world_size=_int(m["world"]), pid=int(m["pid"]),
                    step=_int(m["step"]), timestamp=m["ts"], notes=tuple(notes))


# verl 0.8: save_path/<scope>/[prefix_]prof_rank-<r>_<pid>_<ts>.json.gz (prefix unsanitised), one file per
# profiled call (a step, or a stage call in discrete mode): window/series.py numbers them.
_TORCH_VERL_OLD = re.compile(
    r"(?:^|/)(?:(?P<dir>[^/]+)/)?(?:(?P<prefix>[^/]+?)_)?prof_rank-(?P<rank>\d+)_(?P<pid>\d+)_(?P<ts>\d+)"
    r"(?:_(?:cycle|part)(?P<part>\d+))?\.json(?:\.gz)?$")


def _b_torch_verl_old(m: re.Match[str]) -> NameInfo:
    scope = m["dir"]
    prefix = m["prefix"]
    notes = (f"window=part{m['part']}",) if m["part"] else ()
    return NameInfo(ArtifactKind.TORCH_TRACE, "torch_verl_old", role=_role(prefix, scope),
                    prefix=prefix, scope=scope, rank=int(m["rank"]), pid=int(m["pid"]),
                    timestamp=m["ts"], notes=notes)


# verl 0.7 and main of early 2026 (`get_torch_profiler`): `<save_path>/<role>/[<prefix>_]prof_rank-<R>.json.gz`,
# where <role> is the profiled scope (a stage in discrete mode: `actor_update`; `e2e` ...). No step,
# pid or time in the name: each profiled call rewrites the file, so it holds the last one.
_TORCH_VERL_PHASE = re.compile(
    r"(?:^|/)(?:(?P<dir>[^/]+)/)?(?:(?P<prefix>[^/]+?)_)?prof_rank-(?P<rank>\d+)\.json(?:\.gz)?$")


def _b_torch_verl_phase(m: re.Match[str]) -> NameInfo:
    scope, prefix = m["dir"], m["prefix"]
    return NameInfo(ArtifactKind.TORCH_TRACE, "torch_verl_phase", role=_role(prefix, scope), prefix=prefix,
                    scope=scope, rank=int(m["rank"]),
                    notes=("rewritten each profiled call: holds the last one",))


# verl 0.5 / 0.6 (`verl/utils/profiler/profile.py` Profiler.save, used by megatron_actor's update_policy):
# `<save_path>/prof_start_<a>_end_<b>_rank_<R>.json`, one file per rank and run: a torch.profiler
# schedule over the update's mini-batches a..b (`prof.step()` per mini-batch) of the first
# update_policy call (then `stop_trace`), so RL step 1; its ProfilerStep#N count mini-batches.
_TORCH_VERL_05 = re.compile(r"(?:^|/)prof_start_(?P<a>\d+)_end_(?P<b>\d+)_rank_(?P<rank>\d+)\.json$")


def _b_torch_verl_05(m: re.Match[str]) -> NameInfo:
    return NameInfo(ArtifactKind.TORCH_TRACE, "torch_verl_05", role="actor", scope="update_policy",
                    rank=int(m["rank"]), step=1, notes=(f"mini_batches={m['a']}-{m['b']}",))


# torch.profiler.tensorboard_trace_handler: `<worker_name>.<ms>.pt.trace.json[.gz]`, whose default
# worker name is `<host>_<pid>`.
_TENSORBOARD = re.compile(r"(?:^|/)(?P<worker>[^/]+)\.(?P<ts>\d+)\.pt\.trace\.json(?:\.gz)?$")


def _b_tensorboard(m: re.Match[str]) -> NameInfo:
    hp = re.fullmatch(r"(?P<host>[A-Za-z0-9][A-Za-z0-9.-]*)_(?P<pid>\d+)", m["worker"])
    return NameInfo(ArtifactKind.TORCH_TRACE, "torch_tensorboard", host=hp["host"] if hp else None,
                    pid=int(hp["pid"]) if hp else None, timestamp=m["ts"],
                    host_span=_shift(hp.span("host"), _name_offset(m, "worker")) if hp else None)


_JSON_OTHER = re.compile(r"(?:^|/)[^/]+\.json(?:\.gz)?$")


def _b_json_other(m: re.Match[str]) -> NameInfo:
    return NameInfo(ArtifactKind.TORCH_TRACE, "chrome_trace_other", needs_sniff=True)


PATTERNS: tuple[NamePattern, ...] = (
    NamePattern(
        "hydra_config", _HYDRA, _b_hydra,
        examples=((".hydra/config.yaml", {}), ("outputs/2026-01-02/03-04-05/.hydra/config.yaml", {})),
        not_examples=(".hydra/hydra.yaml", ".hydra/overrides.yaml", "config.yaml", "x.hydra/config.yaml"),
        doc="Hydra's composed run config."),
    NamePattern(
        "ray_worker", _RAY_WORKER, _b_ray_worker,
        examples=(
            ("worker_process_1983.nsys-rep", {"pid": 1983, "capture_range": None, "kind": ArtifactKind.NSYS_REPORT}),
            ("logs/nsight/worker_process_1983.2.nsys-rep", {"pid": 1983, "capture_range": 2}),
            ("worker_process_77.3.qdstrm", {"pid": 77, "capture_range": 3, "kind": ArtifactKind.NSYS_QDSTRM}),
            ("worker_process_1983.1.sqlite", {"pid": 1983, "capture_range": 1, "kind": ArtifactKind.NSYS_SQLITE}),
        ),
        not_examples=("worker_process_abc.nsys-rep", "worker_process_1.2.3.nsys-rep",
                      "node1_worker_process_5.nsys-rep", "worker_process_5.nsys-rep.bak",
                      "my_worker_process_5.json.gz"),
        doc="Ray's nsight runtime_env output (`-o worker_process_%p`), one file per capture range."),
    NamePattern(
        "ray_worker_relocated", _RELOCATED, _b_relocated,
        examples=(
            ("gpu-node-3_worker_process_42.nsys-rep", {"host": "gpu-node-3", "pid": 42, "role": None}),
            ("actor_rollout_ref_h200.example.com_worker_process_42.2.nsys-rep",
             {"host": "h200.example.com", "pid": 42, "capture_range": 2, "role": "actor_rollout_ref",
              "prefix": "actor_rollout_ref"}),
            ("critic_node7_worker_process_9.qdstrm", {"host": "node7", "role": "critic",
                                                      "kind": ArtifactKind.NSYS_QDSTRM}),
            ("rm_n1_worker_process_9.1.sqlite", {"role": "reward", "capture_range": 1,
                                                 "kind": ArtifactKind.NSYS_SQLITE}),
        ),
        not_examples=("worker_process_42.nsys-rep", "_worker_process_42.nsys-rep",
                      "node_worker_process_x.nsys-rep", "node1_worker_process_42.json.gz"),
        doc="verl relocate_results: `[<role>_]<host>_worker_process_<pid>[.<k>]`."),
    NamePattern(
        "nsys_user", _NSYS_USER, _b_nsys_user,
        examples=(("profile_run.nsys-rep", {"kind": ArtifactKind.NSYS_REPORT, "capture_range": None}),
                  ("sub/dir/report1.qdstrm", {"kind": ArtifactKind.NSYS_QDSTRM}),
                  ("capture_0042.3.nsys-rep", {"capture_range": 3})),
        not_examples=("report.nsys-rep.tmp", "report.sqlite", "report.nsysrep", ".nsys-rep/x"),
        doc="Any other report (a user `nsys profile -o NAME`)."),
    NamePattern(
        "nsys_sqlite_user", _SQLITE_USER, _b_sqlite_user,
        examples=(("whole/whole_1873.sqlite", {"kind": ArtifactKind.NSYS_SQLITE, "pid": None, "capture_range": None}),
                  ("node_a.12.sqlite", {"capture_range": 12, "pid": None})),
        not_examples=("db.sqlite-journal", "db.sqlite-wal", "db.sqlite3"),
        doc="Any other SQLite export (validated by header in gather)."),
    NamePattern(
        "memory_snapshot_verl", _MEMORY_VERL, _b_memory_verl,
        examples=(
            ("step2/torch_memory_rank0_pid804.pickle", {"step": 2, "rank": 0, "pid": 804, "steps": None}),
            ("profile/steps3-5/torch_memory_rank7_pid11.pickle", {"step": None, "steps": (3, 5), "rank": 7}),
            ("oom_20260102-030405-123456/torch_memory_oom_rank1_pid2.pickle",
             {"rank": 1, "pid": 2, "notes": ("oom",), "timestamp": "20260102-030405-123456"}),
            ("20260102-0304/snapshot_rank0_pid5.pickle", {"rank": 0, "pid": 5, "timestamp": "20260102-0304"}),
            ("torch_memory_rank3_pid9.pickle", {"rank": 3, "pid": 9, "step": None}),
        ),
        not_examples=("step2/torch_memory_rank0.pickle", "step2/torch_memory_rank0_pid804.pkl",
                      "step2/torch_memory_rankX_pid804.pickle", "step2/_rank0_pid1.pickle"),
        doc="verl torch_memory tool: `{step<N>|steps<a>-<b>|oom_<ts>}/<tag>_rank<R>_pid<P>.pickle`."),
    NamePattern(
        "memory_snapshot_other", _MEMORY_OTHER, _b_memory_other,
        examples=(("my_snapshot.pickle", {}), ("mem_snapshots/rank0_memory.pkl", {})),
        not_examples=("dataset_cache.pickle", "snapshot.pickle.gz", "model.pkl"),
        doc="A snapshot a user dumped by hand (`_dump_snapshot('snapshot.pickle')`)."),
    NamePattern(
        "rollout_replica", _REPLICA_DIR, _b_replica_dir,
        examples=(
            ("agent_loop_rollout_replica_0/host1_4242.1764660000000.pt.trace.json.gz",
             {"replica": 0, "host": "host1", "pid": 4242, "role": "rollout"}),
            ("profile/agent_loop_rollout_replica_3/1764660000.123-TP-1.trace.json.gz",
             {"replica": 3, "notes": ("tp_rank=1",)}),
            ("agent_loop_rollout_replica_1/sub/inst-rank-0.17646.pt.trace.json", {"replica": 1, "tp_rank": 0}),
            ("agent_loop_rollout_replica_2/rank1.pt.trace.json.gz", {"replica": 2, "tp_rank": 1}),
            ("agent_loop_rollout_replica_0/1764.1-TP-1-DP-1.trace.json.gz", {"replica": 0, "tp_rank": None}),
        ),
        not_examples=("agent_loop_rollout_replica_x/a.json.gz", "agent_loop_rollout_replica_0/a.txt",
                      "agent_loop_rollout_replica_0.json.gz"),
        doc="Rollout-engine traces under a replica folder (verl rollout_trace_dir)."),
    NamePattern(
        "rollout_replica_relocated", _REPLICA_RELOCATED, _b_replica_relocated,
        examples=(
            ("rollout-replica2_1764660000.1-TP-0.trace.json.gz", {"replica": 2, "rank": None}),
            ("rollout-replica4-globalrank8_inst-rank-0.1764.pt.trace.json.gz", {"replica": 4, "rank": 8}),
        ),
        not_examples=("rollout-replica_1.json.gz", "rollout-replicaX_a.json.gz", "rollout_replica2_a.json.gz"),
        doc="verl relocate_rollout_traces: `rollout-replica<r>[-globalrank<g>]_<engine name>`."),
    NamePattern(
        "torch_verl", _TORCH_VERL, _b_torch_verl,
        examples=(
            ("actor-rollout-ref_train_step2_rank0-of-1_pid754_20261202085621396.json.gz",
             {"prefix": "actor-rollout-ref", "scope": "train", "step": 2, "rank": 0, "world_size": 1,
              "pid": 754, "role": "actor_rollout_ref", "timestamp": "20261202085621396"}),
            ("train_step5_rank3-of-8_pid1_20260101000000000.json.gz",
             {"prefix": None, "scope": "train", "step": 5, "rank": 3, "world_size": 8, "role": None}),
            ("critic_rank1_pid2_20260101000000000.json.gz", {"prefix": "critic", "scope": None,
                                                             "role": "critic", "step": None}),
            ("language-model_actor-update_step1_rank0-of-2_tp0-pp0-dp0_pid9_20260101000000000_mb0-1.json.gz",
             {"role": "actor", "scope": "actor-update", "notes": ("parallel=tp0-pp0-dp0", "window=mb0-1")}),
            ("actor-rollout-ref_ref-compute-log-prob_step3_rank0_pid9_20260101000000000_part1.json.gz",
             {"role": "actor_rollout_ref", "scope": "ref-compute-log-prob", "world_size": None,
              "notes": ("window=part1",)}),
            ("rank0_pid9_20260101000000000.json", {"rank": 0, "prefix": None, "scope": None}),
        ),
        not_examples=("actor_train_step2_rank0_pid754.json.gz", "step2_rank0-of-1_pid754_2026.json.gz",
                      "a_b_c_rank0_pid1_20260101000000000.json.gz",
                      "actor_rank0_pid1_20260101000000000.json.gz.tmp",
                      "actor_rank0_pid1_20260101000000000.txt"),
        doc="verl >= 0.7 build_trace_basename."),
    NamePattern(
        "torch_verl_old", _TORCH_VERL_OLD, _b_torch_verl_old,
        examples=(
            ("e2e/prof_rank-0_1234_20250101120000123.json.gz", {"scope": "e2e", "rank": 0, "pid": 1234}),
            ("actor_update/actor_rollout_ref_prof_rank-3_77_20250101120000123.json.gz",
             {"scope": "actor_update", "prefix": "actor_rollout_ref", "role": "actor_rollout_ref", "rank": 3}),
            ("prof_rank-1_5_20250101120000123_cycle2.json.gz", {"scope": None, "rank": 1, "notes": ("window=part2",)}),
            ("actor_update/prof_rank-0_1_20250101120000123.json", {"role": "actor"}),
        ),
        not_examples=("e2e/prof_rank0_1_2.json.gz", "e2e/prof_rank-0_1.json.gz", "prof_rank-a_1_2.json.gz"),
        doc="verl 0.8 get_torch_profiler: `<scope>/[prefix_]prof_rank-<r>_<pid>_<ts>.json.gz`, one file per profiled call."),
    NamePattern(
        "torch_verl_phase", _TORCH_VERL_PHASE, _b_torch_verl_phase,
        examples=(
            ("outputs/profile/actor_update/prof_rank-3.json.gz",
             {"scope": "actor_update", "role": "actor", "rank": 3, "pid": None, "step": None}),
            ("e2e/actor_rollout_ref_prof_rank-0.json.gz",
             {"scope": "e2e", "prefix": "actor_rollout_ref", "role": "actor_rollout_ref", "rank": 0}),
            ("prof_rank-1.json", {"scope": None, "rank": 1}),
        ),
        not_examples=("e2e/prof_rank0.json.gz", "e2e/prof_rank-a.json.gz", "e2e/prof_rank-0.json.gz.tmp"),
        doc="verl 0.7 / early-2026 get_torch_profiler: `<role>/[<prefix>_]prof_rank-<R>.json.gz`."),
    NamePattern(
        "torch_verl_05", _TORCH_VERL_05, _b_torch_verl_05,
        examples=(("profile/prof_start_1_end_3_rank_0.json", {"rank": 0, "role": "actor", "step": 1,
                                                             "notes": ("mini_batches=1-3",)}),
                  ("prof_start_0_end_2_rank_7.json", {"rank": 7, "scope": "update_policy"})),
        not_examples=("prof_start_1_end_3_rank_0.json.gz", "prof_start_1_rank_0.json", "prof_start_a_end_3_rank_0.json"),
        doc="verl 0.5 / 0.6 Profiler.save: `prof_start_<a>_end_<b>_rank_<R>.json` (update mini-batches a..b of step 1)."),
    NamePattern(
        "torch_tensorboard", _TENSORBOARD, _b_tensorboard,
        examples=(("node1_4242.1764660000000.pt.trace.json.gz", {"host": "node1", "pid": 4242}),
                  ("worker0.1764660000000.pt.trace.json", {"host": None, "pid": None})),
        not_examples=("node1_4242.pt.trace.json.gz", "node1_4242.1764.trace.json.gz"),
        doc="torch.profiler.tensorboard_trace_handler output."),
    NamePattern(
        "chrome_trace_other", _JSON_OTHER, _b_json_other,
        examples=(("trace.json.gz", {"needs_sniff": True}), ("sub/anything.json", {"needs_sniff": True})),
        not_examples=("trace.json.bz2", "trace.jsonl", "x.json/y"),
        doc="Any other JSON: a chrome trace only if its content says so (gather sniffs it)."),
)


def classify_name(relpath: str) -> NameInfo | None:
    """Identify a file by its path relative to a source root ('/'-separated), or None.

    The parent folders matter for some conventions (`step2/`, `agent_loop_rollout_replica_0/`,
    older verl's `<scope>/`), so pass the relative path, not just the base name.
    """
    rel = relpath.replace("\\", "/")
    for pat in PATTERNS:
        m = pat.regex.search(rel)
        if m:
            return pat.build(m)
    return None


def pattern_by_id(pattern_id: str) -> NamePattern:
    """The pattern with this id (for tests and docs)."""
    for pat in PATTERNS:
        if pat.id == pattern_id:
            return pat
    raise KeyError(pattern_id)
