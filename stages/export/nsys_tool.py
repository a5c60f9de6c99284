"""The local Nsight Systems command line: find it, learn what it can do, run export and import.

Why: verlprof never parses `.nsys-rep` itself; NVIDIA's `nsys export --type sqlite` does. But nsys
differs a lot between installs: Debian's 2022.4 has no `--tables`, 2024+ does; Debian splits the
package so `nsys` cannot find its own `QdstrmImporter`; a report written by a newer nsys fails with
"Version not supported". This module hides all of that behind `find_nsys()` (probe once per path,
cached) and `export_sqlite()` / `import_qdstrm()`, which run quietly (nsys draws progress bars),
write to a temp name, validate, rename, and turn nsys's messages into one-line errors that say what
to do.
"""
from __future__ import annotations

import functools
import os
import re
import shutil
import signal
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO, Sequence

from ..core.atomic import temp_sibling
from ..core.errors import BadInputError, ToolMissingError, VerlprofError
from ..readers.files import require_nonempty_file
from ..readers.sqlite_export import ExportInfo, validate_export

ENV_NSYS = "VERLPROF_NSYS"
DEFAULT_TIMEOUT_S = 1800.0
_PROBE_TIMEOUT_S = 60.0

INSTALL_HINT = (
    "install Nsight Systems (Debian: `apt-get install nsight-systems` from the non-free component; "
    "otherwise NVIDIA's Nsight Systems download or the nsys of a CUDA toolkit) and put nsys on PATH, "
    f"or pass --nsys PATH / set {ENV_NSYS}; or export the reports where they were recorded "
    "(`nsys export --type sqlite X.nsys-rep`) and give verlprof the .sqlite files"
)
IMPORTER_HINT = (
    "Debian's nsight-systems package needs "
    "`ln -s /usr/lib/nsight-systems/host-linux-x64 /usr/lib/x86_64-linux-gnu/nsight-systems/host-linux-x64`; "
    "other installs ship it in <nsys root>/host-linux-x64/"
)

# Places nsys lives when it is not on PATH (newest version wins within each pattern).
_KNOWN_NSYS_GLOBS: tuple[str, ...] = (
    "/opt/nvidia/nsight-systems/*/bin/nsys",
    "/usr/local/cuda/bin/nsys",
    "/usr/local/cuda-*/bin/nsys",
    "/opt/nvidia/nsight-systems-cli/*/bin/nsys",
)
# Debian ships the importer here, away from the multiarch folder nsys looks in.
_KNOWN_IMPORTERS: tuple[str, ...] = ("/usr/lib/nsight-systems/host-linux-x64/QdstrmImporter",)

_VERSION_RE = re.compile(r"(20\d\d)\.(\d+)(?:\.(\d+))?(?:\.(\d+))?(?:-[0-9A-Za-z]+)?")


@dataclass(frozen=True)
class NsysTool:
    """One probed nsys: picklable, so workers get it without probing again."""

    path: Path
    version: str                         # e.g. "2022.4.2.1-df9881f"
    version_tuple: tuple[int, int]       # (year, minor), e.g. (2022, 4)
    supports_tables: bool                # `nsys export --tables` (2024+)
    qdstrm_importer: Path | None
    supports_quiet: bool = True          # `nsys export --quiet` (hides the progress bar)

    @property
    def short_version(self) -> str:
        return f"{self.version_tuple[0]}.{self.version_tuple[1]}"


def parse_version(text: str) -> tuple[str, tuple[int, int]] | None:
    """The first nsys-style version in `text`: ("2022.4.2.1-df9881f", (2022, 4))."""
    m = _VERSION_RE.search(text)
    if not m:
        return None
    return m.group(0), (int(m.group(1)), int(m.group(2)))


def find_nsys(explicit: str | Path | None = None) -> NsysTool:
    """Locate nsys (explicit path, then $VERLPROF_NSYS, PATH, known install folders) and probe it.

    Raises ToolMissingError with an install hint when there is none, or the one given is unusable.
    """
    if explicit:
        return probe_nsys(_resolve_given(Path(str(explicit)).expanduser(), "--nsys"))
    env = os.environ.get(ENV_NSYS)
    if env:
        return probe_nsys(_resolve_given(Path(env).expanduser(), ENV_NSYS))
    found = shutil.which("nsys")
    if found:
        return probe_nsys(Path(found))
    for pattern in _KNOWN_NSYS_GLOBS:
        hits = sorted((p for p in Path("/").glob(pattern.lstrip("/")) if os.access(p, os.X_OK)),
                      key=lambda p: _version_key(str(p)))
        if hits:
            return probe_nsys(hits[-1])
    raise ToolMissingError("nsys", f"not found on PATH; {INSTALL_HINT}")


def _resolve_given(p: Path, origin: str) -> Path:
    """An nsys given by the user: the binary itself, or a folder holding it (bin/, target-*/)."""
    if p.is_dir():
        for cand in (p / "nsys", p / "bin" / "nsys", *sorted(p.glob("target-linux-*/nsys"))):
            if cand.is_file():
                return cand
        raise ToolMissingError(p, f"({origin}) is a folder without an nsys binary; {INSTALL_HINT}")
    if not p.exists():
        raise ToolMissingError(p, f"({origin}) does not exist; {INSTALL_HINT}")
    if not os.access(p, os.X_OK):
        raise ToolMissingError(p, f"({origin}) is not executable")
    return p


def probe_nsys(path: Path) -> NsysTool:
    """Version, export flags and importer of the nsys at `path`; cached per (path, mtime)."""
    p = Path(path).absolute()
    try:
        mtime = p.stat().st_mtime
    except OSError:
        raise ToolMissingError(p, f"does not exist; {INSTALL_HINT}") from None
    return _probe_cached(str(p), mtime)


@functools.lru_cache(maxsize=8)
def _probe_cached(path: str, mtime: float) -> NsysTool:  # noqa: ARG001 - mtime is the cache key
    p = Path(path)
    try:
        out = _run_capture([path, "--version"], _PROBE_TIMEOUT_S)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise ToolMissingError(p, f"cannot run it ({exc}); {INSTALL_HINT}") from None
    parsed = parse_version(out.stdout + out.stderr)
    if out.returncode != 0 or parsed is None:
        raise ToolMissingError(p, f"does not answer like Nsight Systems (`nsys --version`: "
                                  f"{_last_line(out.stdout + out.stderr) or 'no output'}); {INSTALL_HINT}")
    version, vt = parsed
    try:
        helptext = _run_capture([path, "export", "--help"], _PROBE_TIMEOUT_S)
        text = helptext.stdout + helptext.stderr
    except (OSError, subprocess.TimeoutExpired):
        text = ""
    return NsysTool(
        path=p,
        version=version,
        version_tuple=vt,
        supports_tables="--tables" in text,
        supports_quiet="--quiet" in text or not text,
        qdstrm_importer=find_qdstrm_importer(p),
    )


def find_qdstrm_importer(nsys: Path) -> Path | None:
    """The QdstrmImporter that belongs to this nsys, following its symlink chain.

    Layouts: NVIDIA/CUDA installs keep `<root>/target-linux-x64/nsys` (or `<root>/bin/nsys`) beside
    `<root>/host-linux-x64/QdstrmImporter`; the Nsight Compute bundle has `host/<platform>/`;
    Debian splits the package and keeps the importer under /usr/lib/nsight-systems/host-linux-x64.
    """
    hops: list[Path] = []
    cur = Path(os.path.normpath(Path(nsys).absolute()))
    for _ in range(16):  # walk /usr/bin/nsys -> ../lib/nsight-systems/bin/nsys -> ... by hand
        hops.append(cur)
        if not cur.is_symlink():
            break
        cur = Path(os.path.normpath(cur.parent / os.readlink(cur)))
    hops.append(Path(os.path.realpath(nsys)))
    seen: set[Path] = set()
    for hop in hops:
        root = hop.parent.parent
        for cand in (root / "host-linux-x64" / "QdstrmImporter", *sorted(root.glob("*/QdstrmImporter"))):
            if cand not in seen:
                seen.add(cand)
                if cand.is_file() and os.access(cand, os.X_OK):
                    return cand
    if not os.path.realpath(nsys).startswith("/usr/lib/"):
        return None  # the Debian fallback below belongs to Debian's nsys only (versions must match)
    for known in _KNOWN_IMPORTERS:
        cand = Path(known)
        if cand.is_file() and os.access(cand, os.X_OK):
            return cand
    return None


# ------------------------------------------------------------------------------------------------
# Running nsys
# ------------------------------------------------------------------------------------------------

def export_sqlite(tool: NsysTool, report: str | Path, dst: str | Path,
                  tables: Sequence[str] | None = None,
                  timeout: float | None = DEFAULT_TIMEOUT_S) -> ExportInfo:
    """`nsys export --type sqlite` of `report` onto `dst`, atomically; return the validated export.

    nsys writes a temp name beside `dst` (same folder, so the rename is atomic); the temp file is
    validated before the rename and removed on any failure, so `dst` is complete or absent.
    `tables` (nsys `--tables` patterns) is used only when this nsys supports it.
    """
    report, dst = Path(report), Path(dst)
    _check_report_readable(report)
    check_report_version(tool, report)
    dst.parent.mkdir(parents=True, exist_ok=True)
    tmp = _temp_named(dst, ".sqlite")  # ends in .sqlite: nsys may append it to other names
    cmd = [str(tool.path), "export", "--type", "sqlite", "--force-overwrite", "true", "--output", str(tmp)]
    if tool.supports_quiet:
        cmd += ["--quiet", "true"]
    if tables and tool.supports_tables:
        cmd += [f"--tables={','.join(tables)}"]
    cmd.append(str(report))
    try:
        try:
            out = _run_capture(cmd, timeout)
        except subprocess.TimeoutExpired:
            raise VerlprofError(report, f"`nsys export` did not finish within {timeout:.0f} s "
                                        "(raise the export timeout for very large reports)") from None
        except OSError as exc:
            raise ToolMissingError(tool.path, f"cannot run it ({exc}); {INSTALL_HINT}") from None
        if out.returncode != 0:
            raise explain_nsys_failure(tool, report, out.stdout + "\n" + out.stderr, out.returncode)
        try:
            info = validate_export(tmp)
        except BadInputError as exc:
            msg = _last_line(out.stdout + "\n" + out.stderr)
            raise BadInputError(report, f"`nsys export` wrote no valid SQLite ({exc.what})"
                                        + (f"; nsys said: {msg}" if msg else "")) from None
        os.replace(tmp, dst)
        return ExportInfo(path=dst, size=info.size, tables=info.tables,
                          schema_version=info.schema_version, nsys_version=info.nsys_version,
                          meta=info.meta)
    finally:
        for leftover in (tmp, tmp.with_name(tmp.name + "-journal")):
            leftover.unlink(missing_ok=True)


def import_qdstrm(tool: NsysTool, qdstrm: str | Path, dst: str | Path,
                  timeout: float | None = DEFAULT_TIMEOUT_S) -> Path:
    """Turn an unfinished `.qdstrm` into a `.nsys-rep` at `dst` (never beside the input), atomically.

    QdstrmImporter writes into the `.qdstrm` it imports (2022.4 appends to it on the first import),
    and inputs are never modified, so it imports a private copy made in `dst`'s folder.
    """
    qdstrm, dst = Path(qdstrm), Path(dst)
    if tool.qdstrm_importer is None:
        raise ToolMissingError(qdstrm, f"unfinished report (.qdstrm) and no QdstrmImporter beside nsys "
                                       f"{tool.short_version}; {IMPORTER_HINT}")
    _check_report_readable(qdstrm)
    dst.parent.mkdir(parents=True, exist_ok=True)
    tmp = _temp_named(dst, ".nsys-rep")
    copy = _temp_named(dst, ".qdstrm")
    cmd = [str(tool.qdstrm_importer), "--input-file", str(copy), "--output-file", str(tmp)]
    try:
        try:
            shutil.copyfile(qdstrm, copy)
        except OSError as exc:
            raise VerlprofError(qdstrm, f"cannot copy it into the work dir ({exc.strerror or exc})") from None
        try:
            out = _run_capture(cmd, timeout)
        except subprocess.TimeoutExpired:
            raise VerlprofError(qdstrm, f"QdstrmImporter did not finish within {timeout:.0f} s") from None
        except OSError as exc:
            raise ToolMissingError(tool.qdstrm_importer, f"cannot run it ({exc}); {IMPORTER_HINT}") from None
        text = (out.stdout + "\n" + out.stderr).replace(str(copy), qdstrm.name)
        if out.returncode != 0 or not tmp.is_file() or tmp.stat().st_size == 0:
            raise BadInputError(qdstrm, f"QdstrmImporter could not import it "
                                        f"({_importer_reason(text) or f'exit status {out.returncode}'})")
        os.replace(tmp, dst)
        return dst
    finally:
        tmp.unlink(missing_ok=True)
        copy.unlink(missing_ok=True)


def _temp_named(dst: Path, suffix: str) -> Path:
    """A unique temp name beside `dst` that keeps `suffix` (tools pick formats by extension)."""
    t = temp_sibling(dst)
    return t.with_name(t.name + suffix)


def _check_report_readable(path: Path) -> None:
    """Fail before starting nsys on what it cannot possibly read (clearer than nsys's wording)."""
    require_nonempty_file(path, "the profiled run probably died before nsys wrote it")
    if not os.access(path, os.R_OK):
        raise BadInputError(path, "not readable (permissions)")


# nsys 2022.4-2025 wordings of "this file is damaged" (lower-cased substrings).
_CORRUPT_MARKERS: tuple[str, ...] = (
    "magic number mismatch", "cannot read from stream", "version tag is not found",
    "version tag does not contain", "version tag has not been read", "wrong format",
    "file is corrupted", "corrupt", "truncated", "unexpected end", "readstreamexception",
    "failed to read", "invalid report", "not a valid", "version number is invalid",
)


def explain_nsys_failure(tool: NsysTool, report: Path, output: str, returncode: int) -> VerlprofError:
    """Turn nsys's output (progress bars, multi-line messages) into one actionable error."""
    text = output.replace("\r", "\n")
    low = text.lower()
    if "version not supported" in low or "unsupported version" in low or "unsupportedversion" in low:
        writer = report_writer_version(report)
        if writer is not None and writer[1] > tool.version_tuple:
            return ToolMissingError(report, newer_report_message(writer[0], tool))
        return ToolMissingError(
            report, f"written by an nsys this nsys {tool.version} cannot read (`{_nsys_message(text)}`): install "
                    f"a newer Nsight Systems or point --nsys / {ENV_NSYS} at one")
    if "file not found" in low or "no such file" in low:
        return BadInputError(report, "file not found")
    if any(m in low for m in _CORRUPT_MARKERS) or not _has_report_magic(report):
        return BadInputError(report, f"not a readable Nsight Systems report, truncated or corrupt "
                                     f"(nsys {tool.short_version}: {_nsys_message(text)})")
    return VerlprofError(report, f"`nsys export` failed with exit status {returncode}: "
                                 f"{_nsys_message(text) or 'no message'}")


def _has_report_magic(report: Path) -> bool:
    """Whether the file starts like an Nsight Systems report (used only to explain a failed export:
    nsys's own wording for random bytes varies, "Version number is invalid" among others)."""
    try:
        with open(report, "rb") as f:
            return f.read(6) == b"NVIDIA"
    except OSError:
        return False


# The trailer of a report (nsys 2022.4 to 2025.3 at least) is a protobuf message whose string
# fields 4-7 are the capture time (`2026-12-03T15:25:41`), the host name, the nsys version that
# wrote it (`2025.3.1.0`, `2022.4.2.1-df9881f`) and its build. The time is the anchor found first.
_TRAILER_ANCHOR = re.compile(rb'"\x13\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d')
_TRAILER_VERSION_FIELD = 6


def _varint(blob: bytes, at: int) -> tuple[int, int]:
    """A protobuf varint at `at`: (value, position after it); raises IndexError past the end."""
    value = shift = 0
    while True:
        b = blob[at]
        at += 1
        value |= (b & 0x7F) << shift
        if b < 0x80:
            return value, at
        shift += 7
        if shift > 63:
            raise IndexError("varint too long")


def _trailer_version(blob: bytes) -> str | None:
    """The writer's version string from the report trailer's fields (None when not laid out so)."""
    for m in reversed(list(_TRAILER_ANCHOR.finditer(blob))):
        at = m.start()
        try:
            for _ in range(6):  # time, host, version, build: a few length-delimited fields
                tag, at = _varint(blob, at)
                if tag & 7 != 2:
                    break
                size, at = _varint(blob, at)
                value, at = blob[at:at + size], at + size
                if tag >> 3 == _TRAILER_VERSION_FIELD:
                    text = value.decode("ascii", "replace")
                    return text if parse_version(text) else None
        except IndexError:
            continue
    return None


def report_writer_version(report: Path, tail_bytes: int = 1 << 16) -> tuple[str, tuple[int, int]] | None:
    """Which nsys wrote `report`: ("2025.3.1.0", (2025, 3)), read from the report's trailer.

    Why the trailer, and no guess from other version-looking strings: a report also holds the
    paths of the nsys that recorded it and the environment of the profiled process, whose version
    numbers (an install folder, a CUDA path) say nothing reliable about the file format. None when
    the trailer is not found (an unfinished or foreign file): then nsys itself decides.
    """
    try:
        with open(report, "rb") as f:
            size = os.fstat(f.fileno()).st_size
            end = _trailer_section_end(f, size) or size
            f.seek(max(0, end - tail_bytes))
            blob = f.read(min(end, tail_bytes))
    except OSError:
        return None
    text = _trailer_version(blob)
    return parse_version(text) if text else None


# A report is a container: its last 16 bytes are the directory's offset (8 bytes, little endian)
# and this end mark; the directory lists named sections (name, offset, size). The trailer closes
# the "UI Data" section (nsys 2022.4 and 2025.3 alike); the GPU-metrics "Telemetry" section after
# it can be larger than any fixed tail, so the tail of the file alone misses the trailer there.
_CONTAINER_END = b"U3w[END]"
_TRAILER_SECTION = b"UI Data"


def _trailer_section_end(f: BinaryIO, size: int) -> int | None:
    """Where the section holding the trailer ends, from the container directory (None if not laid out so)."""
    if size < 16:
        return None
    f.seek(size - 16)
    tail = f.read(16)
    if tail[8:] != _CONTAINER_END:
        return None
    directory_at = int.from_bytes(tail[:8], "little")
    if not 0 <= directory_at < size - 16 or size - 16 - directory_at > 1 << 20:
        return None
    f.seek(directory_at)
    directory = f.read(size - 16 - directory_at)
    at = directory.find(bytes([len(_TRAILER_SECTION)]) + _TRAILER_SECTION)
    if at < 0:
        return None
    try:
        at += 1 + len(_TRAILER_SECTION)
        fields: dict[int, int] = {}
        while len(fields) < 2:
            tag, at = _varint(directory, at)
            if tag & 7 != 0:
                return None
            fields[tag >> 3], at = _varint(directory, at)
    except IndexError:
        return None
    offset, length = fields.get(2), fields.get(3)
    if offset is None or length is None or offset + length > size:
        return None
    return offset + length


def check_report_version(tool: NsysTool, report: Path) -> None:
    """Refuse, before running nsys, a report written by a newer nsys than `tool` (nsys reads only
    reports of its own version or older, and says so in words that name no version)."""
    writer = report_writer_version(report)
    if writer is not None and writer[1] > tool.version_tuple:
        raise ToolMissingError(report, newer_report_message(writer[0], tool))


def newer_report_message(writer: str, tool: NsysTool) -> str:
    """One line: which nsys wrote the report, which one is here, and what to do."""
    return (f"written by nsys {writer}, this nsys is {tool.version}: install a newer Nsight Systems "
            f"or point --nsys / {ENV_NSYS} at one")


def _nsys_message(text: str) -> str:
    """The meaningful line of nsys output: an error line if any, progress bars dropped."""
    lines = [ln.strip() for ln in text.replace("\r", "\n").splitlines()]
    lines = [ln for ln in lines if ln and not re.search(r"\[[= ]*\d+%[= ]*\]", ln)]
    for ln in lines:
        if "error" in ln.lower():
            return _shorten(re.sub(r"^\w*\s*error(?: status)?:\s*", "", ln, flags=re.I))
    return _shorten(lines[-1]) if lines else ""


def _importer_reason(text: str) -> str:
    lines = [ln.strip() for ln in text.replace("\r", "\n").splitlines()]
    lines = [ln for ln in lines if ln and not re.search(r"\[[= ]*\d+%[= ]*\]", ln)]
    for ln in lines:
        low = ln.lower()
        if "corrupt" in low or "version" in low or "not supported" in low:
            return _shorten(ln.rstrip("."))
    for ln in lines:
        if ln.startswith("std::exception::what:"):
            return _shorten("truncated or corrupt: " + ln.split(":", 1)[1].strip())
    for ln in lines:
        if "failed" in ln.lower() or "error" in ln.lower():
            return _shorten(ln.split(":")[0])
    return _shorten(lines[-1]) if lines else ""


def _shorten(s: str, limit: int = 200) -> str:
    s = " ".join(s.split())
    return s if len(s) <= limit else s[: limit - 3] + "..."


def _last_line(text: str) -> str:
    return _nsys_message(text)


def _version_key(s: str) -> tuple[int, ...]:
    return tuple(int(x) for x in re.findall(r"\d+", s))


def _run_capture(cmd: list[str], timeout: float | None) -> subprocess.CompletedProcess[str]:
    """Run quietly (all output captured), in its own process group so a timeout kills every child."""
    proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, errors="replace", start_new_session=True)
    try:
        stdout, stderr = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        _kill_group(proc)
        proc.communicate()
        raise
    except BaseException:
        _kill_group(proc)
        proc.wait()
        raise
    return subprocess.CompletedProcess(cmd, proc.returncode, stdout, stderr)


def _kill_group(proc: subprocess.Popen) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        proc.kill()
