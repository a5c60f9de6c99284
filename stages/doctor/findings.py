"""What every doctor check returns: a `Finding` (one line, with the fix), and how findings sort.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Iterable, Literal, Optional

Severity = Literal["error", "warning", "info"]


SEVERITY_ORDER = {"error": 0, "warning": 1, "info": 2}


@dataclass(frozen=True)
class Finding:
    """One thing wrong (or worth knowing), said in one line, with what to type instead."""

    code: str
    severity: Severity
    message: str
    fix: str
    key: Optional[str] = None

    def to_dict(self) -> dict:
        return asdict(self)


def sort_findings(findings: Iterable[Finding]) -> list[Finding]:
    return sorted(findings, key=lambda f: SEVERITY_ORDER.get(f.severity, 9))


def has_errors(findings: Iterable[Finding]) -> bool:
    return any(f.severity == "error" for f in findings)
