"""The scrub stage: per-artifact, picklable work that turns raw inputs into shareable copies.

Why this shape: `collect` (and `verlprof scrub`) run many artifacts in parallel, yet pseudonyms must
agree across them (ranks on one node must keep one `host-N`). So scrub is two passes:

  1. `find_identities(path, kind)` per artifact (cheap): host/user names, GPU UUIDs and secret
     values the artifact itself reveals;
  2. the caller merges them (plus the local environment) into one `Pseudonyms` with
     `build_options`, and `scrub_artifact(task, options)` runs per artifact with that shared map.

Both are plain module-level functions of picklable records, so the pipeline's executors can run
them inline, in a process pool, or as Ray tasks. Outputs are written atomically; a crash leaves no
half-written file under its final name, and raw `.nsys-rep` reports are refused outright.
"""
from __future__ import annotations

import hashlib
import resource
import sqlite3
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Iterable

from ..core import atomic, formats
from ..core.errors import BadInputError, VerlprofError
from .identities import Identities, Pseudonyms, local_identities, owner_identities
from .policy import Policy, load_policy
from .scrubber import Scrubber
from ..readers.sqlite_export import SQLITE_MAGIC
from .sqlite_cells import find_sqlite_identities
from .trace import GZIP_MAGIC, sniff_json

KIND_SQLITE = "nsys_sqlite"
KIND_TRACE = "torch_trace"
KIND_SNAPSHOT = "memory_snapshot"
KIND_REPORT = "nsys_report"
KIND_QDSTRM = "nsys_qdstrm"
SCRUBBABLE = (KIND_SQLITE, KIND_TRACE, KIND_SNAPSHOT)
REPORT_NAME = "scrub_report.json"
REPORT_VERSION = 1

_RAW_REPORT_SUFFIXES = (".nsys-rep", ".qdrep", ".qdstrm")


@dataclass(frozen=True)
class ScrubTask:
    """One artifact to scrub: `src` (read only) -> `dst`; `rel` names it in reports."""

    src: str
    dst: str
    kind: str
    rel: str


@dataclass(frozen=True)
class ScrubOptions:
    """What every worker of one bundle shares: the policy and the bundle's pseudonym map."""

    policy: Policy
    pseudonyms: Pseudonyms

    def fingerprint(self) -> str:
        """A short hash for done records: changed policy or pseudonyms redo the work."""
        return hashlib.sha256(repr((self.policy, self.pseudonyms)).encode()).hexdigest()[:16]


@dataclass
class ScrubResult:
    """What scrub did to one artifact. JSON-safe except `dst` (a local path, not for manifests)."""

    rel: str
    kind: str
    dst: str
    status: str                                   # done | refused | failed
    detail: str = ""
    counts: dict[str, dict[str, int]] = field(default_factory=dict)   # location -> kind -> n
    info: dict[str, Any] = field(default_factory=dict)
    bytes_in: int = 0
    bytes_out: int = 0
    seconds: float = 0.0
    peak_rss_mb: float = 0.0
    review: dict[str, dict[str, int]] = field(default_factory=dict)   # kept free text -> location -> n
    # user-written originals published as pseudonyms: original -> (pseudonym, location -> n); for
    # the owner's review list in WORK (done records) only, never scrub_report.json
    named: dict[str, Any] = field(default_factory=dict)

    @property
    def total(self) -> int:
        return sum(n for kinds in self.counts.values() for n in kinds.values())

    def to_report(self) -> dict[str, Any]:
        d = asdict(self)
        d.pop("dst")
        return d

    @classmethod
    def from_record(cls, record: dict[str, Any], dst: str) -> "ScrubResult":
        """The result of an item scrubbed by an earlier run (its done record), marked `cached`."""
        info = dict(record.get("info", {}))
        info.pop("dst", None)
        res = cls(**{**info, "dst": dst})
        res.status = "cached" if res.status == "done" else res.status
        return res


# --------------------------------------------------------------------------------------------
# What is this file?
# --------------------------------------------------------------------------------------------

def sniff_kind(path: str | Path) -> str:
    """nsys_sqlite | torch_trace | memory_snapshot | nsys_report | nsys_qdstrm | unknown."""
    p = Path(path)
    name = p.name.lower()
    if name.endswith(_RAW_REPORT_SUFFIXES):
        return KIND_QDSTRM if name.endswith(".qdstrm") else KIND_REPORT
    try:
        with open(p, "rb") as f:
            head = f.read(16)
    except OSError:
        return "unknown"
    if head.startswith(SQLITE_MAGIC):
        return KIND_SQLITE
    if head[:1] == b"\x80" and name.endswith((".pickle", ".pkl", ".pt.trace.pickle")):
        return KIND_SNAPSHOT
    if head[:1] == b"\x80":
        return KIND_SNAPSHOT
    if head.startswith(GZIP_MAGIC) or head.lstrip()[:1] in (b"{", b"["):
        return KIND_TRACE if sniff_json(p) else "unknown"
    if name.endswith(".sqlite"):
        return KIND_SQLITE   # a bad header is reported by the scrubber with a clear message
    if name.endswith((".pickle", ".pkl")):
        return KIND_SNAPSHOT
    if name.endswith((".json", ".json.gz")):
        return KIND_TRACE
    return "unknown"


def output_name(rel: str, kind: str) -> str:
    """Output file name for an input: traces always end in .json.gz (compressed on the way)."""
    if kind == KIND_TRACE and not rel.endswith(".gz"):
        return rel + ".gz"
    return rel


# --------------------------------------------------------------------------------------------
# Pass 1: identities
# --------------------------------------------------------------------------------------------

def find_identities(path: str | Path, kind: str, policy: Policy | None = None) -> Identities:
    """Names, UUIDs and secret values an artifact reveals about itself (no output written), and
    the account that owns it."""
    pol = policy or load_policy()
    return _content_identities(Path(path), kind, pol).merge(owner_identities(path, pol))


def _content_identities(p: Path, kind: str, pol: Policy) -> Identities:
    """By the format that owns the file kind (stages/formats/<kind>/); None: it reads nothing of
    the file (a raw nsys report, refused later)."""
    try:
        fmt = formats.for_file_kind(kind)
    except KeyError:
        raise BadInputError(p, f"cannot scrub a file of kind {kind!r}") from None
    found = fmt.find_identities(p, pol)
    return Identities() if found is None else found


KIND_CONFIG = "hydra_config"


def config_task(path: str | Path, rel: str) -> ScrubTask:
    """The identity-pass task of a run's config (collect adds it to pass 1; nothing is written)."""
    return ScrubTask(src=str(path), dst="", kind=KIND_CONFIG, rel=rel)


def identities_task(task: ScrubTask, policy: Policy, open_sqlite: sqlite3.Connection | None = None) -> Identities:
    """Executor-friendly form of `find_identities` (fn(item, options)). `open_sqlite`: the SQLite
    input's connection already open in this pass (read instead of opening the file again)."""
    if open_sqlite is not None and task.kind == KIND_SQLITE:
        return find_sqlite_identities(open_sqlite, policy).merge(owner_identities(task.src, policy))
    return find_identities(task.src, task.kind, policy)


def build_options(identities: Iterable[Identities], policy: Policy, salt: str,
                  include_local: bool | None = None) -> ScrubOptions:
    """Merge per-artifact identities (+ the local machine's) into the bundle's shared options."""
    ids = list(identities)
    if policy.use_local_environment if include_local is None else include_local:
        ids.append(local_identities(policy))
    return ScrubOptions(policy, Pseudonyms.build(ids, salt, policy))


def bundle_salt(hashes: Iterable[str]) -> str:
    """A salt that is stable for the same inputs (re-runs resume) and unguessable without them."""
    h = hashlib.sha256(b"verlprof-scrub-salt")
    for x in sorted(hashes):
        h.update(x.encode())
    return h.hexdigest()[:32]


# --------------------------------------------------------------------------------------------
# Pass 2: scrub one artifact
# --------------------------------------------------------------------------------------------

def _peak_rss_mb() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return r / (1024 * 1024) if sys.platform == "darwin" else r / 1024


def scrub_artifact(task: ScrubTask, options: ScrubOptions) -> ScrubResult:
    """Write the scrubbed copy of `task.src` to `task.dst` atomically; never touches the input.

    Raises BadInputError (one line, names the file) for unreadable or refused inputs.
    """
    src, dst = Path(task.src), Path(task.dst)
    if task.kind in (KIND_REPORT, KIND_QDSTRM) or src.name.lower().endswith(_RAW_REPORT_SUFFIXES):
        raise BadInputError(src, "raw Nsight Systems reports cannot be scrubbed and never go into a "
                                 "share bundle; export them (nsys export --type sqlite) and scrub the export")
    if task.kind not in SCRUBBABLE:
        raise BadInputError(src, f"cannot scrub a file of kind {task.kind!r}")
    if not src.is_file():
        raise BadInputError(src, "no such file")
    if src.resolve() == dst.resolve():
        raise BadInputError(src, "output would overwrite the input; inputs are never modified")
    t0 = time.perf_counter()
    sc = Scrubber(options.policy, options.pseudonyms)
    info: dict[str, Any] = {}
    with atomic.atomic_path(dst) as tmp:
        # the format that owns the file kind scrubs it (stages/formats/<kind>/ `scrub_file`)
        info = formats.for_file_kind(task.kind).scrub_file(src, tmp, dst, sc, options)
    return ScrubResult(
        rel=task.rel, kind=task.kind, dst=str(dst), status="done",
        detail=f"{sum(n for k in sc.report_counts().values() for n in k.values())} replacements",
        counts=sc.report_counts(), info=info, bytes_in=src.stat().st_size, bytes_out=dst.stat().st_size,
        seconds=round(time.perf_counter() - t0, 3), peak_rss_mb=round(_peak_rss_mb(), 1), review=sc.review_list(),
        named=sc.named_list())


def scrub_task(task: ScrubTask, options: ScrubOptions) -> ScrubResult:
    """Like `scrub_artifact`, but a bad input becomes a `failed`/`refused` result, not an error."""
    try:
        return scrub_artifact(task, options)
    except VerlprofError as err:
        status = "refused" if task.kind in (KIND_REPORT, KIND_QDSTRM) else "failed"
        return ScrubResult(rel=task.rel, kind=task.kind, dst=task.dst, status=status, detail=err.what)


# --------------------------------------------------------------------------------------------
# The report
# --------------------------------------------------------------------------------------------

def build_report(results: Iterable[ScrubResult], options: ScrubOptions | None = None) -> dict[str, Any]:
    """scrub_report.json: counts per kind and location, never a value."""
    rs = list(results)
    totals: dict[str, int] = {}
    by_location: dict[str, dict[str, int]] = {}
    for r in rs:
        for loc, kinds in r.counts.items():
            for kind, n in kinds.items():
                totals[kind] = totals.get(kind, 0) + n
                slot = by_location.setdefault(loc, {})
                slot[kind] = slot.get(kind, 0) + n
    review: dict[str, dict[str, int]] = {}
    for r in rs:
        for text, where in r.review.items():
            slot = review.setdefault(text, {})
            for loc, n in where.items():
                slot[f"{r.rel}: {loc}"] = slot.get(f"{r.rel}: {loc}", 0) + n
    rep: dict[str, Any] = {
        "report": "verlprof scrub", "version": REPORT_VERSION,
        "artifacts": [{k: v for k, v in r.to_report().items() if k not in ("review", "named")} for r in rs],
        "totals": dict(sorted(totals.items())),
        "by_location": dict(sorted(by_location.items())),
        # every distinct free-text string that was kept, for a person to read before sharing
        "kept_free_text": [{"text": t, "count": sum(w.values()), "where": sorted(w)}
                           for t, w in sorted(review.items(), key=lambda kv: (-sum(kv[1].values()), kv[0]))],
    }
    if options is not None:
        ps = options.pseudonyms
        rep["policy"] = options.policy.source
        rep["identities"] = {"hosts": len({p for _h, p in ps.hosts}), "users": len(ps.users),
                             "secret_values": len(ps.secret_values), "gpu_uuids": len(ps.gpu_uuids)}
    return rep


def write_report(path: str | Path, results: Iterable[ScrubResult], options: ScrubOptions | None = None) -> Path:
    p = Path(path)
    atomic.write_json(p, build_report(results, options))
    return p


# --------------------------------------------------------------------------------------------
# `verlprof scrub IN... -o OUT`: plan, identities, scrub, report, verify
# --------------------------------------------------------------------------------------------

@dataclass
class ScrubRun:
    """Outcome of `scrub_inputs`: per-artifact results, skipped files, report path, findings."""

    results: list[ScrubResult]
    skipped: list[tuple[str, str]]   # (rel, why)
    report: Path | None
    findings: list[Any]
    options: ScrubOptions | None
    named: int = 0                 # user-written names published as pseudonyms
    review_list: Path | None = None   # WORK/names_review.txt: originals for the owner alone
    display: dict[str, str] = field(default_factory=dict)   # published rel -> the input's own name (terminal only)

    @property
    def exit_code(self) -> int:
        if self.findings:
            return 1
        if any(r.status in ("failed", "refused") for r in self.results):
            return 2
        return 0


def plan_inputs(inputs: list[Path], out: Path) -> tuple[list[tuple[Path, str, str]], list[tuple[str, str]], bool,
                                                    list[tuple[str, str]]]:
    """[(src, rel, kind)], [(rel, why skipped)], single-file mode, own outputs skipped: folders are
    judged as collect judges them (stages/scrub/folder_plan.py)."""
    from .folder_plan import plan_inputs as plan

    return plan(inputs, out, sniff_kind)


def finish_scrub(ordered: list[ScrubResult], skipped: list[tuple[str, str]], out: Path, single: bool, namer: Scrubber,
                 options: ScrubOptions, policy: Policy, verify: bool, work_dir: Path | None = None) -> ScrubRun:
    """Write scrub_report.json, then re-check every written file; anything the check flags is
    removed, so nothing unsafe stays under its final name. The originals of the user-written names
    published as pseudonyms go to WORK/names_review.txt (never OUT), for the owner to approve."""
    from .check import check_paths
    from .provenance import merge_named, write_review

    report = out.with_name(out.name + ".scrub_report.json") if single else out / REPORT_NAME
    rep = build_report(ordered, options)
    rep["skipped"] = [namer.scrub(s, "file name") for s, _why in skipped]
    atomic.write_json(report, rep)
    findings: list[Any] = []
    if verify:
        written = [Path(r.dst) for r in ordered if r.status in ("done", "cached") and Path(r.dst).exists()]
        findings = check_paths(written + [report], policy, known=options.pseudonyms) if written else []
        if findings:
            for f in {Path(x.path.split("!")[0]) for x in findings}:
                if f.exists():
                    f.unlink()
    named: dict[str, Any] = {}
    for r in ordered:
        merge_named(named, {o: tuple(v) for o, v in r.named.items()}, f"{r.rel}: ")
    merge_named(named, namer.named_list(), "")
    review = write_review(work_dir, named) if work_dir is not None else None
    return ScrubRun(ordered, skipped, report, findings, options, len(named), review)
