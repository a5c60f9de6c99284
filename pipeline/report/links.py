"""Links from the page to the window traces `collect` wrote beside it.

Why: people click from a bar or a lane to the trace of that process, so the bundle folder (or the
unpacked `pack` archive) is browsable from the page. Only `traces/...` names are ever linked,
URL-quoted: a source name with `#`, `?` or `:` stays a file name and can never become a URL
pointing elsewhere. Perfetto is named in text only, so the page holds no outside URL at all.
"""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import quote


def trace_href(rel: Any) -> str | None:
    """A manifest trace path as a safe relative href, or None (no scheme, no absolute path, no `..`)."""
    if not isinstance(rel, str) or not rel.startswith("traces/") or "\\" in rel:
        return None
    parts = rel.split("/")
    if any(p in ("", ".", "..") for p in parts):
        return None
    return quote(rel, safe="/")


@dataclass
class TraceFiles:
    """One source's window traces: hrefs for the page, raw relative names for reading them."""
    source: str
    kind: str
    chrome: str | None
    sqlite: str | None
    events: int | None
    sizes: dict[str, int] = field(default_factory=dict)
    chrome_rel: str | None = None
    sqlite_rel: str | None = None

    @property
    def href(self) -> str | None:
        return self.chrome or self.sqlite


def traces_of(manifest: Mapping[str, Any]) -> dict[str, TraceFiles]:
    """source rel -> its window traces, from `manifest["traces"]` (malformed entries are skipped)."""
    out: dict[str, TraceFiles] = {}
    entries = manifest.get("traces")
    for t in entries if isinstance(entries, list) else []:
        if not isinstance(t, Mapping) or not isinstance(t.get("source"), str):
            continue
        outputs = t.get("outputs") if isinstance(t.get("outputs"), Mapping) else {}
        counts = t.get("counts") if isinstance(t.get("counts"), Mapping) else {}
        chrome, sqlite = trace_href(outputs.get("chrome")), trace_href(outputs.get("sqlite"))
        if chrome is None and sqlite is None:
            continue
        events = t.get("events")
        n = (sum(v for k, v in events.items() if k != "metadata" and isinstance(v, int))
             if isinstance(events, Mapping) else None)
        sizes = {k: int(c["size"]) for k, c in counts.items()
                 if isinstance(c, Mapping) and isinstance(c.get("size"), int)}
        out.setdefault(t["source"], TraceFiles(
            t["source"], str(t.get("kind") or ""), chrome, sqlite, n, sizes,
            outputs.get("chrome") if chrome else None, outputs.get("sqlite") if sqlite else None))
    return out


def fmt_bytes(n: int | None) -> str:
    if n is None:
        return ""
    size = float(n)
    for unit in ("B", "KB", "MB", "GB"):
        if size < 1024 or unit == "GB":
            return f"{size:,.0f} {unit}" if unit == "B" else f"{size:,.1f} {unit}"
        size /= 1024
    return ""


def leaf(href: str) -> str:
    """The file-name part of an href, for link text (`.trace.json.gz` kept: it says what opens it)."""
    return ".trace.json.gz" if href.endswith(".trace.json.gz") else href.rsplit("/", 1)[-1]


TRACE_NOTE = ('<p class="note">Each process opens its own window trace (the summarized step, scrubbed). '
              'Open a <code>.trace.json.gz</code> in Perfetto (ui.perfetto.dev, <i>Open trace file</i>; '
              'it runs in your browser and uploads nothing) or in <code>chrome://tracing</code> '
              '(<i>Load</i>); a <code>.sqlite</code> is the nsys export of the window, for SQL or '
              "nsys's own stats scripts. The links are relative: keep this page inside the bundle folder.</p>")
