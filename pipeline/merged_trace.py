"""One Perfetto/Chrome trace of every rank's step window: `traces/all_ranks.trace.json.gz`.

Why: the per-source window traces answer "what did this rank do"; "who waited for whom" needs the
ranks side by side on one clock. The window traces already carry absolute UTC microseconds and are
already scrubbed, so merging them is a rename: each process becomes one track group named
`<role> rank <R>` (`<role> pid <P>` without a rank), sorted by role and rank, its pid made unique
across files (two hosts may reuse a pid) and its flow ids prefixed by the file (in the high bits
of a numeric id: a string per event made the check of this file twice as slow as the windows').

Why pieces: the rename of one source's events needs nothing from the other sources (its pids are
numbered in a block of its own, `(index + 1) * PID_BLOCK + j`), so each source's piece is made and
checked in that source's pass-2 job, in parallel and where the source lies (`make_piece`). A gzip
file may hold many members, read as one stream, so the run-level step (`write_merged_trace`) only
writes the head (the track names and their order, which need every source's ranks, checked here)
and appends the pieces' compressed bytes as they are: no event is parsed, compressed or checked
twice. With one serial merge, writing and checking this file took longer than summarizing 8
reports of 100 MB on 2 cores.
"""
from __future__ import annotations

import hashlib
import json
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable, Mapping

from ..stages.core.atomic import atomic_path
from ..stages.core.gzip_pipe import gunzip, gzip_member
from ..stages.readers import json_codec

NAME = "all_ranks.trace.json.gz"
PID_BLOCK = 1 << 16      # pids of one source's piece: (index + 1) * PID_BLOCK + j
_HEAD = {"displayTimeUnit": "ms", "otherData": {"verlprof": "all ranks, one track group per process"}}
_SEP = b",\n"


@dataclass
class Piece:
    """One source's events for the merged trace, renamed, as ONE gzip member of events joined by
    `,\\n` (no brackets), checked where it was made."""

    index: int                                   # the source's place in the run
    body: bytes = b""                            # the gzip member; b"" when it holds no event (or spooled)
    count: int = 0                               # events in it
    processes: list[tuple[str, Any, int, str]] = field(default_factory=list)  # (role, rank, pid, label)
    at: tuple[int, int] | None = None            # (offset, size) of the body in the run's Spool


class Spool:
    """The pieces' bodies in one temp file as they arrive, so the run holds none in memory (a
    thousand ranks' windows would not fit); removed when closed."""

    def __init__(self, folder: Path) -> None:
        self._f = tempfile.TemporaryFile(dir=folder)

    def keep(self, piece: Piece) -> Piece:
        if piece.body:
            self._f.seek(0, 2)
            piece.at = (self._f.tell(), len(piece.body))
            self._f.write(piece.body)
            piece.body = b""
        return piece

    def body(self, piece: Piece) -> bytes:
        if piece.at is None:
            return piece.body
        self._f.seek(piece.at[0])
        return self._f.read(piece.at[1])

    def close(self) -> None:
        self._f.close()


Check = Callable[[dict[str, Path]], list[Any]]   # {bundle name: file} -> the checker's findings


def make_piece(chrome: Path, index: int, source: str, phases: Iterable[Mapping[str, Any]]) -> Piece:
    """Source `source`'s window trace `chrome` renamed for the merged trace. `phases`: this
    source's (scrubbed) phase rows, which name its ranks. Check it (`write_alone`) where it is made."""
    labels: dict[int, tuple[str, Any]] = {}
    for r in phases:
        pid = r.get("pid")
        if r.get("source") == source and pid is not None:
            labels.setdefault(int(pid), (str(r.get("role") or "?"), r.get("rank")))
    base = (index + 1) * PID_BLOCK
    new_pid: dict[Any, int] = {}
    piece = Piece(index)
    for j, (pid, (role, rank)) in enumerate(sorted(labels.items(), key=lambda kv: (
            kv[1][0], -1 if kv[1][1] is None else int(kv[1][1]), kv[0]))):
        new_pid[pid] = base + j
        piece.processes.append((role, rank, base + j, f"{role} rank {rank}" if rank is not None else f"{role} pid {pid}"))
    events = [ev for ev in _events(chrome) if isinstance(ev, dict)]
    own = {ev.get("pid"): (ev.get("args") or {}).get("name") for ev in events
           if ev.get("ph") == "M" and ev.get("name") == "process_name"}
    owner = piece.processes[0][3] if len(piece.processes) == 1 else chrome.name.split(".")[0]
    out: list[bytes] = []
    for ev in events:
        if ev.get("ph") == "M" and ev.get("name") in ("process_name", "process_sort_index", "process_labels"):
            continue
        pid = ev.get("pid")
        key = int(pid) if isinstance(pid, (int, float)) else str(pid)
        if key not in new_pid:   # a pid no phase row names (GPU device tracks ...): keep it apart
            new_pid[key] = base + len(new_pid)
            what = own.get(pid) or f"pid {pid}"
            out.append(json_codec.dumps({"ph": "M", "name": "process_name", "pid": new_pid[key], "tid": 0,
                                     "args": {"name": f"{owner} · {what}"}}))
        ev = dict(ev, pid=new_pid[key])
        if "id" in ev:   # flow ids of one file kept apart from another's; a number stays a number
            fid = ev["id"]
            ev["id"] = (index + 1) << 32 | fid if type(fid) is int and 0 <= fid < 1 << 32 else f"{index}:{fid}"
        out.append(json_codec.dumps(ev))
    if out:
        piece.body, piece.count = gzip_member(_SEP.join(out)), len(out)
    return piece


def _events(path: Path) -> list[dict[str, Any]]:
    data = json_codec.loads(gunzip(path.read_bytes()))   # NaN / Infinity, which Kineto may write, too
    return data.get("traceEvents", []) if isinstance(data, dict) else data


def _document(head_events: list[bytes], pieces: Iterable[bytes]) -> Iterable[bytes]:
    """The gzip members of one trace: the head with its events, each non-empty piece after a
    separator, the closing brackets."""
    head = b"{" + b"".join(json.dumps(k).encode() + b": " + json.dumps(v).encode() + b",\n" for k, v in _HEAD.items())
    yield gzip_member(head + b'"traceEvents": [\n' + _SEP.join(head_events))
    first = not head_events
    for body in pieces:
        if not body:
            continue
        if not first:
            yield gzip_member(_SEP)
        first = False
        yield body
    yield gzip_member(b"\n]}\n")


def write_alone(path: Path, body: bytes, head_events: Iterable[bytes] = ()) -> Path:
    """Events (a piece, or the head) written at `path` as a trace of their own, to be checked."""
    path.write_bytes(b"".join(_document(list(head_events), [body])))
    return path


MARK_TID = 0
MARK_CAT = "verlprof.culprit"


def culprit_marks(culprits: list[dict[str, Any]], phases: list[dict[str, Any]],
                  order: list[tuple[str, Any, int, str]]) -> list[bytes]:
    """Who held the step back, marked on the lanes: per `culprit` row of the chosen step
    (ranks.parquet's, as the ranks job returned them: `bundle_tables.Written.culprits`), a process
    label and an instant event on the culprit's lane at the start of the phase where it lost the
    time, and on each victim's lane at the start of its wait (the first collective range in
    `victim_path`, else the phase), from the bundle's scrubbed `phases` rows. Category
    `verlprof.culprit`; args carry the statement. Nothing when there is no culprit (one rank, an
    even run). Why rows, not the written files: the driver would read ranks.parquet back, and its
    pandas metadata makes pyarrow import pandas (0.4 s on the run's critical path)."""
    pid_of = {(role or "?", int(rank)): pid for role, rank, pid, _l in order if rank is not None}
    starts: dict[tuple[str, int, Any, str], int] = {}
    colls: dict[tuple[str, int, Any, str], int] = {}
    for r in phases:
        if r.get("rank") is None or r.get("start_ns") is None or not r.get("path"):
            continue
        key = (r.get("role") or "?", int(r["rank"]), r.get("step"), r["path"])
        starts[key] = min(starts.get(key, r["start_ns"]), r["start_ns"])
        if r.get("stage") == "collective" and " > " in r["path"]:
            parent = (key[0], key[1], key[2], r["path"].rsplit(" > ", 1)[0])
            colls[parent] = min(colls.get(parent, r["start_ns"]), r["start_ns"])
    out: list[bytes] = []
    for c in culprits:
        if c.get("rank") is None:   # the rows are the chosen step's culprits already
            continue
        role, step, who = c["role"] or "?", c["step"], int(c["rank"])
        pid = pid_of.get((role, who))
        t = starts.get((role, who, step, c["path"]))
        if pid is None or t is None:
            continue
        text = c.get("statement") or ""
        out.append(json_codec.dumps({"ph": "M", "name": "process_labels", "pid": pid, "tid": 0,
                                 "args": {"labels": f"culprit of step {step}: {text}"}}))
        out.append(json_codec.dumps({"ph": "i", "s": "p", "name": f"culprit: lost {c['excess_ns'] / 1e6:.1f} ms here",
                                 "cat": MARK_CAT, "pid": pid, "tid": MARK_TID, "ts": t / 1000,
                                 "args": {"statement": text, "rank": who, "phase": c["path"]}}))
        vpath = c.get("victim_path")
        for v in (int(x) for x in (c.get("victim_ranks") or "").split(",") if x.strip()):
            vpid = pid_of.get((role, v))
            key = (role, v, step, vpath)
            vt = colls.get(key, starts.get(key))
            if vpid is None or vt is None:
                continue
            out.append(json_codec.dumps({"ph": "M", "name": "process_labels", "pid": vpid, "tid": 0,
                                     "args": {"labels": f"waited for rank {who} in step {step}"}}))
            out.append(json_codec.dumps({"ph": "i", "s": "p", "name": f"victim: waited for rank {who}",
                                     "cat": MARK_CAT, "pid": vpid, "tid": MARK_TID, "ts": vt / 1000,
                                     "args": {"statement": text, "rank": v, "culprit": who, "phase": vpath,
                                              "wait_ms": round((c.get("victim_wait_ns") or 0) / 1e6, 3)}}))
    return out


def write_merged_trace(bundle: Path, pieces: list[Piece], check: Check, scratch: Path,
                       spool: Spool | None = None, culprits: list[dict[str, Any]] | None = None,
                       phases: list[dict[str, Any]] | None = None) -> tuple[str, str, list[Any]] | None:
    """Write `bundle/traces/all_ranks.trace.json.gz` from the sources' pieces (their bodies in
    `spool` where kept there; fewer than two pieces: no file, None). Returns (its bundle-relative name, its sha256, the checker's findings in the
    head): every byte of the file has then been checked, the pieces where they were made."""
    pieces = sorted(pieces, key=lambda p: p.index)
    if len(pieces) < 2:
        return None
    order = sorted((p for piece in pieces for p in piece.processes),
                   key=lambda p: (p[0], -1 if p[1] is None else int(p[1]), p[2]))
    head: list[bytes] = []
    for i, (_role, _rank, pid, label) in enumerate(order):
        head.append(json_codec.dumps({"ph": "M", "name": "process_name", "pid": pid, "tid": 0, "args": {"name": label}}))
        head.append(json_codec.dumps({"ph": "M", "name": "process_sort_index", "pid": pid, "tid": 0,
                                  "args": {"sort_index": i + 1}}))
    head += culprit_marks(culprits or [], phases or [], order)
    rel = f"traces/{NAME}"
    with tempfile.TemporaryDirectory(prefix="verlprof-merged-", dir=scratch) as td:
        findings = check({rel: write_alone(Path(td) / NAME, b"", head)})
    out = bundle / "traces" / NAME
    digest = hashlib.sha256()
    with atomic_path(out) as tmp, open(tmp, "wb") as f:
        for member in _document(head, (spool.body(p) if spool else p.body for p in pieces)):
            f.write(member)
            digest.update(member)
    return rel, digest.hexdigest(), findings
