"""One Perfetto/Chrome trace of every rank's step window: `traces/all_ranks.trace.json.gz`.

Why: the per-source window traces answer "what did this rank do"; "who waited for whom" needs the
ranks side by side on one clock. The window traces already carry absolute UTC microseconds and are
already scrubbed, so merging them is a rename: each process becomes one track group named
`<role> rank <R>` (`<role> pid <P>` without a rank), sorted by role and rank, its pid made unique
across files (two hosts may reuse a pid) and its flow ids prefixed by the file. Events are streamed
file by file, so memory holds one window trace at a time. The bundle's `check` scans the result
like every other file before anything is published. orjson and the window traces' own writer
(`traces.ChromeTraceWriter`: threaded ISA-L gzip at level 1): with json + zlib level 6 this one
serial step took longer than summarizing 8 reports of 100 MB each.
"""
from __future__ import annotations

import gzip
import json
from pathlib import Path
from typing import Any, Iterable, Mapping

import orjson

from ..stages.core.atomic import atomic_path
from ..stages.traces import ChromeTraceWriter

try:
    from isal.igzip import decompress as _inflate
except ImportError:  # pragma: no cover - zlib reads the same format, slower
    _inflate = gzip.decompress


NAME = "all_ranks.trace.json.gz"


def _labels(phases: Iterable[Mapping[str, Any]]) -> dict[tuple[str, int], tuple[str, Any]]:
    """(source, pid) -> (role, rank) from the phases rows."""
    out: dict[tuple[str, int], tuple[str, Any]] = {}
    for r in phases:
        src, pid = r.get("source"), r.get("pid")
        if isinstance(src, str) and pid is not None:
            out.setdefault((src, int(pid)), (r.get("role") or "?", r.get("rank")))
    return out


def _events(path: Path) -> list[dict[str, Any]]:
    raw = _inflate(path.read_bytes())
    try:
        data = orjson.loads(raw)
    except orjson.JSONDecodeError:   # NaN / Infinity, which Kineto may write and json reads
        data = json.loads(raw)
    return data.get("traceEvents", []) if isinstance(data, dict) else data


def write_merged_trace(bundle: Path, traces: list[Mapping[str, Any]], phases: Iterable[Mapping[str, Any]]) -> str | None:
    """Write `bundle/traces/all_ranks.trace.json.gz` from the manifest's `traces` entries (their
    `outputs.chrome` files); return its relative name, or None with fewer than two traces."""
    files = [(t.get("source"), (t.get("outputs") or {}).get("chrome")) for t in traces]
    files = [(s, c) for s, c in files if isinstance(c, str) and (bundle / c).is_file()]
    if len(files) < 2:
        return None
    labels = _labels(phases)
    order: list[tuple[str, Any, int, int, str]] = []   # (role, rank, file index, pid, label)
    for k, (source, _) in enumerate(files):
        for (src, pid), (role, rank) in labels.items():
            if src == source:
                order.append((str(role), rank, k, pid, f"{role} rank {rank}" if rank is not None else f"{role} pid {pid}"))
    order.sort(key=lambda o: (o[0], -1 if o[1] is None else int(o[1]), o[2], o[3]))
    new_pid = {(k, pid): i + 1 for i, (_, _, k, pid, _) in enumerate(order)}
    name_of = {(k, pid): label for _, _, k, pid, label in order}
    out = bundle / "traces" / NAME
    header = {"displayTimeUnit": "ms", "otherData": {"verlprof": "all ranks, one track group per process"}}
    with atomic_path(out) as tmp, ChromeTraceWriter(tmp, header, compresslevel=1) as w:
        def put(ev: Mapping[str, Any]) -> None:
            w.write(orjson.dumps(ev))

        for (k, pid), i in new_pid.items():
            put({"ph": "M", "name": "process_name", "pid": i, "tid": 0, "args": {"name": name_of[(k, pid)]}})
            put({"ph": "M", "name": "process_sort_index", "pid": i, "tid": 0, "args": {"sort_index": i}})
        next_pid = len(new_pid) + 1
        for k, (_, chrome) in enumerate(files):
            events = [ev for ev in _events(bundle / chrome) if isinstance(ev, dict)]
            own = {ev.get("pid"): (ev.get("args") or {}).get("name") for ev in events
                   if ev.get("ph") == "M" and ev.get("name") == "process_name"}
            mine = [name_of[key] for key in name_of if key[0] == k]
            for ev in events:
                if ev.get("ph") == "M" and ev.get("name") in ("process_name", "process_sort_index", "process_labels"):
                    continue
                pid = ev.get("pid")
                key = (k, int(pid)) if isinstance(pid, (int, float)) else (k, str(pid))
                if key not in new_pid:   # a pid no phase row names (GPU device tracks ...): keep it apart
                    new_pid[key] = next_pid
                    what = own.get(pid) or f"pid {pid}"
                    owner = mine[0] if len(mine) == 1 else Path(chrome).name.split(".")[0]
                    put({"ph": "M", "name": "process_name", "pid": next_pid, "tid": 0,
                         "args": {"name": f"{owner} · {what}"}})
                    next_pid += 1
                ev = dict(ev, pid=new_pid[key])
                if "id" in ev:
                    ev["id"] = f"{k}:{ev['id']}"
                put(ev)
    return f"traces/{NAME}"
