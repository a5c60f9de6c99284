"""Who made an nsys report: the verl role, rank and world size of its profiled process.

Why: Ray names the reports of profiled actors `worker_process_<pid>.nsys-rep`, so the file name
says nothing about the role or rank (`stages/readers/naming.py` leaves them None) and summaries
would read `role ? rank ?`. The SQLite export of the report still knows, in small tables:

- the profiled process's **name** (`PROCESSES.name`, `ThreadNames` + `StringIds` of its threads):
  Ray sets it to `ray::<ActorClass>` or `ray::<ActorClass>.<method>`, cut by Linux to 15
  characters (`ray::ActorRollo`). The class maps to a role through `CLASS_ROLES` below.
- its **environment**: per process in `META_DATA_CAPTURE` rows `PROCESS_<n>:ENVIRONMENT_VARIABLE`
  (nsys 2024+, one `KEY=VALUE` a row), and for the whole session in `TARGET_INFO_SYSTEM_ENV` row
  `DeviceEnvironment` (NUL-separated in nsys 2022.4, `;`-separated in 2025). Under Ray's
  `runtime_env={"nsight": ...}` nsys is started with the worker's environment, so both hold what
  verl's `RayWorkerGroup` sets: `RANK`, `WORLD_SIZE` (and `WG_PREFIX`, the worker-group prefix).
  `StringIds` also holds environment blocks, but of every process nsys saw on the host (the other
  ranks' too) with nothing tying a block to a pid, so they are never used.
- its **NVTX ranges**: verl's controller opens `step` (`marked_timer`), workers open stage ranges
  (`DistProfiler.annotate`: `generate_sequences`, `actor_update`, ...), see `WORKER_RANGE_ROLES`.

Order of trust for the role: a Ray class name with a role in `CLASS_ROLES` (verl's colocated
`WorkerDict`/`FusedWorker*` and `TrainingWorker` have none: one process plays several roles), then
a `step` range (only a controller opens one: "trainer"), then the worker stage ranges the process
opened (a colocated worker that generated, computed log-probs and updated is `actor_rollout_ref`).
An `ActorRolloutRefWorker` stays `actor_rollout_ref` even when verl gave it a narrower role
(`role="ref"`), because its process name cannot say which.

Secrets: environments carry tokens and passwords. Only `RANK`, `WORLD_SIZE` and `WG_PREFIX` are
ever kept from them (picked out as they are read; per-variable rows are filtered inside SQLite),
and only the two numbers leave this module; `evidence` holds fixed labels (`EVIDENCE_LABELS`).

Speed: only small tables are read (metadata, process and thread names, `StringIds` lookups of a
few known names); `NVTX_EVENTS` is read at most `NVTX_SCAN_ROWS` rows deep, and no CUDA table is
scanned (one `LIMIT 1` row to find the pid when none is given). Read-only (`mode=ro&immutable=1`).
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable

from .nsys_sqlite import PID_SHIFT, TID_MASK, NsysExport, in_list
from .sqlite_export import text_of as _text

#: Ray actor class -> verl role. Classes of verl 0.9 (`verl/workers`, `verl/trainer`,
#: `verl/experimental`, rollout servers) and older fsdp/megatron workers. A class mapped to None is
#: a known container of several roles: its role comes from its NVTX ranges.
CLASS_ROLES: dict[str, str | None] = {
    # the controller (verl's `main_ppo` TaskRunner and its variants)
    "TaskRunner": "trainer", "TaskRunnerV1": "trainer", "BaseTaskRunner": "trainer",
    "OneStepTaskRunner": "trainer", "FullyAsyncTaskRunner": "trainer",
    # policy workers: one process holds actor, rollout and reference model
    "ActorRolloutRefWorker": "actor_rollout_ref", "AsyncActorRolloutRefWorker": "actor_rollout_ref",
    "TinkerActorRolloutRefWorker": "actor_rollout_ref",
    "DetachActorWorker": "actor",
    "RolloutWorker": "rollout", "DetachAsyncRolloutWorker": "rollout", "AgentLoopWorker": "rollout",
    "AgentLoopWorkerTQ": "rollout", "vLLMHttpServer": "rollout", "SGLangHttpServer": "rollout",
    "TRTLLMHttpServer": "rollout", "AsyncvLLMServer": "rollout", "AsyncSglangServer": "rollout",
    "FullyAsyncRollouter": "rollout",
    "CriticWorker": "critic",
    "RewardModelWorker": "reward", "RewardLoopWorker": "reward", "RewardComputeWorker": "reward",
    # colocated containers and generic engines: role from NVTX
    "WorkerDict": None, "FusedWorker": None, "TrainingWorker": None, "TinkerTrainingWorker": None,
}

#: Worker-side NVTX range names (verl `DistProfiler.annotate` roles and, for older verl, the
#: decorated method names) -> the role that opens them. Controller names (`gen`, `old_log_prob`,
#: `update_actor` ...) are left out: the controller opens them too, around its remote calls.
WORKER_RANGE_ROLES: dict[str, str] = {
    "generate_sequences": "rollout", "rollout_generate": "rollout", "async_rollout": "rollout",
    "actor_compute_log_prob": "actor", "compute_log_prob": "actor", "actor_update": "actor",
    "ref_compute_log_prob": "ref", "compute_ref_log_prob": "ref",
    "compute_values": "critic", "critic_compute_values": "critic", "critic_update": "critic",
    "compute_rm_score": "reward",
}

#: Only verl's controller opens this range (`marked_timer("step")`), around each training step.
CONTROLLER_RANGE = "step"

NVTX_SCAN_ROWS = 250_000          # how deep NVTX_EVENTS is read for stage names (rows)
_COMM_LEN = 15                    # Linux cuts process/thread names (comm) to 15 characters
_MIN_PREFIX = 4                   # a cut class name must keep this much to be matched
_ENV_KEYS = ("RANK", "WORLD_SIZE", "WG_PREFIX", "LOCAL_RANK")
_ENV_RE = re.compile(r"(?:^|[;\x00])(RANK|WORLD_SIZE|WG_PREFIX|LOCAL_RANK)=([^;\x00]*)")
_PROC_ENV_RE = re.compile(r"^PROCESS_(\d+):ENVIRONMENT")
_PROC_PID_RE = re.compile(r"^PROCESS_(\d+):PID$")
_POLICY = ("actor", "rollout", "ref")

# Evidence labels: fixed strings, so nothing read from an export can ride along in them.
E_CLASS = "Ray class name"
E_COLOCATED = "Ray colocated worker class"
E_STEP = "NVTX step range"
E_STAGES = "NVTX stage ranges"
ENV_PROCESS = "process capture settings"      # META_DATA_CAPTURE PROCESS_<n>:ENVIRONMENT_VARIABLE
ENV_SESSION = "session environment"           # TARGET_INFO_SYSTEM_ENV DeviceEnvironment
EVIDENCE_LABELS = frozenset({E_CLASS, E_COLOCATED, E_STEP, E_STAGES} | {
    f"{var} env ({src})" for var in ("RANK", "WORLD_SIZE") for src in (ENV_PROCESS, ENV_SESSION)})


@dataclass(frozen=True)
class ReportIdentity:
    """Role, rank and world size of a report's profiled process; None where the export cannot say.

    `evidence` lists where each fact came from as fixed labels ("Ray class name", "RANK env
    (process capture settings)", "NVTX step range" ...), never a value read from the export.
    """

    role: str | None = None
    rank: int | None = None
    world_size: int | None = None
    evidence: tuple[str, ...] = ()

    @property
    def known(self) -> bool:
        return self.role is not None or self.rank is not None or self.world_size is not None


def identify_report(export: str | Path | NsysExport, pid: int | None = None) -> ReportIdentity:
    """Who recorded `export` (a raw nsys export, or the pass's already open one); `pid` is the
    profiled process if known.

    Never raises for a valid export that lacks the tables it looks at (the answer is then
    unknown); raises BadInputError (one line, names the file) for a corrupt or non-nsys file.
    """
    with NsysExport.use(export, need_events=False) as db:
        return _Reader(db).identify(pid)


# Where a per-process rank came from (fixed labels, never a value read from the export).
RANK_ENV = "RANK env"
LOCAL_RANK_ENV = "LOCAL_RANK env"
RANK_DEVICE = "CUDA device"


def process_ranks(db: NsysExport, pids: Iterable[int]) -> dict[int, tuple[int | None, str]]:
    """Rank of every process of one report, and the source that gave it.

    Why: one report may hold several processes (torchrun under one `nsys profile`, a Ray node's
    workers), each its own rank. In order of trust: the process's own `RANK`, else `LOCAL_RANK`
    (nsys 2024+ records the environment of the processes it launched; a single-process report
    also has the session's), else the CUDA device its kernels ran on. NCCL's communicator rank
    lives in NVTX extended payloads, which `nsys export` (2022.4-2025.3) writes without their
    bytes, so it cannot be read here. When several processes share one device, the device says
    nothing about rank: rank stays unknown and the source says why.
    """
    reader = _Reader(db)
    pids = sorted({int(p) for p in pids})
    envs = reader.process_envs()
    single_env = reader._device_env() if len(pids) == 1 and not envs else {}
    out: dict[int, tuple[int | None, str]] = {}
    devices: dict[int, int | None] = {}
    for pid in pids:
        env = envs.get(pid) or (envs.get(0) if len(pids) == 1 else None) or single_env
        for key, label in (("RANK", RANK_ENV), ("LOCAL_RANK", LOCAL_RANK_ENV)):
            v = _int_env(env.get(key)) if env else None
            if v is not None:
                out[pid] = (v, label)
                break
        if pid not in out:
            devices[pid] = reader.device_of(pid)
    shared = {d for d in devices.values() if d is not None and list(devices.values()).count(d) > 1}
    for pid, dev in devices.items():
        if dev is None:
            continue
        out[pid] = (None, f"unknown: processes share {RANK_DEVICE} {dev}") if dev in shared else (dev, RANK_DEVICE)
    return out


class _Reader:
    """The reads of one export, through the pass's one probed `NsysExport`."""

    def __init__(self, db: NsysExport) -> None:
        self.db, self.path, self.query, self.has = db, db.path, db.query, db.has
        self.ranges = in_list(db.nvtx_types.ranges)

    # -- the answer ----------------------------------------------------------------------------

    def identify(self, pid: int | None) -> ReportIdentity:
        evidence: list[str] = []
        pid = self._profiled_pid(pid)
        env, env_label = self._environment(pid)
        rank, world = _int_env(env.get("RANK")), _int_env(env.get("WORLD_SIZE"))
        if world is not None and world < 1:
            world = None
        if rank is not None and world is not None and rank >= world:
            rank = world = None   # contradictory: trust neither
        if rank is not None:
            evidence.append(f"RANK env ({env_label})")
        if world is not None:
            evidence.append(f"WORLD_SIZE env ({env_label})")

        role, labels = self._class_role(pid, env.get("WG_PREFIX"))
        if role is None:
            names = self._range_names(pid)
            if CONTROLLER_RANGE in names:
                role, labels = "trainer", labels + [E_STEP]
            else:
                role = _role_of_ranges(names)
                labels = labels + [E_STAGES] if role else []
        evidence[:0] = labels
        return ReportIdentity(role=role, rank=rank, world_size=world, evidence=tuple(evidence))

    # -- which process -------------------------------------------------------------------------

    def _profiled_pid(self, pid: int | None) -> int | None:
        """`pid` if the export knows it, else the process that opened the first NVTX range or
        made the first CUDA call (the profiled one: nsys records other processes only by name)."""
        if pid is not None and pid > 0 and self._knows_pid(pid):
            return int(pid)
        for table, where in (("NVTX_EVENTS", f"eventType IN {self.ranges} AND "), ("CUPTI_ACTIVITY_KIND_RUNTIME", "")):
            if self.has(table, "eventType" if where else "globalTid", "globalTid"):
                rows = self.query(f"SELECT globalTid FROM {table} WHERE {where}globalTid IS NOT NULL LIMIT 1")
                if rows:
                    return (int(rows[0][0]) >> PID_SHIFT) & TID_MASK
        return None

    def _knows_pid(self, pid: int) -> bool:
        if self.has("PROCESSES", "pid") and self.query("SELECT 1 FROM PROCESSES WHERE pid = ? LIMIT 1", [pid]):
            return True
        if self.has("ThreadNames", "globalTid"):
            return bool(self.query(f"SELECT 1 FROM ThreadNames WHERE ((globalTid >> {PID_SHIFT}) & "
                                   f"{TID_MASK}) = ? LIMIT 1", [pid]))
        return False

    # -- per process ---------------------------------------------------------------------------

    def process_envs(self) -> dict[int, dict[str, str]]:
        """pid -> RANK/LOCAL_RANK/WORLD_SIZE/WG_PREFIX of every process nsys recorded an environment
        for (`PROCESS_<n>:PID` = 0 is the launched process: key 0)."""
        pids, per_proc = self._process_rows()
        return {(pids.get(n) or 0): env for n, env in per_proc.items()}

    def _process_rows(self) -> tuple[dict[int, int | None], dict[int, dict[str, str]]]:
        """nsys 2024+ `PROCESS_<n>:*` rows of META_DATA_CAPTURE: n -> recorded PID (0 or None for
        the launched process), and n -> the picked variables of its environment.

        instr on blobs: byte-wise and past NULs, unlike LIKE; other variables never leave SQLite."""
        if not self.has("META_DATA_CAPTURE", "name", "value"):
            return {}, {}
        likes = " OR ".join(f"instr(CAST(value AS BLOB), CAST('{k}=' AS BLOB)) > 0" for k in _ENV_KEYS)
        per_proc: dict[int, dict[str, str]] = {}
        pids: dict[int, int | None] = {}
        for name, value in self.query(
                "SELECT name, CAST(value AS BLOB) FROM META_DATA_CAPTURE WHERE name LIKE 'PROCESS%' "
                f"AND (name LIKE '%:PID' OR ({likes}))"):
            m = _PROC_PID_RE.match(str(name))
            if m:
                pids[int(m.group(1))] = _int_env(_text(value))
                continue
            m = _PROC_ENV_RE.match(str(name))
            picked = _pick_env(value) if m else {}
            if m and picked:
                per_proc.setdefault(int(m.group(1)), {}).update(picked)
        return pids, per_proc

    def device_of(self, pid: int) -> int | None:
        """CUDA device of the first kernel (else memcpy) the process ran; None without GPU work."""
        for table in ("CUPTI_ACTIVITY_KIND_KERNEL", "CUPTI_ACTIVITY_KIND_MEMCPY"):
            if self.has(table, "globalPid", "deviceId"):
                rows = self.query(f"SELECT deviceId FROM {table} WHERE ((globalPid >> {PID_SHIFT}) & "
                                  f"{TID_MASK}) = ? LIMIT 1", [pid])
                if rows and rows[0][0] is not None:
                    return int(rows[0][0])
        return None

    # -- environment ---------------------------------------------------------------------------

    def _environment(self, pid: int | None) -> tuple[dict[str, str], str]:
        """RANK/WORLD_SIZE/WG_PREFIX of the profiled process, and where they came from."""
        env = self._capture_env(pid)
        if env:
            return env, ENV_PROCESS
        env = self._device_env()
        return env, ENV_SESSION

    def _capture_env(self, pid: int | None) -> dict[str, str]:
        """nsys 2024+: `PROCESS_<n>:ENVIRONMENT_VARIABLE` rows; the process whose `PROCESS_<n>:PID`
        is `pid`, else the first one (nsys launched it: its PID row is 0)."""
        pids, rows = self._process_rows()
        per_proc = {n: e for n, env in rows.items()
                    if (e := {k: v for k, v in env.items() if k != "LOCAL_RANK"})}
        if not per_proc:
            return {}
        for n, p in pids.items():
            if p and p == pid and n in per_proc:
                return per_proc[n]
        return per_proc[min(per_proc)]

    def _device_env(self) -> dict[str, str]:
        """`TARGET_INFO_SYSTEM_ENV` row `DeviceEnvironment`: the environment nsys was started with."""
        if not self.has("TARGET_INFO_SYSTEM_ENV", "name", "value"):
            return {}
        out: dict[str, str] = {}
        for (value,) in self.query("SELECT CAST(value AS BLOB) FROM TARGET_INFO_SYSTEM_ENV "
                                   "WHERE name = 'DeviceEnvironment'"):
            out.update(_pick_env(value))
        return out

    # -- names ---------------------------------------------------------------------------------

    def _names_of(self, pid: int) -> list[str]:
        """Process name and thread names of `pid`, its main thread's first."""
        names: list[str] = []
        if self.has("ThreadNames", "nameId", "globalTid") and self.has("StringIds", "id", "value"):
            rows = self.query(
                f"SELECT s.value, t.globalTid & {TID_MASK} FROM ThreadNames t JOIN StringIds s "
                f"ON s.id = t.nameId WHERE ((t.globalTid >> {PID_SHIFT}) & {TID_MASK}) = ?", [pid])
            rows.sort(key=lambda r: (r[1] != pid, r[1] or 0))
            names += [str(v) for v, _ in rows if v]
        if self.has("PROCESSES", "pid", "name"):
            names[1:1] = [str(v) for (v,) in self.query("SELECT name FROM PROCESSES WHERE pid = ?", [pid]) if v]
        return names

    def _class_role(self, pid: int | None, wg_prefix: str | None) -> tuple[str | None, list[str]]:
        """The role of the first Ray actor class among the process's names that has one."""
        if pid is None:
            return None, []
        container = False
        for name in self._names_of(pid):
            found, role = class_role(name, wg_prefix)
            if found and role is not None:
                return role, [E_CLASS]
            container = container or found
        return None, ([E_COLOCATED] if container else [])

    # -- NVTX ----------------------------------------------------------------------------------

    def _range_names(self, pid: int | None) -> set[str]:
        """Which of verl's role-telling range names the process opened (first NVTX_SCAN_ROWS rows)."""
        if not self.has("NVTX_EVENTS", "eventType"):
            return set()
        wanted = [CONTROLLER_RANGE, *WORKER_RANGE_ROLES]
        has_text = self.has("NVTX_EVENTS", "text")
        ids: dict[int, str] = {}
        if self.has("NVTX_EVENTS", "textId") and self.has("StringIds", "id", "value"):
            marks = ",".join("?" * len(wanted))
            ids = {int(i): str(v) for i, v in self.query(
                f"SELECT id, value FROM StringIds WHERE value IN ({marks})", wanted)}
        if not ids and not has_text:
            return set()
        use_pid = pid is not None and self.has("NVTX_EVENTS", "globalTid")
        sel = (["textId"] if ids else []) + (["text"] if has_text else [])
        inner = f"SELECT eventType, {', '.join(sel)}{', globalTid' if use_pid else ''} FROM NVTX_EVENTS LIMIT ?"
        conds, params = [], []
        if ids:
            conds.append(f"textId IN ({','.join(str(i) for i in ids)})")
        if has_text:
            conds.append(f"text IN ({','.join('?' * len(wanted))})")
            params += wanted
        where = f"eventType IN {self.ranges} AND ({' OR '.join(conds)})"
        if use_pid:
            where += f" AND ((globalTid >> {PID_SHIFT}) & {TID_MASK}) = ?"
            params.append(pid)
        found: set[str] = set()
        for row in self.query(f"SELECT DISTINCT {', '.join(sel)} FROM ({inner}) WHERE {where}",
                              [NVTX_SCAN_ROWS, *params]):
            for v in row:
                if isinstance(v, int) and v in ids:
                    found.add(ids[v])
                elif isinstance(v, str) and v in wanted:
                    found.add(v)
        return found


# ------------------------------------------------------------------------------------------------
# Pure helpers (tested directly)
# ------------------------------------------------------------------------------------------------


def class_role(name: str, wg_prefix: str | None = None) -> tuple[bool, str | None]:
    """(is a known verl class, its role) for a process/thread name like `ray::ActorRollo`.

    Accepts `ray::<Class>`, `ray::<Class>.<method>`, a class behind verl's worker-group prefix
    (`WG_PREFIX`, or any prefix when the full class name follows), and names cut to 15 characters
    (`ray::ActorRollo`: a unique class starting with the cut part, at least 4 characters of it).
    """
    if not name.startswith("ray::"):
        return False, None
    cut = len(name) == _COMM_LEN
    token = name[len("ray::"):].split(".", 1)[0].strip()
    if wg_prefix and token.startswith(wg_prefix) and len(token) > len(wg_prefix):
        token = token[len(wg_prefix):]
    if not token or token == "IDLE":
        return False, None
    if token in CLASS_ROLES:
        return True, CLASS_ROLES[token]
    if token.startswith("FusedWorker"):
        return True, None
    ends = [k for k in CLASS_ROLES if token.endswith(k)]
    if ends:
        return True, CLASS_ROLES[max(ends, key=len)]
    if cut and len(token) >= _MIN_PREFIX:
        starts = [k for k in CLASS_ROLES if k.startswith(token)]
        roles = {CLASS_ROLES[k] for k in starts}
        if len(roles) == 1:
            return True, roles.pop()
    return False, None


def _role_of_ranges(names: Iterable[str]) -> str | None:
    """A role from the worker stage ranges a process opened.

    Policy roles combine (`actor`+`rollout` -> `actor_rollout`, with `ref` -> `actor_rollout_ref`);
    critic or reward only when no policy range is there (a pool colocating policy and critic
    reports its policy role). Per report: in verl's discrete mode (one capture range per stage)
    each file gets the role of the stage it holds, like `naming.role_of_scope` does for traces.
    """
    roles = {WORKER_RANGE_ROLES[n] for n in names if n in WORKER_RANGE_ROLES}
    policy = roles & set(_POLICY)
    if policy:
        if len(policy) == 1:
            return next(iter(policy))
        return "actor_rollout" if policy == {"actor", "rollout"} else "actor_rollout_ref"
    for r in ("critic", "reward"):
        if r in roles:
            return r
    return None


def _pick_env(value: object) -> dict[str, str]:
    """Only RANK/WORLD_SIZE/WG_PREFIX of an environment block (NUL- or `;`-separated,
    or one `KEY=VALUE`); everything else in it is dropped at once."""
    return {k: v.strip() for k, v in _ENV_RE.findall(_text(value))}


def _int_env(value: str | None) -> int | None:
    """A non-negative decimal number (nsys 2025 quotes values: `RANK="1"`), else None (an odd
    value is never echoed anywhere)."""
    if value is None:
        return None
    v = value.strip().strip('"').strip("'").strip()
    return int(v) if v.isdigit() and len(v) <= 9 else None
