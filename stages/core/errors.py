"""One exception type for every user-facing failure, the exit codes, and plain-words reasons.

Why: the standards ask for "a clear, one-line error that names the file and what is wrong". Every
stage raises `VerlprofError(path, what)`; the CLI prints `str(err)` on one line and exits non-zero,
so no traceback ever reaches a user for bad input.

Why the exit codes live here: `collect`, `summarize` and `scrub` are run from post-run hooks and CI,
where the exit code is the only thing a script reads. They share one table (`ExitCode`), and the
errors that end a run carry their code, so `cli.main` needs no knowledge of which command failed.

Why `plain_reason` lives here: per-artifact failures come from many readers and libraries (gzip,
sqlite3, pickle, msgspec) and reach the user as a row of a table and a line of manifest.json. One
place maps their wording to plain words ("gzip stream truncated at 293 KB: the writer was
killed?"), so no row ever shows a bare library message, an exception class or an absolute path.
"""
from __future__ import annotations

import enum
import re
from pathlib import Path
from typing import Any

from . import formats


class ExitCode(enum.IntEnum):
    """What a verlprof command's exit status tells a script (README "Exit codes")."""

    OK = 0         # every input summarized (or scrubbed)
    REFUSED = 1    # `check` found something: nothing was published
    USAGE = 2      # bad usage: a wrong option, a missing SOURCE, an OUT that is not ours
    PARTIAL = 3    # outputs written, but some inputs failed (they are listed); with --strict: nothing written
    NOTHING = 4    # nothing could be summarized: no output published


class VerlprofError(Exception):
    """A problem with an input or the environment, explained in one line."""

    exit_code = int(ExitCode.USAGE)

    def __init__(self, path: str | Path | None, what: str) -> None:
        self.path = str(path) if path is not None else None
        self.what = " ".join(str(what).split())  # force one line
        super().__init__(f"{self.path}: {self.what}" if self.path else self.what)


class BadInputError(VerlprofError):
    """The file exists but is not what it claims to be (truncated, corrupt, wrong schema)."""


class ToolMissingError(VerlprofError):
    """An external tool (nsys) is missing or too old; the message says what to install."""


class RefusedError(VerlprofError):
    """`check` found a possible secret in what was about to be published; nothing was."""

    exit_code = int(ExitCode.REFUSED)


class RunFailedError(VerlprofError):
    """A run that ends without (complete) outputs; `result` keeps what happened, for the table.

    Raised as `NothingSummarizedError` (exit 4) or `IncompleteRunError` (exit 3, `--strict`).
    """

    def __init__(self, path: str | Path | None, what: str, result: Any = None) -> None:
        super().__init__(path, what)
        self.result = result


class NothingSummarizedError(RunFailedError):
    """Not one input could be summarized; no bundle was published."""

    exit_code = int(ExitCode.NOTHING)


class IncompleteRunError(RunFailedError):
    """Some inputs failed and `--strict` asked for all or nothing; no bundle was published."""

    exit_code = int(ExitCode.PARTIAL)


# ------------------------------------------------------------------------------------------------
# Plain-words reasons
# ------------------------------------------------------------------------------------------------


def human_size(n: int | None) -> str:
    """`293 KB`, `4.0 MB`: sizes as the artifact table prints them (1 KB = 1024 bytes)."""
    if n is None:
        return "?"
    if n < 1024:
        return f"{n} bytes"
    value = float(n)
    for unit in ("KB", "MB", "GB", "TB"):
        value /= 1024
        if value < 1024 or unit == "TB":
            return f"{value:.0f} {unit}" if unit == "KB" else f"{value:.1f} {unit}"
    return f"{n} bytes"


def _empty_hint(kind: str | None) -> str:
    """Why a file of this kind is empty, as its format words it (`empty_hints`); "" if unknown."""
    try:
        return formats.for_file_kind(kind).empty_hints.get(str(kind), "") if kind else ""
    except KeyError:
        return ""


# A leading file name the row already shows ("nsight/x.sqlite: ..."), one or more times.
_LEAD_PATH = re.compile(r"^(?:[^\s:]*[/.][^\s:]*:\s+)+")
# Absolute paths inside a message (work-dir copies, temp files): their last part is enough.
_ABS_PATH = re.compile(r"(?<![\w.~])/(?:[^\s/:()'\"]+/)+([^\s/:()'\"]+)")
_EXC_NAME = re.compile(r"\b(?:[A-Z]\w*(?:Error|Exception)|BadGzipFile)\b:?\s*")


def _size_of(m: re.Match[str], group: int) -> str:
    return human_size(int(m.group(group)))


# (pattern, reason): checked in order on the message with its leading path removed. A reason is a
# str (format fields: {size}, {g1}...) or a callable of the match and the file size.
_RULES: list[tuple[re.Pattern[str], Any]] = [
    (re.compile(r"not a gzipped file|BadGzipFile|CRC check failed|invalid (?:block|code|distance|stored)|"
                r"corrupt gzip data", re.I),
     "corrupt gzip data: not a gzip stream, or damaged inside"),
    (re.compile(r"compressed file ended|end-of-stream marker|truncated gzip|truncated or corrupt gzip", re.I),
     lambda m, size: f"gzip stream truncated at {human_size(size)}: the writer was killed?" if size
     else "gzip stream truncated: the writer was killed?"),
    (re.compile(r"trailing garbage after the gzip", re.I),
     "extra bytes after the gzip data (two writes into one file?)"),
    (re.compile(r"traceEvents array is not closed|truncated or malformed JSON after the traceEvents", re.I),
     "trace JSON truncated: the traceEvents list never closes (the writer was killed?)"),
    (re.compile(r"truncated SQLite file \((\d+) bytes, its header says (\d+)\)", re.I),
     lambda m, size: f"SQLite file truncated at {_size_of(m, 1)} of {_size_of(m, 2)}: "
                     "the copy or export was cut short?"),
    (re.compile(r"truncated SQLite file", re.I),
     "SQLite file truncated (shorter than its own header): the copy or export was cut short?"),
    (re.compile(r"database disk image is malformed", re.I),
     "corrupt SQLite database (damaged pages: a partial copy, or a disk error?)"),
    (re.compile(r"file is not a database|not an SQLite database", re.I),
     "not an SQLite database (its header is wrong)"),
    (re.compile(r"refused global ([\w.]+)", re.I),
     lambda m, size: f"refused: a hostile or foreign pickle (loading it would call {m.group(1)}); "
                     "never loaded"),
    (re.compile(r"corrupt or truncated pickle", re.I),
     "truncated or corrupt pickle: the snapshot was cut short?"),
]


def plain_reason(error: BaseException | str, path: str | Path | None = None, size: int | None = None,
                 kind: str | None = None) -> str:
    """One line, in plain words, saying why an artifact could not be used.

    `error` is the exception or the one-line message a task left (`TaskResult.error`); `path`, when
    given, is removed from it (the row already names the file); `size` lets a truncation say where
    the file ends; `kind` (an ArtifactKind value) picks the hint for an empty file. Never returns an
    absolute path, an exception class name or a multi-line text.
    """
    what = error.what if isinstance(error, VerlprofError) else str(error)
    what = " ".join(what.split())
    if path is not None:
        what = what.replace(f"{path}: ", "").replace(str(path), Path(str(path)).name)
    what = _LEAD_PATH.sub("", what)
    # paths inside backticks are a command to type (advice, e.g. where to link nsys's importer): kept
    what = "`".join(part if i % 2 else _ABS_PATH.sub(lambda m: m.group(1), part)
                    for i, part in enumerate(what.split("`")))
    if size == 0 or re.search(r"\bempty file\b|\(0 bytes\)", what, re.I):
        hint = _empty_hint(kind)
        return "empty file (0 bytes)" + (f": {hint}" if hint else "")
    for pattern, reason in _RULES:
        m = pattern.search(what)
        if m:
            return reason(m, size) if callable(reason) else reason
    return _tidy(what)


def _tidy(what: str) -> str:
    """A reader's own message, minus exception class names and stray punctuation; capped."""
    text = _EXC_NAME.sub("", what)
    text = re.sub(r"\(\s*\)", "", text)
    text = re.sub(r"\s+([,;:)])", r"\1", text)
    text = re.sub(r"[.:;,]+\)", ")", text)
    text = re.sub(r"^[\s:;,.'\"-]+|[\s:;,('\"-]+$", "", text)
    text = " ".join(text.split())
    if not re.search(r"[A-Za-z]{3,}\s+[A-Za-z]{2,}", text):   # no words: a bare library value ('ts', 42)
        shown = cut_at_word(what.strip(), 60) or "no message"
        return f"could not read it: unexpected data ({shown}); please report this as a verlprof bug"
    return text if len(text) <= REASON_CAP else _cut(text)


#: A reason longer than this is cut. verlprof's own advice (what to install, which option to pass:
#: nsys's install hint is ~400 characters) fits whole; only a foreign dump is ever cut.
REASON_CAP = 480


def _cut(text: str) -> str:
    """`text` in REASON_CAP characters: whole clauses (up to a `; `) when there are any, so a piece
    of advice is never cut in its middle; else a hard cut marked with `…`."""
    head = text[:REASON_CAP]
    at = head.rfind("; ")
    if at >= REASON_CAP // 2:
        return head[:at] + "; …"
    return cut_at_word(text, REASON_CAP)


def cut_at_word(text: str, limit: int) -> str:
    """`text` in at most `limit` characters, cut after a whole word and marked with `…` (never
    `kernel wi`); a first word longer than `limit` is cut hard."""
    if len(text) <= limit:
        return text
    head = text[:limit - 1]
    if text[limit - 1] != " " and " " in head:
        head = head.rsplit(" ", 1)[0]
    return head.rstrip(" ,;:(") + "…"
