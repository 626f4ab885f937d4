"""Triton `gemv`: y = x @ W^T for a few rows of x (decode), streaming W from HBM once.

This is the public launcher (`kernels.gemv` resolves to it): it checks the arguments, picks
the config and hands the launch to launch.py (the unsplit kernel) or split_k.py. With no
config given, `tune.config_for` picks (BLOCK_N, BLOCK_K, num_warps, num_stages, dot, split_k)
per (N, K, M bucket, dtype): on CUDA the first call of a shape outside CUDA-graph capture
times the candidates and caches the winner; under capture, on the CPU, or with tuning off
(`GemvTuning(tune=False)`) it takes `default_config` (deterministic); where cuBLAS timed
faster than every candidate this launcher calls cuBLAS. Run the engine's warm-up (GraphCache
captures after two eager calls) or `tune.warm_up` before capturing.

Module layout (imports run one way): shared.py (config, inner loop, default) <- split_k.py
<- launch.py <- tune.py <- kernel.py. Semantics: kernels/gemv/ref.py.
"""

from __future__ import annotations

import math

import torch

from kernels._checks import FLOAT_DTYPES, check_int, check_runnable
from kernels._checks import check_tensor as _check
from kernels.gemv.launch import launch
from kernels.gemv.shared import GemvConfig
from kernels.gemv.tune import config_for
from kernels.gemv.tuning import DEFAULT_TUNING, GemvTuning


def _check_args(x: torch.Tensor, w: torch.Tensor, config: GemvConfig | None) -> None:
    _check("w", w, ndim=2, dtypes=FLOAT_DTYPES, inner_stride_one=True)
    if not isinstance(x, torch.Tensor) or x.dim() < 1:
        raise ValueError("x must be a torch.Tensor of rank >= 1 (..., K)")
    _check("x", x, ndim=x.dim(), dtypes=(w.dtype,), device=w.device, inner_stride_one=True)
    if x.shape[-1] != w.shape[1]:
        raise ValueError(f"x has K={x.shape[-1]} columns, w (N, K) has K={w.shape[1]}")
    if config is not None:
        if not isinstance(config, GemvConfig):
            raise ValueError(f"config must be a GemvConfig, got {type(config).__name__}")
        for name in ("block_n", "block_k", "num_warps"):
            v = getattr(config, name)
            if v < 1 or v & (v - 1):
                raise ValueError(f"config.{name} must be a power of two, got {v}")
        if config.dot and config.block_n < 16:
            raise ValueError(f"config.block_n must be >= 16 with dot, got {config.block_n}")
        check_int("config.split_k", config.split_k, minimum=1)
    check_runnable("x", x)


def _check_out(out: torch.Tensor, m: int, n: int, x: torch.Tensor) -> None:
    _check("out", out, ndim=2, dtypes=(x.dtype,), device=x.device, inner_stride_one=True)
    if tuple(out.shape) != (m, n):
        raise ValueError(f"out has shape {tuple(out.shape)}, expected (M, N) = {(m, n)}")


def gemv(x: torch.Tensor, w: torch.Tensor, *, config: GemvConfig | None = None,
         out: torch.Tensor | None = None, tuning: GemvTuning | None = None,
         pdl: bool = False) -> torch.Tensor:
    """Triton version of `gemv_ref`: x (..., K) @ w (N, K)^T -> (..., N) in x's dtype.

    Args:
        x: (..., K) fp32/fp16/bf16, last dim contiguous; meant for M = x.numel() / K <= 16.
        w: (N, K), same dtype and device, rows contiguous (an nn.Linear weight).
        config: launch parameters (split_k > 1: the split-K kernel, split_k.py); None:
            `tune.config_for` (tuned on CUDA, default else; cuBLAS where the tuning timed it
            faster than every candidate).
        out: optional (M, N) contiguous output buffer in x's dtype.
        tuning: how `config_for` picks when config is None (`tune.GemvTuning`; None: its
            defaults: tune, time in CUDA graphs, cuBLAS where faster).
        pdl: a programmatic dependent launch (kernels/pdl.py; CUDA sm_90+ only).
    """
    _check_args(x, w, config)
    n, k = w.shape
    m = math.prod(x.shape[:-1])
    if out is not None:
        _check_out(out, m, n, x)
    if config is None:
        config = config_for(m, n, k, w, tuning or DEFAULT_TUNING)
        if config is None:  # the tuning found cuBLAS faster at this shape
            return torch.matmul(x.reshape(m, k), w.t(), out=out).view(*x.shape[:-1], n)
    return launch(x, w, config, out, pdl)
