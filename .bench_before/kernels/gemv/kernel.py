"""Triton `gemv`: y = x @ W^T for a few rows of x (decode), streaming W from HBM once.

Batch-1 decode is weight streaming: each layer reads wqkv, wo, gate_up and down once per
step. One program owns BLOCK_N rows of W (N, K) and walks the whole K in BLOCK_K-wide
chunks (contiguous, vectorised loads; W evicted first, x kept), accumulating in fp32; grid
axis 0 covers N, axis 1 the rows of x in blocks of M_PAD (one block for M <= 16). That is
enough bytes in flight for wide N (gate_up 24576 rows); for narrow N and long K (o_proj
4096x4096, down_proj 4096x12288: 256-512 programs for 132 SMs, each walking all of K) a first
H200 tuning read 40.6 and 65.8 us against cuBLAS's 18.7 and 40.0, so split-K candidates were
added; the next tuning (benchmarks/h200-2026-11-29c/serve/bs1_gemv) timed the unsplit fma
configs at 16.7 and 35.6 us, split-K at 17.7 and 36.3, cuBLAS at 19.2 and 40.0 (the first
reading was disturbed). A config with split_k > 1 runs split_k.py instead: SPLIT_K programs
per N tile each take one K slice, store fp32 partials, and the last of them to finish (an
acq_rel counter) sums the partials in a fixed order and writes y, all in one launch
(deterministic, CUDA-graph capturable). split_k = 1 is this kernel, unchanged. Both kernels
run one inner loop, `accumulate` (over K chunks [k_lo, k_hi): all of K here, a slice there),
with two inner products:

    dot   x tile (M_PAD >= 16, BLOCK_K) times the W tile on tensor cores (mma); the padding
          rows are masked loads, free on a memory-bound kernel.
    fma   M_PAD <= 4: per row of x, sum(W_tile * x_row) on CUDA cores (no padding).

`config_for` picks (BLOCK_N, BLOCK_K, num_warps, num_stages, dot, split_k) per (N, K, M bucket,
dtype): on CUDA the first call of a shape outside CUDA-graph capture times the candidates
(tune.py) and caches the winner; under capture, on the CPU, or with WORKBENCH_GEMV_TUNE=0
it takes `default_config` (deterministic); where cuBLAS timed faster than every candidate
the launcher calls cuBLAS. Run the engine's warm-up (GraphCache captures after two eager
calls) or `tune.warm_up` before capturing. Semantics: kernels/gemv/ref.py.

On the CPU (TRITON_INTERPRET=1) the dot path upcasts bf16 tiles to fp32 before tl.dot: the
interpreter's dot mishandles bf16 (numpy has none). Products of bf16 values are exact in fp32,
so this is the math the tensor cores do (bf16 products, fp32 accumulation).
"""

from __future__ import annotations

import math
from typing import NamedTuple

import torch
import triton
import triton.language as tl

from kernels._checks import FLOAT_DTYPES, check_int, check_runnable
from kernels._checks import check_tensor as _check


class GemvConfig(NamedTuple):
    """Launch parameters: rows of W per program, K chunk, warps, pipeline stages, dot/fma,
    K slices per N tile (1: the unsplit kernel; > 1: split_k.py)."""

    block_n: int
    block_k: int
    num_warps: int
    num_stages: int
    dot: bool
    split_k: int = 1

    def __str__(self) -> str:
        """E.g. "fma n16 k512 w4 s3", "dot n32 k512 w4 s3 sk4" (sk only when split)."""
        kind = "dot" if self.dot else "fma"
        sk = f" sk{self.split_k}" if self.split_k != 1 else ""
        return (f"{kind} n{self.block_n} k{self.block_k} w{self.num_warps} "
                f"s{self.num_stages}{sk}")


@triton.jit
def accumulate(
    x_ptr, w_rows, m, m0, M, n_ok, m_ok, k_lo, k_hi, s_xm,
    M_PAD: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
    NUM_STAGES: tl.constexpr, DOT: tl.constexpr, IEEE: tl.constexpr,
    EVEN_K: tl.constexpr, EVEN_N: tl.constexpr,
):
    """The inner loop of both kernels: the (M_PAD, BLOCK_N) fp32 tile of x @ W^T summed over
    K columns [k_lo, k_hi) in BLOCK_K chunks (k_lo a multiple of BLOCK_K; `_gemv_kernel` walks
    [0, K), a split-K program its slice). w_rows: the tile's BLOCK_N row starts in W; m, m_ok:
    its rows of x (from m0) and which are < M; n_ok: which rows of W are < N. EVEN_K and
    EVEN_N: no chunk runs past k_hi, no row past N (W loads unmasked)."""
    kk = tl.arange(0, BLOCK_K)
    acc = tl.zeros((M_PAD, BLOCK_N), dtype=tl.float32)
    for k0 in tl.range(k_lo, k_hi, BLOCK_K, num_stages=NUM_STAGES):
        k = k0 + kk
        k = tl.max_contiguous(tl.multiple_of(k, BLOCK_K), BLOCK_K)
        k_ok = k < k_hi
        if DOT:
            # W^T tile (BLOCK_K, BLOCK_N), K contiguous: the "TN" operand of tl.dot.
            w_ptrs = w_rows[None, :] + k[:, None]
            if EVEN_K and EVEN_N:
                wt = tl.load(w_ptrs, eviction_policy="evict_first")
            else:
                wt = tl.load(w_ptrs, mask=k_ok[:, None] & n_ok[None, :], other=0.0,
                             eviction_policy="evict_first")
            x = tl.load(x_ptr + m[:, None] * s_xm + k[None, :],
                        mask=m_ok[:, None] & k_ok[None, :], other=0.0,
                        eviction_policy="evict_last")
            if IEEE:  # fp32 inputs (no tf32); or bf16 upcast exactly, for the interpreter
                acc += tl.dot(x.to(tl.float32), wt.to(tl.float32), input_precision="ieee")
            else:
                acc += tl.dot(x, wt)
        else:
            w_ptrs = w_rows[:, None] + k[None, :]
            if EVEN_K and EVEN_N:
                w = tl.load(w_ptrs, eviction_policy="evict_first")
            else:
                w = tl.load(w_ptrs, mask=n_ok[:, None] & k_ok[None, :], other=0.0,
                            eviction_policy="evict_first")
            w = w.to(tl.float32)
            for i in tl.static_range(M_PAD):
                row = tl.minimum(m0 + i, M - 1)  # rows past M: read row M-1, never stored
                xi = tl.load(x_ptr + row * s_xm + k, mask=k_ok, other=0.0,
                             eviction_policy="evict_last").to(tl.float32)
                part = tl.sum(w * xi[None, :], axis=1)  # (BLOCK_N,)
                acc += tl.where(tl.arange(0, M_PAD)[:, None] == i, part[None, :], 0.0)
    return acc


@triton.jit
def _gemv_kernel(
    x_ptr, w_ptr, y_ptr, M, N, K, s_xm, s_wn, s_ym,
    M_PAD: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
    NUM_STAGES: tl.constexpr, DOT: tl.constexpr, IEEE: tl.constexpr,
    EVEN_K: tl.constexpr, EVEN_N: tl.constexpr,
):
    pid_n = tl.program_id(0)
    m0 = tl.program_id(1) * M_PAD
    n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    m = m0 + tl.arange(0, M_PAD)
    n_ok = n < N
    m_ok = m < M
    w_rows = w_ptr + n.to(tl.int64) * s_wn  # (BLOCK_N,) row starts
    acc = accumulate(x_ptr, w_rows, m, m0, M, n_ok, m_ok, 0, K, s_xm, M_PAD, BLOCK_N, BLOCK_K,
                     NUM_STAGES, DOT, IEEE, EVEN_K, EVEN_N)
    y_ptrs = y_ptr + m[:, None] * s_ym + n[None, :]
    tl.store(y_ptrs, acc.to(y_ptr.dtype.element_ty), mask=m_ok[:, None] & n_ok[None, :])


def m_pad(m: int, dot: bool) -> int:
    """Rows of x per program: 16 for tl.dot (its minimum), next power of two (<= 16) else."""
    return 16 if dot else min(16, triton.next_power_of_2(max(m, 1)))


def default_config(m: int, n: int, k: int) -> GemvConfig:
    """The untuned choice (CPU, capture without a tuned entry, WORKBENCH_GEMV_TUNE=0).

    fma at one or two rows (no padded work), tensor-core dot above; BLOCK_N small enough
    that N/BLOCK_N >= 2 programs per SM of an H200 at N >= 4096.
    """
    if m <= 2:
        return GemvConfig(block_n=8, block_k=512, num_warps=4, num_stages=3, dot=False)
    return GemvConfig(block_n=16, block_k=512, num_warps=4, num_stages=4, dot=True)


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
         out: torch.Tensor | None = None) -> torch.Tensor:
    """Triton version of `gemv_ref`: x (..., K) @ w (N, K)^T -> (..., N) in x's dtype.

    Args:
        x: (..., K) fp32/fp16/bf16, last dim contiguous; meant for M = x.numel() / K <= 16.
        w: (N, K), same dtype and device, rows contiguous (an nn.Linear weight).
        config: launch parameters (split_k > 1: the split-K kernel, split_k.py); None:
            `tune.config_for` (tuned on CUDA, default else; cuBLAS where the tuning timed it
            faster than every candidate).
        out: optional (M, N) contiguous output buffer in x's dtype.
    """
    _check_args(x, w, config)
    n, k = w.shape
    lead = x.shape[:-1]
    m = math.prod(lead)
    x2 = x.reshape(m, k)
    if out is not None:
        _check_out(out, m, n, x)
    if config is None:
        from kernels.gemv.tune import config_for

        config = config_for(m, n, k, w)
        if config is None:  # the tuning found cuBLAS faster at this shape
            return torch.matmul(x2, w.t(), out=out).view(*lead, n)
    y = out if out is not None else torch.empty(m, n, device=x.device, dtype=x.dtype)
    if m == 0 or n == 0:
        return y.view(*lead, n)
    if k == 0:
        return y.zero_().view(*lead, n)
    pad = m_pad(m, config.dot)
    ieee = w.dtype == torch.float32 or (w.dtype == torch.bfloat16 and w.device.type == "cpu")
    if config.split_k > 1:
        from kernels.gemv.split_k import gemv_split_k  # imports this module's `accumulate`

        gemv_split_k(x2, w, y, config, pad, ieee)
        return y.view(*lead, n)
    grid = (triton.cdiv(n, config.block_n), triton.cdiv(m, pad))
    _gemv_kernel[grid](
        x2, w, y, m, n, k, x2.stride(0), w.stride(0), y.stride(0),
        M_PAD=pad, BLOCK_N=config.block_n, BLOCK_K=config.block_k,
        NUM_STAGES=config.num_stages, DOT=config.dot, IEEE=ieee,
        EVEN_K=k % config.block_k == 0, EVEN_N=n % config.block_n == 0,
        num_warps=config.num_warps, num_stages=config.num_stages,
    )
    return y.view(*lead, n)
