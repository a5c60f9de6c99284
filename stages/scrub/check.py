"""`verlprof check`: prove that nothing secret or personal is left in a set of files.

Why a separate verifier: scrub builds safe outputs by construction, but "safe" must be shown, not
assumed. The checker opens every file the way a reader would and reports each finding by location
and kind, never by value:

- SQLite through Python, every text and blob cell (SQL `LIKE`/`length()` stop at the first NUL
  byte and would miss the rest of an environment block), then the raw bytes of the file (deleted
  rows survive in free pages until VACUUM);
- Parquet column values, column names and key-value metadata;
- JSON as a stream (chrome traces of any size), keys included;
- gzip / zstd / tar / zip members, recursively;
- pickles only through the restricted unpickler (a hostile pickle is a finding, never executed);
- anything else as text lines, or as raw bytes when binary.

Detection is `Scrubber.findings`, the same code path scrub uses to replace, so the two agree: the
same decoders (URL, base64, hex), context rules and entropy rule run on every parsed string, and
adjacent NVTX ranges (a trace's consecutive op inputs) of one thread are scanned joined as scrub does.
Raw-byte windows (free pages, huge text lines) skip only the entropy rule: they glue cells together.
"""
from __future__ import annotations

import dataclasses
import gzip
import pickle
import shutil
import sqlite3
import subprocess
import tarfile
import tempfile
import zipfile
import zlib
from collections import OrderedDict
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any, Iterable, Iterator

from ..core.errors import BadInputError
from ..readers.chrome_trace import ChromeTraceStream
from ..readers.memory_snapshot import loads_restricted
from .identities import Identities, Pseudonyms, find_config_identities, hint_windows, owner_identities
from .policy import Policy, load_policy
from .rules import KIND_SPLIT, PATTERN_HINTS, PATTERN_IHINTS
from .scrubber import LocationNames, Scrubber
from ..readers.sqlite_export import SQLITE_MAGIC, decode_text, open_readonly
from .deny import denied_flag_items
from .parquet_schema import KEY as ARROW_SCHEMA
from .parquet_schema import decoded_text, schema_texts
from .shapes import flag_value_items
from .sqlite import keep_spec
from .sqlite_cells import (ARGV_TABLE, SPLIT_LOCATION, STRING_TABLE, argv_pair_findings, find_sqlite_identities,
                           iter_adjacent_nvtx, iter_distinct_cells)
from .sqlite_pages import unallocated_regions
from .check_user_text import json_field, parquet_field, pickle_field, sqlite_field, user_string_values
from .trace import LiteralFilter, loads_event
from .op_inputs import SPLIT_OP_LOCATION, OpInputs, split_op_halves

ZSTD_MAGIC = b"\x28\xb5\x2f\xfd"
PARQUET_MAGIC = b"PAR1"
KIND_RAW_REPORT = "raw_nsys_report"
KIND_UNSAFE_PICKLE = "unsafe_pickle"
KIND_UNREADABLE = "unreadable"
_MAX_DEPTH = 6
_CHUNK = 4 << 20


@dataclass(frozen=True)
class Finding:
    """Something secret or personal: where (file + location inside it) and what kind. No value."""

    path: str
    location: str
    kind: str
    count: int = 1

    def __str__(self) -> str:
        more = f" ({self.count} occurrences)" if self.count > 1 else ""
        return f"{self.path}: {self.location}: {self.kind}{more}"


class _Sink:
    """Aggregates findings per (path, location template, kind); keeps the first concrete place."""

    def __init__(self) -> None:
        self._d: OrderedDict[tuple[str, str, str], list[Any]] = OrderedDict()

    def add(self, path: str, template: str, kind: str, where: str = "", n: int = 1) -> None:
        k = (path, template, kind)
        slot = self._d.get(k)
        if slot is None:
            self._d[k] = [where, n]
        else:
            slot[1] += n

    def findings(self) -> list[Finding]:
        out = []
        for (path, tpl, kind), (where, n) in self._d.items():
            loc = f"{tpl} (first at {where})" if where else tpl
            out.append(Finding(path, loc, kind, n))
        return out

    def kinds_for(self, path: str) -> set[str]:
        return {k for (p, _t, k) in self._d if p == path}


class Checker:
    """Scans files; `known` adds bundle-specific secrets (values, host and user names)."""

    def __init__(self, policy: Policy | None = None, known: Pseudonyms | Identities | None = None) -> None:
        self.policy = policy or load_policy()
        if isinstance(known, Identities):
            known = Pseudonyms.build([known], salt="", policy=self.policy)
        elif known is None and self.policy.extra_values:
            known = Pseudonyms.build([], salt="", policy=self.policy)
        self.known = known or Pseudonyms()
        self.sc = Scrubber(self.policy, self.known)
        self.sink = _Sink()
        self.files = 0
        self._names = LocationNames(50_000)
        self._trace_doc = False      # inside a chrome trace: user-written fields are judged (issue 39)

    # -- entry points ---------------------------------------------------------------------------
    def check_paths(self, paths: Iterable[str | Path]) -> list[Finding]:
        paths = [Path(p) for p in paths]
        self._learn_configs(paths)
        for p in paths:
            root = Path(p)
            if not root.exists():
                raise BadInputError(root, "no such file or directory")
            if root.is_dir():
                for f in sorted(x for x in root.rglob("*") if x.is_file() or x.is_symlink()):
                    self._file(f, str(f), str(f.relative_to(root)), 0)
            else:
                self._file(root, str(root), root.name, 0)
        return self.sink.findings()

    def _learn_configs(self, paths: list[Path]) -> None:
        """A run's own config (`.hydra/config.yaml`) among the inputs: its secret values are known
        values for every other file, as collect makes them (an unlabelled `judge_api_key` value in
        an NVTX range is a finding)."""
        configs = [p for p in paths if p.is_file() and p.name == "config.yaml" and p.parent.name == ".hydra"]
        for p in paths:
            if p.is_dir():
                configs += sorted(p.rglob(".hydra/config.yaml"))
        ids = []
        for c in configs:
            try:
                ids.append(find_config_identities(c, self.policy))
            except BadInputError:
                continue
        values = {v for i in ids for v in i.secret_values} - set(self.known.secret_values)
        if values:
            self.known = dataclasses.replace(self.known, secret_values=tuple(
                sorted(set(self.known.secret_values) | values, key=lambda v: (-len(v), v))))
            self.sc = Scrubber(self.policy, self.known)

    # -- dispatch -------------------------------------------------------------------------------
    def _file(self, path: Path, display: str, rel: str, depth: int) -> None:
        self.files += 1
        for kind in self.sc.findings(rel):
            self.sink.add(display, "file name", kind)
        if path.is_symlink():
            self.sink.add(display, "symbolic link (not followed)", KIND_UNREADABLE)
            return
        name = path.name.lower()
        if name.endswith((".nsys-rep", ".qdrep", ".qdstrm")):
            self.sink.add(display, "raw Nsight Systems report (cannot be scrubbed; never share)", KIND_RAW_REPORT)
            return
        try:
            with open(path, "rb") as f:
                head = f.read(512)
        except OSError as exc:
            self.sink.add(display, f"cannot read ({exc.strerror})", KIND_UNREADABLE)
            return
        if not head:
            return
        if depth > _MAX_DEPTH:
            self.sink.add(display, "archive nested too deeply", KIND_UNREADABLE)
            return
        if head.startswith(SQLITE_MAGIC):
            self._sqlite(path, display)
        elif head.startswith(PARQUET_MAGIC):
            self._parquet(path, display)
        elif head.startswith(b"\x1f\x8b"):
            self._gzip(path, display, depth)
        elif head.startswith(ZSTD_MAGIC):
            self._zstd(path, display, depth)
        elif head.startswith(b"PK\x03\x04") or head.startswith(b"PK\x05\x06"):
            self._zip(path, display, depth)
        elif len(head) > 262 and head[257:262] == b"ustar":
            self._tar(path, display, depth)
        elif head[:1] == b"\x80" and 2 <= head[1] <= 5:
            self._pickle(path, display)
        elif head.lstrip()[:1] in (b"{", b"["):
            self._json(path, display)
        elif b"\x00" in head:
            self._raw(path, display)
        else:
            self._text(path, display)

    # -- per format -----------------------------------------------------------------------------
    def _hit(self, display: str, template: str, where: str, kinds: Iterable[str]) -> None:
        for kind in kinds:
            self.sink.add(display, template, kind, where)

    def _own_identities(self, conn: sqlite3.Connection, path: Path, tables: list[str]) -> Scrubber:
        """The scrubber for one export: a raw export (it holds a table scrub drops: environment,
        argv, streams) teaches its own host and user names, GPU UUIDs and secret values, as scrub's
        identity pass does (`find_sqlite_identities` + the file's owner), so check names a learned
        value as scrub does (`secret_value`, not `pattern:*`) and both count the same findings; a
        scrubbed copy holds nothing to learn and is checked with the checker's own scrubber."""
        if all(t == STRING_TABLE or keep_spec(t) is not None for t in tables):
            return self.sc
        ids = find_sqlite_identities(conn, self.policy).merge(owner_identities(path, self.policy))
        if not (ids.hosts or ids.users or ids.secret_values or ids.gpu_uuids):
            return self.sc
        k = self.known
        have = Identities({h for h, _p in k.hosts}, {u for u, _p in k.users}, set(k.secret_values), set(k.gpu_uuids),
                          set(k.split_values))
        return Scrubber(self.policy, Pseudonyms.build([have, ids], salt=k.salt, policy=self.policy))

    def _sqlite(self, path: Path, display: str) -> None:
        saved = self.sc
        try:
            self._sqlite_cells(path, display)
        finally:
            self.sc = saved

    def _sqlite_cells(self, path: Path, display: str) -> None:
        """`_sqlite`: the cells, then the bytes no cell holds, with the export's own scrubber."""
        try:
            conn = open_readonly(path, decode_text, check=False)
            try:
                master = conn.execute("SELECT name, coalesce(sql, ''), type FROM sqlite_master").fetchall()
                sc = self.sc = self._own_identities(conn, path, [str(n) for n, _s, t in master if t == "table"])
                for name, sql, _t in master:
                    self._hit(display, "sqlite_master", str(name), sc.findings(f"{name} {sql}"))
                users = user_string_values(conn)     # StringIds only user-written columns reference

                def kinds_of(table: str, col: str, value: Any) -> tuple[str, ...]:
                    text = value.decode("latin-1") if isinstance(value, bytes) else value
                    field = sqlite_field(table, col, value, users)   # issue 39: user_text in kept tables
                    kinds = sc.keyed_findings(col, text)
                    return kinds if field is None or sc.key_class(col) else sc.user_text_findings(text, field) or kinds

                for table, col, rid, value, n in iter_distinct_cells(conn, path=path,
                                                                     keep_in=lambda t, c, v: bool(kinds_of(t, c, v))):
                    for kind in kinds_of(table, col, value):
                        self.sink.add(display, f"{table}.{col}", kind, f"rowid {rid}", n)
                for rid, kind in argv_pair_findings(conn, sc):     # lone argv values, with their flag
                    self.sink.add(display, f"{ARGV_TABLE}.value", kind, f"rowid {rid}")
                if self.policy.join_adjacent_nvtx:
                    for first, second in iter_adjacent_nvtx(conn):
                        if any(sc.joined_halves(first[2], second[2])):
                            self.sink.add(display, SPLIT_LOCATION, KIND_SPLIT, f"rowid {first[0]}")
            finally:
                conn.close()
        except sqlite3.DatabaseError as exc:
            self.sink.add(display, f"SQLite unreadable ({' '.join(str(exc).split())})", KIND_UNREADABLE)
        except BadInputError as exc:      # the opener's one line: the database cannot be read at all
            self.sink.add(display, f"SQLite unreadable ({exc.what})", KIND_UNREADABLE)
        # Deleted rows and free pages: raw bytes. Reported only for kinds the cells did not show.
        # Only the bytes no live cell holds (the cells were read above), when the pages can be read.
        template, skip = "raw bytes (free pages or unparsed data)", self.sink.kinds_for(display)
        regions = unallocated_regions(path)
        if regions is None:
            self._raw(path, display, template=template, skip=skip)
        else:
            self._raw_regions(path, display, regions, template, skip)

    def _parquet(self, path: Path, display: str) -> None:
        try:
            import pyarrow.parquet as pq
        except ImportError:  # pragma: no cover - pyarrow is a dependency
            self._raw(path, display)
            return
        try:
            pf = pq.ParquetFile(path)
            meta = pf.metadata.metadata or {}
            for k, v in meta.items():
                ks = k.decode("utf-8", "replace")
                self._hit(display, "key-value metadata", self.sc.scrub(ks, "-"), self.sc.findings(ks))
                inner = schema_texts(v) if k == ARROW_SCHEMA else None   # by structure (parquet_schema.py)
                if inner is None:   # any other value, or an entry that is not exactly a schema: as text
                    self._hit(display, "key-value metadata", self.sc.scrub(ks, "-"),
                              self.sc.keyed_findings(ks, v.decode("utf-8", "replace")))
                    inner = [(None, decoded_text(v) or "")] if k == ARROW_SCHEMA else []
                for key, text in inner:
                    self._hit(display, "key-value metadata", f"{ks} {self.sc.scrub(key or text, '-')}",
                              self.sc.keyed_findings(key, text) if key else self.sc.findings(text))
            for name in pf.schema_arrow.names:
                self._hit(display, "column names", "", self.sc.findings(name))
            row0 = 0
            for batch in pf.iter_batches(batch_size=65_536):
                for name, col in zip(batch.schema.names, batch.columns):
                    if _numeric_arrow(col.type):
                        continue
                    shown = self.sc.scrub(name, "-")
                    field = parquet_field(path.name.split(".")[0], name)
                    for i, v in enumerate(col.to_pylist()):
                        for kind in (self.sc.user_text_findings(v, field) if type(v) is str and v
                                     and not self.sc.key_class(name) else self._walk_findings(v, name)):
                            self.sink.add(display, f"column {shown}", kind, f"row {row0 + i}")
                row0 += batch.num_rows
        except Exception as exc:  # noqa: BLE001 - any parse failure: cannot verify, say so
            self.sink.add(display, f"Parquet unreadable ({type(exc).__name__})", KIND_UNREADABLE)
            self._raw(path, display)

    def _walk_findings(self, obj: Any, key: str | None, depth: int = 0) -> Iterator[str]:
        if isinstance(obj, str):
            yield from (self.sc.keyed_findings(key, obj) if key else self.sc.findings(obj))
        elif isinstance(obj, bytes):
            yield from self.sc.findings(obj.decode("latin-1"))
        elif isinstance(obj, dict) and depth < 100:
            for k, v in obj.items():
                if isinstance(k, str):
                    yield from self.sc.findings(k)
                yield from self._walk_findings(v, k if isinstance(k, str) else key, depth + 1)
        elif isinstance(obj, (list, tuple, set, frozenset)) and depth < 100:
            for v in obj:
                yield from self._walk_findings(v, key, depth + 1)

    def _json_value(self, display: str, obj: Any, key: str | None, loc: str, where: str, depth: int = 0,
                    parent: dict[str, Any] | None = None) -> None:
        t = type(obj)
        if t is str:
            if obj:
                if self._trace_doc and (key is None or not self.sc.key_class(key)):   # issue 39: by field
                    kinds = self.sc.user_text_findings(obj, json_field(loc, key, parent))
                else:
                    kinds = self.sc.keyed_findings(key, obj) if key is not None else self.sc.findings(obj)
                if kinds:
                    self._hit(display, loc, where, kinds)
        elif t is dict and depth < 200:
            for k, v in obj.items():
                tv = type(v)
                if tv is not str and tv is not dict and tv is not list and not isinstance(k, str):
                    continue
                kinds = self.sc.findings(k) if isinstance(k, str) else ()
                if kinds:
                    self._hit(display, f"{loc}.<key>", where, kinds)
                if tv is str and not v:
                    continue
                if tv is str or tv is dict or tv is list:
                    shown = self.sc.scrub(k, "-") if kinds else k
                    self._json_value(display, v, k, self._child(loc, shown), where, depth + 1, obj)
        elif t is list and depth < 200:
            sub = loc if loc.endswith("[]") else loc + "[]"
            values = flag_value_items(obj, self.sc.is_secret_name) if len(obj) > 1 else ()
            denied = denied_flag_items(obj) if len(obj) > 1 else ()
            for i, v in enumerate(obj):
                tv = type(v)
                if i in values:      # `["--api-key", "<value>"]`: judged as the flag's value
                    self._hit(display, sub, where, self.sc.keyed_findings(obj[i - 1], v))
                elif i in denied:    # `["--run-name", "<value>"]`: what trace scrub pseudonymises
                    self._hit(display, sub, where, self.sc.deny_value_findings(v))
                elif tv is str or tv is dict or tv is list:
                    self._json_value(display, v, key, sub, where, depth + 1)

    def _child(self, parent: str, key: str) -> str:
        return self._names.child(parent, key)

    def _clean_literal(self, text: str) -> bool:
        if text[:2] == "--" and " " not in text and "=" not in text:
            return False            # an option: the item after it is judged as its value
        return not self.sc.user_text_findings(text, "-") and self.sc.key_class(text) == 0

    def _toolchain_literal(self, text: str) -> bool:
        """Clean where the toolchain wrote it (a kernel name): walked only in a user field (issue 39)."""
        return not (text[:2] == "--" and " " not in text and "=" not in text) and not self.sc.findings(text) \
            and self.sc.key_class(text) == 0

    def _json_members(self, display: str, members: dict[str, Any]) -> None:
        for key, val in members.items():
            kinds = self.sc.findings(key)
            self._hit(display, "$.<key>", "", kinds)
            shown = self.sc.scrub(key, "-") if kinds else key
            self._json_value(display, val, key, f"$.{shown}", "")

    def _json(self, path: Path, display: str, text_fallback: bool = True) -> None:
        """Any JSON document, streamed by the one chrome-trace reader: top-level members walked,
        events skipped unless they hold a literal with a finding (`LiteralFilter`), which are
        decoded and walked (all of a batch the fast decoders refused)."""
        lits = LiteralFilter(self._clean_literal, toolchain=self._toolchain_literal)
        ops = OpInputs() if self.policy.join_adjacent_nvtx else None
        loc = ""
        self._trace_doc = False
        n = 0
        try:
            stream = ChromeTraceStream(path, require_events=False)
            for batch in stream:
                if not loc:
                    self._trace_doc = True       # a chrome trace: its fields have provenance
                    self._json_members(display, stream.head)
                    loc = "$[]" if stream.is_array else "$.traceEvents[]"
                if batch.tolerant:
                    todo = list(enumerate(batch.events or ()))
                else:
                    raw = batch.raw
                    todo = [(k, loads_event(raw[s:e], path)) for k, s, e in lits.events_to_walk(raw)]
                if ops is not None:   # the filter's scan of this batch gives its event boundaries too
                    scan = None if batch.tolerant else lits.last_scan
                    ops.feed_batch(batch.raw, batch.events, lambda raw: loads_event(raw, path),
                                   commas=None if scan is None else scan.commas)
                for k, ev in todo:
                    self._json_value(display, ev, None, loc, f"#{n + k}")
                n += batch.count
            if not loc:
                self._json_members(display, stream.head)
            self._json_members(display, stream.tail)
            if ops:     # a secret only two consecutive ops' inputs show together (op_inputs.py)
                for _half in sorted(split_op_halves(ops.pairs(), self.sc)):
                    self.sink.add(display, f"{loc}.args.{SPLIT_OP_LOCATION}", KIND_SPLIT)
            self._trace_doc = False
        except (BadInputError, RecursionError):
            self._trace_doc = False
            self.sink.add(display, "not valid JSON: scanned as text", KIND_UNREADABLE)
            if text_fallback:
                self._text(path, display)

    def _pickle(self, path: Path, display: str, data: bytes | None = None) -> None:
        try:
            blob = data if data is not None else path.read_bytes()
            obj = loads_restricted(blob)
        except pickle.UnpicklingError as exc:
            self.sink.add(display, f"pickle refused by the restricted unpickler ({exc}); not loaded", KIND_UNSAFE_PICKLE)
            return
        except Exception as exc:  # noqa: BLE001 - truncated/corrupt: cannot verify
            self.sink.add(display, f"pickle unreadable ({type(exc).__name__})", KIND_UNREADABLE)
            self._raw(path, display)
            return
        seen: set[int] = set()
        self._pickle_walk(display, obj, None, "pickle", seen, 0)

    def _pickle_walk(self, display: str, obj: Any, key: str | None, loc: str, seen: set[int], depth: int,
                     frame: dict[str, Any] | None = None) -> None:
        if isinstance(obj, str):
            if key and self.sc.key_class(key):
                kinds = self.sc.keyed_findings(key, obj)
            else:      # issue 39: a snapshot's fields have provenance (frames by their file)
                kinds = self.sc.user_text_findings(obj, pickle_field(loc, frame, key)) if obj else ()
            self._hit(display, loc, "", kinds)
            return
        if isinstance(obj, bytes):
            self._hit(display, loc, "", self.sc.findings(obj.decode("latin-1")))
            return
        if not isinstance(obj, (dict, list, tuple, set, frozenset)):
            return
        if id(obj) in seen:
            return
        seen.add(id(obj))
        if depth > 200:
            self.sink.add(display, loc, KIND_UNREADABLE, "nested too deeply")
            return
        if isinstance(obj, dict):
            fr = obj if isinstance(obj.get("filename"), str) and isinstance(obj.get("name"), str) else None
            for k, v in obj.items():
                ks = k if isinstance(k, str) else None
                if ks:
                    kinds = self.sc.findings(ks)
                    self._hit(display, f"{loc}.<key>", "", kinds)
                    shown = self.sc.scrub(ks, "-") if kinds else ks
                else:
                    shown = "<key>"
                self._pickle_walk(display, v, ks or key, f"{loc}.{shown}", seen, depth + 1, fr)
        else:
            sub = loc if loc.endswith("[]") else loc + "[]"
            for v in obj:
                self._pickle_walk(display, v, key, sub, seen, depth + 1)

    def _text(self, path: Path, display: str) -> None:
        try:
            with open(path, "rb") as f:
                for i, line in enumerate(f, 1):
                    text = line.decode("utf-8", "replace")
                    if len(text) > 65_536:
                        self._scan_big_text(display, text, f"line {i}")
                        continue
                    self._hit(display, "text", f"line {i}", self.sc.findings(text))
        except OSError as exc:
            self.sink.add(display, f"cannot read ({exc.strerror})", KIND_UNREADABLE)

    def _scan_big_text(self, display: str, text: str, where: str, template: str = "text", skip: set[str] = frozenset()) -> None:
        for a, b in self._raw_windows(text):
            for kind in self.sc.findings_uncached(text[a:b]):
                if kind not in skip:
                    self.sink.add(display, template, kind, where)

    def _raw_windows(self, text: str) -> list[tuple[int, int]]:
        low = text.lower()
        spans: list[tuple[int, int]] = []
        for rule, hints in PATTERN_HINTS.items():
            if rule in self.policy.patterns:
                spans += hint_windows(text, hints, 200, 600)
        for rule, hints in PATTERN_IHINTS.items():
            if rule in self.policy.patterns:
                spans += hint_windows(low, hints, 200, 600)
        if self.policy.custom_patterns:
            spans.append((0, len(text)))
        spans += hint_windows(text, self.known.secret_values, 8, 8 + max((len(v) for v in self.known.secret_values), default=0))
        spans += hint_windows(text, ("/home/", "/Users/", "\\Users\\"), 16, 96)
        spans += hint_windows(low, ("gpu-", "mig-"), 4, 64)
        names = [n for n, _p in self.known.hosts + self.known.users if len(n) >= self.policy.min_free_text_length]
        spans += hint_windows(text, names, 64, 64)
        spans.sort()
        merged: list[tuple[int, int]] = []
        for a, b in spans:
            if merged and a <= merged[-1][1]:
                merged[-1] = (merged[-1][0], max(b, merged[-1][1]))
            else:
                merged.append((a, b))
        return merged

    def _raw(self, path: Path, display: str, template: str = "raw bytes", skip: set[str] = frozenset()) -> None:
        try:
            with open(path, "rb") as f:
                off = 0
                tail = b""
                while True:
                    data = f.read(_CHUNK)
                    if not data:
                        break
                    block = tail + data
                    self._scan_big_text(display, block.decode("latin-1"), f"offset {off - len(tail)}", template, skip)
                    tail = block[-4096:]
                    off += len(data)
        except OSError as exc:
            self.sink.add(display, f"cannot read ({exc.strerror})", KIND_UNREADABLE)

    def _raw_regions(self, path: Path, display: str, regions: list[tuple[int, int]], template: str,
                     skip: set[str]) -> None:
        """`_raw` over some byte ranges of a file only; ranges of zeros (never written, or wiped by
        secure_delete) are skipped, the others scanned in blocks of about `_CHUNK` bytes."""
        try:
            with open(path, "rb") as f:
                block: list[bytes] = []
                size = 0
                first = 0
                for a, b in regions:
                    f.seek(a)
                    data = f.read(b - a)
                    if not data.strip(b"\x00"):
                        continue
                    if not block:
                        first = a
                    block.append(data)
                    size += len(data) + 1
                    if size >= _CHUNK:
                        self._scan_big_text(display, "\x00".join(x.decode("latin-1") for x in block),
                                            f"offset {first}", template, skip)
                        block, size = [], 0
                if block:
                    self._scan_big_text(display, "\x00".join(x.decode("latin-1") for x in block),
                                        f"offset {first}", template, skip)
        except OSError as exc:
            self.sink.add(display, f"cannot read ({exc.strerror})", KIND_UNREADABLE)

    # -- containers -----------------------------------------------------------------------------
    def _spool_and_check(self, stream: IO[bytes], display: str, rel: str, depth: int) -> None:
        with tempfile.TemporaryDirectory(prefix="verlprof-check-") as td:
            tmp = Path(td) / (Path(rel).name or "member")
            with open(tmp, "wb") as out:
                shutil.copyfileobj(stream, out, _CHUNK)
            self._file(tmp, display, rel, depth + 1)

    def _gzip(self, path: Path, display: str, depth: int) -> None:
        inner = path.name[:-3] if path.name.lower().endswith(".gz") else path.name + ".ungz"
        try:
            with gzip.open(path, "rb") as g:
                head = g.read(512)
            if head.lstrip()[:1] in (b"{", b"["):
                self._json(path, display + "!" + inner, text_fallback=False)
                return
            with gzip.open(path, "rb") as g:
                self._spool_and_check(g, display + "!" + inner, inner, depth)  # type: ignore[arg-type]
        except (EOFError, gzip.BadGzipFile, zlib.error, OSError) as exc:
            self.sink.add(display, f"gzip unreadable ({type(exc).__name__})", KIND_UNREADABLE)
            self._raw(path, display)

    def _zstd(self, path: Path, display: str, depth: int) -> None:
        inner = path.name[:-4] if path.name.lower().endswith(".zst") else path.name + ".unzst"
        try:
            import zstandard  # type: ignore[import-not-found]

            with open(path, "rb") as f, zstandard.ZstdDecompressor().stream_reader(f) as r:
                self._spool_and_check(r, display + "!" + inner, inner, depth)
            return
        except ImportError:
            pass
        except Exception as exc:  # noqa: BLE001
            self.sink.add(display, f"zstd unreadable ({type(exc).__name__})", KIND_UNREADABLE)
            self._raw(path, display)
            return
        exe = shutil.which("zstd")
        if exe is None:
            self.sink.add(display, "zstd member cannot be opened (install `zstandard` or the zstd tool)", KIND_UNREADABLE)
            self._raw(path, display)
            return
        with subprocess.Popen([exe, "-dc", "--", str(path)], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL) as proc:
            assert proc.stdout is not None
            self._spool_and_check(proc.stdout, display + "!" + inner, inner, depth)
        if proc.returncode != 0:
            self.sink.add(display, "zstd stream corrupt or truncated", KIND_UNREADABLE)

    def _tar(self, path: Path, display: str, depth: int) -> None:
        try:
            with tarfile.open(path, "r:*") as tf:
                for m in tf:
                    for kind in self.sc.findings(m.name):
                        self.sink.add(display, "tar member name", kind)
                    if m.isfile():
                        f = tf.extractfile(m)
                        if f is not None:
                            self._spool_and_check(f, f"{display}!{m.name}", m.name, depth)
                    elif m.issym() or m.islnk():
                        for kind in self.sc.findings(m.linkname):
                            self.sink.add(display, "tar link target", kind)
        except (tarfile.TarError, EOFError, OSError, zlib.error) as exc:
            self.sink.add(display, f"tar unreadable ({type(exc).__name__})", KIND_UNREADABLE)
            self._raw(path, display)

    def _zip(self, path: Path, display: str, depth: int) -> None:
        try:
            with zipfile.ZipFile(path) as zf:
                for info in zf.infolist():
                    for kind in self.sc.findings(info.filename):
                        self.sink.add(display, "zip member name", kind)
                    if not info.is_dir():
                        with zf.open(info) as f:
                            self._spool_and_check(f, f"{display}!{info.filename}", info.filename, depth)
        except (zipfile.BadZipFile, OSError, EOFError, zlib.error, RuntimeError) as exc:
            self.sink.add(display, f"zip unreadable ({type(exc).__name__})", KIND_UNREADABLE)
            self._raw(path, display)


def _numeric_arrow(t: Any) -> bool:
    import pyarrow as pa

    return bool(pa.types.is_integer(t) or pa.types.is_floating(t) or pa.types.is_boolean(t)
                or pa.types.is_temporal(t) or pa.types.is_decimal(t) or pa.types.is_null(t))


def check_paths(paths: Iterable[str | Path], policy: Policy | None = None,
                known: Pseudonyms | Identities | None = None) -> list[Finding]:
    """Every finding under `paths` (files or folders), by location and kind, never by value."""
    return Checker(policy, known).check_paths(paths)


def format_findings(findings: list[Finding], limit: int = 200) -> list[str]:
    lines = [str(f) for f in findings[:limit]]
    if len(findings) > limit:
        lines.append(f"... and {len(findings) - limit} more findings")
    return lines


def class_totals(findings: list[Finding]) -> list[str]:
    """One line per class of finding with its occurrences and files, most first: the same classes
    (kinds) scrub_report.json counts, so a person compares what check saw with what scrub replaced."""
    occ: dict[str, int] = {}
    files: dict[str, set[str]] = {}
    for f in findings:
        occ[f.kind] = occ.get(f.kind, 0) + f.count
        files.setdefault(f.kind, set()).add(f.path)
    return [f"by class: {k}: {n} occurrence{'s' if n != 1 else ''} in {len(files[k])} file{'s' if len(files[k]) != 1 else ''}"
            for k, n in sorted(occ.items(), key=lambda kv: (-kv[1], kv[0]))]


__all__ = ["Finding", "Checker", "check_paths", "format_findings", "class_totals"]
