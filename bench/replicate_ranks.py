"""Build an N-rank bundle from a real collect bundle by replicating its ranks (issue 23).

Why: no machine here runs 1,000 ranks, but the views and `summarize` must stay small and fast at
that scale. Rank r of the copy is real rank (r mod R) of the source with its own rank and
source name (`rank<r>/<file>`; the pid stays, so each copy finds its GPU lane in the real window
trace); every time stays as captured (so real arrival offsets and stragglers repeat), and the
manifest lists one artifact per rank. Window traces are not copied (the copy's report has no GPU
lanes unless `traces=True`, which links every rank to its real rank's trace files).

    python bench/replicate_ranks.py BUNDLE OUT --ranks 1024
"""
from __future__ import annotations

import argparse
import json
import shutil
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from verlprof.pipeline.ranks import write_ranks


def _replicate(table: pa.Table, n: int, src_of: dict[str, str]) -> pa.Table:
    ranks = sorted({r for r in table.column("rank").to_pylist() if r is not None})
    parts = []
    for r in range(n):
        real = ranks[r % len(ranks)]
        t = table.filter(pc.equal(table.column("rank"), real))
        srcs = [src_of.setdefault(s, s) for s in t.column("source").to_pylist()]
        names = [f"rank{r:04d}/{s.rsplit('/', 1)[-1]}" for s in srcs]
        t = t.set_column(t.schema.get_field_index("rank"), "rank", pa.array([r] * t.num_rows, t.schema.field("rank").type))
        t = t.set_column(t.schema.get_field_index("source"), "source", pa.array(names, pa.string()))
        parts.append(t)
    return pa.concat_tables(parts)


def replicate_bundle(src: Path, dst: Path, n: int, traces: bool = False) -> Path:
    """Write an `n`-rank copy of bundle `src` at `dst` (summaries, ranks.parquet and manifest)."""
    src, dst = Path(src), Path(dst)
    (dst / "summaries").mkdir(parents=True, exist_ok=True)
    phases = None
    for name in ("phases", "kernels", "steps"):
        p = src / "summaries" / f"{name}.parquet"
        if not p.is_file():
            continue
        t = pq.read_table(p)
        if "rank" in t.column_names and t.num_rows:
            t = _replicate(t, n, {})
        pq.write_table(t, dst / "summaries" / f"{name}.parquet", compression="zstd")
        if name == "phases":
            phases = t
    write_ranks(phases.to_pandas() if phases is not None else [], dst / "summaries")
    man = json.loads((src / "manifest.json").read_text())
    arts = [a for a in man.get("artifacts", []) if isinstance(a, dict) and a.get("rank") is not None
            and a.get("status") in ("done", "reused")]
    real_ranks = sorted({a["rank"] for a in arts})
    new_arts = []
    for r in range(n):
        for a in (x for x in arts if real_ranks and x["rank"] == real_ranks[r % len(real_ranks)]):
            new_arts.append({**a, "rank": r, "rel": f"rank{r:04d}/{a['rel'].rsplit('/', 1)[-1]}"})
    man["artifacts"] = new_arts
    if traces and man.get("traces"):
        shutil.copytree(src / "traces", dst / "traces", dirs_exist_ok=True)
        by_rank: dict[int, list[dict]] = {}
        for t in man["traces"]:
            a = next((x for x in arts if x["rel"] == t.get("source")), None)
            if a is not None:
                by_rank.setdefault(a["rank"], []).append(t)
        man["traces"] = [{**t, "source": f"rank{r:04d}/{t['source'].rsplit('/', 1)[-1]}"}
                         for r in range(n) for t in by_rank.get(real_ranks[r % len(real_ranks)], [])]
    else:
        man.pop("traces", None)
    (dst / "manifest.json").write_text(json.dumps(man))
    return dst


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("bundle", type=Path)
    ap.add_argument("out", type=Path)
    ap.add_argument("--ranks", type=int, default=1024)
    ap.add_argument("--traces", action="store_true")
    a = ap.parse_args()
    print(replicate_bundle(a.bundle, a.out, a.ranks, a.traces))


if __name__ == "__main__":
    main()
