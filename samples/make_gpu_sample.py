#!/usr/bin/env python3
"""Make `samples/gpu_run/`: the second shipped sample, from real GPU captures (issue 42).

Why: the first sample (`tiny_run/`, make_sample.py) was made on a CPU-only machine, so its report
shows no kernel, no copy, no GPU memory and no GPU idle: the reasons people profile. This one is
cut from a real 2-rank run on one NVIDIA H200 that tests/data already holds
(`tests/data/gpu_captures/n2-gloo-same-gpu/`, its README says how it was recorded: nsys 2025.3.1,
torch 2.11 + CUDA 13.0, `--trace=cuda,nvtx,cublas,ucx,cudnn,osrt --cuda-memory-usage=true`, one
report per step and rank as verl's continuous mode writes them, rank 1 a planted 50 ms straggler
in the actor update, both ranks on the one GPU through gloo, so their collectives are
device-to-host and host-to-device copies, not NCCL kernels).

What it does, and nothing else:
1. decompresses the SQLite exports of profiled steps 2 and 3 of both ranks (step 1 is the CUDA
   start-up, 4 s; two steps are what a recurrence needs and keep the sample at about 6 MB);
2. scrubs them with verlprof's own scrubber (`verlprof scrub`, the same as collect runs): tables
   and columns by allowlist, free text pseudonymised, the environment dropped; user-written text
   no public source writes becomes one pseudonym (issue 39: the processes' name, the recording
   machine's interpreter path `/opt/.../bin/python3`, is `name-<letters>`);
3. puts back, from the raw export, exactly the three variables verlprof reads to know which rank
   a Ray worker's report is (`RANK`, `WORLD_SIZE`, `LOCAL_RANK`, stages/readers/report_identity.py):
   a scrubbed export has no environment at all, and without them both processes read as one rank.
   They go in a `DeviceEnvironment` row holding only `RANK=..;WORLD_SIZE=..;LOCAL_RANK=..`;
4. VACUUMs each file and writes it as `ray_logs/nsight/worker_process_<pid>.<n>.sqlite`, the
   layout of a Ray session's nsight folder (each report's export beside it; the `.nsys-rep` files
   themselves embed the recording machine's environment and are not shipped).

Run from the repository root: `python samples/make_gpu_sample.py` (rewrites samples/gpu_run/; the
inputs are never modified). Deterministic: the scrubber's pseudonyms are keyed, so a re-run with
the same inputs writes the same rows.
"""
from __future__ import annotations

import lzma
import re
import shutil
import sqlite3
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SOURCE = ROOT / "tests" / "data" / "gpu_captures" / "n2-gloo-same-gpu"
OUT = ROOT / "samples" / "gpu_run"
STEPS = (2, 3)
IDENTITY = ("RANK", "WORLD_SIZE", "LOCAL_RANK")


def identity_of(raw: Path) -> str:
    """`RANK=1;WORLD_SIZE=2;LOCAL_RANK=1` from the raw export's environment (those keys only)."""
    con = sqlite3.connect(f"file:{raw}?mode=ro", uri=True)
    try:
        row = con.execute("SELECT value FROM TARGET_INFO_SYSTEM_ENV WHERE name = 'DeviceEnvironment'").fetchone()
    finally:
        con.close()
    env = dict(m.groups() for m in re.finditer(r"(?:^|[;\x00\n])([A-Z_]+)=([^;\x00\n]*)", row[0] if row else ""))
    kept = [f"{k}={env[k]}" for k in IDENTITY if re.fullmatch(r"\d+", env.get(k, ""))]
    if len(kept) < 2:
        raise SystemExit(f"{raw}: no RANK / WORLD_SIZE in its environment")
    return ";".join(kept)


def put_identity(scrubbed: Path, identity: str) -> None:
    con = sqlite3.connect(scrubbed)
    try:
        con.execute("DELETE FROM TARGET_INFO_SYSTEM_ENV WHERE name = 'DeviceEnvironment'")
        con.execute("INSERT INTO TARGET_INFO_SYSTEM_ENV (globalVid, devStateName, name, nameEnum, value) "
                    "SELECT globalVid, devStateName, 'DeviceEnvironment', 0, ? FROM TARGET_INFO_SYSTEM_ENV LIMIT 1",
                    (identity,))
        con.commit()
        con.execute("VACUUM")
    finally:
        con.close()


def main(out: Path = OUT) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        raw_dir, scrub_dir = Path(tmp) / "raw", Path(tmp) / "scrubbed"
        raw_dir.mkdir()
        names = []
        for xz in sorted(SOURCE.glob("worker_process_*.sqlite.xz")):
            if int(xz.name.split(".")[1]) not in STEPS:
                continue
            raw = raw_dir / xz.name[:-3]
            raw.write_bytes(lzma.decompress(xz.read_bytes()))
            names.append(raw.name)
        # its own WORK: done records of another run are not reused, and the review list (the raw
        # process names it pseudonymised) goes with the temporary folder, not into the user's cache
        subprocess.run([sys.executable, "-m", "verlprof.pipeline.cli", "scrub", str(raw_dir), "-o", str(scrub_dir),
                        "--work", str(Path(tmp) / "work")], check=True)
        staging = out.with_name(out.name + ".tmp")
        shutil.rmtree(staging, ignore_errors=True)
        nsight = staging / "ray_logs" / "nsight"
        nsight.mkdir(parents=True)
        for name in names:
            shutil.copyfile(scrub_dir / name, nsight / name)
            put_identity(nsight / name, identity_of(raw_dir / name))
        shutil.rmtree(out, ignore_errors=True)
        staging.rename(out)
    total = sum(p.stat().st_size for p in out.rglob("*") if p.is_file())
    print(f"{out}: {len(names)} exports, {total / 2**20:.1f} MB")


if __name__ == "__main__":
    import argparse

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=OUT, help="where to write the sample (default: samples/gpu_run)")
    main(ap.parse_args().out)
