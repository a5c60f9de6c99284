#!/usr/bin/env python3
"""A small verl-shaped RL run on N ranks, annotated the way verl annotates it; made to be profiled.

Launch with torchrun (any N, CPU or GPU) or directly as one process (then it is rank 0 of 1):

    torchrun --nproc_per_node=2 samples/make_gpu_run.py --steps 3          # CPU: gloo, GPU: NCCL
    python samples/make_gpu_run.py --steps 3 --emit-nvtx                   # one rank, no launcher

Each of ``--steps`` RL steps does what a verl PPO/GRPO step does, at toy size:

    step
      gen > generate_sequences       autoregressive decode of a random GPT-style policy (rollout)
      reward                         rule-based reward on the driver (CPU)
      old_log_prob > actor_compute_log_prob
      ref > ref_compute_log_prob
      adv                            normalised advantages on the driver (CPU)
      update_actor > actor_update    FSDP actor: forward + backward + AdamW over --mini-batches

The outer names are the driver's ``marked_timer`` ranges, the inner ones the worker's
``DistProfiler.annotate(role=...)`` ranges. NVTX ranges are issued through ``verl.utils.profiler``
when it imports, else through the python ``nvtx`` package (the calls verl's nvtx_profile makes:
``nvtx.start_range``/``end_range`` in the default domain), else through ``torch.cuda.nvtx``
(``range_push``/``range_pop``); ``--nvtx-api`` forces one. The model is randomly initialised and
nothing is downloaded. The actor and the reference policy are ``FullyShardedDataParallel`` modules
(NCCL on CUDA, gloo on CPU; ``--backend`` overrides), each rank decodes its own prompts.

Profiling options:
  --emit-nvtx        wrap the actor update in torch.autograd.profiler.emit_nvtx(): aten op ranges
                     with "seq = N" appear, backward kernels run on the autograd thread (CUDA only)
  --capture-range    torch.cuda.profiler.start()/stop() around each step (verl's continuous nsys
                     mode; DistProfiler.start/stop when verl imports), for
                     nsys --capture-range=cudaProfilerApi --capture-range-end=repeat-shutdown:<steps>
  --discrete         one capture range around each worker stage call instead (verl's discrete nsys
                     mode, NsightToolConfig(discrete=True): one report per stage call), for
                     nsys --capture-range=cudaProfilerApi --capture-range-end=repeat-shutdown:<4*steps>
                     (CPU: --capture-range=nvtx --nvtx-capture=verlprof_capture, see DiscreteCapture)
  --straggler-rank R --straggler-ms 50
                     rank R sleeps that long inside update_actor > actor_update, the other ranks
                     wait for it in the FSDP collectives
  --same-gpu         put every rank on cuda:0; NCCL refuses that ("Duplicate GPU detected"), add
                     --backend gloo (FSDP then runs its collectives through gloo on CUDA tensors)

tests/data/gpu_captures/README.md says how its captures were made with this script.
"""

import argparse
import contextlib
import datetime
import functools
import os
import socket
import sys
import time


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--steps", type=int, default=3)
    p.add_argument("--batch", type=int, default=8, help="prompts per rank")
    p.add_argument("--prompt-len", type=int, default=64)
    p.add_argument("--response-len", type=int, default=16, help="decode steps in generate_sequences")
    p.add_argument("--mini-batches", type=int, default=2)
    p.add_argument("--vocab", type=int, default=4096)
    p.add_argument("--dim", type=int, default=256)
    p.add_argument("--layers", type=int, default=4)
    p.add_argument("--heads", type=int, default=4)
    p.add_argument("--lr", type=float, default=1e-5)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--emit-nvtx", action="store_true")
    p.add_argument("--capture-range", action="store_true")
    p.add_argument("--discrete", action="store_true")
    p.add_argument("--straggler-rank", type=int, default=None)
    p.add_argument("--straggler-ms", type=float, default=50.0)
    p.add_argument("--same-gpu", action="store_true")
    p.add_argument("--device", choices=["auto", "cuda", "cpu"], default="auto")
    p.add_argument("--backend", choices=["auto", "nccl", "gloo"], default="auto")
    p.add_argument("--nvtx-api", choices=["auto", "verl", "nvtx", "torch", "record_function", "none"], default="auto",
                   help="record_function: the same ranges as torch.profiler user annotations (with --torch-trace)")
    p.add_argument("--torch-trace", default=None, metavar="DIR",
                   help="record each step with torch.profiler into DIR, named as verl names its traces")
    p.add_argument("--torch-memory", action="store_true",
                   help="with --torch-trace: profile_memory=True (verl's `memory` content), the [memory] events "
                        "that match nsys --cuda-memory-usage=true")
    p.add_argument("--timeout-s", type=float, default=120.0, help="process-group timeout")
    return p.parse_args(argv)


ARGS = parse_args()

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn
from torch.distributed.fsdp import FullyShardedDataParallel as FSDP
from torch.distributed.fsdp import MixedPrecision, ShardingStrategy
from torch.distributed.fsdp.wrap import ModuleWrapPolicy


# ----------------------------------------------------------------------------------------------
# NVTX: verl's own helpers when they import, else the same calls by hand
# ----------------------------------------------------------------------------------------------
def _pick_nvtx_api(want):
    errors = []
    if want == "record_function":
        return "record_function", errors
    if want in ("auto", "verl"):
        try:
            import verl.utils.profiler as vp  # noqa: F401
            from verl.utils.import_utils import is_nvtx_available
            from verl.utils.profiler import DistProfiler  # noqa: F401

            if not is_nvtx_available():
                raise ImportError(
                    "verl imports but the python nvtx package does not (verl's markers are no-ops)"
                )
            return "verl", errors
        except Exception as e:  # verl pulls ray, tensordict, omegaconf ...: any of them may be missing
            errors.append(f"verl: {type(e).__name__}: {e}")
            if want == "verl":
                raise
    if want in ("auto", "nvtx"):
        try:
            import nvtx  # noqa: F401

            return "nvtx", errors
        except Exception as e:
            errors.append(f"nvtx: {type(e).__name__}: {e}")
            if want == "nvtx":
                raise
    if want in ("auto", "torch"):
        stub = getattr(torch.cuda.nvtx, "_NVTXStub", None)  # what a CPU-only torch build has instead
        if not (stub and isinstance(getattr(torch.cuda.nvtx, "_nvtx", None), stub)):
            return "torch", errors
        errors.append("torch.cuda.nvtx: this torch build has no NVTX")
        if want == "torch":
            raise RuntimeError(errors[-1])
    return "none", errors


class Marks:
    """start/end ranges, the driver's marked_timer and the worker's annotate, for the chosen API."""

    def __init__(self, api):
        self.api = api
        self._stack = []
        if api == "verl":
            import verl.utils.profiler as vp

            self._vp = vp
        elif api == "nvtx":
            import nvtx

            self._nvtx = nvtx

    def start(self, name, color=None):
        if self.api == "verl":
            return self._vp.mark_start_range(message=name, color=safe_color(color))
        if self.api == "nvtx":
            return self._nvtx.start_range(message=name, color=safe_color(color))
        if self.api == "torch":
            torch.cuda.nvtx.range_push(name)
        if self.api == "record_function":
            rf = torch.profiler.record_function(name)
            rf.__enter__()
            return rf
        return None

    def end(self, handle):
        if self.api == "verl":
            self._vp.mark_end_range(handle)
        elif self.api == "nvtx":
            self._nvtx.end_range(handle)
        elif self.api == "torch":
            torch.cuda.nvtx.range_pop()
        elif self.api == "record_function" and handle is not None:
            handle.__exit__(None, None, None)

    def timer(self, name, timing, color=None):
        """verl's ``marked_timer(name, timing_raw, color=...)`` (ray_trainer.py)."""
        if self.api == "verl":
            return self._vp.marked_timer(name, timing, color=safe_color(color))
        return self._fallback_timer(name, timing, color)

    @contextlib.contextmanager
    def _fallback_timer(self, name, timing, color):
        h = self.start(name, color)
        t0 = time.perf_counter()
        try:
            yield
        finally:
            timing[name] = timing.get(name, 0.0) + time.perf_counter() - t0
            self.end(h)


API, API_ERRORS = _pick_nvtx_api(ARGS.nvtx_api)
MARKS = Marks(API)


@functools.cache
def safe_color(color):
    """The python nvtx package knows "olive", "brown", "pink" (verl's colors) only through matplotlib."""
    if color is None or API not in ("verl", "nvtx"):
        return color
    try:
        from nvtx.colors import color_to_hex

        color_to_hex(color)
        return color
    except (ImportError, TypeError, ValueError):
        API_ERRORS.append(f"color {color!r} dropped (nvtx needs matplotlib for it)")
        return None


def annotate(color, role):
    """A worker method's profiling range, like ``@DistProfiler.annotate(color=..., role=...)``."""
    if API == "verl":
        from verl.utils.profiler import DistProfiler

        return DistProfiler.annotate(color=safe_color(color), role=role)

    def deco(fn):
        @functools.wraps(fn)
        def wrapper(self, *a, **k):
            if not self.profiler.active:
                return fn(self, *a, **k)
            capture = DiscreteCapture(self.use_cuda) if ARGS.discrete else None
            if capture:  # DistProfiler.annotate with discrete=True: one capture range per call
                capture.start()
            h = MARKS.start(role, color)
            try:
                return fn(self, *a, **k)
            finally:
                MARKS.end(h)
                if capture:
                    capture.stop()

        return wrapper

    return deco


class DiscreteCapture:
    """One capture range around one stage call (verl's discrete mode). On CUDA what verl does:
    cudaProfilerStart/Stop, for nsys --capture-range=cudaProfilerApi. On a CPU machine, where that
    API does nothing, a push/pop range `verlprof_capture` opened on a helper thread triggers
    nsys --capture-range=nvtx --nvtx-capture=verlprof_capture (with NSYS_NVTX_PROFILER_REGISTER_ONLY=0);
    on its own thread it encloses nothing of the worker's ranges (they nest per thread)."""

    def __init__(self, use_cuda):
        self.use_cuda = use_cuda
        self._go = self._done = self._thread = None

    def start(self):
        if self.use_cuda:
            torch.cuda.profiler.start()
            return
        import threading

        import nvtx

        self._go, self._done = threading.Event(), threading.Event()

        def hold():
            nvtx.push_range("verlprof_capture")
            self._go.set()
            self._done.wait()
            nvtx.pop_range()

        self._thread = threading.Thread(target=hold, name="capture", daemon=True)
        self._thread.start()
        self._go.wait()

    def stop(self):
        if self.use_cuda:
            torch.cuda.synchronize()
            torch.cuda.profiler.stop()
            return
        self._done.set()
        self._thread.join()


class FallbackProfiler:
    """What DistProfiler(tool="nsys", discrete=False) does in a worker, without verl."""

    def __init__(self, rank, use_cuda):
        self.rank, self.use_cuda, self.active = rank, use_cuda, False

    def begin_step(self, capture):
        self.active = True
        if capture and self.use_cuda:
            torch.cuda.profiler.start()

    def end_step(self, capture):
        if capture and self.use_cuda:
            torch.cuda.profiler.stop()
        self.active = False


class VerlProfiler:
    """verl's own DistProfiler(tool="nsys", discrete=False); ``.inner`` is what annotate reads."""

    def __init__(self, rank, use_cuda):
        self.use_cuda = use_cuda
        from verl.utils.profiler import DistProfiler, ProfilerConfig
        from verl.utils.profiler.config import NsightToolConfig

        tool = NsightToolConfig(discrete=False)
        cfg = ProfilerConfig(tool="nsys", enable=True, all_ranks=True, save_path=None, tool_config=tool)
        self.inner = DistProfiler(rank=rank, config=cfg, tool_config=tool)

    def begin_step(self, capture):
        if capture and self.use_cuda:
            self.inner.start()  # NsightSystemsProfiler.start -> platform.profiler_start -> cudaProfilerStart
        else:
            # Whole-run capture: enable the annotate ranges without touching the CUDA profiler.
            self.inner._this_step = True

    def end_step(self, capture):
        if capture and self.use_cuda:
            self.inner.stop(run_command=False)
        else:
            self.inner._this_step = False


# ----------------------------------------------------------------------------------------------
# The policy: a small GPT
# ----------------------------------------------------------------------------------------------
class Block(nn.Module):
    def __init__(self, d, h):
        super().__init__()
        self.h = h
        self.ln1, self.qkv, self.o = nn.LayerNorm(d), nn.Linear(d, 3 * d), nn.Linear(d, d)
        self.ln2, self.f1, self.f2 = nn.LayerNorm(d), nn.Linear(d, 4 * d), nn.Linear(4 * d, d)

    def forward(self, x):
        b, t, d = x.shape
        q, k, v = self.qkv(self.ln1(x)).view(b, t, 3, self.h, d // self.h).permute(2, 0, 3, 1, 4)
        a = F.scaled_dot_product_attention(q, k, v, is_causal=True).transpose(1, 2).reshape(b, t, d)
        x = x + self.o(a)
        return x + self.f2(F.gelu(self.f1(self.ln2(x))))


class GPT(nn.Module):
    def __init__(self, vocab, d, layers, h):
        super().__init__()
        self.emb = nn.Embedding(vocab, d)
        self.blocks = nn.ModuleList(Block(d, h) for _ in range(layers))
        self.ln, self.head = nn.LayerNorm(d), nn.Linear(d, vocab, bias=False)

    def forward(self, idx):
        x = self.emb(idx)
        for b in self.blocks:
            x = b(x)
        return self.head(self.ln(x))


def token_logp(model, seq):
    logits = model(seq[:, :-1]).float()
    return torch.gather(F.log_softmax(logits, -1), 2, seq[:, 1:, None]).squeeze(-1)


# ----------------------------------------------------------------------------------------------
# The worker (verl's ActorRolloutRefWorker, colocated): rollout, actor, reference
# ----------------------------------------------------------------------------------------------
class ActorRolloutRefWorker:
    def __init__(self, args, rank, world, device, use_cuda):
        self.args, self.rank, self.world, self.device, self.use_cuda = args, rank, world, device, use_cuda
        # verl's worker keeps its DistProfiler in ``self.profiler``: DistProfiler.annotate reads it there
        self.steps_profiler = (
            VerlProfiler(rank, use_cuda) if API == "verl" else FallbackProfiler(rank, use_cuda)
        )
        self.profiler = self.steps_profiler.inner if API == "verl" else self.steps_profiler
        torch.manual_seed(args.seed)  # same initial weights on every rank (and sync_module_states)
        fsdp_kw = {
            "auto_wrap_policy": ModuleWrapPolicy({Block}),
            "sharding_strategy": ShardingStrategy.FULL_SHARD if world > 1 else ShardingStrategy.NO_SHARD,
            "sync_module_states": use_cuda,  # a broadcast from rank 0 (CUDA only; the seed makes them equal anyway)
        }
        # device_id=cpu: FSDP runs on CPU with gloo only when told so explicitly
        fsdp_kw["device_id"] = device
        if use_cuda:
            fsdp_kw["mixed_precision"] = MixedPrecision(
                param_dtype=torch.bfloat16, reduce_dtype=torch.float32, buffer_dtype=torch.float32
            )
        actor = GPT(args.vocab, args.dim, args.layers, args.heads)
        ref = GPT(args.vocab, args.dim, args.layers, args.heads)
        ref.load_state_dict(actor.state_dict())
        if use_cuda:
            actor, ref = actor.to(device), ref.to(device)
        self.actor = FSDP(actor, **fsdp_kw)
        self.ref = FSDP(ref, **fsdp_kw)
        self.opt = torch.optim.AdamW(self.actor.parameters(), lr=args.lr)
        self.gen = torch.Generator(device="cpu").manual_seed(args.seed * 1000 + rank + 1)

    def prompts(self):
        return torch.randint(0, self.args.vocab, (self.args.batch, self.args.prompt_len), generator=self.gen)

    @annotate(color="red", role="generate_sequences")
    @torch.no_grad()
    def generate_sequences(self, prompts):
        seq = prompts.to(self.device, non_blocking=True)
        for _ in range(self.args.response_len):
            logits = self.actor(seq)[:, -1].float()
            nxt = torch.multinomial(F.softmax(logits, -1), 1)
            seq = torch.cat([seq, nxt], 1)
        return seq.cpu()  # verl hands the batch back to the driver (DataProto on CPU)

    @annotate(color="blue", role="actor_compute_log_prob")
    @torch.no_grad()
    def compute_log_prob(self, seq):
        return token_logp(self.actor, seq.to(self.device)).cpu()

    @annotate(color="olive", role="ref_compute_log_prob")
    @torch.no_grad()
    def compute_ref_log_prob(self, seq):
        return token_logp(self.ref, seq.to(self.device)).cpu()

    @annotate(color="red", role="actor_update")
    def update_actor(self, seq, old, refl, adv):
        if self.args.straggler_rank == self.rank:
            time.sleep(self.args.straggler_ms / 1000.0)
        ctx = contextlib.nullcontext()
        if self.args.emit_nvtx and self.use_cuda:
            ctx = torch.autograd.profiler.emit_nvtx()
        seq, old, refl, adv = (t.to(self.device) for t in (seq, old, refl, adv))
        n = seq.shape[0]
        mbs = max(1, n // self.args.mini_batches)
        losses = []
        with ctx:
            for mb in range(self.args.mini_batches):
                sl = slice(mb * mbs, (mb + 1) * mbs)
                # the same range for NVTX (nsys) and torch.profiler (record_function), once each
                h = MARKS.start(f"mini_batch{mb}") if API not in ("record_function", "none") else None
                with torch.profiler.record_function(f"mini_batch{mb}"):
                    lp = token_logp(self.actor, seq[sl])
                    ratio = torch.exp(lp - old[sl])
                    pg = -(torch.clamp(ratio, 0.8, 1.2) * adv[sl, None]).mean()
                    kl = (lp - refl[sl]).pow(2).mean()
                    loss = pg + 0.01 * kl
                    self.opt.zero_grad(set_to_none=True)
                    loss.backward()
                    self.actor.clip_grad_norm_(1.0)
                    self.opt.step()
                    losses.append(loss.detach())
                MARKS.end(h)
        return torch.stack(losses).mean().item()


# ----------------------------------------------------------------------------------------------
# The driver (verl's RayPPOTrainer.fit, one step)
# ----------------------------------------------------------------------------------------------
def rl_step(worker, args, timing):
    with MARKS.timer("step", timing):
        with MARKS.timer("gen", timing, color="red"):
            seq = worker.generate_sequences(worker.prompts())
        with MARKS.timer("reward", timing, color="yellow"):
            resp = seq[:, args.prompt_len :]
            reward = (resp % 7 == 0).float().mean(1)
        with MARKS.timer("old_log_prob", timing, color="blue"):
            old = worker.compute_log_prob(seq)
        with MARKS.timer("ref", timing, color="olive"):
            refl = worker.compute_ref_log_prob(seq)
        with MARKS.timer("adv", timing, color="brown"):
            adv = (reward - reward.mean()) / (reward.std() + 1e-6)
        with MARKS.timer("update_actor", timing, color="red"):
            loss = worker.update_actor(seq, old, refl, adv)
    return loss


def setup_dist(args):
    if "RANK" not in os.environ:  # started without torchrun: one rank
        os.environ.update(RANK="0", WORLD_SIZE="1", LOCAL_RANK="0", MASTER_ADDR="127.0.0.1")
        if "MASTER_PORT" not in os.environ:
            with socket.socket() as s:
                s.bind(("127.0.0.1", 0))
                os.environ["MASTER_PORT"] = str(s.getsockname()[1])
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    local = int(os.environ.get("LOCAL_RANK", rank))
    use_cuda = args.device == "cuda" or (args.device == "auto" and torch.cuda.is_available())
    if use_cuda:
        ndev = torch.cuda.device_count()
        idx = 0 if args.same_gpu else local % max(ndev, 1)
        if not args.same_gpu and world > ndev:
            print(
                f"[rank {rank}] warning: {world} ranks on {ndev} GPU(s): ranks share GPUs "
                f"(NCCL refuses that; --same-gpu says so on purpose)",
                flush=True,
            )
        device = torch.device("cuda", idx)
        torch.cuda.set_device(device)
    else:
        device = torch.device("cpu")
    backend = args.backend if args.backend != "auto" else ("nccl" if use_cuda else "gloo")
    kw = {"backend": backend, "timeout": datetime.timedelta(seconds=args.timeout_s)}
    if backend == "nccl":
        kw["device_id"] = device
    dist.init_process_group(**kw)
    return rank, world, device, use_cuda, backend


def torch_trace_start(args, use_cuda):
    """torch.profiler around one step (verl's tool=torch, discrete per step), when --torch-trace."""
    if not args.torch_trace:
        return None
    acts = [torch.profiler.ProfilerActivity.CPU] + ([torch.profiler.ProfilerActivity.CUDA] if use_cuda else [])
    prof = torch.profiler.profile(activities=acts, profile_memory=args.torch_memory)
    prof.__enter__()
    return prof


def torch_trace_stop(prof, args, step, rank, world):
    if prof is None:
        return
    import gzip
    import shutil

    prof.__exit__(None, None, None)
    os.makedirs(args.torch_trace, exist_ok=True)
    stamp = time.strftime("%Y%m%d%H%M%S") + "000"
    base = os.path.join(args.torch_trace, f"make-gpu-run_train_step{step}_rank{rank}-of-{world}_pid{os.getpid()}_{stamp}")
    prof.export_chrome_trace(base + ".json")
    with open(base + ".json", "rb") as f, gzip.open(base + ".json.gz", "wb") as g:
        shutil.copyfileobj(f, g)
    os.remove(base + ".json")


def main(args):
    rank, world, device, use_cuda, backend = setup_dist(args)
    tag = f"[make_gpu_run rank {rank}/{world} pid {os.getpid()}]"
    if rank == 0:
        extra = f" ({'; '.join(API_ERRORS)})" if API_ERRORS else ""
        name = torch.cuda.get_device_name(device) if use_cuda else "cpu"
        print(
            f"{tag} torch {torch.__version__} device {device} ({name}) backend {backend} "
            f"nvtx-api {API}{extra}",
            flush=True,
        )
        print(
            f"{tag} model V={args.vocab} D={args.dim} L={args.layers} H={args.heads}; batch {args.batch}/rank, "
            f"prompt {args.prompt_len}, response {args.response_len}, {args.mini_batches} mini-batches; "
            f"emit_nvtx={args.emit_nvtx} capture_range={args.capture_range} "
            f"straggler={args.straggler_rank}:{args.straggler_ms}ms",
            flush=True,
        )
    if args.emit_nvtx and not use_cuda and rank == 0:
        print(f"{tag} --emit-nvtx needs CUDA: ignored on CPU", flush=True)
    worker = ActorRolloutRefWorker(args, rank, world, device, use_cuda)
    for step in range(1, args.steps + 1):
        timing = {}
        t0 = time.perf_counter()
        worker.steps_profiler.begin_step(args.capture_range)
        prof = torch_trace_start(args, use_cuda)
        loss = rl_step(worker, args, timing)
        if use_cuda:
            torch.cuda.synchronize()
        torch_trace_stop(prof, args, step, rank, world)
        worker.steps_profiler.end_step(args.capture_range)
        dt = time.perf_counter() - t0
        parts = " ".join(f"{k}={v * 1000:.1f}ms" for k, v in timing.items())
        print(f"{tag} step {step} loss={loss:.5f} {dt:.3f}s {parts}", flush=True)
    dist.barrier()
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main(ARGS))
