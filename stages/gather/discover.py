"""Gather: find a verl run's profiler output and say what each file is.

Why: the rest of the pipeline works on `Artifact` records, never on a directory listing. This stage
walks the SOURCE folders/files (or, with none given, where verl writes: the newest Ray session's
`logs/nsight` and `./outputs/profile`), classifies each file by name (`readers/naming.py`) plus a
cheap header peek, reads the run's Hydra config when one is found, and records identity, size and
content hash. It only reads: inputs are never opened for writing, moved or deleted.

Hashing big reports is the slow part, so it is a separate plain function (`hash_artifact`) that a
caller may run in an executor; `gather(..., with_hashes=False)` returns unhashed records for that.
"""
from __future__ import annotations

import os
import secrets
import socket
import stat
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterator, Sequence

from ..core.errors import BadInputError, VerlprofError
from ..core.hashing import salted_hash, sha256_file
from ..core.model import Artifact, ArtifactKind
from ..readers.hydra_config import (
    HYDRA_SIBLINGS,
    RunConfig,
    find_config_near,
    load_run_config,
)
from ..core import formats
from ..core.cores import usable_cores
from ..core.own_outputs import own_output_reason
from .headers import UNREADABLE, check_header, named_bad
from ..readers.naming import NameInfo

#: Folders never worth walking (VCS, caches); verlprof's own temp files are skipped by name.
_SKIP_DIRS = frozenset({".git", ".hg", ".svn", "__pycache__", ".ipynb_checkpoints", "node_modules"})

#: Progress callback: (files hashed so far, files to hash, rel of the one just done).
Progress = Callable[[int, int, str], None]


@dataclass
class GatherResult:
    """What gather found. `roots` are display names of the sources (never absolute paths)."""

    artifacts: list[Artifact]
    config: RunConfig | None
    skipped: list[tuple[str, str]] = field(default_factory=list)   # (rel, reason)
    roots: list[str] = field(default_factory=list)
    #: the unreadable candidates inside folders (also in `skipped`, with their reason) as artifacts,
    #: so that collect can list each as a failed artifact, as it would fail given alone
    rejected: list[Artifact] = field(default_factory=list)
    #: folders skipped as verlprof's own output (a bundle, a WORK folder): (path as given, reason),
    #: which every command prints as one line each (stages/core/own_outputs.py)
    own_outputs: list[tuple[str, str]] = field(default_factory=list)

    def by_kind(self, kind: ArtifactKind) -> list[Artifact]:
        return [a for a in self.artifacts if a.kind == kind]

    @property
    def unreadable(self) -> list[tuple[str, str]]:
        """(rel, reason) of the files named like artifacts whose content is not what the name says
        (a corrupt SQLite, a `.json.gz` that is not gzip): named to the user, never just ignored."""
        return unreadable(self.skipped)


def unreadable(skipped: Sequence[tuple[str, str]]) -> list[tuple[str, str]]:
    """The entries of `skipped` that are unreadable artifacts, as (rel, reason without the prefix)."""
    return [(rel, why[len(UNREADABLE):]) for rel, why in skipped if why.startswith(UNREADABLE)]


# ----------------------------------------------------------------------------------------------
# Where verl writes
# ----------------------------------------------------------------------------------------------


def _ray_dir_groups(extra: Sequence[Path] = ()) -> list[list[Path]]:
    """Ray temp folders in Ray's own order of preference, each base with and without `/ray`.

    Ray puts its sessions in `<RAY_TMPDIR or TMPDIR or /tmp>/ray`; `ray start --temp-dir=D` uses D
    itself, which cannot be discovered from outside, so callers pass it in `extra` (tried first).
    """
    bases: list[Path] = [Path(p).expanduser() for p in extra]
    for var in ("RAY_TMPDIR", "TMPDIR"):
        v = os.environ.get(var)
        if v:
            bases.append(Path(v))
    bases.append(Path("/tmp"))
    groups: list[list[Path]] = []
    seen: set[Path] = set()
    for b in bases:
        g = [c for c in (b, b / "ray") if c not in seen]
        seen.update(g)
        if g:
            groups.append(g)
    return groups


def ray_temp_dirs(extra: Sequence[Path] = ()) -> list[Path]:
    """Every Ray temp folder candidate, most preferred first (see `_ray_dir_groups`)."""
    return [d for g in _ray_dir_groups(extra) for d in g]


def newest_session(ray_dir: Path) -> Path | None:
    """The session folder `session_latest` points at, else the newest `session_*` folder."""
    latest = ray_dir / "session_latest"
    try:
        if latest.exists():
            resolved = latest.resolve()
            if resolved.is_dir():
                return resolved
        sessions = [(p.stat().st_mtime, p.name, p) for p in ray_dir.glob("session_*")
                    if p.name != "session_latest" and p.is_dir()]
    except OSError:
        return None
    return max(sessions)[2] if sessions else None


def ray_nsight_dir(ray_dirs: Sequence[Path] = ()) -> Path | None:
    """`<session>/logs/nsight` of the newest session in the most preferred Ray temp folder.

    Preference follows Ray (given folders, then RAY_TMPDIR, TMPDIR, /tmp): a set RAY_TMPDIR means
    verl's Ray wrote there, even if /tmp/ray holds newer sessions of some other run.
    """
    for group in _ray_dir_groups(ray_dirs):
        found: list[tuple[float, Path]] = []
        for rd in group:
            s = newest_session(rd)
            if s is not None and (s / "logs" / "nsight").is_dir():
                try:
                    found.append((s.stat().st_mtime, s / "logs" / "nsight"))
                except OSError:
                    continue
        if found:
            return max(found)[1]
    return None


def default_sources(ray_dirs: Sequence[Path] = (), cwd: Path | None = None) -> list[Path]:
    """Where verl writes when no SOURCE is given: the nsight folder of the newest Ray session and
    `./outputs/profile` (verl's default `global_profiler.save_path`). Only existing folders."""
    out: list[Path] = []
    nsight = ray_nsight_dir(ray_dirs)
    if nsight is not None:
        out.append(nsight)
    prof = (cwd or Path.cwd()) / "outputs" / "profile"
    if prof.is_dir():
        out.append(prof)
    return out


def _local_ray_host(src: Path, ray_dirs: Sequence[Path]) -> str | None:
    """This machine's host name when `src` lies in a session of one of its Ray temp folders."""
    try:
        real = src.resolve()
    except OSError:
        return None
    for rd in ray_temp_dirs(ray_dirs):
        try:
            rel = real.relative_to(rd.resolve())
        except (ValueError, OSError):
            continue
        if rel.parts and rel.parts[0].startswith("session_"):
            return socket.gethostname()
    return None


# ----------------------------------------------------------------------------------------------
# Walking
# ----------------------------------------------------------------------------------------------


def _walk(root: Path, skipped: list[tuple[str, str]], exclude: set[tuple[int, int]],
          own: list[tuple[str, str]] | None = None) -> Iterator[tuple[Path, str, os.stat_result]]:
    """Yield (path, rel, stat) of regular files under `root`, following symlinked folders once.

    Folders are identified by (device, inode), so symlink loops and a folder reached twice are
    walked once; unreadable folders and broken links become `skipped` entries.
    """
    seen: set[tuple[int, int]] = set()
    stack: list[tuple[Path, str]] = [(root, "")]
    while stack:
        d, drel = stack.pop()
        try:
            st = d.stat()
        except OSError as exc:
            skipped.append((drel or ".", f"unreadable folder: {exc.strerror or exc}"))
            continue
        key = (st.st_dev, st.st_ino)
        if key in seen or key in exclude:
            if key in exclude:
                skipped.append((drel or ".", "excluded (verlprof output or work folder)"))
            continue
        seen.add(key)
        mine = own_output_reason(d)
        if mine is not None:    # a bundle or WORK folder of verlprof: never read back as input
            skipped.append((drel or ".", mine))
            if own is not None:
                own.append((str(d), mine))
            continue
        try:
            with os.scandir(d) as it:
                entries = sorted(it, key=lambda e: e.name)
        except OSError as exc:
            skipped.append((drel or ".", f"unreadable folder: {exc.strerror or exc}"))
            continue
        subdirs: list[tuple[Path, str]] = []
        for e in entries:
            rel = f"{drel}/{e.name}" if drel else e.name
            try:
                est = e.stat(follow_symlinks=True)
            except OSError:
                skipped.append((rel, "broken symlink" if e.is_symlink() else "cannot stat"))
                continue
            if stat.S_ISDIR(est.st_mode):
                if e.name in _SKIP_DIRS:
                    continue
                subdirs.append((Path(e.path), rel))
            elif stat.S_ISREG(est.st_mode):
                if e.name.startswith(".") and ".tmp-" in e.name:
                    continue        # a temp file of a verlprof writer, never an input
                yield Path(e.path), rel, est
            else:
                skipped.append((rel, "not a regular file"))
        stack.extend(reversed(subdirs))


# ----------------------------------------------------------------------------------------------
# Classification
# ----------------------------------------------------------------------------------------------


def _classify(path: Path, rel: str, root_name: str) -> NameInfo | None:
    """Name-based identity; the source root's own name counts as a parent folder (`step2/`)."""
    for fmt in formats.all_formats():   # a file a format claims by its content (the run's config)
        info = fmt.claim(path)
        if info is not None:
            return info
    if path.name in HYDRA_SIBLINGS and path.parent.name == ".hydra":
        return None
    return formats.classify(f"{root_name}/{rel}" if root_name else rel)


def _skip_reason(path: Path) -> str:
    if path.parent.name == ".hydra":
        return "Hydra metadata (only config.yaml is read)"
    name = path.name
    if name.endswith((".sqlite-journal", ".sqlite-wal", ".sqlite-shm")):
        return "SQLite side file"
    suffix = "".join(path.suffixes[-2:]) or "(no extension)"
    return f"not a profiler artifact ({suffix})"


def mask_host(rel: str, info: NameInfo, salt: str) -> str:
    """`rel` with the host name in its base name replaced by `host-<salted hash>`.

    Why: relocated nsys reports and old vLLM traces carry the host name in the file name, and
    manifests may show host names only as salted hashes (the same hash `Artifact.to_manifest`
    writes for `host` when given the same salt).
    """
    if not info.host or info.host_span is None:
        return rel
    head, sep, base = rel.rpartition("/")
    a, b = info.host_span
    if base[a:b] != info.host:
        return rel
    return f"{head}{sep}{base[:a]}host-{salted_hash(info.host, salt)}{base[b:]}"


def _artifact(path: Path, rel: str, st: os.stat_result, info: NameInfo, index: int,
              host: str | None) -> Artifact:
    notes = list(info.notes)
    if info.replica is not None:
        notes.append(f"replica={info.replica}")
    if st.st_size == 0:
        notes.append("empty")
    return Artifact(
        kind=info.kind, path=path, rel=rel, size=st.st_size, mtime=st.st_mtime, role=info.role,
        rank=info.rank, world_size=info.world_size, pid=info.pid, host=info.host or host,
        capture_range=info.capture_range, step=info.step, steps=info.steps, scope=info.scope,
        naming=info.naming, source_index=index, notes=tuple(notes))


def hash_artifact(a: Artifact, options: Any = None) -> Artifact:
    """The artifact with its sha256 filled in (picklable, so an executor may run it)."""
    if a.sha256:
        return a
    try:
        digest = sha256_file(a.path)
        st = os.stat(a.path)
    except OSError as exc:
        raise BadInputError(a.path, f"cannot read to hash: {exc.strerror or exc}") from None
    if a.mtime and (st.st_size != a.size or st.st_mtime != a.mtime):
        return a.replace(sha256=digest, notes=a.notes + (GROWING,))
    return a.replace(sha256=digest)


#: Note of an artifact whose size or mtime changed between the walk and the end of its hash.
GROWING = "growing"
GROWING_REASON = ("still being written (it changed while verlprof read it); "
                  "collect again once the profiler has finished writing it")


def sqlite_export_of(report: Artifact) -> Path | None:
    """The SQLite export lying beside a report (recorded by gather), for the export stage."""
    for n in report.notes:
        if n.startswith("sqlite_export="):
            return report.path.with_name(report.path.name[: -len(".nsys-rep")] + ".sqlite")
    return None


def _config_format() -> formats.Format:
    """The format of the run's config (gather reads the run's roles and steps from it)."""
    return next(f for f in formats.all_formats() if f.run_config)


def _ranks_from_config(arts: list[Artifact], cfg: RunConfig | None) -> list[Artifact]:
    """Rollout engine traces: one file per GPU of a replica, its tensor-parallel rank in the name.
    With the replica's GPU count from the config (tp x dp x pp), the file's global rank is
    replica x that + tp rank, as verl's `relocate_rollout_traces` numbers them; two TP ranks of one
    replica are two ranks. The config's token window (`profile_token_start/end`) is noted on them."""
    if cfg is None:
        return arts
    out: list[Artifact] = []
    for a in arts:
        if a.naming in ("rollout_replica", "rollout_replica_relocated"):
            notes = dict(n.split("=", 1) for n in a.notes if "=" in n)
            replica, tp = _int_note(notes.get("replica")), _int_note(notes.get("tp_rank"))
            world = cfg.rollout_world_size
            if a.rank is None and replica is not None and world:
                rank = replica if world == 1 else (replica * world + tp if tp is not None else None)
                if rank is not None:
                    a = a.replace(rank=rank, world_size=a.world_size, notes=a.notes + ("rank_from_config",))
            if cfg.rollout_token_window is not None:
                lo, hi = cfg.rollout_token_window
                a = a.replace(notes=a.notes + (f"token_window={'' if lo is None else lo}-{'' if hi is None else hi}",))
        out.append(a)
    return out


def _int_note(v: str | None) -> int | None:
    return int(v) if v is not None and v.isdigit() else None


def _display_root(src: Path) -> str:
    """A safe display name: relative to the cwd when inside it, else Ray session or base name."""
    try:
        return str(src.resolve().relative_to(Path.cwd().resolve())) or "."
    except (ValueError, OSError):
        pass
    parts = src.parts
    for i, p in enumerate(parts):
        if p.startswith("session_"):
            return "/".join(parts[i:])
    return src.name or "."


def _unique_rels(arts: list[Artifact]) -> list[Artifact]:
    """Prefix `src<N>/` (N = source index + 1) onto rels that occur under several sources."""
    by_rel: dict[str, set[int]] = {}
    for a in arts:
        by_rel.setdefault(a.rel, set()).add(a.source_index)
    clash = {r for r, idx in by_rel.items() if len(idx) > 1}
    if not clash:
        return arts
    return [a.replace(rel=f"src{a.source_index + 1}/{a.rel}") if a.rel in clash else a for a in arts]


# ----------------------------------------------------------------------------------------------
# The stage
# ----------------------------------------------------------------------------------------------


def gather(sources: list[Path], *, with_hashes: bool = True, progress: Progress | None = None,
           exclude: Sequence[Path] = (), ray_dirs: Sequence[Path] = (),
           find_config: bool = True, host_salt: str | None = None) -> GatherResult:
    """Find and identify every profiler artifact under `sources` (folders or single files).

    - `exclude`: folders never to walk (verlprof's OUT and WORK dirs when they lie inside a SOURCE).
    - `ray_dirs`: extra Ray temp folders (`ray start --temp-dir`) whose sessions are local.
    - `find_config`: also look for the run's Hydra config next to (not only inside) the sources.
    - `host_salt`: the bundle's salt; host names inside file names become `host-<salted hash>` in
      `rel` (a random salt when None, so they are hidden either way).

    A missing SOURCE, or a single-file SOURCE that is not a recognisable artifact, raises
    VerlprofError/BadInputError (one line, names the file). Inside folders, unrecognised or
    malformed files are listed in `skipped` with the reason instead.
    """
    salt = host_salt if host_salt is not None else secrets.token_hex(8)
    skipped: list[tuple[str, str]] = []
    arts: list[Artifact] = []
    rejected: list[Artifact] = []
    configs: list[Artifact] = []
    roots: list[str] = []
    own: list[tuple[str, str]] = []
    seen_files: dict[tuple[int, int], str] = {}
    excl: set[tuple[int, int]] = set()
    for e in exclude:
        try:
            st = Path(e).stat()
            excl.add((st.st_dev, st.st_ino))
        except OSError:
            pass

    for index, raw_src in enumerate(sources):
        src = Path(raw_src).expanduser()
        try:
            st = src.stat()
        except FileNotFoundError:
            raise VerlprofError(src, "no such file or folder") from None
        except OSError as exc:
            raise VerlprofError(src, f"cannot read: {exc.strerror or exc}") from None
        roots.append(_display_root(src))
        host = _local_ray_host(src, ray_dirs)
        if stat.S_ISDIR(st.st_mode):
            mine = own_output_reason(src)
            if mine is not None:    # given as SOURCE: say so at once rather than find nothing in it
                raise VerlprofError(src, f"{mine}: give the run's folder, not a verlprof output")
            root_name = src.resolve().name
            files: Iterator[tuple[Path, str, os.stat_result]] = _walk(src, skipped, excl, own)
            single = False
        else:
            root_name = src.resolve().parent.name
            files = iter([(src, src.name, st)])
            single = True
        for path, rel, fst in files:
            info = _classify(path, rel, root_name)
            if info is not None:
                rel = mask_host(rel, info, salt)
            fkey = (fst.st_dev, fst.st_ino)
            if fkey in seen_files:
                skipped.append((rel, f"same file as {seen_files[fkey]}"))
                continue
            seen_files[fkey] = rel
            if info is None:
                reason = _skip_reason(path)
                if single:
                    raise BadInputError(path, f"not a recognised profiler artifact: {reason}")
                skipped.append((rel, reason))
                continue
            if fst.st_size > 0:
                bad = check_header(path, info)
                if bad is not None:
                    if single:
                        raise BadInputError(path, f"{info.kind}: {bad.removeprefix(UNREADABLE)}")
                    why = bad if bad.startswith(UNREADABLE) or not named_bad(bad) else UNREADABLE + bad
                    skipped.append((rel, why))
                    if why.startswith(UNREADABLE):
                        rejected.append(_artifact(path, rel, fst, info, index, host))
                    continue
            a = _artifact(path, rel, fst, info, index, host)
            if formats.for_file_kind(info.kind).run_config:
                configs.append(a)
            arts.append(a)

    if find_config and not configs:
        for index, raw_src in enumerate(sources):
            near = find_config_near(Path(raw_src).expanduser())
            if near is None:
                continue
            nst = near.stat()
            if (nst.st_dev, nst.st_ino) in seen_files:
                continue
            # relative to the source, minus the climb out of it: no names from above the source
            up = Path(os.path.relpath(near, Path(raw_src).expanduser().resolve())).parts
            rel = "/".join(p for p in up if p != "..")
            a = _artifact(near, rel, nst, _config_format().found_near(near), index, None)
            a = a.replace(notes=a.notes + ("found_near_source",))
            arts.append(a)
            configs.append(a)
            break

    # Read the newest config; a broken one is reported and left out, never fatal.
    config: RunConfig | None = None
    bad_cfg: set[str] = set()
    for a in sorted(configs, key=lambda c: c.mtime, reverse=True):
        try:
            cfg = load_run_config(a.path, rel=a.rel)
        except BadInputError as exc:
            skipped.append((a.rel, f"bad Hydra config: {exc.what}"))
            bad_cfg.add(a.rel)
            continue
        if config is None:
            config = cfg
    arts = [a for a in arts if not (formats.for_file_kind(a.kind).run_config and a.rel in bad_cfg)]

    arts = _unique_rels(arts)
    for fmt in formats.all_formats():   # files of one format that belong together (a report, its export)
        arts = fmt.paired(arts, skipped)
    if config is not None:              # what the run's config says of each file (its steps)
        arts = [formats.for_file_kind(a.kind).from_config(a, config) for a in arts]
    arts = _ranks_from_config(arts, config)
    arts.sort(key=lambda a: (a.source_index, a.rel))
    if config is not None:
        hyd = next((a for a in arts if a.path == config.path), None)
        if hyd is not None:
            config.rel = hyd.rel

    if with_hashes:
        # hashlib releases the GIL on large blocks: a thread per core hashes that many files at once
        # (8 reports of 100 MB: 0.6 s serial, the longest serial step of collect's start).
        from concurrent.futures import ThreadPoolExecutor

        total = len(arts)
        hashed: list[Artifact] = []
        with ThreadPoolExecutor(max_workers=max(1, min(usable_cores(), total))) as pool:
            for i, a in enumerate(pool.map(hash_artifact, arts), 1):
                hashed.append(a)
                if progress is not None:
                    progress(i, total, a.rel)
        arts = []
        for a in hashed:   # a file still being written is no input yet: failed, with its reason
            if GROWING in a.notes:
                skipped.append((a.rel, UNREADABLE + GROWING_REASON))
                rejected.append(a)
            else:
                arts.append(a)
    return GatherResult(artifacts=arts, config=config, skipped=skipped, roots=roots, rejected=rejected, own_outputs=own)
