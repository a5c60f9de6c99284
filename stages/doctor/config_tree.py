"""Dict helpers over a plain config tree and a small OmegaConf-style interpolation resolver.

Why not omegaconf: doctor must run where verl (and Hydra) are not installed.
"""
from __future__ import annotations

import re
from typing import Any

import yaml

_MISSING = object()


def lookup(root: Any, path: str, resolve: bool, _depth: int = 0) -> tuple[bool, Any]:
    """(found, value) at dotted `path` in a config tree; `resolve` follows `${...}` interpolations."""
    node = root
    for part in path.split(".") if path else []:
        if resolve:
            node = _resolve(root, node, _depth)
        if isinstance(node, dict) and part in node:
            node = node[part]
        elif isinstance(node, list) and part.isdigit() and int(part) < len(node):
            node = node[int(part)]
        else:
            return False, None
    if resolve:
        node = _resolve(root, node, _depth)
    return True, node


def _split_top(text: str, sep: str = ",") -> list[str]:
    """Split on ``sep`` outside of ``${}``/``[]``/``{}`` nesting and quotes."""
    parts, depth, buf, quote = [], 0, [], None
    for ch in text:
        if quote:
            buf.append(ch)
            if ch == quote:
                quote = None
            continue
        if ch in "'\"":
            quote = ch
        elif ch in "{[(":
            depth += 1
        elif ch in "}])":
            depth -= 1
        elif ch == sep and depth == 0:
            parts.append("".join(buf))
            buf = []
            continue
        buf.append(ch)
    parts.append("".join(buf))
    return parts


def braced_end(text: str, i: int) -> int | None:
    """Index just past the ``}`` closing the ``${`` whose inside starts at ``i`` (nesting aware),
    or None when it is never closed. Shared by the OmegaConf resolver and the shell reader."""
    depth, j = 1, i
    while j < len(text):
        if text.startswith("${", j):
            depth += 1
            j += 2
            continue
        if text[j] == "}":
            depth -= 1
            if depth == 0:
                return j + 1
        j += 1
    return None


def _find_interpolations(text: str) -> list[tuple[int, int]]:
    """Spans (start, end) of the top-level ``${...}`` expressions in ``text``."""
    spans, i = [], 0
    while True:
        start = text.find("${", i)
        if start < 0:
            return spans
        end = braced_end(text, start + 2)
        if end is None:
            return spans
        spans.append((start, end))
        i = end


def _eval_interpolation(root: Any, expr: str, depth: int) -> Any:
    """Evaluate the inside of ``${...}``: a dotted path, ``oc.select:path,default``; else None."""
    expr = expr.strip()
    if ":" in expr.split(",", 1)[0] and not expr.startswith("."):
        name, _, args = expr.partition(":")
        parts = _split_top(args)
        if name == "oc.select":
            path = parts[0].strip()
            found, value = lookup(root, path, resolve=True, _depth=depth + 1)
            if found and value != "???":
                return value
            if len(parts) > 1:
                return _resolve(root, parse_scalar(",".join(parts[1:]).strip()), depth + 1)
            return None
        # oc.env, oc.decode, custom resolvers: deliberately not evaluated (no environment reads).
        if name == "oc.env" and len(parts) > 1:
            return _resolve(root, parse_scalar(",".join(parts[1:]).strip()), depth + 1)
        return None
    if expr.startswith("."):  # relative interpolation: not tracked
        return None
    found, value = lookup(root, expr, resolve=True, _depth=depth + 1)
    return value if found else None


def _resolve(root: Any, value: Any, depth: int = 0) -> Any:
    if not isinstance(value, str) or "${" not in value or depth > 32:
        return value
    spans = _find_interpolations(value)
    if not spans:
        return value
    if len(spans) == 1 and spans[0] == (0, len(value)):
        return _eval_interpolation(root, value[2:-1], depth)
    out, last = [], 0
    for s, e in spans:
        out.append(value[last:s])
        v = _eval_interpolation(root, value[s + 2 : e - 1], depth)
        out.append("" if v is None else str(v))
        last = e
    out.append(value[last:])
    return "".join(out)


def set_key(root: dict, path: str, value: Any) -> None:
    """Set dotted `path` in a config tree to `value`, making the dicts on the way (a `+key=v` override)."""
    node = root
    parts = path.split(".")
    for part in parts[:-1]:
        nxt = node.get(part)
        if not isinstance(nxt, dict):
            nxt = {}
            node[part] = nxt
        node = nxt
    node[parts[-1]] = value


def delete_key(root: dict, path: str) -> bool:
    """Remove dotted `path` from a config tree (a `~key` override); whether it was there."""
    node = root
    parts = path.split(".")
    for part in parts[:-1]:
        node = node.get(part) if isinstance(node, dict) else None
        if not isinstance(node, dict):
            return False
    if isinstance(node, dict) and parts[-1] in node:
        del node[parts[-1]]
        return True
    return False


def parse_scalar(text: str) -> Any:
    """A Hydra override value, read as YAML: ``1``, ``true``, ``null``, ``[1,2]``, ``{a:1}``, strings."""
    if text == "":
        return ""
    if text.startswith("{") and text.endswith("}"):
        text = re.sub(r":(?=\S)", ": ", text)  # Hydra's {a:1} is YAML's {a: 1}
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError:
        return text
