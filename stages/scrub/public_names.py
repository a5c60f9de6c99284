"""The corpus of public strings: names a public package's own source writes (issue 39).

Why: a user-written string (an NVTX range, a thread name, a record_function label) may leave a
bundle as it is only when a public source writes the same WHOLE string, so a person's name, a
handle or a project can never ride along inside a name made of ordinary words. The corpus is built
from the packages themselves by `tools/build_public_names.py` (their wheels and sdists, walked with
`ast`, never imported) and shipped compressed beside this module (`public_names.txt.gz`).

A string is public when it is in the corpus exactly, or when it is an instance of one of the
corpus's templates: an f-string / %-format / .format call of a public source whose holes are typed:

- `{int}` matches ASCII digits only (a rank, a step, an index);
- `{float}` matches a decimal number only;
- `{numlist}` matches brackets, parentheses, digits, commas and blanks only (emit_nvtx's sizes);
- `{=NAME}` matches exactly one of the literals of set NAME (e.g. the role names verl passes; the
  set `classes` holds every class name the packages define, for `<class>Backward` and the like);
- `{public}` matches a string that is itself public (checked again, at most _MAX_DEPTH deep): torch
  wraps names it wrote elsewhere (`autograd::engine::evaluate_function: X`, emit_nvtx's
  `X, seq = N, op_id = N`, Kineto's `thread N (X)`).

No hole ever matches free text: a hole that takes any text would let a person's name through.

File format (UTF-8 text, gzip, one entry a line, sorted by the builder so builds are byte-equal):

    # verlprof-public-names/1 torch==2.13.0 verl==0.9.1 ...     header: format + package pins
    = NAME<TAB>value<TAB>value...                                a set of literals for {=NAME}
    @ verl 0.9.1                                                 the source of the entries below
    s update_actor                                               an exact string
    t timing_s/{=role}                                           a template

In entry texts `\\`, newline, CR and TAB are written `\\\\`, `\\n`, `\\r`, `\\t`; in templates a
literal brace is doubled (`{{`, `}}`) as in str.format.

Speed: exact strings are one dict lookup; templates are bucketed by the first `_PREFIX` characters
of their literal prefix (a template that starts with a set hole is expanded into one prefix per
value), each bucket one compiled alternation tried with `fullmatch`. A lookup costs at most
`_PREFIX + 1` dict probes and the regexes of those buckets; a set of more than _INLINE_SET values
and a `{public}` hole are matched as a token, then looked up (bench/bench_public_names.py measures).
"""
from __future__ import annotations

import gzip
import re
import threading
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

CORPUS_FILE: Path = Path(__file__).with_name("public_names.txt.gz")
FORMAT = "verlprof-public-names/1"

# Typed holes: what each may match. Never `.*`: see the module docstring.
HOLE_PATTERNS: dict[str, str] = {
    "int": r"[0-9]+",
    "float": r"-?[0-9]+(?:\.[0-9]+)?(?:[eE][-+]?[0-9]+)?",
    # torch's emit_nvtx sizes and input_op_ids: brackets, parentheses, digits, commas, blanks only.
    "numlist": r"\[[\[\]()0-9, ]*\]",
}
_PREFIX = 4
_INLINE_SET = 64  # larger sets are matched as a token and then looked up (a 40k-way regex is slow)
_MAX_DEPTH = 2  # {public} inside {public}: autograd::engine::evaluate_function: X, op_id = N
_HOLE = re.compile(r"\{\{|\}\}|\{(=[^{}\t]+|int|float|numlist|public)\}|[{}]")
_ESCAPES = {"\\\\": "\\", "\\n": "\n", "\\r": "\r", "\\t": "\t"}
_UNESCAPE = re.compile(r"\\[\\nrt]")


def escape_text(text: str) -> str:
    """How an entry's text is written on one line of the corpus file."""
    return text.replace("\\", "\\\\").replace("\n", "\\n").replace("\r", "\\r").replace("\t", "\\t")


def unescape_text(line: str) -> str:
    """The inverse of escape_text."""
    return _UNESCAPE.sub(lambda m: _ESCAPES[m.group(0)], line) if "\\" in line else line


def template_parts(template: str) -> list[tuple[str, str]]:
    """A template as [("lit", text) | ("hole", "int"|"float"|"=NAME")], braces undoubled.

    Raises ValueError for a lone brace or an unknown hole: the builder writes only valid templates,
    so a bad one means a damaged or hand-edited file.
    """
    parts: list[tuple[str, str]] = []
    lit: list[str] = []
    pos = 0
    for m in _HOLE.finditer(template):
        lit.append(template[pos:m.start()])
        tok = m.group(0)
        if tok in ("{{", "}}"):
            lit.append(tok[0])
        elif m.group(1):
            if lit and "".join(lit):
                parts.append(("lit", "".join(lit)))
            lit = []
            parts.append(("hole", m.group(1)))
        else:
            raise ValueError(f"lone brace at {m.start()} in template {template!r}")
        pos = m.end()
    lit.append(template[pos:])
    if "".join(lit):
        parts.append(("lit", "".join(lit)))
    return parts


@dataclass(frozen=True)
class _Bucket:
    """Templates sharing a literal prefix: one alternation for those a regex decides alone, and the
    checked ones (a large-set or {public} hole), each tried by itself and verified after a match."""
    plain: re.Pattern[str] | None
    # (template index, regex, a literal the string must contain, [(group, set name | "public")])
    checked: tuple[tuple[int, re.Pattern[str], str, tuple[tuple[str, str], ...]], ...]


@dataclass(frozen=True)
class _Template:
    template: str
    source: int


class PublicNames:
    """The shipped corpus, loaded on first use (so a pickled reference to it costs nothing)."""

    def __init__(self, path: Path | None = None) -> None:
        self.path = Path(path) if path is not None else CORPUS_FILE
        self._lock = threading.Lock()
        self._loaded = False
        self._version = ""
        self._sources: list[str] = []
        self._exact: dict[str, int] = {}
        self._sets: dict[str, tuple[str, ...]] = {}
        self._templates: list[_Template] = []
        self._buckets: dict[str, _Bucket] = {}
        self._big_sets: dict[str, frozenset[str]] = {}
        self._set_chars: dict[str, str] = {}

    # Pickling ships the path only: each worker loads (lazily) its own copy.
    def __reduce__(self):
        return (_for_path, (str(self.path),))

    @property
    def version(self) -> str:
        """The corpus's header: its format and the package versions it was built from."""
        self._load()
        return self._version

    @property
    def strings(self) -> int:
        """How many distinct exact strings the corpus holds."""
        self._load()
        return len(self._exact)

    @property
    def templates(self) -> int:
        """How many templates the corpus holds."""
        self._load()
        return len(self._templates)

    def is_public(self, text: str) -> bool:
        """True when a public source writes the WHOLE string: exactly, or as a template instance."""
        return self._source_index(text) is not None

    __contains__ = is_public

    def source_of(self, text: str) -> str | None:
        """Which package writes `text` (e.g. "verl 0.9.1"), or None when no public source does."""
        i = self._source_index(text)
        return None if i is None else self._sources[i]

    def _source_index(self, text: str, depth: int = 0) -> int | None:
        if not self._loaded:
            self._load()
        i = self._exact.get(text)
        if i is not None:
            return i
        buckets = self._buckets
        for n in range(min(len(text), _PREFIX) + 1):
            bucket = buckets.get(text[:n])
            if bucket is None:
                continue
            if bucket.plain is not None:
                m = bucket.plain.fullmatch(text)
                if m is not None:
                    return self._templates[int(m.lastgroup[1:])].source
            for idx, rx, needle, checks in bucket.checked:
                if needle in text:
                    m = rx.fullmatch(text)
                    if m is not None and self._checks_pass(m, checks, depth):
                        return self._templates[idx].source
        return None

    def _checks_pass(self, m: re.Match[str], checks: list[tuple[str, str]], depth: int) -> bool:
        """Large-set and {public} holes: the captured token must be a member / a public string."""
        for group, what in checks:
            value = m.group(group)
            if what == "public":
                if depth >= _MAX_DEPTH or self._source_index(value, depth + 1) is None:
                    return False
            elif value not in self._big_sets[what]:
                return False
        return True

    # ---- loading -------------------------------------------------------------------------------
    def _load(self) -> None:
        if self._loaded:
            return
        with self._lock:
            if self._loaded:
                return
            try:
                with gzip.open(self.path, "rt", encoding="utf-8", newline="\n") as f:
                    self._parse(f)
            except (OSError, EOFError, ValueError, UnicodeDecodeError) as e:
                raise ValueError(f"{self.path}: not a public-names corpus ({e})") from None
            self._compile()
            self._loaded = True

    def _parse(self, lines) -> None:
        source = -1
        for lineno, raw in enumerate(lines, 1):
            line = raw[:-1] if raw.endswith("\n") else raw
            if lineno == 1:
                if not line.startswith("# " + FORMAT):
                    raise ValueError(f"first line is not a '# {FORMAT}' header")
                self._version = line[2:]
                continue
            if not line or line.startswith("#"):
                continue
            kind, body = line[:2], line[2:]
            if kind == "@ ":
                self._sources.append(body)
                source = len(self._sources) - 1
            elif kind == "= ":
                name, *values = body.split("\t")
                self._sets[name] = tuple(unescape_text(v) for v in values)
            elif source < 0:
                raise ValueError(f"line {lineno}: an entry before any '@ source' line")
            elif kind == "s ":
                self._exact.setdefault(unescape_text(body), source)
            elif kind == "t ":
                self._templates.append(_Template(unescape_text(body), source))
            else:
                raise ValueError(f"line {lineno}: unknown entry kind {kind!r}")

    def _compile(self) -> None:
        """Group templates by literal prefix; each group becomes one alternation regex."""
        self._big_sets = {k: frozenset(v) for k, v in self._sets.items() if len(v) > _INLINE_SET}
        groups: dict[str, dict[int, list[str]]] = {}
        bodies: dict[int, tuple[str, list[tuple[str, str]], str]] = {}
        for idx, t in enumerate(self._templates):
            parts = template_parts(t.template)
            heads = [""]
            if parts and parts[0][0] == "hole" and parts[0][1].startswith("=") \
                    and parts[0][1][1:] not in self._big_sets:
                heads = list(self._set(parts[0][1][1:]))
                parts = parts[1:]
            checks: list[tuple[str, str]] = []
            body = "".join(self._part_regex(idx, k, kind, val, checks) for k, (kind, val) in enumerate(parts))
            literals = [val for kind, val in parts if kind == "lit"]
            bodies[idx] = (body, checks, max(literals, key=len) if literals else "")
            tail = parts[0][1] if parts and parts[0][0] == "lit" else ""
            for head in heads:
                groups.setdefault((head + tail)[:_PREFIX], {}).setdefault(idx, []).append(head)
        self._buckets = {}
        for key, members in groups.items():
            alts, checked = [], []
            for idx, heads in members.items():
                body, checks, needle = bodies[idx]
                head_rx = "|".join(re.escape(h) for h in sorted(heads, key=len, reverse=True))
                rx = (f"(?:{head_rx})" if head_rx else "") + body
                if checks:
                    checked.append((idx, re.compile(rx), needle, tuple(checks)))
                else:
                    alts.append(f"(?P<t{idx}>{rx})")
            self._buckets[key] = _Bucket(re.compile("|".join(alts)) if alts else None, tuple(checked))

    def _part_regex(self, idx: int, k: int, kind: str, val: str, checks: list[tuple[str, str]]) -> str:
        if kind == "lit":
            return re.escape(val)
        if val == "public":
            checks.append((f"h{idx}_{k}", "public"))
            return f"(?P<h{idx}_{k}>.+?)"
        if val.startswith("="):
            name = val[1:]
            values = self._set(name)
            if name in self._big_sets:
                chars = self._set_chars.get(name)
                if chars is None:  # once per set: the classes set is 34k names
                    chars = self._set_chars[name] = "".join(sorted(set("".join(values))))
                checks.append((f"h{idx}_{k}", name))
                return f"(?P<h{idx}_{k}>[{re.escape(chars)}]+?)"
            return "(?:" + "|".join(re.escape(v) for v in sorted(values, key=len, reverse=True)) + ")"
        return "(?:" + HOLE_PATTERNS[val] + ")"

    def _set(self, name: str) -> tuple[str, ...]:
        try:
            return self._sets[name]
        except KeyError:
            raise ValueError(f"template uses undefined set {name!r}") from None


@lru_cache(maxsize=None)
def _for_path(path: str) -> PublicNames:
    return PublicNames(Path(path)) if Path(path) != CORPUS_FILE else public_names()


@lru_cache(maxsize=1)
def public_names() -> PublicNames:
    """The process-wide corpus instance (loaded on first lookup, once per process)."""
    return PublicNames()
