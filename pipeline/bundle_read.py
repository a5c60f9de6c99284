"""Read one collect bundle for `verlprof summarize`: its manifest, its summary tables cast to
verlprof's schema, its content hash and its `runs.parquet` row.

Why a module of its own: this is the part of the batch summary that runs inside a task (on any
node), and the part other readers of bundles reuse; pipeline/batch.py keeps the run-level work
(dispatch, cache, stacking, comparison). Nothing here writes.
"""
from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from ..stages.core.errors import BadInputError
from ..stages.core.hashing import sha256_file
from ..stages.core.phases import canonical_stage
from ..stages.schema import arrow_schema

#: Columns a bundle's table must have to be usable; every other schema column may be absent (null).
REQUIRED = {"phases": ("phase", "wall_ns"), "kernels": ("kernel", "total_ns")}


def is_bundle(path: Path) -> bool:
    return (path / "manifest.json").is_file()


def bundle_files(bundle: Path) -> list[Path]:
    """The files that define a bundle's summary: manifest and summary tables (not the traces)."""
    files = [bundle / "manifest.json"]
    summaries = bundle / "summaries"
    if summaries.is_dir():
        files += sorted(p for p in summaries.glob("*.parquet") if p.is_file())
    return files


def bundle_hash(bundle: Path) -> str:
    """Content hash of a bundle's manifest and summary tables (names + bytes, not mtimes)."""
    h = hashlib.sha256()
    for p in bundle_files(bundle):
        try:
            digest = sha256_file(p)
        except OSError as exc:
            raise BadInputError(p, f"cannot read: {exc.strerror or exc}") from None
        h.update(f"{p.relative_to(bundle).as_posix()}\0{digest}\n".encode())
    return h.hexdigest()


def read_manifest(bundle: Path) -> dict[str, Any]:
    path = bundle / "manifest.json"
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        raise BadInputError(bundle, "not a verlprof bundle: no manifest.json") from None
    except OSError as exc:
        raise BadInputError(path, f"cannot read: {exc.strerror or exc}") from None
    try:
        man = json.loads(raw)
    except (ValueError, UnicodeDecodeError) as exc:
        raise BadInputError(path, f"not valid JSON ({exc})") from None
    if not isinstance(man, dict):
        raise BadInputError(path, "manifest is not a JSON object")
    return man


def read_summary_table(bundle: Path, name: str) -> pa.Table:
    """`summaries/<name>.parquet` cast to verlprof's schema; missing optional columns become null."""
    path = bundle / "summaries" / f"{name}.parquet"
    if not path.is_file():
        raise BadInputError(bundle, f"bundle has no summaries/{name}.parquet")
    try:
        table = pq.read_table(path)
    except (pa.ArrowException, OSError) as exc:
        raise BadInputError(path, f"not a readable Parquet file ({' '.join(str(exc).split())[:160]})") from None
    return conform(table, name, path)


def conform(table: pa.Table, name: str, path: Path | str) -> pa.Table:
    """Cast `table` to `arrow_schema(name)`: checks required columns and types, fills the rest."""
    schema = arrow_schema(name)
    missing = [c for c in REQUIRED[name] if c not in table.column_names]
    if missing:
        raise BadInputError(path, f"wrong schema for {name}: missing column(s) {', '.join(missing)}")
    cols = []
    for f in schema:
        if f.name in table.column_names:
            try:
                cols.append(table.column(f.name).cast(f.type))
            except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
                raise BadInputError(path, f"wrong schema for {name}: column {f.name} is "
                                          f"{table.schema.field(f.name).type}, expected {f.type}") from None
        elif f.name == "stage" and "phase" in table.column_names:
            roles = table.column("role").to_pylist() if "role" in table.column_names else [None] * table.num_rows
            cols.append(pa.array([canonical_stage(str(p), r) for p, r in
                                  zip(table.column("phase").to_pylist(), roles)], pa.string()))
        else:
            cols.append(pa.nulls(table.num_rows, f.type))
    return pa.Table.from_arrays(cols, schema=schema)


def _basename(value: Any) -> str | None:
    if not isinstance(value, str) or not value.strip():
        return None
    return value.rstrip("/").replace("\\", "/").rsplit("/", 1)[-1] or None


def _first(d: dict[str, Any], *keys: str) -> Any:
    """The first present, non-null value among dotted keys of a nested dict."""
    for key in keys:
        cur: Any = d
        for part in key.split("."):
            cur = cur.get(part) if isinstance(cur, dict) else None
        if cur is not None:
            return cur
    return None


_INT32 = 2**31


def _int_or_none(v: Any) -> int | None:
    """An int that fits the runs table's int32 columns (steps, world size), else None: a manifest
    value beyond that range is not a step or a size, and must not make Arrow refuse the whole row."""
    try:
        n = int(v) if v is not None and not isinstance(v, bool) else None
    except (TypeError, ValueError, OverflowError):
        return None
    return n if n is not None and -_INT32 <= n < _INT32 else None


def run_metadata(manifest: dict[str, Any], phases: pa.Table, kernels: pa.Table) -> dict[str, Any]:
    """One `runs.parquet` row (minus run id and input) from a manifest, tolerant of older layouts."""
    cfg = manifest.get("config") if isinstance(manifest.get("config"), dict) else {}
    raw_arts = manifest.get("artifacts")
    arts = [a for a in raw_arts if isinstance(a, dict)] if isinstance(raw_arts, list) else []
    roles = _first(cfg, "roles", "enabled_roles") or sorted({a["role"] for a in arts if a.get("role")})
    if isinstance(roles, dict):
        roles = list(roles)
    steps = _first(cfg, "profiled_steps", "steps", "global_profiler.steps")
    world = _int_or_none(_first(cfg, "world_size", "trainer.world_size"))
    if world is None:
        ws = [w for w in (_int_or_none(a.get("world_size")) for a in arts) if w]
        world = max(ws) if ws else None
    if world is None:   # verl's trainer.n_gpus_per_node x trainer.nnodes, when the config kept them
        per_node = _int_or_none(_first(cfg, "trainer.n_gpus_per_node"))
        world = per_node * (_int_or_none(_first(cfg, "trainer.nnodes")) or 1) if per_node else None
    config_hash = _first(cfg, "config_hash", "hash") or (
        hashlib.sha256(json.dumps(cfg, sort_keys=True, default=str).encode()).hexdigest()[:16] if cfg else None)
    window = manifest.get("window") if isinstance(manifest.get("window"), dict) else {}
    return {
        "verlprof_version": _str(manifest.get("verlprof_version")),
        "verl_version": _str(_first(cfg, "verl_version", "verl.version") or manifest.get("verl_version")),
        "model": _basename(_first(cfg, "model", "model_path", "actor_rollout_ref.model.path")),
        "world_size": world,
        "roles": [str(r) for r in roles] if isinstance(roles, (list, tuple)) and roles else None,
        "profiled_steps": [n for n in (_int_or_none(s) for s in steps) if n is not None] if isinstance(steps, (list, tuple)) else None,
        "tool": _str(_first(cfg, "tool", "global_profiler.tool")),
        "date": _str(manifest.get("created")),
        "config_hash": _str(config_hash),
        "window_step": _int_or_none(window.get("step")),
        "artifacts": len(arts),
        "phase_rows": phases.num_rows,
        "kernel_rows": kernels.num_rows,
        "failed_artifacts": len(failed_artifacts(manifest)),
        "failed": failed_artifacts(manifest),
    }


def failed_artifacts(manifest: dict[str, Any]) -> list[str]:
    """`rel: reason` of every artifact a bundle's manifest records as failed (collect's final
    status per artifact; a merged cluster bundle keeps them too). Tolerant of any manifest shape."""
    arts = manifest.get("artifacts")
    out = []
    for a in arts if isinstance(arts, list) else []:
        if isinstance(a, dict) and a.get("status") == "failed":
            reason = a.get("reason")
            out.append(f"{a.get('rel')}: {reason}" if isinstance(reason, str) and reason else str(a.get("rel")))
    return out


def _str(v: Any) -> str | None:
    return None if v is None else str(v)
