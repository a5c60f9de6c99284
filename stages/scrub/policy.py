"""The scrub policy: every knob of scrub and check, read from stages/scrub/scrub_policy.toml and
overridable by a TOML/YAML file and by keyword arguments.

Why frozen and made of tuples: the policy travels to every worker process (pickled) and keys the
per-process verdict caches (scrubber.py), so it must be hashable data, not behaviour.
"""
from __future__ import annotations

import re
import sys
from dataclasses import dataclass, fields
from importlib import resources
from pathlib import Path
from typing import Any, Mapping

from ..core.errors import BadInputError


@dataclass(frozen=True)
class Policy:
    """Every knob of scrub/check. Frozen and made of tuples, so it pickles to worker processes."""

    min_value_length: int = 8
    ignore_values: tuple[str, ...] = ()
    use_local_environment: bool = True
    name_words: tuple[str, ...] = ()
    name_suffixes: tuple[str, ...] = ()
    allow_names: tuple[str, ...] = ()
    patterns: tuple[str, ...] = ()
    custom_patterns: tuple[tuple[str, str], ...] = ()
    pseudonymize_hosts: bool = True
    pseudonymize_users: bool = True
    hash_gpu_uuids: bool = True
    keep_users: tuple[str, ...] = ()
    min_free_text_length: int = 5
    common_words: tuple[str, ...] = ()
    trim_env_prefixes: bool = True
    trace_keep_keys: tuple[str, ...] = ()
    trace_host_keys: tuple[str, ...] = ()
    trace_path_keys: tuple[str, ...] = ()
    gzip_level: int = 6
    decode_enabled: bool = True
    decode_min_base64: int = 16
    decode_min_hex: int = 16
    decode_min_printable: float = 0.85
    decode_max_depth: int = 2
    context_rules: tuple[str, ...] = ()
    join_adjacent_nvtx: bool = True
    entropy_enabled: bool = True
    entropy_min_length: int = 20
    entropy_base64_ratio: float = 0.8
    entropy_hex_bits: float = 3.0
    entropy_max_wordish: float = 0.5
    entropy_allow_keys: tuple[str, ...] = ()
    entropy_allow: tuple[tuple[str, str, tuple[str, ...]], ...] = ()   # (name, regex, examples)
    extra_values: tuple[str, ...] = ()   # known secrets given by the user (--values-file)
    approved_names: tuple[str, ...] = ()  # user-written strings the owner approved (--keep-names FILE)
    source: str = "default"              # where the policy came from (for reports)


# TOML section/key -> Policy field
_POLICY_KEYS: dict[tuple[str, str], str] = {
    ("values", "min_length"): "min_value_length",
    ("values", "ignore"): "ignore_values",
    ("values", "use_local_environment"): "use_local_environment",
    ("names", "words"): "name_words",
    ("names", "suffixes"): "name_suffixes",
    ("names", "allow"): "allow_names",
    ("patterns", "enabled"): "patterns",
    ("patterns", "custom"): "custom_patterns",
    ("personal", "pseudonymize_hosts"): "pseudonymize_hosts",
    ("personal", "pseudonymize_users"): "pseudonymize_users",
    ("personal", "hash_gpu_uuids"): "hash_gpu_uuids",
    ("personal", "keep_users"): "keep_users",
    ("personal", "min_free_text_length"): "min_free_text_length",
    ("personal", "common_words"): "common_words",
    ("personal", "trim_env_prefixes"): "trim_env_prefixes",
    ("trace", "keep_keys"): "trace_keep_keys",
    ("trace", "host_keys"): "trace_host_keys",
    ("trace", "path_keys"): "trace_path_keys",
    ("output", "gzip_level"): "gzip_level",
    ("decode", "enabled"): "decode_enabled",
    ("decode", "min_base64"): "decode_min_base64",
    ("decode", "min_hex"): "decode_min_hex",
    ("decode", "min_printable"): "decode_min_printable",
    ("decode", "max_depth"): "decode_max_depth",
    ("context", "enabled"): "context_rules",
    ("context", "join_adjacent_nvtx"): "join_adjacent_nvtx",
    ("entropy", "enabled"): "entropy_enabled",
    ("entropy", "min_length"): "entropy_min_length",
    ("entropy", "base64_ratio"): "entropy_base64_ratio",
    ("entropy", "hex_bits"): "entropy_hex_bits",
    ("entropy", "max_wordish"): "entropy_max_wordish",
    ("entropy", "allow_keys"): "entropy_allow_keys",
    ("entropy", "allow"): "entropy_allow",
    ("user_text", "keep"): "approved_names",
}


def _read_policy_file(path: Path) -> dict[str, Any]:
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise BadInputError(path, f"cannot read policy: {exc.strerror or exc}") from None
    try:
        if path.suffix.lower() in (".yaml", ".yml"):
            import yaml

            data = yaml.safe_load(text) or {}
        else:
            data = _toml_loads(text)
    except Exception as exc:  # noqa: BLE001 - any parse error becomes one line naming the file
        raise BadInputError(path, f"policy is not valid {'YAML' if path.suffix in ('.yaml', '.yml') else 'TOML'}: {exc}") from None
    if not isinstance(data, dict):
        raise BadInputError(path, "policy must be a table of sections")
    return data


def _toml_loads(text: str) -> dict[str, Any]:
    if sys.version_info >= (3, 11):
        import tomllib
    else:  # pragma: no cover - python 3.10
        import tomli as tomllib  # type: ignore[no-redef]
    return tomllib.loads(text)


def _apply_sections(base: dict[str, Any], data: Mapping[str, Any], origin: str) -> None:
    for section, table in data.items():
        if not isinstance(table, Mapping):
            raise BadInputError(origin, f"policy section [{section}] must be a table")
        for key, value in table.items():
            add = key.endswith("_add")
            name = key[:-4] if add else key
            fld = _POLICY_KEYS.get((section, name))
            if fld is None:
                raise BadInputError(origin, f"unknown policy key [{section}] {key}")
            if fld == "custom_patterns":
                if not isinstance(value, Mapping):
                    raise BadInputError(origin, "[patterns] custom must be a table of name = regex")
                items = tuple((str(k), str(v)) for k, v in value.items())
                for k, v in items:
                    try:
                        re.compile(v)
                    except re.error as exc:
                        raise BadInputError(origin, f"custom pattern {k!r} is not a valid regex: {exc}") from None
                base[fld] = (base.get(fld, ()) + items) if add else items
            elif fld == "entropy_allow":
                shapes = _allow_shapes(value, origin)
                base[fld] = (base.get(fld, ()) + shapes) if add else shapes
            elif isinstance(value, list):
                vals = tuple(str(v) for v in value)
                base[fld] = (tuple(base.get(fld, ())) + vals) if add else vals
            else:
                if add:
                    raise BadInputError(origin, f"[{section}] {key}: only lists can be extended")
                base[fld] = value


def _allow_shapes(value: Any, origin: str) -> tuple[tuple[str, str, tuple[str, ...]], ...]:
    """[entropy.allow.<name>] tables -> (name, regex, examples); each regex must cover its examples."""
    from .hidden import verify_allow_examples

    if not isinstance(value, Mapping):
        raise BadInputError(origin, "[entropy] allow must be tables of regex = ..., examples = [...]")
    shapes = []
    for name, table in value.items():
        if not isinstance(table, Mapping) or "regex" not in table:
            raise BadInputError(origin, f"[entropy.allow.{name}] needs regex = '...' and examples = [...]")
        try:
            re.compile(str(table["regex"]))
        except re.error as exc:
            raise BadInputError(origin, f"[entropy.allow.{name}] regex is not valid: {exc}") from None
        shapes.append((str(name), str(table["regex"]), tuple(str(e) for e in table.get("examples", ()))))
    problems = verify_allow_examples(tuple(shapes))
    if problems:
        raise BadInputError(origin, problems[0])
    return tuple(shapes)


def default_policy_data() -> dict[str, Any]:
    text = resources.files("verlprof.stages.scrub").joinpath("scrub_policy.toml").read_text(encoding="utf-8")
    return _toml_loads(text)


def load_policy(path: str | Path | None = None, **overrides: Any) -> Policy:
    """The default policy, updated by a TOML/YAML file and then by explicit keyword overrides."""
    base: dict[str, Any] = {}
    _apply_sections(base, default_policy_data(), "scrub_policy.toml")
    source = "default"
    if path is not None:
        p = Path(path)
        _apply_sections(base, _read_policy_file(p), str(p))
        source = p.name
    base.update({k: v for k, v in overrides.items() if v is not None})
    base["source"] = source
    known = {f.name for f in fields(Policy)}
    return Policy(**{k: v for k, v in base.items() if k in known})


def read_values_file(path: str | Path) -> tuple[str, ...]:
    """Extra known secret values, one per line (never on the command line, where shells log them)."""
    p = Path(path)
    try:
        lines = p.read_text(encoding="utf-8").splitlines()
    except OSError as exc:
        raise BadInputError(p, f"cannot read values file: {exc.strerror or exc}") from None
    return tuple(v.strip() for v in lines if v.strip() and not v.lstrip().startswith("#"))

