"""Bash words without running bash: quoting, ``\\``-newlines, comments, and ``$`` expansions.

`tokenize` turns script text into words and separators, keeping each ``$NAME``, ``${NAME:-x}``,
``${ARR[@]}``, ``"$@"`` and ``$(...)`` as a part of its word; `expand_word` expands a word with the
variables known at that point (`Env`). Nothing is executed: a ``$(...)`` or a variable the script
does not set stays unknown, written as the OmegaConf interpolation ``${NAME}`` (``${cmd}`` for a
command) and listed in `Word.unknown`. `launch_script` reads statements and the launch line on top.
"""
from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field

from .config_tree import braced_end

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
    kind: str  # "word", "sep" (newline ; & && || |), "redir" (> 2>& <), "(", ")"
    parts: list = field(default_factory=list)
    raw: str = ""
    line: int = 0


_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_OPS = (":-", ":=", ":+", ":?", "-", "=", "+", "?")


def _read_braced(text: str, i: int) -> tuple[str, int]:
    """The inside of ``${...}`` starting at ``i`` (just after ``${``), nesting aware; returns (inside, end)."""
    end = braced_end(text, i)
    if end is None:
        raise ValueError("unterminated ${")
    return text[i:end - 1], end


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


def tilde(parts: list[Part]) -> list[Part]:
    """Bash's tilde expansion of a leading unquoted ``~`` / ``~/`` (assignment values, defaults): $HOME."""
    if parts and isinstance(parts[0], Lit) and not parts[0].quoted and parts[0].text.startswith("~"):
        rest = parts[0].text[1:]
        if rest == "" or rest.startswith("/"):
            return [Var("HOME", False)] + ([Lit(rest, False)] if rest else []) + list(parts[1:])
    return list(parts)


def _parts(text: str, quoted: bool) -> list[Part]:
    """Parts of a default value (``${X:-this}``), read as inside double quotes when ``quoted``."""
    return tilde(_raw_parts(text, quoted)) if not quoted else _raw_parts(text, quoted)


def _raw_parts(text: str, quoted: bool) -> list[Part]:
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
                out.extend(_raw_parts(text[i + 1:end], True))
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
        if ch in "<>" or (ch == "&" and text[i + 1:i + 2] == ">"):
            # a redirection (2>&1, > log, &>> log): the fd number before it is not a word, and the
            # word after it is its target (`_statements` users drop both)
            if cur is not None and cur.raw.isdigit():
                cur = None
            flush()
            j = i + 1
            while j < n and text[j] in "<>&|":
                j += 1
            toks.append(Token("redir", [], text[i:j], line))
            i = j
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
    branch: int = 0  # the if/else/case branch that added it to an array (0: unconditional)


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
