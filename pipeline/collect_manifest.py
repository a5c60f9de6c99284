"""The records a collect leaves: each artifact's final status, the manifest, the run's salt.

Why apart from pipeline/collect.py: collect.py reads as the sequence of stages; what the bundle's
manifest.json says about each artifact (final status and reason, the `status` block that
`verlprof summarize` reads to call a run incomplete, salted host hashes, no absolute path) is
one record built at the end, here.
"""
from __future__ import annotations

import datetime as _dt
import secrets as _secrets
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any

from ..stages.core import formats
from ..stages import gather as gather_stage
from ..stages.doctor import Finding, after_run_checks
from ..stages.core import atomic
from ..stages.core.errors import plain_reason
from ..stages.core.model import (
    DONE,
    FAILED,
    MANIFEST_VERSION,
    REUSED,
    SKIPPED,
    Artifact,
    ArtifactStatus,
    StageOutcome,
    final_status,
)


def after_run_findings(gathered: gather_stage.GatherResult | None) -> list[Finding]:
    """verlprof doctor's after-run checks over what gather found (.qdstrm left, empty reports,
    profiled roles that produced nothing, stale reports). Printed by the CLI, not put in OUT."""
    if gathered is None:
        return []
    arts = [{"kind": str(a.kind), "rel": a.rel, "size": a.size, "mtime": a.mtime, "role": a.role}
            for a in gathered.artifacts]
    cfg = gathered.config.raw if gathered.config is not None else None
    try:
        return after_run_checks(arts, cfg)
    except Exception:  # noqa: BLE001 - advice must never fail a collect
        return []


def artifact_statuses(artifacts: list[Artifact], outcomes: list[StageOutcome]) -> list[ArtifactStatus]:
    """The final status of every artifact, in gather order (model.final_status over its outcomes).

    Artifacts no stage reads on their own get a `summarize: skipped` outcome saying why: the run's
    Hydra config, and an export lying beside its report (summarized as that report)."""
    by_rel: dict[str, list[StageOutcome]] = {}
    for o in outcomes:
        by_rel.setdefault(o.artifact, []).append(o)
    out = []
    for a in artifacts:
        mine = by_rel.get(a.rel, [])
        if not mine:
            why = _unread_reason(a)
            if why:
                outcomes.append(StageOutcome("summarize", a.rel, "skipped", why))
                mine = [outcomes[-1]]
        empty = plain_reason("empty file", size=0, kind=str(a.kind)) if a.size == 0 and not mine else None
        # gather found it unreadable (a corrupt file in a folder): it failed before any stage
        unread = next((o.detail for o in mine if o.stage == "gather" and o.status == "failed"), None)
        out.append(final_status(a.rel, mine, unread or empty))
    return out


def _unread_reason(a: Artifact) -> str:
    unread = formats.for_file_kind(a.kind).unread_reason
    if unread:
        return unread
    report = next((n.split("=", 1)[1] for n in a.notes if n.startswith("export_of=")), None)
    if report:
        return f"the export of {Path(report).name}: summarized as that report"
    return ""


def build_manifest(gathered: gather_stage.GatherResult, outcomes: list[StageOutcome], salt: str,
                   extra: dict[str, Any], statuses: list[ArtifactStatus] | None = None) -> dict[str, Any]:
    """manifest.json: relative names, salted host hashes, stage outcomes, each artifact's final
    status and reason, and a `status` block naming every failed artifact (so `verlprof summarize`
    can say which runs are incomplete); no absolute path."""
    by_rel: dict[str, list[dict[str, Any]]] = {}
    for o in outcomes:
        by_rel.setdefault(o.artifact, []).append({"stage": o.stage, "status": o.status, "detail": o.detail, **o.info})
    final = {s.rel: s for s in statuses or []}
    artifacts = []
    rejected = {a.rel for a in gathered.rejected}   # unreadable candidates: listed as failed artifacts
    for a in [*gathered.artifacts, *gathered.rejected]:
        rec = a.to_manifest(salt)
        rec["stages"] = by_rel.get(a.rel, [])
        if a.rel in final:
            rec.update(final[a.rel].to_manifest())
        artifacts.append(rec)
    if statuses is not None:
        extra = {"status": status_block(statuses), **extra}
    return {
        "manifest_version": MANIFEST_VERSION,
        "verlprof_version": _verlprof_version(),
        "created": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "sources": gathered.roots,
        "config": gathered.config.to_manifest() if gathered.config else None,
        "artifacts": artifacts,
        "skipped": [{"rel": r, "reason": why} for r, why in gathered.skipped if r not in rejected],
        **extra,
    }


def status_block(statuses: list[ArtifactStatus]) -> dict[str, Any]:
    """The manifest's `status`: counts per final status, complete or not, and each failure."""
    counts = {st: sum(1 for s in statuses if s.status == st) for st in (DONE, REUSED, SKIPPED, FAILED)}
    return {
        "complete": counts[FAILED] == 0,
        "summarized": counts[DONE] + counts[REUSED],
        **counts,
        "failed_artifacts": [{"rel": s.rel, "stage": s.stage, "reason": s.reason}
                             for s in statuses if s.status == FAILED],
    }


def _verlprof_version() -> str:
    try:
        return version("verlprof")
    except PackageNotFoundError:
        return "0+unknown"


def bundle_salt(work_dir: Path) -> str:
    """A random salt kept in the WORK dir (never in a bundle), so host hashes cannot be reversed."""
    p = work_dir / "salt"
    try:
        return p.read_text().strip()
    except OSError:
        atomic.write_text(p, _secrets.token_hex(16))
        return p.read_text().strip()
