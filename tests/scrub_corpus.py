"""Every kernel name and every NVTX / annotation name of every real capture in tests/data.

Why a module: the false-positive corpus test (test_scrub_corpus.py) and the benchmark's per-string
cost both read the same names, and the names are what users need intact in a shared bundle.
"""
from __future__ import annotations

import gzip
import json
import pickle
import sqlite3
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from testdata import DATA, data_path  # noqa: E402

_KERNEL_COLS = ("demangledName", "shortName", "mangledName")


def sqlite_files() -> list[Path]:
    out = []
    for p in sorted(DATA.rglob("*.sqlite*")):
        if "golden" in p.parts:
            continue
        rel = str(p.relative_to(DATA))
        out.append(data_path(rel[:-3] if rel.endswith(".xz") else rel))
    return out


def _sqlite_names(path: Path) -> set[str]:
    con = sqlite3.connect(f"file:{path}?mode=ro&immutable=1", uri=True)
    con.text_factory = lambda b: b.decode("utf-8", "replace")
    names: set[str] = set()
    try:
        tables = {r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type='table'")}
        if "CUPTI_ACTIVITY_KIND_KERNEL" in tables:
            cols = {r[1] for r in con.execute("PRAGMA table_info(CUPTI_ACTIVITY_KIND_KERNEL)")}
            for c in _KERNEL_COLS:
                if c in cols:
                    names.update(r[0] for r in con.execute(
                        f"SELECT DISTINCT s.value FROM CUPTI_ACTIVITY_KIND_KERNEL k JOIN StringIds s ON s.id = k.{c}"))
        if "NVTX_EVENTS" in tables:
            names.update(r[0] for r in con.execute("SELECT DISTINCT text FROM NVTX_EVENTS WHERE text IS NOT NULL"))
            names.update(r[0] for r in con.execute(
                "SELECT DISTINCT s.value FROM NVTX_EVENTS n JOIN StringIds s ON s.id = n.textId"))
    finally:
        con.close()
    return {n for n in names if isinstance(n, str) and n}


_TRACE_CATS = {"kernel", "user_annotation", "gpu_user_annotation"}


def _trace_names(path: Path) -> set[str]:
    opener = gzip.open if path.name.endswith(".gz") else open
    with opener(path, "rt", encoding="utf-8") as f:
        doc = json.load(f)
    events = doc if isinstance(doc, list) else doc.get("traceEvents", ())
    return {e["name"] for e in events
            if isinstance(e, dict) and e.get("cat") in _TRACE_CATS and isinstance(e.get("name"), str) and e["name"]}


def _snapshot_names(path: Path) -> set[str]:
    with path.open("rb") as f:
        snap = pickle.load(f)
    names: set[str] = set()
    for a in snap.get("external_annotations", ()) or ():
        if isinstance(a, dict) and isinstance(a.get("name"), str):
            names.add(a["name"])
    return names


def corpus() -> dict[str, set[str]]:
    """{capture file name: its kernel and range / annotation names}."""
    out: dict[str, set[str]] = {}
    for p in sqlite_files():
        out[p.name] = _sqlite_names(p)
    for p in sorted(DATA.rglob("*.json.gz")) + sorted(DATA.rglob("*.json.xz")):
        if "golden" in p.parts:
            continue
        rel = str(p.relative_to(DATA))
        path = data_path(rel[:-3]) if rel.endswith(".xz") else p
        if path.name not in out:
            out[path.name] = _trace_names(path)
    snap = data_path("h200-torch-2.11/step2/torch_memory_rank0_pid804.pickle")
    out[snap.name] = _snapshot_names(snap)
    return out
