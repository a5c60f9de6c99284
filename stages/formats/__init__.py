"""formats: one folder per input format, each a `Format` (stages/core/formats.py) that registers
itself when imported. The registry imports this package at its first lookup; a new format is one
more folder here (and one import below), or a plugin package under the `verlprof.formats` entry
point group, or one `register` call (tests/test_toy_format.py). docs/DESIGN.md "Adding an input
format" says what each method does."""
from ..core.formats import Format, all_formats, for_file_kind, get, kinds, register, unregister
from .base import BaseFormat
from . import nsys, kineto, memory_snapshot, hydra_config  # noqa: F401  (each registers its format)

__all__ = ["BaseFormat", "Format", "all_formats", "for_file_kind", "get", "kinds", "register", "unregister"]
