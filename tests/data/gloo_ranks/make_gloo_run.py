"""A small multi-rank "verl step" on CPU with gloo, one rank slow in generation (issue 23).

Each rank runs 3 steps shaped like verl's (`step > gen > generate_sequences`, `old_log_prob`,
`update_actor > actor_update`), with a gloo all_reduce at the end of generation and one in the
actor update. Rank `--slow-rank` sleeps `--slow-ms` inside `generate_sequences` before its
all_reduce, so the other ranks wait for it there. Ranges are both NVTX (for nsys; python `nvtx`
0.2.10, the last one nsys 2022.4 reads) and torch `record_function` (for torch.profiler), and each
step is written as a torch chrome trace named the way verl 0.9 names them.

    torchrun --nproc_per_node=4 make_gloo_run.py --out traces --slow-rank 2 --slow-ms 150
    # each rank under its own nsys (started a few seconds apart: nsys 2022.4 deadlocks otherwise):
    torchrun --nproc_per_node=4 --no-python sh -c 'sleep $((LOCAL_RANK*3)); exec nsys profile \
        --trace=nvtx,osrt --sample=none --cpuctxsw=none -o nsys/worker_process_%p python make_gloo_run.py ...'
"""
from __future__ import annotations

import argparse
import os
import time
from pathlib import Path

import nvtx
import torch
import torch.distributed as dist
from torch.profiler import ProfilerActivity, profile, record_function


class Range:
    """One NVTX range and one torch user annotation of the same name."""

    def __init__(self, name: str) -> None:
        self.name = name

    def __enter__(self) -> "Range":
        self.rf = record_function(self.name)
        self.rf.__enter__()
        self.nv = nvtx.start_range(message=self.name)
        return self

    def __exit__(self, *exc: object) -> None:
        nvtx.end_range(self.nv)
        self.rf.__exit__(*exc)


def work(n: int) -> torch.Tensor:
    a = torch.randn(n, n)
    for _ in range(4):
        a = torch.tanh(a @ a / n)
    return a


def one_step(args: argparse.Namespace, rank: int) -> None:
    with Range("step"):
        with Range("gen"), Range("generate_sequences"):
            work(192)
            if rank == args.slow_rank:
                time.sleep(args.slow_ms / 1000)
            t = torch.ones(1024)
            with Range("all_reduce"):
                dist.all_reduce(t)
        with Range("old_log_prob"), Range("actor_compute_log_prob"):
            work(128)
        with Range("update_actor"), Range("actor_update"):
            g = work(160)
            with Range("all_reduce"):
                dist.all_reduce(g)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--slow-rank", type=int, default=2)
    ap.add_argument("--slow-ms", type=float, default=150.0)
    args = ap.parse_args()
    torch.set_num_threads(1)
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    args.out.mkdir(parents=True, exist_ok=True)
    for step in range(1, args.steps + 1):
        dist.barrier()
        with profile(activities=[ProfilerActivity.CPU]) as prof:
            one_step(args, rank)
        stamp = time.strftime("%Y%m%d%H%M%S") + "000"
        name = f"actor-rollout-ref_train_step{step}_rank{rank}-of-{world}_pid{os.getpid()}_{stamp}.json.gz"
        prof.export_chrome_trace(str(args.out / name))
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
