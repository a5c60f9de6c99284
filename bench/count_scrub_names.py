"""How many distinct kernel, op, range and thread names of the real captures scrub changes (issue 39).

Over every capture in tests/data (nsys SQLite exports, torch traces, the memory snapshot), each
distinct name is read with the field it sits in, then judged twice:

- before: by the scrubber of another checkout (`--before PYTHON`, e.g. /work/main/.venv/bin/python:
  the word-by-word vocabulary rule), given the same location names;
- after: by this checkout's Scrubber, by provenance (`scrub(text, location, field)`).

It prints one table row per class: distinct names, changed before, changed after, changed after
that a public package writes (`public_names().is_public` or a toolchain name: must be 0), and
changed after that the owner's review list does not name (must be 0).

    .venv/bin/python bench/count_scrub_names.py [--before /work/main/.venv/bin/python]
"""
from __future__ import annotations

import argparse
import gzip
import json
import pickle
import re
import sqlite3
import subprocess
import sys
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))
from testdata import DATA, data_path  # noqa: E402

# (class, location as scrub names it, field for the provenance table)
Name = tuple[str, str, str, str]


def _sqlite(path: Path) -> set[Name]:
    con = sqlite3.connect(f"file:{path}?mode=ro&immutable=1", uri=True)
    con.text_factory = lambda b: b.decode("utf-8", "replace")
    out: set[Name] = set()
    try:
        tables = {r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type='table'")}
        q = [("kernel", "CUPTI_ACTIVITY_KIND_KERNEL", c) for c in ("demangledName", "shortName")]
        q += [("op", "CUPTI_ACTIVITY_KIND_RUNTIME", "nameId")]
        for cls, t, c in q:
            if t in tables and c in {r[1] for r in con.execute(f"PRAGMA table_info({t})")}:
                out |= {(cls, v, "StringIds.value", "StringIds.value") for (v,) in con.execute(
                    f"SELECT DISTINCT s.value FROM {t} k JOIN StringIds s ON s.id = k.{c}")}
        if "NVTX_EVENTS" in tables:
            out |= {("range", v, "NVTX_EVENTS.text", "NVTX_EVENTS.text")
                    for (v,) in con.execute("SELECT DISTINCT text FROM NVTX_EVENTS WHERE text IS NOT NULL")}
            out |= {("range", v, "StringIds.value", "StringIds.value[user]") for (v,) in con.execute(
                "SELECT DISTINCT s.value FROM NVTX_EVENTS n JOIN StringIds s ON s.id = n.textId")}
        if "ThreadNames" in tables:
            out |= {("thread", v, "StringIds.value", "StringIds.value[user]") for (v,) in con.execute(
                "SELECT DISTINCT s.value FROM ThreadNames t JOIN StringIds s ON s.id = t.nameId")}
    finally:
        con.close()
    return {n for n in out if isinstance(n[1], str) and n[1]}


def _trace(path: Path) -> set[Name]:
    opener = gzip.open if path.name.endswith(".gz") else open
    with opener(path, "rt", encoding="utf-8") as f:
        doc = json.load(f)
    events = doc if isinstance(doc, list) else doc.get("traceEvents", ())
    out: set[Name] = set()
    for e in events:
        if not isinstance(e, dict) or not isinstance(e.get("name"), str) or not e["name"]:
            continue
        cat, ph = e.get("cat"), e.get("ph")
        field = "traceEvents[ph:M].name" if ph == "M" else f"traceEvents[{cat if isinstance(cat, str) else ''}].name"
        if cat == "kernel":
            out.add(("kernel", e["name"], "traceEvents[].name", field))
        elif cat in ("cpu_op", "cuda_runtime", "cuda_driver"):
            out.add(("op", e["name"], "traceEvents[].name", field))
        elif cat in ("user_annotation", "gpu_user_annotation"):
            out.add(("range", e["name"], "traceEvents[].name", field))
        elif ph == "M" and e["name"] == "thread_name" and isinstance((e.get("args") or {}).get("name"), str):
            out.add(("thread", e["args"]["name"], "traceEvents[].args.name", "traceEvents[].args.name"))
    return out


def _snapshot(path: Path) -> set[Name]:
    with path.open("rb") as f:
        snap = pickle.load(f)
    return {("range", a["name"], "snapshot.external_annotations[].name", "snapshot.external_annotations[].name")
            for a in snap.get("external_annotations", ()) or () if isinstance(a, dict) and isinstance(a.get("name"), str)}


def names() -> set[Name]:
    out: set[Name] = set()
    for p in sorted(DATA.rglob("*.sqlite*")):
        if "golden" not in p.parts:
            rel = str(p.relative_to(DATA))
            out |= _sqlite(data_path(rel[:-3] if rel.endswith(".xz") else rel))
    for p in sorted(DATA.rglob("*.json.gz")) + sorted(DATA.rglob("*.json.xz")):
        if "golden" not in p.parts:
            rel = str(p.relative_to(DATA))
            out |= _trace(data_path(rel[:-3]) if rel.endswith(".xz") else p)
    out |= _snapshot(data_path("h200-torch-2.11/step2/torch_memory_rank0_pid804.pickle"))
    return out


_BEFORE = """
import json, sys
from verlprof.stages.scrub import Scrubber, load_policy
from verlprof.stages.scrub.identities import Pseudonyms
sc = Scrubber(load_policy(use_local_environment=False), Pseudonyms(salt="count"))
rows = json.load(sys.stdin)
json.dump([sc.scrub(t, loc) != t for t, loc in rows], sys.stdout)
"""


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--before", help="python of another checkout (its installed verlprof judges 'before')")
    args = ap.parse_args()
    from verlprof.stages.scrub import Scrubber, load_policy
    from verlprof.stages.scrub.identities import Pseudonyms
    from verlprof.stages.scrub.provenance import is_structure, is_toolchain_name, is_toolchain_op, origin_of, Origin
    from verlprof.stages.scrub.public_names import public_names

    rows = sorted(names())
    sc = Scrubber(load_policy(use_local_environment=False), Pseudonyms(salt="count"))
    published = [sc.scrub(t, loc, field) for _c, t, loc, field in rows]
    after = [p != t for p, (_c, t, _l, _f) in zip(published, rows)]
    named = sc.named_list()
    listed = {p for p, _w in named.values()}
    before = None
    if args.before:
        res = subprocess.run([args.before, "-c", _BEFORE], input=json.dumps([[t, loc] for _c, t, loc, _f in rows]),
                             capture_output=True, text=True, check=True)
        before = json.loads(res.stdout)
    pn = public_names()

    def public(t: str, field: str) -> bool:
        return (origin_of(field) is Origin.TOOLCHAIN or pn.is_public(t) or is_structure(t) or is_toolchain_name(t)
                or (origin_of(field) is Origin.OP and is_toolchain_op(t, bare=True))
                or (origin_of(field) is Origin.OP_NAMED and is_toolchain_op(t)))

    table: dict[str, list[int]] = defaultdict(lambda: [0, 0, 0, 0, 0])
    for i, (cls, t, _loc, field) in enumerate(rows):
        r = table[cls]
        r[0] += 1
        r[1] += bool(before[i]) if before is not None else 0
        r[2] += after[i]
        r[3] += after[i] and public(t, field)
        made = re.findall(r"name-[g-z]{8}", published[i])       # each pseudonym it holds, for the owner
        r[4] += after[i] and not (made and all(m in listed for m in made))
    print(f"corpus: {pn.version}  ({pn.strings} strings, {pn.templates} templates)")
    print(f"{'class':8} {'distinct':>9} {'changed before':>15} {'changed after':>14} {'public changed':>15} {'not in review':>14}")
    for cls in ("kernel", "op", "range", "thread"):
        d, b, a, p, nr = table[cls]
        print(f"{cls:8} {d:9d} {b if before is not None else '-':>15} {a:14d} {p:15d} {nr:14d}")
    tot = [sum(table[c][k] for c in table) for k in range(5)]
    print(f"{'total':8} {tot[0]:9d} {tot[1] if before is not None else '-':>15} {tot[2]:14d} {tot[3]:15d} {tot[4]:14d}")
    for cls in ("kernel", "op", "range", "thread"):
        changed = sorted({t for i, (c, t, _l, _f) in enumerate(rows) if after[i] and c == cls})
        print(f"{cls} names changed after (first 12):", ", ".join(repr(t[:48]) for t in changed[:12]))


if __name__ == "__main__":
    main()
