"""Read the Hydra overrides a verl launch script passes, without running it.

verl's recipes are bash scripts: variables with defaults (``X=${X:-8}``), arrays of overrides
(``ACTOR=( a=1 b="$X" )`` expanded with ``"${ACTOR[@]}"``), ``\\`` continuations, quoted lists
(``data.train_files="['$A', '$B']"``) and a trailing ``"$@"`` for extra overrides. Running the
script to see its argv would run whatever else it does (``$(python3 -c ...)``, downloads, ``ray
start``), so the script is read statically: a small tokenizer that knows bash quoting, and an
expander that knows only what the script itself assigns. A variable the script does not assign (or
assigns inside an ``if``/``case``/loop, or from a command's output) is *unknown*: its place in a word
is kept as an OmegaConf interpolation ``${NAME}`` (which Hydra accepts without judging the value)
and the word records the name, so the doctor says which values it could not see rather than
guessing them. ``${X:-default}`` with ``X`` unassigned takes the default, as bash does when the
caller does not export ``X``.
"""
from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from ..core.errors import BadInputError

# ----------------------------------------------------------------------------------------------
# tokens: a word is a list of parts; expansion happens later, with the variables known by then
# ----------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Lit:
    text: str
    quoted: bool  # inside "..." or '...' (no word splitting)


@dataclass(frozen=True)
class Var:
    name: str  # NAME, or "@" / "*" for the script's arguments
    quoted: bool
    op: str = ""  # "", ":-", "-", ":=", "=", ":+", "+", or "[@]" for arrays
    default: tuple = ()  # parts of the word after the operator


@dataclass(frozen=True)
class Cmd:
    text: str  # $(...) or `...`: never run
    quoted: bool


Part = Lit | Var | Cmd


@dataclass
class Token:
    kind: str  # "word", "sep" (newline ; & && || |), "(", ")"
    parts: list = field(default_factory=list)
    raw: str = ""
    line: int = 0


_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_OPS = (":-", ":=", ":+", ":?", "-", "=", "+", "?")


def _read_braced(text: str, i: int) -> tuple[str, int]:
    """The inside of ``${...}`` starting at ``i`` (just after ``${``), nesting aware; returns (inside, end)."""
    depth, j = 1, i
    while j < len(text):
        if text.startswith("${", j):
            depth += 1
            j += 2
            continue
        if text[j] == "}":
            depth -= 1
            if depth == 0:
                return text[i:j], j + 1
        j += 1
    raise ValueError("unterminated ${")


def _read_paren(text: str, i: int) -> tuple[str, int]:
    """The inside of ``$( ... )`` starting at ``i`` (just after ``$(``)."""
    depth, j, quote = 1, i, None
    while j < len(text):
        ch = text[j]
        if quote:
            if ch == quote:
                quote = None
        elif ch in "'\"":
            quote = ch
        elif ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
            if depth == 0:
                return text[i:j], j + 1
        j += 1
    raise ValueError("unterminated $(")


def _dollar(text: str, i: int, quoted: bool) -> tuple[Part | None, int]:
    """Parse an expansion at ``text[i] == '$'``; (None, i+1) for a literal dollar."""
    nxt = text[i + 1] if i + 1 < len(text) else ""
    if nxt == "(":
        if text.startswith("$((", i):  # arithmetic: unknown value
            inside, end = _read_paren(text, i + 2)
            return Cmd(inside, quoted), end
        inside, end = _read_paren(text, i + 2)
        return Cmd(inside, quoted), end
    if nxt == "{":
        inside, end = _read_braced(text, i + 2)
        m = _NAME.match(inside) or re.match(r"[@*#?]", inside)
        if not m:
            return Cmd("${" + inside + "}", quoted), end
        name, rest = m.group(0), inside[m.end():]
        if rest in ("[@]", "[*]"):
            return Var(name, quoted, "[@]"), end
        if not rest:
            return Var(name, quoted), end
        for op in _OPS:
            if rest.startswith(op):
                return Var(name, quoted, op, tuple(_parts(rest[len(op):], quoted))), end
        return Cmd("${" + inside + "}", quoted), end  # ${X#pre}, ${X/a/b}, ${#X}: not modelled
    m = _NAME.match(text, i + 1)
    if m:
        return Var(m.group(0), quoted), m.end()
    if nxt in "@*":
        return Var(nxt, quoted), i + 2
    if nxt and nxt in "#?$!0123456789-":
        return Cmd("$" + nxt, quoted), i + 2
    return None, i + 1


def _parts(text: str, quoted: bool) -> list[Part]:
    """Parts of a default value (``${X:-this}``), read as inside double quotes when ``quoted``."""
    out: list[Part] = []
    buf: list[str] = []
    i = 0
    while i < len(text):
        ch = text[i]
        if ch == "$":
            part, j = _dollar(text, i, quoted)
            if part is not None:
                if buf:
                    out.append(Lit("".join(buf), quoted))
                    buf = []
                out.append(part)
                i = j
                continue
        if ch == "\\" and i + 1 < len(text):
            buf.append(text[i + 1])
            i += 2
            continue
        if not quoted and ch in "'\"":
            end = text.find(ch, i + 1)
            end = len(text) if end < 0 else end
            if ch == "'":
                out.extend([Lit("".join(buf), False), Lit(text[i + 1:end], True)] if buf else [Lit(text[i + 1:end], True)])
                buf = []
            else:
                if buf:
                    out.append(Lit("".join(buf), False))
                    buf = []
                out.extend(_parts(text[i + 1:end], True))
            i = end + 1
            continue
        buf.append(ch)
        i += 1
    if buf:
        out.append(Lit("".join(buf), quoted))
    return out


def tokenize(text: str) -> list[Token]:
    """Bash words and separators: quotes, ``\\``-newline, comments, ``$``-expansions kept as parts."""
    toks: list[Token] = []
    i, line, n = 0, 1, len(text)
    cur: Token | None = None

    def flush() -> None:
        nonlocal cur
        if cur is not None and (cur.parts or cur.raw):
            toks.append(cur)
        cur = None

    def start() -> Token:
        nonlocal cur
        if cur is None:
            cur = Token("word", [], "", line)
        return cur

    while i < n:
        ch = text[i]
        if ch == "\\" and i + 1 < n and text[i + 1] == "\n":
            i += 2
            line += 1
            continue
        if ch in " \t\r":
            flush()
            i += 1
            continue
        if ch == "#" and cur is None:
            while i < n and text[i] != "\n":
                i += 1
            continue
        if ch == "\n" or ch == ";" or ch in "&|":
            flush()
            j = i + 1
            if ch in "&|" and j < n and text[j] == ch:
                j += 1
            toks.append(Token("sep", [], text[i:j], line))
            if ch == "\n":
                line += 1
            i = j
            continue
        if ch in "()" and cur is None:
            toks.append(Token(ch, [], ch, line))
            i += 1
            continue
        if ch in "()" and cur is not None and ch == ")":
            flush()
            toks.append(Token(ch, [], ch, line))
            i += 1
            continue
        tok = start()
        if ch == "'":
            end = text.find("'", i + 1)
            if end < 0:
                raise ValueError(f"line {line}: unterminated single quote")
            tok.parts.append(Lit(text[i + 1:end], True))
            tok.raw += text[i:end + 1]
            line += text.count("\n", i, end)
            i = end + 1
            continue
        if ch == '"':
            j, buf = i + 1, []
            while j < n and text[j] != '"':
                if text[j] == "\\" and j + 1 < n and text[j + 1] in '"\\$`\n':
                    if text[j + 1] != "\n":
                        buf.append(text[j + 1])
                    j += 2
                    continue
                if text[j] == "$":
                    part, k = _dollar(text, j, True)
                    if part is not None:
                        if buf:
                            tok.parts.append(Lit("".join(buf), True))
                            buf = []
                        tok.parts.append(part)
                        j = k
                        continue
                if text[j] == "`":
                    end = text.find("`", j + 1)
                    if buf:
                        tok.parts.append(Lit("".join(buf), True))
                        buf = []
                    tok.parts.append(Cmd(text[j + 1:end], True))
                    j = end + 1
                    continue
                buf.append(text[j])
                j += 1
            if j >= n:
                raise ValueError(f"line {line}: unterminated double quote")
            if buf or not tok.parts:
                tok.parts.append(Lit("".join(buf), True))
            tok.raw += text[i:j + 1]
            line += text.count("\n", i, j)
            i = j + 1
            continue
        if ch == "$":
            part, j = _dollar(text, i, False)
            if part is not None:
                tok.parts.append(part)
                tok.raw += text[i:j]
                i = j
                continue
        if ch == "`":
            end = text.find("`", i + 1)
            tok.parts.append(Cmd(text[i + 1:end], False))
            tok.raw += text[i:end + 1]
            i = end + 1
            continue
        if ch == "\\" and i + 1 < n:
            tok.parts.append(Lit(text[i + 1], True))
            tok.raw += text[i:i + 2]
            i += 2
            continue
        if ch == "(" and tok.raw.endswith("="):  # NAME=( ... ): the array opens
            tok.raw += "("
            flush()
            toks.append(Token("(", [], "(", line))
            i += 1
            continue
        tok.parts.append(Lit(ch, False))
        tok.raw += ch
        i += 1
    flush()
    return toks


# ----------------------------------------------------------------------------------------------
# expansion with what the script itself assigns
# ----------------------------------------------------------------------------------------------

UNKNOWN = None  # a variable whose value the script does not determine


@dataclass
class Env:
    """Variables as the script assigns them, top to bottom: str, list of Word (arrays) or UNKNOWN."""

    values: dict = field(default_factory=dict)
    # why a variable is UNKNOWN: the pieces it was built from ("$HOME", "$(date ...)", "if-branch")
    why: dict = field(default_factory=dict)
    args: tuple[str, ...] = ()  # what "$@" expands to (extra words the user would pass)


@dataclass(frozen=True)
class Word:
    """One argument the script passes, as far as can be known."""

    text: str  # unknown pieces appear as ${NAME} (OmegaConf interpolation syntax)
    unknown: tuple[str, ...] = ()  # "$NAME" / "$(...)" pieces whose value the script does not set
    line: int = 0


def _expand_parts(parts: Sequence[Part], env: Env) -> tuple[list[list[tuple[str, bool]]], list[str]]:
    """Fields (each a list of (text, splittable) chunks) and unknown names, before word splitting."""
    fields: list[list[tuple[str, bool]]] = [[]]
    unknown: list[str] = []
    for p in parts:
        if isinstance(p, Lit):
            fields[-1].append((p.text, False))
        elif isinstance(p, Cmd):
            name = "cmd"
            unknown.append(f"$({p.text.strip()[:40]})" if not p.text.startswith("${") else p.text)
            fields[-1].append(("${" + name + "}", False))
        else:
            if p.name in "@*":
                args = list(env.args)
                if p.quoted and p.name == "@":
                    if not args:
                        if fields == [[]]:
                            fields = []
                        continue
                    fields[-1].append((args[0], False))
                    for a in args[1:]:
                        fields.append([(a, False)])
                else:
                    fields[-1].append((" ".join(args), not p.quoted))
                continue
            val = env.values.get(p.name, "__unset__")
            if p.op == "[@]":
                if isinstance(val, list):
                    for w in val:
                        unknown.extend(w.unknown)
                    if p.quoted:
                        if not val:
                            if fields == [[]]:
                                fields = []
                            continue
                        fields[-1].append((val[0].text, False))
                        for a in val[1:]:
                            fields.append([(a.text, False)])
                    else:
                        fields[-1].append((" ".join(w.text for w in val), True))
                    continue
                val = val if isinstance(val, str) else ("__unset__" if val == "__unset__" else UNKNOWN)
            if isinstance(val, list):
                unknown.extend(val[0].unknown if val else ())
                val = val[0].text if val else ""
            unset = val == "__unset__"
            empty = unset or val == ""
            if p.op in (":-", "-", ":=", "="):
                use_default = empty if p.op.startswith(":") else unset
                if use_default:
                    sub, unk = _expand_parts(p.default, env)
                    unknown.extend(unk)
                    text = " ".join("".join(t for t, _ in f) for f in sub)
                    if p.op in (":=", "="):
                        env.values[p.name] = text if not unk else UNKNOWN
                        if unk:
                            env.why[p.name] = tuple(unk)
                    fields[-1].append((text, not p.quoted))
                    continue
            elif p.op in (":+", "+"):
                if (empty if p.op == ":+" else unset) or val is UNKNOWN:
                    if val is UNKNOWN:
                        unknown.append("$" + p.name)
                        fields[-1].append(("${" + p.name + "}", False))
                    continue
                sub, unk = _expand_parts(p.default, env)
                unknown.extend(unk)
                fields[-1].append((" ".join("".join(t for t, _ in f) for f in sub), not p.quoted))
                continue
            if unset or val is UNKNOWN:
                unknown.append("$" + p.name)
                fields[-1].append(("${" + p.name + "}", False))
            else:
                fields[-1].append((val, not p.quoted))
    return fields, unknown


def expand_word(tok: Token, env: Env) -> list[Word]:
    """The words one token becomes (unquoted expansions split on blanks, quoted arrays per element)."""
    fields, unknown = _expand_parts(tok.parts, env)
    words: list[str] = []
    for f in fields:
        cur: list[str] = []
        started = False
        for text, split in f:
            if not split:
                cur.append(text)
                started = True
                continue
            pieces = re.split(r"[ \t\n]+", text)
            for k, piece in enumerate(pieces):
                if k > 0 and (started or "".join(cur)):
                    words.append("".join(cur))
                    cur, started = [], False
                if piece:
                    cur.append(piece)
                    started = True
        if started or "".join(cur):
            words.append("".join(cur))
    unk = tuple(dict.fromkeys(unknown))
    return [Word(w, tuple(u for u in unk if _mentions(w, u)), tok.line) for w in words]


def _mentions(word: str, unknown: str) -> bool:
    if unknown.startswith("$("):
        return "${cmd}" in word
    if unknown.startswith("${"):
        return "${cmd}" in word
    return "${" + unknown[1:] + "}" in word


# ----------------------------------------------------------------------------------------------
# statements: assignments, arrays, and the launch line
# ----------------------------------------------------------------------------------------------

_LAUNCHERS = {"python", "python3", "torchrun", "uv", "run", "ray", "job", "submit"}
_ASSIGN = re.compile(r"^([A-Za-z_][A-Za-z0-9_]*)(\+?)=")
_OPENERS = {"if", "case", "for", "while", "until", "select", "{"}
_CLOSERS = {"fi", "esac", "done", "}"}
_DECLARE = {"export", "local", "declare", "readonly", "typeset"}


@dataclass(frozen=True)
class LaunchLine:
    """The trainer command a script runs: where it is, what it launches, the words it passes."""

    script: str
    line: int
    entrypoint: str | None  # module (-m x) or script path (x.py)
    words: tuple[Word, ...]  # the words after the entrypoint (overrides, --config-name, ...)
    config_name: str | None = None
    config_path: str | None = None
    others: int = 0  # further trainer launches in the same script (not checked)
    # for each unknown "$NAME" a word mentions: what made it unknown ($HOME, $(date ...), a branch)
    why: dict = field(default_factory=dict)


def _statements(toks: list[Token]) -> Iterable[list[Token]]:
    stmt: list[Token] = []
    depth = 0  # inside NAME=( ... )
    for t in toks:
        if t.kind == "(":
            depth += 1
        elif t.kind == ")":
            depth = max(0, depth - 1)
        if t.kind == "sep" and depth == 0:
            if stmt:
                yield stmt
            stmt = []
            continue
        if t.kind == "sep":
            continue  # newlines inside an array body
        stmt.append(t)
    if stmt:
        yield stmt


def _assignment_value(tok: Token) -> tuple[str, bool, list[Part]]:
    """(name, append, value parts) of a NAME=value token."""
    m = _ASSIGN.match(tok.raw)
    assert m
    name, plus = m.group(1), m.group(2)
    # drop the literal 'NAME=' / 'NAME+=' from the first parts
    skip = len(m.group(0))
    parts: list[Part] = []
    for p in tok.parts:
        if skip > 0 and isinstance(p, Lit) and not p.quoted:
            take = min(skip, len(p.text))
            skip -= take
            rest = p.text[take:]
            if rest:
                parts.append(Lit(rest, False))
            continue
        parts.append(p)
    return name, bool(plus), parts


def _is_launcher(words: list[str]) -> int | None:
    """Index of the word naming the trainer (the module after -m, or a main*.py), else None."""
    for k, w in enumerate(words):
        if w == "-m" and k + 1 < len(words):
            mod = words[k + 1]
            if mod.startswith(("verl", "recipe.", "main_")) or ".main_" in mod:
                return k + 1
        if w.endswith(".py") and ("main" in w.rsplit("/", 1)[-1] or "trainer" in w.rsplit("/", 1)[-1]):
            return k
    return None


def _split_flags(rest: list) -> tuple[str | None, str | None, list]:
    """Take Hydra's ``--config-name``/``-cn`` and ``--config-path``/``-cp`` out of the words."""
    config_name = config_path = None
    kept = []
    i = 0
    while i < len(rest):
        w = rest[i].text if isinstance(rest[i], Word) else rest[i]
        for flag, short in (("--config-name", "-cn"), ("--config-path", "-cp")):
            if w in (flag, short) and i + 1 < len(rest):
                val = rest[i + 1].text if isinstance(rest[i + 1], Word) else rest[i + 1]
                i += 1
                break
            if w.startswith(flag + "="):
                val = w.split("=", 1)[1]
                break
        else:
            kept.append(rest[i])
            i += 1
            continue
        if flag == "--config-name":
            config_name = val
        else:
            config_path = val
        i += 1
    return config_name, config_path, kept


def split_launch_words(words: Sequence[str]) -> tuple[str | None, str | None, str | None, list[str]]:
    """(entrypoint, config_name, config_path, override words) of a launch line given as words.

    ``python3 -m verl.trainer.main_ppo --config-name=x a=1``: what follows the entrypoint; without
    one, every word that is not a flag (``-x``/``--x``) is an override word.
    """
    words = list(words)
    at = _is_launcher(words)
    entrypoint = words[at] if at is not None else None
    rest = words[at + 1:] if at is not None else words
    config_name, config_path, kept = _split_flags(rest)
    if at is None:
        kept = [w for w in kept if w.rsplit("/", 1)[-1] not in _LAUNCHERS]
    return entrypoint, config_name, config_path, [w for w in kept if not w.startswith("-")]


def read_launch_text(text: str, script: str = "<script>", args: Sequence[str] = ()) -> LaunchLine:
    """The trainer launch of a bash script's text (see the module docstring for what is known)."""
    try:
        toks = tokenize(text)
    except ValueError as e:
        raise BadInputError(script, f"cannot read it as a shell script: {e}") from None
    env = Env(values={}, args=tuple(args))
    depth = 0
    launches: list[LaunchLine] = []
    for stmt in _statements(toks):
        head = stmt[0].raw if stmt[0].kind == "word" else ""
        for t in stmt:
            if t.kind == "word" and t.raw in _OPENERS:
                depth += 1
            elif t.kind == "word" and t.raw in _CLOSERS:
                depth = max(0, depth - 1)
        k = 1 if head in _DECLARE else 0
        if k < len(stmt) and stmt[k].kind == "word" and _ASSIGN.match(stmt[k].raw):
            # NAME=value [NAME2=value ...] or NAME=( words )
            i = k
            while i < len(stmt):
                t = stmt[i]
                if t.kind != "word" or not _ASSIGN.match(t.raw):
                    break
                name, append, parts = _assignment_value(t)
                if i + 1 < len(stmt) and stmt[i + 1].kind == "(":
                    j = i + 2
                    items: list[Word] = []
                    while j < len(stmt) and stmt[j].kind != ")":
                        items.extend(expand_word(stmt[j], env))
                        j += 1
                    old = env.values.get(name)
                    base = old if append and isinstance(old, list) else []
                    env.values[name] = UNKNOWN if depth else base + items
                    if depth:
                        env.why[name] = ("set inside if/case/loop",)
                    i = j + 1
                    continue
                ws = expand_word(Token("word", parts, "", t.line), env)
                value = " ".join(w.text for w in ws)
                unknown = any(w.unknown for w in ws)
                if append and isinstance(env.values.get(name), str):
                    value = env.values[name] + value
                env.values[name] = UNKNOWN if (depth or unknown) else value
                if depth or unknown:
                    env.why[name] = tuple(dict.fromkeys(
                        u for w in ws for u in w.unknown)) or ("set inside if/case/loop",)
                i += 1
            if i >= len(stmt):
                continue
            stmt = stmt[i:]  # VAR=x command ...: the command follows
        words: list[Word] = []
        for t in stmt:
            if t.kind == "word":
                words.extend(expand_word(t, env))
        texts = [w.text for w in words]
        at = _is_launcher(texts)
        if at is None:
            continue
        config_name, config_path, kept = _split_flags(list(words[at + 1:]))
        why = {f"${n}": r for n, r in env.why.items()}
        launches.append(LaunchLine(script, stmt[0].line, texts[at], tuple(kept), config_name, config_path,
                                   why=why))
    if not launches:
        raise BadInputError(script, "runs no verl trainer (no `python3 -m verl...` or main*.py line found)")
    first = launches[0]
    return LaunchLine(first.script, first.line, first.entrypoint, first.words, first.config_name,
                      first.config_path, others=len(launches) - 1, why=first.why)


def read_launch_script(path: str, args: Sequence[str] = ()) -> LaunchLine:
    """``read_launch_text`` of a file; ``args`` are what its ``"$@"`` stands for."""
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            text = f.read()
    except OSError as e:
        raise BadInputError(path, f"cannot read it: {e.strerror or e}") from None
    return read_launch_text(text, path, args)
