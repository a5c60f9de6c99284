"""Build a big torch chrome trace from the real H200 fixture, for bench/bench_torch.py.

Why: verlprof must stay fast and lean on the multi-hundred-MB traces real verl runs write, but the
repository only carries small real traces. This script replicates the events of one real trace
(`tests/data/h200-torch-2.11/*step2*.json.gz` by default) back to back in time, shifting
timestamps and every id that links events (`correlation`, `External id`, flow ids) so the copy is
a consistent, valid trace, until the uncompressed JSON reaches `--mb` megabytes (default 400).

The output is gzip-compressed like the traces verl writes (`.json.gz`) and lands in `bench/data/`
(git-ignored). It is written streaming and atomically, so memory stays at one replica.

    python bench/make_big_trace.py [--mb 400] [--src FILE] [--out bench/data/big_trace.json.gz]
"""
from __future__ import annotations

import argparse
import gzip
import sys
from pathlib import Path

import orjson

REPO = Path(__file__).resolve().parents[1]
FIXTURES = REPO / "tests" / "data" / "h200-torch-2.11"
DEFAULT_OUT = REPO / "bench" / "data" / "big_trace.json.gz"


def _default_src() -> Path:
    found = sorted(FIXTURES.glob("*step2*.json.gz"))
    if not found:
        sys.exit(f"no fixture trace under {FIXTURES}")
    return found[0]


def _max_ids(events: list[dict]) -> tuple[int, int, int]:
    """Largest correlation, External id and flow id, so each replica can shift past them."""
    corr = ext = flow = 0
    for e in events:
        a = e.get("args")
        if isinstance(a, dict):
            c = a.get("correlation")
            if isinstance(c, int):
                corr = max(corr, c)
            x = a.get("External id")
            if isinstance(x, int):
                ext = max(ext, x)
        if e.get("ph") in ("s", "f", "t") and isinstance(e.get("id"), int):
            flow = max(flow, e["id"])
    return corr + 1, ext + 1, flow + 1


def _shifted(e: dict, k: int, dt: float, corr: int, ext: int, flow: int) -> dict:
    """Event `e` of replica `k`: later by k*dt microseconds, ids moved into replica k's range."""
    e = dict(e)
    if isinstance(e.get("ts"), (int, float)):
        e["ts"] = round(e["ts"] + k * dt, 3)
    a = e.get("args")
    if isinstance(a, dict):
        a = dict(a)
        if isinstance(a.get("correlation"), int) and a["correlation"] > 0:
            a["correlation"] += k * corr
        if isinstance(a.get("External id"), int) and a["External id"] > 0:
            a["External id"] += k * ext
        e["args"] = a
    if e.get("ph") in ("s", "f", "t") and isinstance(e.get("id"), int):
        e["id"] += (k * corr) if e.get("cat") == "ac2g" else (k * flow)
    return e


def make(src: Path, out: Path, target_mb: float) -> tuple[int, int, int]:
    """Write the replicated trace; return (replicas, events, uncompressed bytes)."""
    with gzip.open(src, "rb") as fh:
        doc = orjson.loads(fh.read())
    events = [e for e in doc["traceEvents"] if e.get("ph") != "M"]
    meta_events = [e for e in doc["traceEvents"] if e.get("ph") == "M"]
    header = {k: v for k, v in doc.items() if k != "traceEvents"}
    ts = [e["ts"] for e in events if isinstance(e.get("ts"), (int, float))]
    ends = [e["ts"] + e.get("dur", 0) for e in events if isinstance(e.get("ts"), (int, float))]
    dt = (max(ends) - min(ts)) + 1000.0  # replicas 1 ms apart
    corr, ext, flow = _max_ids(events)
    target = int(target_mb * 1_000_000)

    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(f".{out.name}.tmp")
    written = n_events = k = 0
    with gzip.open(tmp, "wb", compresslevel=1) as gz:
        def put(b: bytes) -> None:
            nonlocal written
            gz.write(b)
            written += len(b)

        head = orjson.dumps(header, option=orjson.OPT_INDENT_2)
        put(head[:-2] + b',\n  "traceEvents": [\n')  # drop the closing "\n}"
        first = True
        for e in meta_events:
            put((b"" if first else b",\n") + orjson.dumps(e))
            first = False
            n_events += 1
        while written < target:
            chunk = b",\n".join(orjson.dumps(_shifted(e, k, dt, corr, ext, flow)) for e in events)
            put((b"" if first else b",\n") + chunk)
            first = False
            n_events += len(events)
            k += 1
        put(b"\n  ]\n}\n")
    tmp.replace(out)
    return k, n_events, written


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--mb", type=float, default=400.0, help="uncompressed size to reach (MB)")
    ap.add_argument("--src", type=Path, default=None, help="real trace to replicate")
    ap.add_argument("--out", type=Path, default=DEFAULT_OUT)
    a = ap.parse_args()
    src = a.src or _default_src()
    k, n, size = make(src, a.out, a.mb)
    print(f"{a.out}: {k} replicas of {src.name}, {n:,} events, {size / 1e6:.0f} MB uncompressed, "
          f"{a.out.stat().st_size / 1e6:.0f} MB gzip")


if __name__ == "__main__":
    main()
