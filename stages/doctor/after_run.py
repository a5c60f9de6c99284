"""After-run checks over the artifacts a run folder holds: unfinished `.qdstrm`, empty reports,
profiled roles that wrote nothing, stale reports.
"""
from __future__ import annotations

import os
import re
from dataclasses import dataclass
from typing import Optional

import yaml

from .config import WORKER_OPTS, ProfileConfig, enabled_roles, fmt_value, global_tool, load_yaml, profile_steps
from .findings import Finding

ARTIFACT_KINDS = ("nsys_report", "nsys_qdstrm", "nsys_sqlite", "torch_trace", "memory_snapshot", "hydra_config")


REPORT_KINDS = ("nsys_report", "nsys_qdstrm", "torch_trace", "memory_snapshot")


STALE_SECONDS = 600.0


_SESSION_RE = re.compile(r"session_(\d{4}-\d{2}-\d{2}_\d{2}-\d{2}-\d{2}_\d+_\d+)")


@dataclass(frozen=True)
class Artifact:
    kind: str
    rel: str
    size: int
    mtime: float
    role: Optional[str] = None

    @classmethod
    def from_dict(cls, d: dict) -> "Artifact":
        return cls(kind=str(d["kind"]), rel=str(d["rel"]), size=int(d.get("size") or 0),
                   mtime=float(d.get("mtime") or 0.0), role=d.get("role"))


def artifact_kind(name: str, rel: str = "") -> Optional[str]:
    low = name.lower()
    parts = rel.replace("\\", "/").split("/")
    if low == "config.yaml" and len(parts) >= 2 and parts[-2] == ".hydra":
        return "hydra_config"
    if low.endswith(".qdstrm"):
        return "nsys_qdstrm"
    if low.endswith(".nsys-rep") or low.endswith(".qdrep"):
        return "nsys_report"
    if low.endswith(".sqlite"):
        return "nsys_sqlite"
    if low.endswith(".json.gz") or low.endswith(".pt.trace.json") or (
        low.endswith(".json") and ("trace" in low or re.search(r"rank\d+", low))
    ):
        return "torch_trace"
    if (low.endswith(".pickle") or low.endswith(".pkl")) and ("snapshot" in low or "memory" in low):
        return "memory_snapshot"
    return None


_ROLE_RES = (
    ("rollout", re.compile(r"(^|[/_.-])(agent_loop_rollout_replica|rollout-replica)", re.I)),
    ("reward_model", re.compile(r"(^|[/_.-])reward", re.I)),
    ("ref", re.compile(r"(^|/)ref[_.-]", re.I)),
    ("critic", re.compile(r"(^|/)(critic|value_model)[_.-]", re.I)),
    ("actor", re.compile(r"(^|/)actor(_rollout(_ref)?)?[_.-]", re.I)),
)


def infer_role(rel: str) -> Optional[str]:
    """The verl role a file name encodes (verl prefixes traces with the worker role), or None."""
    for role, pat in _ROLE_RES:
        if pat.search(rel):
            return role
    return None


def scan_run_folder(root: str) -> list[dict]:
    """Artifacts under a run folder, as the dicts ``after_run_checks`` takes (os.walk, no symlinks)."""
    out = []
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames.sort()
        for name in sorted(filenames):
            full = os.path.join(dirpath, name)
            rel = os.path.relpath(full, root).replace(os.sep, "/")
            kind = artifact_kind(name, rel)
            if kind is None:
                continue
            try:
                st = os.stat(full)
            except OSError:
                continue
            out.append({"kind": kind, "rel": rel, "size": st.st_size, "mtime": st.st_mtime,
                        "role": infer_role(rel) if kind != "hydra_config" else None})
    return out


def _roles_of(a: Artifact) -> set[str]:
    role = (a.role or infer_role(a.rel) or "").lower()
    if not role:
        return set()
    if role.startswith("actor_rollout_ref"):
        return {"actor", "ref"}
    if role.startswith("actor"):
        return {"actor"}
    if role.startswith("rollout") or role == "generation":
        return {"rollout"}
    if role.startswith("reward"):
        return {"reward_model"}
    return {role}


def _examples(items: list[str], n: int = 3) -> str:
    shown = ", ".join(items[:n])
    return shown + (f" (+{len(items) - n} more)" if len(items) > n else "")


def after_run_checks(artifacts: list[dict], cfg: Optional[dict] = None,
                     stale_seconds: float = STALE_SECONDS) -> list[Finding]:
    """Checks over what a run left behind.

    ``artifacts``: dicts with ``kind`` (one of ``ARTIFACT_KINDS``), ``rel``, ``size``, ``mtime``,
    ``role`` (str or None). ``cfg``: the run's composed config as a nested dict (or None).
    """
    arts = [Artifact.from_dict(a) for a in artifacts]
    pc = ProfileConfig(data=cfg, base_kind="composed-run") if isinstance(cfg, dict) else None
    out: list[Finding] = []

    qd = [a for a in arts if a.kind == "nsys_qdstrm"]
    if qd:
        stems = {a.rel.rsplit(".", 1)[0] for a in arts if a.kind == "nsys_report" and a.size > 0}
        orphan = [a.rel for a in qd if a.rel.rsplit(".", 1)[0] not in stems]
        if orphan:
            out.append(Finding("after-qdstrm", "error",
                               f"{len(orphan)} nsys report(s) never finalized, still .qdstrm: {_examples(orphan)} "
                               "(nsys was killed, or capture-range-end=repeat-shutdown:N waited for ranges that "
                               "never opened)",
                               "QdstrmImporter -i <file>.qdstrm to convert; next run set capture-range-end="
                               "repeat-shutdown:<number of profiled steps> and let the run exit cleanly",
                               f"{WORKER_OPTS}.capture-range-end"))
    empty = [a.rel for a in arts if a.kind == "nsys_report" and a.size == 0]
    if empty:
        out.append(Finding("after-empty-report", "error",
                           f"{len(empty)} empty .nsys-rep report(s): {_examples(empty)} (no capture range opened "
                           "in that process, or nsys died while writing)",
                           "profile a step that runs (global_profiler.steps) with capture-range=cudaProfilerApi "
                           "on the process that does the work", None))

    if pc is not None:
        tool = global_tool(pc)
        kinds = {"nsys": ("nsys_report", "nsys_qdstrm"), "torch": ("torch_trace",),
                 "torch_memory": ("memory_snapshot",)}.get(tool or "", REPORT_KINDS)
        reports = [a for a in arts if a.kind in kinds]
        roles = enabled_roles(pc) if profile_steps(pc) else {}
        if roles and not reports:
            out.append(Finding("after-no-reports", "error",
                               f"profiling was configured ({tool}, steps {fmt_value(profile_steps(pc))}, roles "
                               f"{', '.join(sorted(roles))}) but the run left no {tool or 'profiler'} output here",
                               "run `verlprof doctor` on the config; for nsys look under "
                               "/tmp/ray/session_latest/logs/nsight or set global_profiler.relocate_results=True",
                               "global_profiler.steps"))
        elif roles:
            seen: set[str] = set()
            for a in reports:
                seen |= _roles_of(a)
            if seen:  # only when file names say which role wrote them (nsys worker_process_* do not)
                for role, prefix in sorted(roles.items()):
                    if role not in seen:
                        out.append(Finding("after-role-silent", "warning",
                                           f"{role} was profiled ({prefix}.enable) but produced no output",
                                           f"check the {role} worker's log; `verlprof doctor` its config",
                                           f"{prefix}.enable"))

    # stale: older than the run's config, or from an earlier Ray session
    reports = [a for a in arts if a.kind in REPORT_KINDS or a.kind == "nsys_sqlite"]
    stale: dict[str, str] = {}
    configs = [a for a in arts if a.kind == "hydra_config"]
    if configs:
        started = max(a.mtime for a in configs)
        for a in reports:
            if a.mtime and a.mtime < started - stale_seconds:
                stale[a.rel] = f"{(started - a.mtime) / 60:.0f} min older than the run's config"
    sessions = sorted({m.group(1) for a in reports for m in [_SESSION_RE.search(a.rel)] if m})
    if len(sessions) > 1:
        for a in reports:
            m = _SESSION_RE.search(a.rel)
            if m and m.group(1) != sessions[-1]:
                stale.setdefault(a.rel, f"from earlier Ray session {m.group(1)}")
    if stale:
        rels = sorted(stale)
        out.append(Finding("after-stale-report", "warning",
                           f"{len(rels)} report(s) from an earlier run: {_examples([f'{r} ({stale[r]})' for r in rels], 2)}"
                           " (a reused session_latest or save_path keeps old reports)",
                           "delete them or collect into a fresh folder; clear /tmp/ray/session_latest/logs/nsight "
                           "before the next run", None))
    return out


@dataclass
class RunFolder:
    root: str
    config: Optional[dict]
    config_path: Optional[str]
    overrides: list[str]
    entrypoint: Optional[str]
    artifacts: list[dict]


def load_run_folder(root: str) -> RunFolder:
    """A run folder: its ``.hydra/config.yaml`` (shallowest), ``overrides.yaml``, job name, artifacts."""
    artifacts = scan_run_folder(root)
    cfgs = sorted((a for a in artifacts if a["kind"] == "hydra_config"), key=lambda a: (a["rel"].count("/"), a["rel"]))
    config = config_path = entrypoint = None
    overrides: list[str] = []
    if cfgs:
        config_path = os.path.join(root, cfgs[0]["rel"])
        data = load_yaml(config_path)
        config = data if isinstance(data, dict) else None
        hydra_dir = os.path.dirname(config_path)
        ov_path = os.path.join(hydra_dir, "overrides.yaml")
        if os.path.isfile(ov_path):
            ov = load_yaml(ov_path)
            if isinstance(ov, list):
                overrides = [str(w) for w in ov]
        hy_path = os.path.join(hydra_dir, "hydra.yaml")
        if os.path.isfile(hy_path):
            try:
                hy = load_yaml(hy_path)
                entrypoint = ((hy or {}).get("hydra") or {}).get("job", {}).get("name")
            except yaml.YAMLError:
                entrypoint = None
    return RunFolder(root=root, config=config, config_path=config_path, overrides=overrides,
                     entrypoint=entrypoint, artifacts=artifacts)
