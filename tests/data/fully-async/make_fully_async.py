"""The NVTX ranges verl's fully-async trainer opens, from verl's own `marked_timer`, on a CPU.

`verl/experimental/fully_async_policy/fully_async_trainer.py` (FullyAsyncTrainer.fit): every
training step is `marked_timer("step")` around `marked_timer("gen")` (samples from the message
queue) and the batch's stages; after every `trigger_parameter_sync_step` steps,
`_trigger_parameter_sync_after_step` raises `current_param_version` by one and syncs the weights
to the rollouter inside `marked_timer("timing_s/wait_last_valid")` and
`marked_timer("timing_s/param_sync")`. Here the work is sleeps of fixed lengths, the first
version slower (warm-up), as the real loop's calls would be; only the range structure matters.

    python make_fully_async.py --steps 6 --trigger 2     # 3 parameter versions
    python make_fully_async.py --steps 6 --trigger 2 --test-freq 2 --tail-resync
        # and the end of `fit()`: `_fit_update_weights()` once more when the version is not a
        # multiple of `trainer.test_freq` (3 % 2 != 0): a weight sync of version 3 again, outside
        # any `step` range (`current_param_version` is raised only in `_fit_update_local_step`)
"""
import argparse
import time

from verl.utils.profiler import marked_timer

p = argparse.ArgumentParser()
p.add_argument("--steps", type=int, default=6)
p.add_argument("--trigger", type=int, default=2, help="trigger_parameter_sync_step")
p.add_argument("--test-freq", type=int, default=1, help="trainer.test_freq")
p.add_argument("--tail-resync", action="store_true", help="end as fit() does: re-sync unless version %% test_freq == 0")
args = p.parse_args()

timing: dict[str, float] = {}
version, local = 0, 1
for global_step in range(1, args.steps + 1):
    slow = 0.05 if version == 0 else 0.0
    with marked_timer("step", timing):
        with marked_timer("gen", timing, color="red"):
            time.sleep(0.01 + slow)
        with marked_timer("old_log_prob", timing, color="blue"):
            time.sleep(0.005)
        with marked_timer("update_actor", timing, color="red"):
            time.sleep(0.02 + slow)
    if local < args.trigger:
        local += 1
        continue
    version, local = version + 1, 1
    with marked_timer("timing_s/wait_last_valid", timing):
        time.sleep(0.003)
    with marked_timer("timing_s/param_sync", timing):
        time.sleep(0.008)
if args.tail_resync and (version % args.test_freq != 0 or local > 1):
    with marked_timer("timing_s/param_sync", timing):   # fit()'s end: _fit_update_weights(), same version
        time.sleep(0.008)
print("parameter versions:", version)
