#!/usr/bin/env python
"""Generate ``samples/tiny_run``: a tiny but real "verl run" profiled on a CPU-only machine.

Usage (from the repository root; needs nsys, ray, torch, nvtx==0.2.10 and verl, see samples/README.md)::

    python samples/make_sample.py --out samples/tiny_run

What it does
------------
1. Starts a private local Ray cluster (``ray.init(_temp_dir=/tmp/verlprof_sample_ray)``, so it never
   touches ``/tmp/ray`` of other jobs or tests) and plays one verl PPO/GRPO job on it:

   * a ``TaskRunner`` actor (verl's controller) started with Ray's own
     ``runtime_env={"nsight": controller_nsight_options}``, exactly as ``verl/trainer/main_ppo.py``
     does, which drives 3 RL steps with verl's ``marked_timer`` NVTX ranges::

         start_profile
         step > gen, reward, old_log_prob, ref, adv, update_actor
         stop_profile

   * an ``actor_rollout_ref`` worker group of 2 ranks (Ray actors named like verl names them,
     ``<prefix>ActorRolloutRefWorker_0:<rank>``), each started with
     ``runtime_env={"nsight": worker_nsight_options, "env_vars": {RANK, WORLD_SIZE, ...}}`` as
     ``verl/single_controller/ray/base.py`` does. The ranks join a gloo process group and run a
     tiny policy (embedding + MLP + LM head, ~0.3 M parameters) for real: autoregressive
     ``generate_sequences``, ``actor_compute_log_prob``, ``ref_compute_log_prob`` and
     ``actor_update`` (2 mini-batches of forward + backward + gloo all-reduce + AdamW).
     Step 1 also pays a one-off warm-up (rollout "graph capture" and optimizer-state creation),
     so it is clearly slower than steps 2 and 3.

   Ray runs every profiled actor under ``nsys profile`` and nsys writes one report per process,
   ``<ray temp dir>/session_latest/logs/nsight/worker_process_<pid>.nsys-rep`` (``%p`` is the pid
   of the profiled Python process).

2. Profiling goes through verl's own code (``verl.utils.profiler``):

   * NVTX ranges: ``marked_timer`` in the controller; ``DistProfiler(tool="nsys")`` +
     ``DistProfiler.annotate(role=...)`` in the workers. On a machine without CUDA,
     ``torch.cuda.profiler.start()/stop()`` (what verl's nsys backend calls in continuous mode for
     ``--capture-range=cudaProfilerApi``) cannot run, so the worker platform's
     ``profiler_start/profiler_stop`` are patched to no-ops and nsys records the whole process
     (no capture range).
   * torch profiler chrome traces: a second ``DistProfiler(tool="torch")`` per worker, started and
     stopped around every step with ``role="train"``, writes
     ``outputs/profile/actor-rollout-ref_train_step<N>_rank<R>-of-2_pid<P>_<timestamp>.json.gz``
     (verl's ``torch_profile.py`` naming; it turns the ``_`` of the role ``actor_rollout_ref`` into ``-``). verl itself uses one tool per run; here both run in the
     same job to keep the sample small. verl's torch Profiler class runs fine on CPU, so no
     fallback was needed.
   * No memory snapshot: ``torch.cuda.memory._dump_snapshot`` is GPU-only (a real one is in
     ``tests/data/h200-torch-2.11/step2``).

3. Writes the Hydra-style composed config of the run, ``outputs/<date>/<time>/.hydra/config.yaml``
   and ``overrides.yaml``: verl's own ``_generated_ppo_trainer.yaml`` (interpolations kept, as Hydra
   saves it) with the run's command-line overrides applied.

4. Copies the reports out of Ray's nsight folder into ``<out>/ray_logs/nsight/`` and exports each one
   beside itself with ``nsys export --type sqlite``; copies the Ray ``worker-*.out/.err`` logs of
   the profiled actors into ``<out>/ray_logs/`` (they hold the actor names and the stdout), and the
   torch traces into ``<out>/outputs/profile/``. ``<out>/sample_manifest.json`` maps each pid to its
   role and rank (this file is not part of a real run; it is there for tests).

FAKE secrets are planted on purpose (a scrub test input): the job's
``ray_kwargs.ray_init.runtime_env.env_vars`` carries ``HF_TOKEN``, ``WANDB_API_KEY`` and
``MY_SERVICE_PASSWORD`` (all made up), so they land in every actor's environment, hence in the
reports' ``TARGET_INFO_SYSTEM_ENV``/``StringIds``; rank 0 also prints one to stdout, which nsys
captures (``ProcessStreams``) and Ray keeps in the worker ``.out`` log.

Isolation: the job runs with a clean, made-up environment (``USER=alice``,
``HOME=<work>/home/alice``) and, when run as root where ``unshare`` exists, inside its own PID and
UTS namespaces with the host name ``verl-node-0``, and its own mount namespace with a private
``/dev/shm`` and ``/tmp/nvidia``. Without this, nsys would record the environment of the shell that
launched the script and the names of every process on the machine; and because PIDs repeat in a
fresh PID namespace, nsys' PID-keyed shared memory left by an earlier run made an nsys agent hang
now and then without writing its report (the job is still retried, ``--attempts``).
``--no-sandbox`` skips the namespaces.
"""

from __future__ import annotations

import argparse
import datetime as _dt
import functools
import glob
import json
import os
import shutil
import socket
import subprocess
import sys
import time

# ----------------------------------------------------------------------------------------------
# Settings of the sample
# ----------------------------------------------------------------------------------------------

FAKE_SECRETS = {
    # All made up; none is valid anywhere.
    "HF_TOKEN": "hf_SampLe0FakeTokenNotReal1234567890ab",
    "WANDB_API_KEY": "0123456789abcdef0123456789abcdef01234567",
    "MY_SERVICE_PASSWORD": "sample-Pa55-not-real",
}

# Ray's nsight runtime_env turns each key into `--key=value` (`-k value` for one letter).
# Trimmed for size: no CPU sampling, no context-switch trace; NVTX plus only the OS-runtime calls
# that block for 1 ms or more (the default 1 us threshold gives ~35k rows and ~2 MB per report),
# with no OS-runtime backtraces.
_NSIGHT_OPTIONS = {
    "trace": "nvtx,osrt",
    "sample": "none",
    "cpuctxsw": "none",
    "osrt-threshold": "1000000",
    "osrt-backtrace-threshold": "10000000000",
}
CONTROLLER_NSIGHT_OPTIONS = dict(_NSIGHT_OPTIONS)
WORKER_NSIGHT_OPTIONS = dict(_NSIGHT_OPTIONS)

HOSTNAME = "verl-node-0"
USER = "alice"
WORLD_SIZE = 2
TOTAL_STEPS = 3
WG_PREFIX = "sMpL3e"  # verl uses a random 6-character prefix for worker-group actor names

# Tiny policy and batch (per step: 8 prompts x n=2 samples = 16 sequences, 8 per rank).
VOCAB, D_MODEL, D_HIDDEN, N_LAYERS = 512, 128, 512, 2
TRAIN_BATCH, ROLLOUT_N, PROMPT_LEN, RESPONSE_LEN, PPO_MINI_BATCH = 8, 2, 16, 16, 4
WARMUP_ROUNDS = 2  # step 1 only: extra forwards that make the first step clearly slower

DEFAULT_WORK = "/tmp/verlprof_sample_work"
DEFAULT_RAY_TMP = "/tmp/verlprof_sample_ray"


def hydra_overrides(save_path: str) -> list[str]:
    """The command line a user would have typed (Hydra override syntax)."""

    def opts(d: dict) -> str:
        return "{" + ",".join(f"{k}:'{v}'" for k, v in d.items()) + "}"

    ov = [
        "algorithm.adv_estimator=grpo",
        f"data.train_batch_size={TRAIN_BATCH}",
        f"data.max_prompt_length={PROMPT_LEN}",
        f"data.max_response_length={RESPONSE_LEN}",
        f"actor_rollout_ref.model.path=/tmp/home/{USER}/models/tiny-mlp-policy",
        f"actor_rollout_ref.actor.ppo_mini_batch_size={PPO_MINI_BATCH}",
        "actor_rollout_ref.actor.optim.lr=1e-3",
        "actor_rollout_ref.actor.use_kl_loss=true",
        f"actor_rollout_ref.rollout.n={ROLLOUT_N}",
        "actor_rollout_ref.rollout.name=hf",
        "actor_rollout_ref.actor.profiler.enable=true",
        "actor_rollout_ref.actor.profiler.all_ranks=true",
        "actor_rollout_ref.actor.profiler.tool_config.torch.contents=[cpu,shapes]",
        "actor_rollout_ref.ref.profiler.enable=true",
        "actor_rollout_ref.ref.profiler.all_ranks=true",
        "actor_rollout_ref.rollout.profiler.enable=true",
        "actor_rollout_ref.rollout.profiler.all_ranks=true",
        "global_profiler.tool=nsys",
        f"global_profiler.steps=[{','.join(str(s) for s in range(1, TOTAL_STEPS + 1))}]",
        f"global_profiler.save_path={save_path}",
        "global_profiler.global_tool_config.nsys.discrete=false",
        "global_profiler.global_tool_config.nsys.controller_nsight_options=" + opts(CONTROLLER_NSIGHT_OPTIONS),
        "global_profiler.global_tool_config.nsys.worker_nsight_options=" + opts(WORKER_NSIGHT_OPTIONS),
        "trainer.device=cpu",
        "trainer.nnodes=1",
        f"trainer.n_gpus_per_node={WORLD_SIZE}",
        "trainer.total_epochs=1",
        f"trainer.total_training_steps={TOTAL_STEPS}",
        "trainer.val_before_train=false",
        "trainer.resume_mode=disable",  # doctor's pin: a leftover checkpoint would skip the profiled steps
        "trainer.logger=[console,wandb]",
        "trainer.project_name=verlprof_sample",
        "trainer.experiment_name=tiny_run",
    ]
    ov += [f"+ray_kwargs.ray_init.runtime_env.env_vars.{k}={v}" for k, v in FAKE_SECRETS.items()]
    return ov


# ----------------------------------------------------------------------------------------------
# Config (Hydra-style composed config, interpolations kept)
# ----------------------------------------------------------------------------------------------


def compose_config(save_path: str):
    """verl's generated PPO trainer config with this run's overrides applied (unresolved)."""
    from omegaconf import OmegaConf

    import verl

    base = os.path.join(os.path.dirname(verl.__file__), "trainer", "config", "_generated_ppo_trainer.yaml")
    cfg = OmegaConf.load(base)
    for item in hydra_overrides(save_path):
        key, value = item.split("=", 1)
        key = key.lstrip("+")
        if key.endswith("_nsight_options"):
            # replace the whole option dict (the defaults carry CUDA-only options)
            opts = CONTROLLER_NSIGHT_OPTIONS if key.endswith("controller_nsight_options") else WORKER_NSIGHT_OPTIONS
            OmegaConf.update(cfg, key, dict(opts), merge=False, force_add=True)
            continue
        parsed = OmegaConf.create({"v": yaml_value(value)}).v
        OmegaConf.update(cfg, key, parsed, merge=False, force_add=True)
    return cfg


def yaml_value(text: str):
    import yaml

    if text.startswith("[") and text.endswith("]"):
        return [yaml_value(x) for x in text[1:-1].split(",") if x]
    if text.startswith("/") or text.startswith("hf_"):
        return text
    return yaml.safe_load(text)


# ----------------------------------------------------------------------------------------------
# The Ray actors (imported lazily so the outer process needs neither ray nor torch)
# ----------------------------------------------------------------------------------------------


def _nvtx_colors():
    """verl's range colors beyond nvtx's built-in list need matplotlib; register them directly
    (same ARGB values matplotlib would give) so the sample does not need matplotlib."""
    import nvtx.colors

    for name, argb in {"olive": 0xFF808000, "brown": 0xFFA52A2A, "pink": 0xFFFFC0CB}.items():
        nvtx.colors._NVTX_COLORS.setdefault(name, argb)
    nvtx.colors.color_to_hex.cache_clear()


def _cpu_safe_platform():
    """verl's nsys backend calls torch.cuda.profiler.start()/stop(); make those no-ops on CPU."""
    import torch

    from verl.plugin.platform import get_platform

    platform = get_platform()
    if not torch.cuda.is_available():
        platform.profiler_start = lambda: None
        platform.profiler_stop = lambda: None
    return platform


def stage(role: str, color: str, scheduled: bool = False):
    """``@DistProfiler.annotate(color=..., role=...)`` for both profilers of a worker.

    The outer annotate sees ``self.profiler`` (the nsys DistProfiler -> NVTX range named ``role``);
    the inner one is handed a view whose ``.profiler`` is the torch DistProfiler
    (-> ``record_function(role)`` in the chrome trace). Both are verl's code paths, unchanged.
    """
    from verl.utils.profiler import DistProfiler

    class _TorchView:
        def __init__(self, worker):
            self.profiler = worker.torch_profiler

    def deco(func):
        kw = {"scheduled": True} if scheduled else {}

        def _call(view, worker, *a, **k):
            return func(worker, *a, **k)

        _call.__name__ = func.__name__
        torch_wrapped = DistProfiler.annotate(color=color, role=role, **kw)(_call)

        @DistProfiler.annotate(color=color, role=role, **kw)
        @functools.wraps(func)
        def wrapper(self, *a, **k):
            return torch_wrapped(_TorchView(self), self, *a, **k)

        return wrapper

    return deco


def rule_reward(tokens: list) -> float:
    """A rule-based reward scored on the decoded text, as verl's reward functions do (a few ms)."""
    import re

    text = " ".join(f"tok{t}" for t in tokens)
    score = 0.0
    for _ in range(60):  # a real reward fn parses and normalizes the answer several ways
        numbers = [int(m) for m in re.findall(r"tok(\d+)", text)]
        score = sum(n % 7 == 0 for n in numbers) / max(len(numbers), 1)
    return score


def grpo_advantage(scores, old_lp, ref_lp, config):
    """GRPO outcome advantage, with a token-level KL-shaped return computed step by step."""
    import torch

    n = config.actor_rollout_ref.rollout.n
    grouped = scores.view(-1, n)
    adv = ((grouped - grouped.mean(dim=1, keepdim=True)) / (grouped.std(dim=1, keepdim=True) + 1e-6)).flatten()
    kl = old_lp - ref_lp
    ret = torch.zeros_like(adv)
    for t in reversed(range(kl.shape[1])):  # like verl's GAE loop over response positions
        ret = -0.001 * kl[:, t] + 0.99 * ret
    return adv + 0.0 * ret


def build_actor_classes():
    import ray
    import torch
    import torch.nn as nn

    class TinyPolicy(nn.Module):
        def __init__(self):
            super().__init__()
            self.emb = nn.Embedding(VOCAB, D_MODEL)
            self.blocks = nn.ModuleList(
                nn.Sequential(nn.LayerNorm(D_MODEL), nn.Linear(D_MODEL, D_HIDDEN), nn.GELU(), nn.Linear(D_HIDDEN, D_MODEL))
                for _ in range(N_LAYERS)
            )
            self.head = nn.Linear(D_MODEL, VOCAB)

        def trunk(self, h):
            for blk in self.blocks:
                h = h + blk(h)
            return self.head(h)

        def forward(self, tokens):
            # causal "attention": running mean over the prefix, cheap and order-aware
            h = torch.cumsum(self.emb(tokens), dim=1) / torch.arange(1, tokens.shape[1] + 1).view(1, -1, 1)
            return self.trunk(h)

        def decode(self, prompts, n_new):
            """Autoregressive sampling with a running-sum cache (the "KV cache" of this model)."""
            cache = self.emb(prompts).sum(dim=1)
            length, seq = prompts.shape[1], prompts
            for _ in range(n_new):
                logits = self.trunk(cache / length)
                nxt = torch.multinomial(torch.softmax(logits, dim=-1), 1)
                seq = torch.cat([seq, nxt], dim=1)
                cache, length = cache + self.emb(nxt).squeeze(1), length + 1
            return seq

    def token_log_probs(logits, tokens):
        lp = torch.log_softmax(logits[:, :-1].float(), dim=-1)
        return torch.gather(lp, 2, tokens[:, 1:].unsqueeze(-1)).squeeze(-1)

    class ActorRolloutRefWorker:
        """Colocated actor + rollout + reference policy, one rank (like verl's hybrid engine)."""

        def __init__(self, config_yaml: str, profile_save_path: str):
            from omegaconf import OmegaConf

            from verl.utils import omega_conf_to_dataclass
            from verl.utils.profiler import DistProfiler, ProfilerConfig
            from verl.utils.profiler.config import NsightToolConfig, TorchProfilerToolConfig

            torch.set_num_threads(1)
            torch.manual_seed(0)
            self.rank = int(os.environ["RANK"])
            self.world_size = int(os.environ["WORLD_SIZE"])
            self.role = "actor_rollout_ref"
            self.config = OmegaConf.create(config_yaml)
            OmegaConf.resolve(self.config)  # verl's TaskRunner resolves the config before use
            _cpu_safe_platform()
            _nvtx_colors()

            # the profiler config of the actor role, exactly as verl builds it ...
            prof_omega = self.config.actor_rollout_ref.actor.profiler
            nsys_cfg = omega_conf_to_dataclass(prof_omega, dataclass_type=ProfilerConfig)
            nsys_tool = omega_conf_to_dataclass(prof_omega.tool_config.nsys, dataclass_type=NsightToolConfig)
            self.profiler = DistProfiler(rank=self.rank, config=nsys_cfg, tool_config=nsys_tool, save_file_prefix=self.role)
            # ... and the same role profiled with the torch tool (written to an absolute save_path)
            torch_omega = OmegaConf.merge(prof_omega, {"tool": "torch", "save_path": profile_save_path})
            torch_cfg = omega_conf_to_dataclass(torch_omega, dataclass_type=ProfilerConfig)
            torch_tool = omega_conf_to_dataclass(prof_omega.tool_config.torch, dataclass_type=TorchProfilerToolConfig)
            self.torch_profiler = DistProfiler(
                rank=self.rank, config=torch_cfg, tool_config=torch_tool, save_file_prefix=self.role
            )
            self._warm = False
            if self.rank == 0:
                # A leaky debug print, as real training code has: stdout is captured by Ray and nsys.
                print(f"[{self.role} rank {self.rank}] wandb login with WANDB_API_KEY={os.environ.get('WANDB_API_KEY')}")
            print(f"[{self.role} rank {self.rank}] pid={os.getpid()} host={socket.gethostname()}", flush=True)

        def info(self):
            return {"pid": os.getpid(), "rank": self.rank, "world_size": self.world_size, "role": self.role}

        def init_model(self):
            import torch.distributed as dist

            dist.init_process_group(
                "gloo",
                init_method=f"tcp://{os.environ['MASTER_ADDR']}:{os.environ['MASTER_PORT']}",
                rank=self.rank,
                world_size=self.world_size,
            )
            torch.manual_seed(1234)  # same initial weights on every rank
            self.actor = TinyPolicy()
            self.ref = TinyPolicy()
            self.ref.load_state_dict(self.actor.state_dict())
            self.ref.requires_grad_(False)
            self.optim = torch.optim.AdamW(self.actor.parameters(), lr=1e-3, weight_decay=0.01)
            n = sum(p.numel() for p in self.actor.parameters())
            print(f"[{self.role} rank {self.rank}] model ready, {n} parameters", flush=True)
            return n

        # -- profiling control (DistProfilerExtension.start_profile/stop_profile) --------------
        def start_profile(self, **kwargs):
            self.profiler.start(**kwargs)
            self.torch_profiler.start(**kwargs)

        def stop_profile(self, run_command: bool = True):
            self.torch_profiler.stop(run_command=run_command)
            self.profiler.stop(run_command=run_command)

        # -- the verl stages -----------------------------------------------------------------
        @stage("generate_sequences", "red")
        def generate_sequences(self, prompts):
            torch.manual_seed(100 + self.rank)
            with torch.no_grad():
                if not self._warm:
                    # one-off rollout warm-up, like an inference engine capturing graphs per batch size
                    for bs in (1, 2, 4, 8, 16, 32, 64, 128):
                        for _ in range(WARMUP_ROUNDS):
                            self.actor(torch.zeros(bs, PROMPT_LEN + RESPONSE_LEN, dtype=torch.long))
                    self._warm = True
                return self.actor.decode(prompts, RESPONSE_LEN)

        @stage("actor_compute_log_prob", "blue")
        def compute_log_prob(self, seqs):
            with torch.no_grad():
                out = [token_log_probs(self.actor(mb), mb) for mb in seqs.split(2)]
            return torch.cat(out)

        @stage("ref_compute_log_prob", "olive")
        def compute_ref_log_prob(self, seqs):
            with torch.no_grad():
                out = [token_log_probs(self.ref(mb), mb) for mb in seqs.split(2)]
            return torch.cat(out)

        @stage("actor_update", "red", scheduled=True)
        def update_actor(self, seqs, old_log_probs, ref_log_probs, advantages):
            import torch.distributed as dist

            metrics = []
            resp = slice(PROMPT_LEN - 1, None)
            mini = PPO_MINI_BATCH * ROLLOUT_N // self.world_size  # sequences per rank per mini-batch
            for mb in range(0, seqs.shape[0], mini):
                sl = slice(mb, mb + mini)
                lp = token_log_probs(self.actor(seqs[sl]), seqs[sl])[:, resp]
                ratio = torch.exp(lp - old_log_probs[sl][:, resp])
                adv = advantages[sl].unsqueeze(-1)
                pg = -torch.min(ratio * adv, torch.clamp(ratio, 0.8, 1.2) * adv).mean()
                kl = (lp - ref_log_probs[sl][:, resp]).pow(2).mean()
                loss = pg + 0.001 * kl
                self.optim.zero_grad(set_to_none=True)
                loss.backward()
                grads = [p.grad for p in self.actor.parameters()]
                bucket = torch.cat([g.flatten() for g in grads])  # one DDP-style gradient bucket
                dist.all_reduce(bucket)
                bucket /= self.world_size
                offset = 0
                for g in grads:
                    g.copy_(bucket[offset : offset + g.numel()].view_as(g))
                    offset += g.numel()
                self.optim.step()
                metrics.append(float(loss.detach()))
                self.torch_profiler.step()  # verl advances the profiler once per update mini-batch
                self.profiler.step()
            return {"actor/pg_loss": sum(metrics) / len(metrics)}

        def shutdown(self):
            import torch.distributed as dist

            if dist.is_initialized():
                dist.destroy_process_group()
            ray.actor.exit_actor()

    class TaskRunner:
        """verl's controller: builds the worker group and runs the PPO loop."""

        def run(self, config_yaml: str, profile_save_path: str, worker_env: dict):
            from omegaconf import OmegaConf

            from verl.utils.profiler import marked_timer

            torch.set_num_threads(1)
            torch.manual_seed(0)
            config = OmegaConf.create(config_yaml)
            OmegaConf.resolve(config)
            _nvtx_colors()
            world = config.trainer.n_gpus_per_node
            nsight = OmegaConf.to_container(config.global_profiler.global_tool_config.nsys.worker_nsight_options)
            with socket.socket() as s:
                s.bind(("127.0.0.1", 0))
                port = s.getsockname()[1]
            remote_cls = ray.remote(num_cpus=1)(ActorRolloutRefWorker)
            self.workers = []
            for rank in range(world):
                env = {
                    "WORLD_SIZE": str(world),
                    "RANK": str(rank),
                    "WG_PREFIX": WG_PREFIX,
                    "WG_BACKEND": "ray",
                    "RAY_LOCAL_WORLD_SIZE": str(world),
                    "MASTER_ADDR": "127.0.0.1",
                    "MASTER_PORT": str(port),
                    **worker_env,
                }
                name = f"{WG_PREFIX}ActorRolloutRefWorker_0:{rank}"
                self.workers.append(
                    remote_cls.options(name=name, runtime_env={"env_vars": env, "nsight": dict(nsight)}).remote(
                        config_yaml, profile_save_path
                    )
                )
            infos = ray.get([w.info.remote() for w in self.workers])
            ray.get([w.init_model.remote() for w in self.workers])

            def all_ranks(method, *chunks_per_rank, **kwargs):
                refs = [
                    getattr(w, method).remote(*(c[i] for c in chunks_per_rank), **kwargs)
                    for i, w in enumerate(self.workers)
                ]
                return ray.get(refs)

            steps = list(config.global_profiler.steps or [])
            history = []
            for step in range(1, config.trainer.total_training_steps + 1):
                timing_raw: dict = {}
                profile = step in steps
                with marked_timer("start_profile", timing_raw):
                    if profile:
                        all_ranks("start_profile", role="train", profile_step=step)
                g = torch.Generator().manual_seed(step)
                prompts = torch.randint(0, VOCAB, (TRAIN_BATCH, PROMPT_LEN), generator=g)
                prompts = prompts.repeat_interleave(config.actor_rollout_ref.rollout.n, dim=0)
                with marked_timer("step", timing_raw):
                    with marked_timer("gen", timing_raw, color="red"):
                        seqs = torch.cat(all_ranks("generate_sequences", prompts.chunk(world)))
                    with marked_timer("reward", timing_raw, color="yellow"):
                        scores = torch.tensor([rule_reward(row) for row in seqs[:, PROMPT_LEN:].tolist()])
                    with marked_timer("old_log_prob", timing_raw, color="blue"):
                        old_lp = torch.cat(all_ranks("compute_log_prob", seqs.chunk(world)))
                    with marked_timer("ref", timing_raw, color="olive"):
                        ref_lp = torch.cat(all_ranks("compute_ref_log_prob", seqs.chunk(world)))
                    with marked_timer("adv", timing_raw, color="brown"):
                        adv = grpo_advantage(scores, old_lp[:, PROMPT_LEN - 1 :], ref_lp[:, PROMPT_LEN - 1 :], config)
                    with marked_timer("update_actor", timing_raw, color="red"):
                        metrics = all_ranks(
                            "update_actor", seqs.chunk(world), old_lp.chunk(world), ref_lp.chunk(world), adv.chunk(world)
                        )
                with marked_timer("stop_profile", timing_raw):
                    if profile:
                        all_ranks("stop_profile", run_command=(step == max(steps)))
                line = " - ".join(
                    [f"step:{step}", f"actor/pg_loss:{metrics[0]['actor/pg_loss']:.4f}"]
                    + [f"timing_s/{k}:{v:.3f}" for k, v in timing_raw.items()]
                )
                print(line, flush=True)
                history.append({"step": step, **{k: round(v, 4) for k, v in timing_raw.items()}})
            return {"controller_pid": os.getpid(), "workers": infos, "timing": history}

        def shutdown_workers(self):
            for w in self.workers:
                try:
                    ray.get(w.shutdown.remote())
                except Exception:  # exit_actor ends the actor; the call then reports it as dead
                    pass

        def info(self):
            return {"pid": os.getpid()}

        def shutdown(self):
            ray.actor.exit_actor()

    return TaskRunner


# ----------------------------------------------------------------------------------------------
# Inner job (runs inside the sandbox)
# ----------------------------------------------------------------------------------------------


REPORT_MISSING = "report-missing"


def wait_for_reports(nsight_dir: str, pids: list[int], timeout: float = 120.0) -> list[str]:
    want = {pid: os.path.join(nsight_dir, f"worker_process_{pid}.nsys-rep") for pid in pids}
    deadline = time.time() + timeout
    last_sizes: dict = {}
    while time.time() < deadline:
        ready = all(os.path.exists(p) for p in want.values())
        pending = glob.glob(os.path.join(nsight_dir, "*.qdstrm"))
        sizes = {p: os.path.getsize(p) for p in want.values() if os.path.exists(p)}
        if ready and not pending and sizes == last_sizes:
            return sorted(want.values())
        last_sizes = sizes
        time.sleep(2.0)
    missing = [p for p in want.values() if not os.path.exists(p)]
    ps = subprocess.run(["ps", "-eo", "pid,ppid,stat,args"], capture_output=True, text=True).stdout
    print(f"[make_sample] processes:\n{ps}", file=sys.stderr)
    raise SystemExit(f"{REPORT_MISSING}: nsys reports did not appear in {timeout:.0f}s: {missing}")


def private_mounts() -> None:
    """Give the sandbox its own /dev/shm and /tmp/nvidia (it has its own mount namespace).

    nsys keys its shared memory, semaphores (``/dev/shm/quadd-agent-instance-<pid>``,
    ``sem.nsys_sem_<pid>``) and session lock (``/tmp/nvidia/nsight_systems``) by PID. PIDs inside a
    fresh PID namespace repeat from run to run, so leftovers of an earlier run, or another nsys on
    the host, can make an nsys agent hang and never write its report.
    """
    for target, size in (("/dev/shm", "1g"), ("/tmp/nvidia", "256m")):
        os.makedirs(target, exist_ok=True)
        subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size},mode=1777", "tmpfs", target], check=True)


def init_reaper(job) -> int:
    """Be a real init for the PID namespace: run ``job`` in a child and reap every orphan.

    Orphans (nsys launchers, Ray workers) are reparented to PID 1. If PID 1 never reaps them they
    stay zombies, and nsys' agent, which waits for its launcher to go away, then never writes the
    report of that process.
    """
    child = os.fork()
    if child == 0:
        try:
            job()
            code = 0
        except SystemExit as e:
            code = e.code if isinstance(e.code, int) else 1
            if e.code not in (None, 0) and not isinstance(e.code, int):
                print(e.code, file=sys.stderr)
        except BaseException:
            import traceback

            traceback.print_exc()
            code = 1
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)
    while True:
        pid, status = os.wait()
        if pid == child:
            return os.waitstatus_to_exitcode(status)


def inner(args) -> None:
    if args.hostname:
        try:
            socket.sethostname(args.hostname)
        except OSError as e:
            print(f"[make_sample] could not set host name: {e}", file=sys.stderr)

    run_dir = args.run_dir
    os.chdir(run_dir)
    started = _dt.datetime.now()
    save_path_cfg = "outputs/profile"
    profile_save_path = os.path.join(run_dir, save_path_cfg)

    from omegaconf import OmegaConf

    cfg = compose_config(save_path_cfg)
    hydra_dir = os.path.join(run_dir, "outputs", started.strftime("%Y-%m-%d"), started.strftime("%H-%M-%S"), ".hydra")
    os.makedirs(hydra_dir)
    with open(os.path.join(hydra_dir, "config.yaml"), "w") as f:
        f.write(OmegaConf.to_yaml(cfg))
    with open(os.path.join(hydra_dir, "overrides.yaml"), "w") as f:
        import yaml

        yaml.safe_dump(hydra_overrides(save_path_cfg), f, default_flow_style=False, width=4096)
    config_yaml = OmegaConf.to_yaml(cfg)

    import ray

    from verl.trainer.constants_ppo import get_ppo_ray_runtime_env

    runtime_env = get_ppo_ray_runtime_env(cfg)
    env_vars = dict(runtime_env.get("env_vars", {}))
    env_vars.update(OmegaConf.to_container(cfg.ray_kwargs.ray_init.runtime_env.env_vars))
    # A Ray worker started under nsys may not find the interpreter's packages: say where they are.
    env_vars["PYTHONPATH"] = os.pathsep.join(p for p in sys.path if p.endswith("site-packages"))
    runtime_env["env_vars"] = env_vars

    ray.init(
        _temp_dir=args.ray_temp_dir,
        num_cpus=4,
        include_dashboard=False,
        object_store_memory=200 * 1024 * 1024,
        runtime_env=runtime_env,
        logging_level="WARNING",
    )
    TaskRunner = build_actor_classes()
    controller_nsight = OmegaConf.to_container(cfg.global_profiler.global_tool_config.nsys.controller_nsight_options)
    runner = (
        ray.remote(num_cpus=1)(TaskRunner)
        .options(name="TaskRunner", runtime_env={"nsight": controller_nsight, "env_vars": env_vars})
        .remote()
    )
    t0 = time.time()
    result = ray.get(runner.run.remote(config_yaml, profile_save_path, env_vars))
    run_s = time.time() - t0
    # nsys writes a report when its process exits. Let the workers exit first and wait for their
    # reports, then the controller: finishing them one group at a time is more reliable on 2 cores.
    session_dir = os.path.realpath(os.path.join(args.ray_temp_dir, "session_latest"))
    nsight_dir = os.path.join(session_dir, "logs", "nsight")
    ray.get(runner.shutdown_workers.remote())
    reports = wait_for_reports(nsight_dir, [w["pid"] for w in result["workers"]])
    try:
        ray.get(runner.shutdown.remote())
    except Exception:  # exit_actor ends the actor; the call then reports it as dead
        pass
    reports += wait_for_reports(nsight_dir, [result["controller_pid"]])
    ray.shutdown()

    for rep in reports:
        out = rep[: -len(".nsys-rep")] + ".sqlite"
        subprocess.run(
            ["nsys", "export", "--type", "sqlite", "--force-overwrite", "true", "-o", out, rep],
            check=True,
            stdout=subprocess.DEVNULL,
        )

    manifest = {
        "about": "Written by samples/make_sample.py (not part of a real verl run): which process is which.",
        "host": socket.gethostname(),
        "started": started.isoformat(timespec="seconds"),
        "steps": TOTAL_STEPS,
        "controller": {"pid": result["controller_pid"], "actor": "TaskRunner"},
        "workers": [
            {**w, "actor": f"{WG_PREFIX}ActorRolloutRefWorker_0:{w['rank']}"} for w in result["workers"]
        ],
        "nsight_options": {"controller": CONTROLLER_NSIGHT_OPTIONS, "worker": WORKER_NSIGHT_OPTIONS},
        "fake_secrets": FAKE_SECRETS,
        "timing_s": result["timing"],
        "job_seconds": round(run_s, 1),
        "ray_session_dir": session_dir,
        "run_dir": run_dir,
        "hydra_dir": os.path.relpath(hydra_dir, run_dir),
    }
    with open(os.path.join(args.work, "manifest.json"), "w") as f:
        json.dump(manifest, f, indent=2)


# ----------------------------------------------------------------------------------------------
# Outer driver: sandbox, then assemble the sample
# ----------------------------------------------------------------------------------------------


def clean_env(work: str) -> dict:
    home = os.path.join(work, "home", USER)
    py_bin = os.path.dirname(sys.executable)
    return {
        "PATH": os.pathsep.join([py_bin, "/usr/local/bin", "/usr/bin", "/bin"]),
        "HOME": home,
        "USER": USER,
        "LOGNAME": USER,
        "LANG": "C.UTF-8",
        "PYTHONUNBUFFERED": "1",
        "OMP_NUM_THREADS": "1",
        "RAY_USAGE_STATS_ENABLED": "0",
    }


def assemble(work: str, out: str) -> None:
    with open(os.path.join(work, "manifest.json")) as f:
        manifest = json.load(f)
    run_dir = manifest["run_dir"]
    session = manifest["ray_session_dir"]
    if os.path.exists(out):
        shutil.rmtree(out)
    os.makedirs(os.path.join(out, "ray_logs", "nsight"))
    # reports and their exports
    for path in sorted(glob.glob(os.path.join(session, "logs", "nsight", "worker_process_*"))):
        shutil.copy2(path, os.path.join(out, "ray_logs", "nsight"))
    # Ray's stdout/stderr logs of the profiled processes (actor names, printed lines)
    pids = [manifest["controller"]["pid"]] + [w["pid"] for w in manifest["workers"]]
    for pid in pids:
        for path in glob.glob(os.path.join(session, "logs", f"worker-*-{pid}.*")):
            if path.endswith((".out", ".err")):
                shutil.copy2(path, os.path.join(out, "ray_logs"))
    # Hydra output dir and the profiler save_path
    shutil.copytree(os.path.join(run_dir, "outputs"), os.path.join(out, "outputs"))
    manifest["files"] = sorted(
        os.path.relpath(os.path.join(d, f), out) for d, _, fs in os.walk(out) for f in fs
    )
    with open(os.path.join(out, "sample_manifest.json"), "w") as f:
        json.dump(manifest, f, indent=2)
        f.write("\n")


def main(argv=None) -> int:
    here = os.path.dirname(os.path.abspath(__file__))
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--out", default=os.path.join(here, "tiny_run"), help="sample folder to (re)create")
    p.add_argument("--work", default=DEFAULT_WORK, help="scratch folder (deleted and recreated)")
    p.add_argument("--ray-temp-dir", default=DEFAULT_RAY_TMP, help="Ray _temp_dir (deleted and recreated)")
    p.add_argument("--no-sandbox", action="store_true", help="do not use PID/UTS namespaces")
    p.add_argument("--timeout", type=float, default=900.0, help="seconds for one attempt")
    p.add_argument("--attempts", type=int, default=3, help="reruns of the job when it fails")
    p.add_argument("--inner", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--run-dir", help=argparse.SUPPRESS)
    p.add_argument("--hostname", help=argparse.SUPPRESS)
    args = p.parse_args(argv)

    if args.inner:
        if os.getpid() == 1:
            private_mounts()
            return init_reaper(lambda: inner(args))
        inner(args)
        return 0

    if shutil.which("nsys") is None:
        print("nsys is not on PATH (Debian: apt-get install nsight-systems)", file=sys.stderr)
        return 2
    t0 = time.time()
    work = os.path.abspath(args.work)
    for d in (work, args.ray_temp_dir):
        shutil.rmtree(d, ignore_errors=True)
    run_dir = os.path.join(work, "home", USER, "rlproj")
    os.makedirs(run_dir)
    cmd = [
        sys.executable,
        os.path.abspath(__file__),
        "--inner",
        "--work",
        work,
        "--run-dir",
        run_dir,
        "--ray-temp-dir",
        args.ray_temp_dir,
    ]
    sandbox = not args.no_sandbox and os.geteuid() == 0 and shutil.which("unshare") is not None
    if sandbox:
        cmd = ["unshare", "--pid", "--fork", "--mount-proc", "--uts", "--"] + cmd + ["--hostname", HOSTNAME]
    else:
        print("[make_sample] no PID/UTS sandbox: the reports will list this machine's processes", file=sys.stderr)
    for attempt in range(1, args.attempts + 1):
        print(f"[make_sample] running the profiled job (attempt {attempt}) ...", flush=True)
        proc = subprocess.run(cmd, env=clean_env(work), cwd=run_dir, timeout=args.timeout)
        if proc.returncode == 0:
            break
        if attempt == args.attempts:
            print("[make_sample] the profiled job failed", file=sys.stderr)
            return proc.returncode
        # nsys now and then never writes one report (seen with nsys 2022.4 on 2 cores): run again
        for d in (work, args.ray_temp_dir):
            shutil.rmtree(d, ignore_errors=True)
        os.makedirs(run_dir)
    assemble(work, os.path.abspath(args.out))
    total = sum(
        os.path.getsize(os.path.join(d, f)) for d, _, fs in os.walk(args.out) for f in fs
    )
    print(f"[make_sample] wrote {args.out} ({total / 1e6:.2f} MB) in {time.time() - t0:.0f}s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
