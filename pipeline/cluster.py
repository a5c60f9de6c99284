"""`collect --ray`: collect on every node of a Ray cluster; only scrubbed summaries travel.

Why: on a multi-node verl run each node keeps its own reports in its own Ray session folder
(`<temp dir>/session_latest/logs/nsight/`) and in the profiler's `save_path`. Copying raw reports
to one place would move every secret they hold across the network. Instead, one Ray task per
alive node is pinned to that node (NodeAffinitySchedulingStrategy, soft=False); it finds the
node's own folders, runs the per-node collect there (gather, export, scrub, summarize) and returns
only the resulting bundle as bytes (a deterministic tar.gz) through Ray's object store. The
caller merges the node bundles into one bundle whose manifest says which (pseudonymous) node each
artifact came from.

A node that is dead, has no nsys, has nothing to collect, or fails is a row of the result (and of
the final table), never a crash of the whole collect.

The per-node work is a parameter `node_fn(sources, options) -> bytes` (plain, picklable); the
default `collect_node_bundle` runs `pipeline.collect.run_collect` on the node.
"""
from __future__ import annotations

import gzip
import io
import os
import secrets as _secrets
import sys
import tarfile
import tempfile
import time
import zlib
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

import pyarrow as pa
import pyarrow.parquet as pq

from ..stages.core import atomic
from ..stages.core.errors import BadInputError, ToolMissingError, VerlprofError
from ..stages.core.hashing import salted_hash
from ..stages.schema import SCHEMAS, arrow_schema
from .progress import NoProgress
from .ray_executor import _one_line, connect, import_ray

#: Environment variable that overrides where a node's nsight reports are (set per node by
#: `ray start` env / `RayParams.env_vars`; tests give every node its own folder this way).
NSIGHT_ENV = "VERLPROF_NSIGHT_DIR"

#: node_fn(sources on this node, options) -> bundle bytes (tar.gz of a scrubbed, summarized bundle)
NodeFn = Callable[[list[str], Any], bytes]

_REPORT_SUFFIXES = (".nsys-rep", ".qdrep", ".qdstrm")
_DATA_SUFFIXES = (".sqlite", ".json", ".json.gz", ".pickle", ".pkl", ".yaml")
_MAX_MEMBER = 2 << 30


@dataclass
class NodeResult:
    """What one node sent back. `bundle` is set only when status is "ok"."""

    node: str                    # pseudonym: salted hash of the Ray node id
    status: str                  # ok | nothing | no-nsys | failed | dead
    detail: str = ""             # one line for the terminal table (not written to bundles)
    bundle: bytes | None = None
    files: int = 0               # candidate input files found on the node
    seconds: float = 0.0


# ----------------------------------------------------------------------------------------------
# Deterministic bundle archives
# ----------------------------------------------------------------------------------------------


def tar_folder(folder: str | Path) -> bytes:
    """A tar.gz of `folder`'s regular files, byte-identical for identical content.

    Sorted names, zero mtimes/owners and a fixed gzip header, so "the Ray path equals the local
    path" is a byte comparison. Symlinks and special files are left out (never followed).
    """
    root = Path(folder)
    buf = io.BytesIO()
    with gzip.GzipFile(fileobj=buf, mode="wb", mtime=0, compresslevel=6) as gz:
        with tarfile.open(fileobj=gz, mode="w", format=tarfile.PAX_FORMAT) as tar:
            for path in sorted(p for p in root.rglob("*") if p.is_file() and not p.is_symlink()):
                info = tarfile.TarInfo(path.relative_to(root).as_posix())
                info.size = path.stat().st_size
                info.mode = 0o644
                with open(path, "rb") as f:
                    tar.addfile(info, f)
    return buf.getvalue()


def extract_bundle(data: bytes, dest: str | Path, *, what: str = "node bundle") -> Path:
    """Safely unpack bundle bytes into `dest` (regular files only, no absolute or `..` names)."""
    dest = Path(dest)
    dest.mkdir(parents=True, exist_ok=True)
    try:
        with tarfile.open(fileobj=io.BytesIO(data), mode="r:*") as tar:
            members = tar.getmembers()
            for m in members:
                if not m.isfile() or m.size > _MAX_MEMBER:
                    raise BadInputError(what, f"unexpected member {m.name!r} (only plain files are allowed)")
            tar.extractall(dest, members=members, filter="data")
    except (tarfile.TarError, EOFError, OSError, zlib.error) as exc:
        raise BadInputError(what, f"not a readable bundle archive ({_one_line(exc)})") from None
    return dest


# ----------------------------------------------------------------------------------------------
# On the node
# ----------------------------------------------------------------------------------------------


def _opt(options: Any, name: str, default: Any = None) -> Any:
    if isinstance(options, Mapping):
        return options.get(name, default)
    return getattr(options, name, default)


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
    from ..stages.gather import ray_nsight_dir

    return ray_nsight_dir()


def node_sources(sources: Sequence[str | Path], options: Any) -> list[Path]:
    """Folders on this node to collect from: its nsight folder, the profiler save_path, `sources`."""
    cands: list[Path] = []
    nsight = node_nsight_dir()
    if nsight is not None:
        cands.append(nsight)
    for p in (_opt(options, "save_path"), *sources):
        if p:
            cands.append(Path(p).expanduser())
    out: list[Path] = []
    for c in cands:
        if c.exists() and c not in out:
            out.append(c)
    return out


def _files_under(paths: Sequence[Path], limit: int = 100_000) -> list[Path]:
    found: list[Path] = []
    for p in paths:
        if p.is_file():
            found.append(p)
            continue
        for root, _dirs, files in os.walk(p):
            found += [Path(root) / f for f in files]
            if len(found) >= limit:
                return found
    return found


def run_on_node(node_fn: NodeFn, sources: Sequence[str], options: Any) -> dict[str, Any]:
    """The body of the per-node task: find the node's files, run `node_fn`, return bytes only."""
    t0 = time.perf_counter()
    dirs = node_sources(sources, options)
    files = _files_under(dirs)
    base = {"files": len(files)}
    if not files:
        return {**base, "status": "nothing", "detail": f"no profiler output on this node ({len(dirs)} folder(s) checked)",
                "seconds": time.perf_counter() - t0}
    try:
        data = node_fn([str(d) for d in dirs], options)
    except ToolMissingError as exc:
        return {**base, "status": "no-nsys", "detail": str(exc), "seconds": time.perf_counter() - t0}
    except Exception as exc:  # noqa: BLE001 - reported per node, never fatal
        msg = str(exc) if isinstance(exc, VerlprofError) else _one_line(exc)
        return {**base, "status": "failed", "detail": " ".join(msg.split()), "seconds": time.perf_counter() - t0}
    if not data:
        return {**base, "status": "nothing", "detail": "nothing collectable on this node", "seconds": time.perf_counter() - t0}
    return {**base, "status": "ok", "bundle": bytes(data), "seconds": time.perf_counter() - t0}


def _node_key() -> str:
    """A local folder name for this Ray node (its id; never written to a bundle)."""
    ray = sys.modules.get("ray")
    if ray is None or not ray.is_initialized():   # never start Ray just to name a folder
        return "local"
    try:
        return ray.get_runtime_context().get_node_id()[:16]
    except Exception:  # noqa: BLE001 - not in a Ray worker: one folder for this host
        return "local"


def collect_node_bundle(sources: list[str], options: Any) -> bytes:
    """Default node_fn: run the full local collect on this node's folders; return the bundle tar.

    Raises ToolMissingError when the node holds only nsys reports and has no nsys to export them.
    """
    from ..stages.core.done_records import default_work_dir
    from . import collect
    from .executors import make_executor

    files = _files_under([Path(s) for s in sources])
    reports = [f for f in files if f.name.endswith(_REPORT_SUFFIXES)]
    data = [f for f in files if f.name.endswith(_DATA_SUFFIXES)]
    if reports and not data:
        from ..stages.readers import nsys_tool

        nsys_tool.find_nsys(_opt(options, "nsys"))   # raises ToolMissingError, one line
    # One work dir per Ray node: nodes sharing a host (or a shared home) must not see each
    # other's in-flight temp files (collect cleans stale temps of its work dir on start).
    work = Path(_opt(options, "work_dir") or default_work_dir()).expanduser() / "ray-node" / _node_key()
    work.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="verlprof-node-", dir=work) as tmp:
        out = Path(tmp) / "bundle"
        allowed = set(collect.CollectOptions.__dataclass_fields__)
        kw = {k: v for k, v in (dict(options) if isinstance(options, Mapping) else {}).items() if k in allowed}
        kw.update(sources=[Path(s) for s in sources], out=out, work_dir=work, ray=None, html=False, pack=False)
        opts = collect.CollectOptions(**kw)
        collect.run_collect(opts, NoProgress(), make_executor(opts.jobs))
        return tar_folder(out)


# ----------------------------------------------------------------------------------------------
# On the caller
# ----------------------------------------------------------------------------------------------


def collect_on_nodes(address: str | None, sources: Sequence[str | Path], options: Any,
                     node_fn: NodeFn | None = None, *, salt: str | None = None, num_cpus: float = 1,
                     timeout_s: float | None = None, on_done: Callable[[NodeResult], None] | None = None
                     ) -> list[NodeResult]:
    """One pinned task per alive node; dead nodes and per-node failures become result rows.

    `sources` are extra paths looked for on every node (e.g. the run's output folder); each node
    also checks its own nsight folder and `options.save_path`. Node ids are reported as salted
    hashes (`salt`, random when not given).
    """
    ray = import_ray()
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    connect(address or "auto")
    salt = salt or _secrets.token_hex(8)
    fn = node_fn or collect_node_bundle
    srcs = [str(s) for s in sources]
    results: list[NodeResult] = []
    pending: dict[Any, str] = {}
    task = ray.remote(run_on_node)
    fn_ref, opt_ref = ray.put(fn), ray.put(options)
    for n in sorted(ray.nodes(), key=lambda n: n.get("NodeID", "")):
        pseudo = salted_hash(n["NodeID"], salt)
        if not n.get("Alive", False):
            results.append(NodeResult(pseudo, "dead", "node is not alive"))
            continue
        strategy = NodeAffinitySchedulingStrategy(node_id=n["NodeID"], soft=False)
        pinned = task.options(num_cpus=num_cpus, max_retries=0, scheduling_strategy=strategy)
        pending[pinned.remote(fn_ref, srcs, opt_ref)] = pseudo
    deadline = None if timeout_s is None else time.monotonic() + timeout_s
    while pending:
        left = None if deadline is None else max(0.0, deadline - time.monotonic())
        ready, _ = ray.wait(list(pending), num_returns=1, timeout=left)
        if not ready:
            for ref, pseudo in pending.items():
                ray.cancel(ref, force=True)
                results.append(NodeResult(pseudo, "failed", f"timed out after {timeout_s:g}s"))
                if on_done:
                    on_done(results[-1])
            break
        ref = ready[0]
        pseudo = pending.pop(ref)
        try:
            r = ray.get(ref)
            res = NodeResult(pseudo, r["status"], r.get("detail", ""), r.get("bundle"), r.get("files", 0),
                             r.get("seconds", 0.0))
        except Exception as exc:  # noqa: BLE001 - the node died or the worker crashed
            dead = type(exc).__name__ in ("NodeDiedError", "TaskUnschedulableError", "ActorUnschedulableError")
            res = NodeResult(pseudo, "dead" if dead else "failed", _one_line(exc))
        results.append(res)
        if on_done:
            on_done(res)
    order = {"ok": 0, "nothing": 1, "no-nsys": 2, "failed": 3, "dead": 4}
    return sorted(results, key=lambda r: (order.get(r.status, 9), r.node))


def _conform_any(table: pa.Table, name: str) -> pa.Table:
    schema = arrow_schema(name)
    cols = [table.column(f.name).cast(f.type) if f.name in table.column_names else pa.nulls(table.num_rows, f.type)
            for f in schema]
    return pa.Table.from_arrays(cols, schema=schema)


def merge_node_bundles(results: Sequence[NodeResult], out: str | Path) -> dict[str, Any]:
    """Write one bundle from the node bundles: each node's files under `nodes/<node>/`, the
    summaries stacked (`source` becomes `<node>/<source>`), and a manifest whose artifacts say
    which node they came from. Atomic: OUT appears complete or not at all. Returns the manifest.
    """
    out = Path(out)
    if out.exists() and any(out.iterdir()) and not (out / "manifest.json").exists():
        raise VerlprofError(out, "exists, is not empty and is not a verlprof bundle; choose another -o")
    nodes: list[dict[str, Any]] = []
    artifacts: list[dict[str, Any]] = []
    first: dict[str, Any] | None = None
    tables: dict[str, list[pa.Table]] = {name: [] for name in SCHEMAS}
    with atomic.atomic_path(out) as staging:
        staging.mkdir(parents=True)
        for r in results:
            rec: dict[str, Any] = {"node": r.node, "status": r.status, "files": r.files}
            if r.status == "ok" and r.bundle:
                folder = extract_bundle(r.bundle, staging / "nodes" / r.node, what=f"bundle of node {r.node}")
                man = _read_json(folder / "manifest.json")
                first = first or man
                arts = man.get("artifacts") if isinstance(man.get("artifacts"), list) else []
                for a in arts:
                    if isinstance(a, dict):
                        artifacts.append({**a, "rel": f"{r.node}/{a.get('rel')}", "node": r.node})
                rec["artifacts"] = len(arts)
                rec["window"] = man.get("window")
                for name in SCHEMAS:
                    if name == "ranks":   # across nodes: recomputed below from the merged phases
                        continue
                    p = folder / "summaries" / f"{name}.parquet"
                    if p.is_file():
                        t = _conform_any(pq.read_table(p), name)
                        src = pa.array([f"{r.node}/{s}" if s is not None else r.node
                                        for s in t.column("source").to_pylist()], pa.string())
                        tables[name].append(t.set_column(t.schema.get_field_index("source"), "source", src))
            nodes.append(rec)
        for name, parts in tables.items():
            if name == "ranks":
                continue
            merged = pa.concat_tables(parts) if parts else arrow_schema(name).empty_table()
            (staging / "summaries").mkdir(exist_ok=True)
            pq.write_table(merged, staging / "summaries" / f"{name}.parquet", compression="zstd")
        from .ranks import write_ranks   # issue 23: the run across ranks of every node

        write_ranks(pq.read_table(staging / "summaries" / "phases.parquet").to_pandas(), staging / "summaries")
        base = first or {}
        manifest = {
            "manifest_version": base.get("manifest_version", 1),
            "verlprof_version": base.get("verlprof_version"),
            "created": datetime.now(timezone.utc).isoformat(timespec="seconds"),
            "config": base.get("config"),
            "window": base.get("window"),
            "cluster": {"nodes": nodes},
            "artifacts": artifacts,
        }
        atomic.write_json(staging / "manifest.json", manifest)
    return manifest


def _read_json(path: Path) -> dict[str, Any]:
    import json

    try:
        obj = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise BadInputError(path.name, f"node bundle has no readable manifest.json ({_one_line(exc)})") from None
    return obj if isinstance(obj, dict) else {}


__all__ = ["NSIGHT_ENV", "NodeResult", "collect_node_bundle", "collect_on_nodes", "extract_bundle",
           "merge_node_bundles", "node_nsight_dir", "node_sources", "run_on_node", "tar_folder"]
