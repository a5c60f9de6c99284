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
from .shell_words import UNKNOWN, Env, Lit, Part, Token, Word, expand_word, tilde, tokenize

# ----------------------------------------------------------------------------------------------
# statements: assignments, arrays, and the launch line
# ----------------------------------------------------------------------------------------------

_LAUNCHERS = {"python", "python3", "torchrun", "uv", "run", "ray", "job", "submit"}
_ASSIGN = re.compile(r"^([A-Za-z_][A-Za-z0-9_]*)(\+?)=")
_OPENERS = {"if", "case", "for", "while", "until", "select", "{"}
_CLOSERS = {"fi", "esac", "done", "}"}
_LEADERS = {"then", "else", "do", "{", "!"}
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
    """Tokens per simple command (redirections and their targets dropped; arrays span lines)."""
    stmt: list[Token] = []
    depth = 0  # inside NAME=( ... )
    skip = False
    for t in toks:
        if t.kind == "redir":
            skip = True
            continue
        if skip and t.kind == "word":
            skip = False
            continue
        skip = False
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
    return name, bool(plus), tilde(parts)


def _key(word: str) -> str:
    return word.lstrip("+~").split("=", 1)[0]


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
    branch = 0  # numbers the if/else/loop bodies, so alternatives are not applied on top of each other
    launches: list[LaunchLine] = []
    for stmt in _statements(toks):
        for t in stmt:
            if t.kind == "word" and t.raw in _OPENERS:
                depth += 1
                branch += 1
            elif t.kind == "word" and t.raw in ("else", "elif"):
                branch += 1
            elif t.kind == "word" and t.raw in _CLOSERS:
                depth = max(0, depth - 1)
        k = 0
        while k < len(stmt) and stmt[k].kind == "word" and stmt[k].raw in _LEADERS:
            k += 1  # `then X=1`, `else A+=(...)`, `do ...`: the command after the keyword
        if k < len(stmt) and stmt[k].raw in _DECLARE:
            k += 1
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
                    # inside an if/case/loop the branch may run: its items join the array (the
                    # union of the branches is checked: each must be a valid override), except a
                    # key an *other* branch already sets (the two are alternatives: `if npu; then
                    # +k=a; else +k=b; fi` must not read as +k twice)
                    keep = isinstance(old, list) and (append or depth > 0)
                    base = old if keep else []
                    if depth:
                        taken = {_key(w.text): w.branch for w in base if w.branch}
                        items = [Word(w.text, w.unknown, w.line, branch) for w in items
                                 if taken.get(_key(w.text), branch) == branch]
                    env.values[name] = base + items
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
