"""Kernel name -> coarse category (gemm, attention, comm, normalization, memcpy, memset, elementwise,
reduction, other).

Why: thousands of distinct kernel names (cuBLAS `nvjet_*`, cuDNN SDPA, flash-attn, NCCL, Triton,
ATen templates) are unreadable in a summary; a handful of categories answers "was this phase
compute-, attention- or communication-bound?" and lets `comm_ns` / `exposed_comm_ns` find the
collectives. Rules match lower-cased substrings, first on the short name (no template noise:
`vectorized_elementwise_kernel<GeluFunctor...>` is elementwise, not activation-specific), then on
the demangled name. Order matters: comm before gemm (NCCL kernels mention reduce), attention before
gemm (SDPA kernels mention wgmma), normalization before reduction (a layer norm computes row
statistics, but what it *is* is a layer norm: `vectorized_layer_norm_kernel`,
`GammaBetaBackwardCUDAKernelTemplate`, Triton/apex/vLLM RMSNorm). Memcpy/memset come from their own
activity tables.
"""
from __future__ import annotations

from functools import lru_cache

CATEGORIES: tuple[str, ...] = ("gemm", "attention", "comm", "normalization", "memcpy", "memset", "elementwise",
                               "reduction", "other")

_RULES: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("comm", (
        "nccl", "allreduce", "all_reduce", "allgather", "all_gather", "reducescatter", "reduce_scatter",
        "alltoall", "all_to_all", "sendrecv", "cross_device_reduce", "custom_all_reduce", "nvshmem",
        "multimem", "one_shot_all", "two_shot_all", "deep_ep", "dispatch_kernel<", "combine_kernel<",
    )),
    ("attention", (
        "flash", "fmha", "attention", "attn", "sdpa", "mha_", "_mha", "xformers", "paged_", "flashinfer",
        "dot_do_o", "convert_dq", "softmax_lse", "merge_state", "kv_cache", "reshape_and_cache",
    )),
    ("gemm", (
        "gemm", "nvjet", "cutlass", "cublas", "xmma", "matmul", "gemv", "wgmma", "bmm", "splitkreduce",
        "s16816", "s1688", "h16816", "h1688", "i16832", "_mm_", "scaled_mm", "deep_gemm", "dot_kernel",
        "sm80_", "sm90_", "sm100_", "ampere_", "volta_", "turing_", "hopper_",
    )),
    ("normalization", (
        "layer_norm", "layernorm", "rms_norm", "rmsnorm", "batch_norm", "batchnorm", "group_norm",
        "groupnorm", "instance_norm", "instancenorm", "gammabeta", "cuapplylayernorm", "cuapplyrmsnorm",
    )),
    ("reduction", (
        "reduce", "reduction", "softmax", "vector_norm", "norm_kernel", "l2norm", "l2_norm", "argmax", "argmin", "topk", "top_k", "cumsum", "scan",
        "gammabeta", "cross_entropy", "logsumexp", "sum_kernel", "mean_kernel", "max_kernel", "min_kernel",
    )),
    ("elementwise", (
        "elementwise", "vectorized", "unrolled", "copy", "fill", "cat", "index", "gather", "scatter",
        "embedding", "dropout", "gelu", "silu", "relu", "act_and_mul", "multi_tensor_apply", "adam",
        "arange", "where", "masked", "triu", "tril", "pointwise", "assert", "distribution", "transpose",
        "permute", "cast", "convert", "rotary", "normal_kernel", "bernoulli", "uniform_kernel",
    )),
)


@lru_cache(maxsize=65536)
def _match(name: str) -> str | None:
    low = name.lower()
    for cat, needles in _RULES:
        if any(n in low for n in needles):
            return cat
    return None


@lru_cache(maxsize=65536)
def categorize(short_name: str | None, demangled: str | None = None) -> str:
    """The category of a kernel, from its short name first and its demangled name second."""
    for name in (short_name, demangled):
        if name:
            cat = _match(name)
            if cat is not None:
                return cat
    return "other"
