"""Content hashes and salted pseudonyms.

Why: the export cache is keyed by a report's content (not its name or mtime), and the manifest must
identify hosts without naming them, so host names are replaced by a salted hash.
"""
from __future__ import annotations

import hashlib
from pathlib import Path

_CHUNK = 1 << 20


def sha256_file(path: str | Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(_CHUNK):
            h.update(chunk)
    return h.hexdigest()


def salted_hash(value: str, salt: str, length: int = 12) -> str:
    """A stable, non-reversible pseudonym of `value` within one bundle (same salt)."""
    return hashlib.sha256(f"{salt}\0{value}".encode()).hexdigest()[:length]
