"""Three 4-rank "verl steps" on CPU with gloo and torch.profiler (issue 32): who held the step back.

Each rank runs 3 steps shaped like verl's worker (`step > gen > generate_sequences`,
`old_log_prob > actor_compute_log_prob`, `update_actor > actor_update`), the only collective being
the gloo all_reduce of the actor update (wrapped in a `all_reduce` range, as verl's FSDP/Megatron
reduce sits inside `actor_update`). One torch.profiler chrome trace per step and rank, named the
way verl 0.9 names them; step 1 runs unprofiled (first calls and the profiler's start-up warm up), steps 2-4 are profiled. Scenarios (`--scenario`):

- `gen_slow`: rank `--slow-rank` sleeps `--slow-ms` inside `generate_sequences` in every step, so
  the others wait for it in the actor update's all_reduce (the culprit loses the time in one phase,
  the victims pay in a later one);
- `update_slow`: rank `--slow-rank` sleeps `--slow-ms` inside `actor_update`, before its
  all_reduce, in every step (the culprit and the wait in one phase);
- `even`: nobody sleeps (all ranks equal within noise).

    torchrun --nproc_per_node=4 make_straggler_runs.py --scenario gen_slow --slow-rank 2 --slow-ms 150 --out gen_slow
"""
from __future__ import annotations

import argparse
import os
import time
from pathlib import Path

import torch
import torch.distributed as dist
from torch.profiler import ProfilerActivity, profile, record_function


def work(n: int, ms: float) -> torch.Tensor:
    """A little CPU work, then `ms` of sleep: like a rank waiting on its GPU. Why sleep: four
    compute-bound ranks on a shared 2-core machine differ by whole scheduler slices (10 ms and
    more), which is noise no straggler rule should name; sleeping ranks do not contend."""
    a = torch.randn(n, n)
    for _ in range(2):
        a = torch.tanh(a @ a / n)
    time.sleep(ms / 1000)
    return a


def one_step(args: argparse.Namespace, rank: int) -> None:
    slow = rank == args.slow_rank
    with record_function("step"):
        with record_function("gen"), record_function("generate_sequences"):
            work(64, 200)
            if slow and args.scenario == "gen_slow":
                time.sleep(args.slow_ms / 1000)
        with record_function("old_log_prob"), record_function("actor_compute_log_prob"):
            work(64, 80)
        with record_function("update_actor"), record_function("actor_update"):
            g = work(64, 100)
            if slow and args.scenario == "update_slow":
                time.sleep(args.slow_ms / 1000)
            with record_function("all_reduce"):
                dist.all_reduce(g)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--scenario", choices=("gen_slow", "update_slow", "even"), required=True)
    ap.add_argument("--steps", type=int, default=3, help="profiled steps, after one unprofiled warm-up step")
    ap.add_argument("--slow-rank", type=int, default=2)
    ap.add_argument("--slow-ms", type=float, default=150.0)
    args = ap.parse_args()
    torch.set_num_threads(1)
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    args.out.mkdir(parents=True, exist_ok=True)
    for step in range(1, args.steps + 2):
        dist.barrier()
        if step == 1:   # warm-up, not profiled (verl: global_profiler.steps=[2,3,4]): first-call costs,
            with profile(activities=[ProfilerActivity.CPU]):   # the profiler's own start-up included
                pass
            one_step(args, rank)
            continue
        with profile(activities=[ProfilerActivity.CPU]) as prof:
            one_step(args, rank)
        stamp = time.strftime("%Y%m%d%H%M%S") + "000"
        name = f"actor-rollout-ref_train_step{step}_rank{rank}-of-{world}_pid{os.getpid()}_{stamp}.json.gz"
        prof.export_chrome_trace(str(args.out / name))
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
