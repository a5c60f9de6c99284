"""`collect --ray`: where a run's files lie on a Ray cluster, so collect can work on them there.

Why: on a multi-node verl run each node keeps its own reports in its own Ray session folder
(`<temp dir>/session_latest/logs/nsight/`) and in the profiler's `save_path`; copying raw reports
to one place would move every secret they hold across the network. So `collect --ray` runs the
same sequence as a local collect (pipeline/collect.py); only the places differ: gather runs once
per alive node (one task pinned to it, `gather_node`), every artifact remembers the node that
holds it, and each later per-input task (export, pass 1, pass 2) is a `Job` pinned to that node.
What comes back from a node is the gather listing, pass 1's facts (steps, identities for the one
pseudonym map) and pass 2's scrubbed rows and window files.

A node that is dead, holds nothing or fails is a row of `nodes` (and of the manifest's `cluster`
block), never a crash of the whole collect.
"""
from __future__ import annotations

import os
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence

from ..stages import gather as gather_stage
from ..stages.core.hashing import salted_hash
from .executors import Job, run_jobs

#: Environment variable that overrides where a node's nsight reports are (set per node by
#: `ray start` env / `RayParams.env_vars`; tests give every node its own folder this way).
NSIGHT_ENV = "VERLPROF_NSIGHT_DIR"


@dataclass
class NodeRow:
    """One Ray node of the run: pseudonym (salted hash of its id), what it held, or why not."""

    node: str
    status: str                  # ok | nothing | failed | dead
    artifacts: int = 0
    detail: str = ""             # one line for the terminal (not written to the bundle)

    def to_manifest(self) -> dict[str, Any]:
        return {"node": self.node, "status": self.status, "artifacts": self.artifacts}


@dataclass
class ClusterGather:
    """Gather over every node: one merged listing, and which node holds each artifact."""

    gathered: gather_stage.GatherResult
    node_of: dict[str, str] = field(default_factory=dict)   # artifact rel -> Ray node id
    nodes: list[NodeRow] = field(default_factory=list)


@dataclass(frozen=True)
class GatherNodeOptions:
    salt: str
    exclude: tuple[str, ...] = ()
    save_path: str | None = None


def node_nsight_dir() -> Path | None:
    """This node's Ray nsight folder: $VERLPROF_NSIGHT_DIR, else `<session dir>/logs/nsight`."""
    env = os.environ.get(NSIGHT_ENV)
    if env:
        return Path(env)
    session = None
    ray = sys.modules.get("ray")
    if ray is not None and ray.is_initialized():
        try:
            node = getattr(ray._private.worker.global_worker, "node", None)  # noqa: SLF001 - no public API
            session = node.get_session_dir_path() if node is not None else None
        except Exception:  # noqa: BLE001 - fall back to the folder search of gather
            session = None
    if session:
        return Path(session) / "logs" / "nsight"
    return gather_stage.ray_nsight_dir()


def node_sources(sources: Sequence[str | Path], save_path: str | None = None) -> list[Path]:
    """Folders on this node to collect from: its nsight folder, the profiler save_path, `sources`."""
    cands: list[Path] = []
    nsight = node_nsight_dir()
    if nsight is not None:
        cands.append(nsight)
    for p in (save_path, *sources):
        if p:
            cands.append(Path(p).expanduser())
    out: list[Path] = []
    for c in cands:
        if c.exists() and c not in out:
            out.append(c)
    return out


def gather_node(sources: list[str], options: GatherNodeOptions) -> gather_stage.GatherResult:
    """On one node: gather (with content hashes) what it holds. Only the listing travels."""
    dirs = node_sources(sources, options.save_path)
    if not dirs:
        return gather_stage.GatherResult([], None)
    return gather_stage.gather(dirs, with_hashes=True, exclude=[Path(e) for e in options.exclude],
                               host_salt=options.salt)


def gather_on_nodes(executor: Any, sources: Sequence[str | Path], salt: str,
                    exclude: Sequence[Path] = (), save_path: str | None = None) -> ClusterGather:
    """One pinned gather per alive node; artifacts merged in node order, each tagged with its node.

    A name found on two nodes is kept apart as `<node>/<name>` (node = the salted pseudonym)."""
    ray = executor.ensure()
    nodes = sorted(ray.nodes(), key=lambda n: n.get("NodeID", ""))
    rows: list[NodeRow] = []
    alive = []
    for n in nodes:
        if n.get("Alive", False):
            alive.append(n["NodeID"])
        else:
            rows.append(NodeRow(salted_hash(n["NodeID"], salt), "dead", detail="node is not alive"))
    opts = GatherNodeOptions(salt, tuple(str(e) for e in exclude), save_path)
    srcs = [str(s) for s in sources]
    results = run_jobs(executor, [Job(gather_node, srcs, opts, node=nid) for nid in alive])
    per_node: list[tuple[str, gather_stage.GatherResult]] = []
    for nid, res in zip(alive, results):
        pseudo = salted_hash(nid, salt)
        if res.error is not None:
            rows.append(NodeRow(pseudo, "dead" if "Unschedulable" in res.error or "NodeDied" in res.error
                                else "failed", detail=res.error))
            continue
        got = res.value
        held = len(got.artifacts) + len(got.rejected)     # a corrupt candidate is a (failed) artifact
        rows.append(NodeRow(pseudo, "ok" if held else "nothing", held))
        per_node.append((nid, got))     # every node: its unreadable files and skip reasons count too
    return merge_gathers(per_node, rows, salt)


def merge_gathers(per_node: list[tuple[str, gather_stage.GatherResult]], rows: list[NodeRow],
                  salt: str) -> ClusterGather:
    """The nodes' listings as one, as a local gather of all their folders would list them.

    Every field of each node's `GatherResult` is carried (one node's listing comes back equal to
    itself, tests/test_cluster_merge.py): the unreadable candidates (`rejected`, and their reasons
    in `skipped`) are what collect reports as failed artifacts, by the same path as a local run;
    verlprof's own outputs found on a node (`own_outputs`) are said once each, as locally.
    A name found on two nodes becomes `<node>/<name>` (node = the salted pseudonym) wherever it
    appears: artifact, unreadable candidate and its skip reason alike.
    """
    count: dict[str, int] = {}
    for _nid, got in per_node:
        for a in (*got.artifacts, *got.rejected):
            count[a.rel] = count.get(a.rel, 0) + 1

    def on_node(nid: str, rel: str) -> str:
        return f"{salted_hash(nid, salt)}/{rel}" if count.get(rel, 0) > 1 else rel

    artifacts, rejected, skipped, roots, config, node_of = [], [], [], [], None, {}
    own: list[tuple[str, str]] = []
    for nid, got in per_node:
        for a in got.artifacts:
            a = a.replace(rel=on_node(nid, a.rel))
            artifacts.append(a)
            node_of[a.rel] = nid
        rejected += [a.replace(rel=on_node(nid, a.rel)) for a in got.rejected]
        skipped += [(on_node(nid, rel), why) for rel, why in got.skipped]
        own += [(rel if len(per_node) == 1 else f"{salted_hash(nid, salt)}/{rel}", why) for rel, why in got.own_outputs]
        roots += [r for r in got.roots if r not in roots]
        config = config or got.config
    order = {"ok": 0, "nothing": 1, "failed": 2, "dead": 3}
    rows.sort(key=lambda r: (order.get(r.status, 9), r.node))
    return ClusterGather(gather_stage.GatherResult(artifacts, config, skipped, roots, rejected, own), node_of, rows)


__all__ = ["NSIGHT_ENV", "ClusterGather", "GatherNodeOptions", "NodeRow", "gather_node", "gather_on_nodes",
           "merge_gathers", "node_nsight_dir", "node_sources"]
