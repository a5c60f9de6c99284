"""Read the names a Python source passes to profiler / naming APIs, with `ast` (never importing it).

Why a module of its own: tools/build_public_names.py downloads and walks the packages; this module
is the one place that decides what a call site publishes and how each hole of an f-string /
%-format / .format template is typed (stages/scrub/public_names.py says what the types match).

Hole typing is conservative in the one direction that matters: a hole may only ever match digits
(`{int}`, `{float}`) or one literal of a finite set the same source writes (`{=NAME}`). A wrong
guess that a hole is an int can only make a real name miss the corpus (it is then pseudonymised,
which is safe); a hole that could take free text is never written: such a template is left out and
counted.
"""
from __future__ import annotations

import ast
import hashlib
import re
import string
import warnings
from collections import Counter
from dataclasses import dataclass, field

# callee (last dotted part) -> (positional index of the name, keyword names), and whether the full
# dotted callee must mention one of NEEDS_CONTEXT (for short generic names like `range` or `mark`).
NAMING_CALLS: dict[str, tuple[int | None, tuple[str, ...]]] = {
    "record_function": (0, ("name",)),
    "_record_function_enter": (0, ("name",)),
    "_record_function_enter_new": (0, ("name",)),
    "_record_function_with_args_enter": (0, ("name",)),
    "_RecordFunctionFast": (0, ("name",)),
    "compile_time_record_function": (0, ("name",)),
    "range_push": (0, ("msg", "message")),
    "nvtx_range_push": (0, ("msg", "message", "suffix")),
    "push_range": (0, ("message", "msg")),
    "start_range": (0, ("message", "msg")),
    "mark_start_range": (0, ("message",)),
    "range_start": (0, ("message",)),
    "range": (0, ("msg", "message")),
    "mark": (0, ("msg", "message")),
    "annotate": (0, ("message", "msg", "role", "domain")),
    "mark_annotate": (0, ("message", "role")),
    "marked_timer": (0, ("name",)),
    "simple_timer": (0, ("name",)),
    "_timer": (0, ("name",)),
    "GPUMemoryLogger": (None, ("role",)),
    "Thread": (None, ("name",)),
    "Process": (None, ("name",)),
    "Timer": (None, ("name",)),
    "setproctitle": (0, ("title",)),
    "set_thread_name": (0, ("name",)),
    "ThreadPoolExecutor": (None, ("thread_name_prefix",)),
    "dynamo_timed": (0, ("key",)),
    "custom_op": (0, ("name",)),
    "triton_op": (0, ("name",)),
}
# Generic callee names taken only when the dotted callee names a profiler API.
NEEDS_CONTEXT = {"range": ("nvtx",), "mark": ("nvtx",),
                 "annotate": ("nvtx", "profiler", "Profiler", "annotate"),
                 "Timer": ("threading",), "Process": ("multiprocessing", "mp", "ctx")}
# Decorators that name a span after the decorated function when given no message.
NAME_DECORATORS = {"annotate", "mark_annotate", "instrument_w_nvtx", "nvtx_decorator", "record_function"}

_INT_NAME = re.compile(
    r"^(?:[ijkmn]|idx|index|rank|step|steps|epoch|iteration|iter|it|layer|count|num|pid|tid|gpu|port|"
    r"world_size|micro_batch|microbatch|mb|chunk|bucket|replica|seq|seq_nr|seqlen|size|length|nbytes|"
    r"i\d|idx\d|\w+_(?:idx|index|id|ids|rank|step|num|count|number|size|nr|no|len|cnt|n))$"
    r"|^(?:num|n|len|cnt)_\w+$")
_INT_CALLS = {"int", "len", "round", "getpid", "get_rank", "get_world_size", "get_local_rank", "get_tp_rank",
              "current_device", "gettid", "get_ident", "get_native_id", "next", "count", "sum", "abs"}
_FLOAT_SPEC = re.compile(r"^[^a-zA-Z]*[eEfFgG%]$")
_INT_SPEC = re.compile(r"^[^a-zA-Z]*[dn]?$")
_PCT = re.compile(r"%(?:\((\w+)\))?[-#0 +]*(?:\*|\d+)?(?:\.(?:\*|\d+))?[hlL]?([diouxXeEfFgGcrsa%])")
MAX_ALTERNATIVES = 64
MAX_SET = 256


class Unresolved(Exception):
    """A hole that could take free text: the template is left out (and counted)."""


@dataclass
class Found:
    """What one source file publishes."""
    exact: set[str] = field(default_factory=set)
    templates: set[str] = field(default_factory=set)
    sets: dict[str, tuple[str, ...]] = field(default_factory=dict)
    classes: set[str] = field(default_factory=set)
    autograd_functions: set[str] = field(default_factory=set)
    threads: set[str] = field(default_factory=set)  # thread / process names (Linux cuts them at 15)
    skipped: Counter = field(default_factory=Counter)


def set_name(values: tuple[str, ...]) -> str:
    """A set's name is a hash of its sorted values: the same set always gets the same name."""
    return "s" + hashlib.sha1("\0".join(values).encode()).hexdigest()[:10]


def _lit(s: str) -> str:
    return s.replace("{", "{{").replace("}", "}}")


def _dotted(node: ast.AST) -> str:
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if isinstance(node, ast.Name):
        parts.append(node.id)
    elif isinstance(node, ast.Call):
        parts.append(_dotted(node.func) + "()")
    return ".".join(reversed(parts))


class _Scope:
    """String constants a name is bound to inside one function (or the module): `x = "a"`,
    `x = "a" if c else "b"`, `for x in ("a", "b")`. A name bound to anything else is unresolved."""

    def __init__(self, body: list[ast.stmt], args: set[str]) -> None:
        self.values: dict[str, set[str] | None] = {a: None for a in args}
        for node in _walk_no_nested(body):
            if isinstance(node, ast.Assign):
                for t in node.targets:
                    if isinstance(t, ast.Name):
                        self._bind(t.id, _consts(node.value))
            elif isinstance(node, (ast.AnnAssign, ast.AugAssign)) and isinstance(node.target, ast.Name):
                value = node.value if isinstance(node, ast.AnnAssign) else None
                self._bind(node.target.id, _consts(value) if value is not None else None)
            elif isinstance(node, (ast.For, ast.comprehension)) and isinstance(node.target, ast.Name):
                it = node.iter
                vals = None
                if isinstance(it, (ast.Tuple, ast.List, ast.Set)):
                    vals = set()
                    for e in it.elts:
                        c = _consts(e)
                        if c is None:
                            vals = None
                            break
                        vals |= c
                self._bind(node.target.id, vals)
            elif isinstance(node, (ast.With, ast.AsyncWith)):
                for item in node.items:
                    if isinstance(item.optional_vars, ast.Name):
                        self._bind(item.optional_vars.id, None)

    def _bind(self, name: str, vals: set[str] | None) -> None:
        if name in self.values and self.values[name] is None:
            return
        if vals is None:
            self.values[name] = None
        else:
            self.values[name] = (self.values.get(name) or set()) | vals

    def lookup(self, name: str) -> set[str] | None:
        return self.values.get(name)


def _walk_no_nested(body: list[ast.stmt]):
    stack = list(body)
    while stack:
        node = stack.pop()
        yield node
        for child in ast.iter_child_nodes(node):
            if not isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Lambda)):
                stack.append(child)


def _consts(node: ast.AST | None) -> set[str] | None:
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return {node.value}
    if isinstance(node, ast.IfExp):
        a, b = _consts(node.body), _consts(node.orelse)
        return None if a is None or b is None else a | b
    return None


class _Templater:
    """Turns one name expression into corpus templates (a list of alternatives)."""

    def __init__(self, scopes: list[_Scope], found: Found) -> None:
        self.scopes = scopes
        self.found = found

    def alternatives(self, node: ast.AST) -> list[str]:
        out = self._alts(node)
        if len(out) > MAX_ALTERNATIVES:
            raise Unresolved("too many alternatives")
        return out

    def _alts(self, node: ast.AST) -> list[str]:
        if isinstance(node, ast.Constant):
            if isinstance(node.value, str):
                return [_lit(node.value)]
            raise Unresolved("not a string")
        if isinstance(node, ast.JoinedStr):
            return self._concat([self._fpart(v) for v in node.values])
        if isinstance(node, ast.IfExp):
            return self._alts(node.body) + self._alts(node.orelse)
        if isinstance(node, ast.BoolOp) and isinstance(node.op, ast.Or):
            out: list[str] = []
            for v in node.values:
                try:
                    out += self._alts(v)
                except Unresolved:
                    pass  # `message or func.__name__`: the other alternatives still stand
            if not out:
                raise Unresolved("no alternative resolves")
            return out
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
            return self._concat([self._alts(node.left), self._alts(node.right)])
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Mod) and _is_str(node.left):
            return self._percent(node.left.value, node.right)
        if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "format"
                and _is_str(node.func.value)):
            return self._format(node.func.value.value, node)
        if isinstance(node, ast.Call) and _dotted(node.func) == "str" and node.args:
            return self._hole_alts(node.args[0])
        if isinstance(node, ast.Name):
            vals = self._scope_values(node.id)
            if vals is not None:
                return sorted(_lit(v) for v in vals)
        raise Unresolved(type(node).__name__)

    def _concat(self, parts: list[list[str]]) -> list[str]:
        out = [""]
        for alts in parts:
            out = [a + b for a in out for b in alts]
            if len(out) > MAX_ALTERNATIVES:
                raise Unresolved("too many alternatives")
        return out

    def _scope_values(self, name: str) -> set[str] | None:
        for scope in self.scopes:
            if name in scope.values:
                return scope.lookup(name)
        return None

    def _fpart(self, v: ast.AST) -> list[str]:
        if isinstance(v, ast.Constant):
            return [_lit(str(v.value))]
        if isinstance(v, ast.FormattedValue):
            spec = ""
            if v.format_spec is not None:
                if not all(isinstance(p, ast.Constant) for p in v.format_spec.values):
                    raise Unresolved("computed format spec")
                spec = "".join(str(p.value) for p in v.format_spec.values)
            if spec and _FLOAT_SPEC.match(spec):
                return ["{float}"]
            if spec and not _INT_SPEC.match(spec):
                raise Unresolved("format spec " + spec)
            if v.conversion not in (-1, ord("s")) and not _is_int_expr(v.value):
                raise Unresolved("!r / !a conversion")
            return self._hole_alts(v.value)
        raise Unresolved(type(v).__name__)

    def _hole_alts(self, expr: ast.AST) -> list[str]:
        """One hole: digits, a literal, or a set of literals; never free text."""
        if isinstance(expr, ast.Constant):
            if isinstance(expr.value, bool) or expr.value is None:
                return [str(expr.value)]
            if isinstance(expr.value, (int, str)):
                return [_lit(str(expr.value))]
            if isinstance(expr.value, float):
                return ["{float}"]
        if _is_int_expr(expr):
            return ["{int}"]
        vals = None
        if isinstance(expr, ast.Name):
            vals = self._scope_values(expr.id)
        elif isinstance(expr, ast.IfExp):
            return self._hole_alts(expr.body) + self._hole_alts(expr.orelse)
        if vals:
            vals_t = tuple(sorted(vals))
            if len(vals_t) == 1:
                return [_lit(vals_t[0])]
            if len(vals_t) > MAX_SET:
                raise Unresolved("set too large")
            name = set_name(vals_t)
            self.found.sets[name] = vals_t
            return ["{=" + name + "}"]
        if _is_class_name_expr(expr):
            return ["{=classes}"]
        raise Unresolved("hole " + ast.dump(expr)[:40])

    def _percent(self, fmt: str, right: ast.AST) -> list[str]:
        args = list(right.elts) if isinstance(right, ast.Tuple) else [right]
        if isinstance(right, ast.Dict):
            raise Unresolved("%-format with a mapping")
        parts: list[list[str]] = []
        pos = 0
        ai = 0
        for m in _PCT.finditer(fmt):
            parts.append([_lit(fmt[pos:m.start()])])
            conv = m.group(2)
            if conv == "%":
                parts.append(["%"])
            else:
                if m.group(1) or ai >= len(args) or "*" in m.group(0):
                    raise Unresolved("%-format shape")
                arg = args[ai]
                ai += 1
                if conv in "diouxX":
                    parts.append(["{int}"] if conv in "diu" else self._never())
                elif conv in "eEfFgG":
                    parts.append(["{float}"])
                else:
                    parts.append(self._hole_alts(arg))
            pos = m.end()
        parts.append([_lit(fmt[pos:])])
        return self._concat(parts)

    def _format(self, fmt: str, call: ast.Call) -> list[str]:
        parts: list[list[str]] = []
        auto = 0
        kw = {k.arg: k.value for k in call.keywords if k.arg}
        try:
            parsed = list(string.Formatter().parse(fmt))
        except ValueError as e:
            raise Unresolved(str(e)) from None
        for literal, fname, spec, conv in parsed:
            parts.append([_lit(literal)])
            if fname is None:
                continue
            if fname == "":
                if auto >= len(call.args):
                    raise Unresolved(".format arity")
                arg = call.args[auto]
                auto += 1
            elif fname.isdigit() and int(fname) < len(call.args):
                arg = call.args[int(fname)]
            elif fname in kw:
                arg = kw[fname]
            else:
                raise Unresolved(".format field " + fname)
            if spec and _FLOAT_SPEC.match(spec):
                parts.append(["{float}"])
            elif spec and not _INT_SPEC.match(spec):
                raise Unresolved("format spec")
            else:
                parts.append(self._hole_alts(arg))
        return self._concat(parts)

    @staticmethod
    def _never() -> list[str]:
        raise Unresolved("hex / octal hole")


def _is_str(node: ast.AST) -> bool:
    return isinstance(node, ast.Constant) and isinstance(node.value, str)


def _is_int_expr(expr: ast.AST) -> bool:
    if isinstance(expr, ast.Constant):
        return isinstance(expr.value, int) and not isinstance(expr.value, bool)
    if isinstance(expr, ast.Call):
        name = _dotted(expr.func).rsplit(".", 1)[-1]
        return name in _INT_CALLS
    if isinstance(expr, ast.BinOp) and isinstance(expr.op, (ast.Add, ast.Sub, ast.Mult, ast.FloorDiv,
                                                            ast.Mod)):
        return _is_int_expr(expr.left) or _is_int_expr(expr.right)
    if isinstance(expr, ast.Name):
        return bool(_INT_NAME.match(expr.id))
    if isinstance(expr, ast.Attribute):
        return bool(_INT_NAME.match(expr.attr))
    if isinstance(expr, ast.Subscript):
        return False
    return False


def _is_class_name_expr(expr: ast.AST) -> bool:
    """`type(x).__name__`, `x.__class__.__name__`, `cls.__name__`: a class name of the package."""
    if not (isinstance(expr, ast.Attribute) and expr.attr in ("__name__", "__qualname__")):
        return False
    inner = expr.value
    if isinstance(inner, ast.Attribute) and inner.attr == "__class__":
        return True
    if isinstance(inner, ast.Call) and _dotted(inner.func) == "type":
        return True
    return isinstance(inner, ast.Name) and inner.id == "cls"


def _callee_ok(dotted: str, last: str) -> bool:
    need = NEEDS_CONTEXT.get(last)
    return need is None or any(n in dotted.rsplit(".", 1)[0] for n in need)


def _arg_nodes(call: ast.Call, pos: int | None, kws: tuple[str, ...]) -> list[ast.AST]:
    out = [k.value for k in call.keywords if k.arg in kws]
    if pos is not None and len(call.args) > pos and not isinstance(call.args[pos], ast.Starred):
        out.append(call.args[pos])
    return out


def _is_autograd_function(cls: ast.ClassDef) -> bool:
    for b in cls.bases:
        d = _dotted(b)
        if d.endswith("autograd.Function") or d in ("Function", "torch.autograd.Function", "InplaceFunction"):
            return True
    return False


# A file none of these words occur in publishes no name: it is not parsed (most files; 5x faster).
_TRIGGER = re.compile(r"torch\.ops\.|record_function|RecordFunction|nvtx|_timer|Thread\(|thread_name|"
                      r"proctitle|annotate|"
                      r"GPUMemoryLogger|Function[,)]|dynamo_timed|custom_op|triton_op|Process\(|"
                      r"PROC(?:ESS)?_?(?:TYPE|TITLE|NAME)|THREAD_?NAME")
_CLASS = re.compile(r"^[ \t]*class[ \t]+([A-Za-z_][A-Za-z0-9_]*)[ \t]*[(:]", re.M)


def scan_source(text: str, found: Found) -> None:
    """Add what one Python file publishes to `found` (a syntax error counts and skips the file)."""
    found.classes.update(_CLASS.findall(text))
    if not _TRIGGER.search(text):
        return
    try:
        with warnings.catch_warnings():  # a package's own invalid escapes are not ours to report
            warnings.simplefilter("ignore")
            tree = ast.parse(text)
    except (SyntaxError, ValueError):
        found.skipped["file does not parse"] += 1
        return
    module_scope = _Scope(tree.body, set())
    _visit(tree, [module_scope], found, "")
    _named_constants(tree, [module_scope], found)


# Module constants that hold a process or thread name (ray: WORKER_PROCESS_TYPE_IDLE_WORKER = "ray::IDLE").
_NAME_CONSTANT = re.compile(r"PROC(?:ESS)?_?(?:TYPE|TITLE|NAME)|THREAD_?NAME")


def _named_constants(tree: ast.Module, scopes: list[_Scope], found: Found) -> None:
    for node in tree.body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name) \
                and _NAME_CONSTANT.search(node.targets[0].id):
            try:
                alts = _Templater(scopes, found).alternatives(node.value)
            except Unresolved:
                continue
            for t in alts:
                if "{" not in t:
                    found.threads.add(t)
                found_add(found, t)


def _visit(node: ast.AST, scopes: list[_Scope], found: Found, qual: str) -> None:
    for child in ast.iter_child_nodes(node):
        if isinstance(child, ast.ClassDef):
            if _is_autograd_function(child):
                found.autograd_functions.add(child.name)
            _visit(child, scopes, found, child.name)
        elif isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
            _decorated_names(child, scopes, found, qual)
            args = {a.arg for a in child.args.args + child.args.kwonlyargs + child.args.posonlyargs}
            args |= {a.arg for a in (child.args.vararg, child.args.kwarg) if a}
            inner = [_Scope(child.body, args)] + scopes
            _visit(child, inner, found, child.name)
        else:
            if isinstance(child, ast.Call):
                _call(child, scopes, found)
            elif isinstance(child, ast.Attribute) and child.attr not in _OVERLOADS:
                m = _TORCH_OP.fullmatch(_dotted(child))
                if m:  # torch.ops._C.rms_norm(...): Kineto names the op "_C::rms_norm"
                    found.exact.add(f"{m.group(1)}::{m.group(2)}")
            _visit(child, scopes, found, qual)


_TORCH_OP = re.compile(r"torch\.ops\.([A-Za-z_][A-Za-z0-9_]*)\.([A-Za-z_][A-Za-z0-9_]*)")
_OVERLOADS = {"default", "Tensor", "Scalar", "out", "int", "float"}


def _decorated_names(fn: ast.FunctionDef | ast.AsyncFunctionDef, scopes, found: Found, qual: str) -> None:
    for dec in fn.decorator_list:
        call = dec if isinstance(dec, ast.Call) else None
        dotted = _dotted(dec.func if call else dec)
        last = dotted.rsplit(".", 1)[-1]
        if last not in NAME_DECORATORS:
            continue
        if last == "annotate" and not any(n in dotted for n in ("nvtx", "rofiler", "annotate")):
            continue
        named = call is not None and (
            call.args or any(k.arg in ("message", "role", "msg", "name") for k in call.keywords))
        if not named:
            found.exact.add(fn.name)
            if last == "instrument_w_nvtx" and qual:
                found.exact.add(f"{qual}.{fn.name}")


def _call(call: ast.Call, scopes: list[_Scope], found: Found) -> None:
    dotted = _dotted(call.func)
    last = dotted.rsplit(".", 1)[-1]
    spec = NAMING_CALLS.get(last)
    if spec is None or not _callee_ok(dotted, last):
        return
    pos, kws = spec
    if last in ("Thread", "Process", "Timer", "ThreadPoolExecutor"):
        pos = None
    for node in _arg_nodes(call, pos, kws):
        if isinstance(node, ast.Constant) and node.value is None:
            continue
        try:
            alts = _Templater(scopes, found).alternatives(node)
        except Unresolved as e:
            found.skipped[f"{last}: {str(e).split(' ')[0]}"] += 1
            continue
        for t in alts:
            if last in ("Thread", "Process", "Timer", "setproctitle", "set_thread_name") and "{" not in t:
                found.threads.add(t.replace("{{", "{").replace("}}", "}"))
            if last == "ThreadPoolExecutor":
                t = t + "_{int}"
            elif last == "dynamo_timed":
                found_add(found, t + " (dynamo_timed)")
            found_add(found, t)


def found_add(found: Found, template: str) -> None:
    """An exact string when the template has no hole, else a template; blank names are dropped."""
    text = template.replace("{{", "\0").replace("}}", "\1")
    if not text.strip():
        return
    if "{" in text:
        found.templates.add(template)
    else:
        found.exact.add(text.replace("\0", "{").replace("\1", "}"))
