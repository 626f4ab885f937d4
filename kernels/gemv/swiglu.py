"""`gemv_swiglu`: a gate_up GEMV with SiLU-and-mul in its epilogue, for decode rows.

    g = x @ W[:I]^T,  u = x @ W[I:]^T      (each rounded to x's dtype)
    a[m, j] = silu(g[m, j]) * u[m, j]      x (..., K), W (2I, K): gate rows, then up rows

A Qwen3 MLP at batch 1 otherwise writes the (M, 2I) gate_up tensor and launches a separate
SiLU-and-mul kernel to read it back. Here one program owns BLOCK_N rows of W as BLOCK_N / 2
output columns j, each with its gate row and its up row, interleaved: tile row r is
W[(r % 2) * I + j0 + r // 2]. The inner loop is the GEMV's own (`shared.accumulate`, one
pass over K), so the weight stream is the unsplit GEMV's with the same config; the epilogue
splits the (M_PAD, BLOCK_N) tile into its gate and up halves and stores only `a`.

Rounding follows the unfused engine path (a projection stored in x's dtype, then Inductor's
fused `silu(g) * u` in fp32 with one rounding): g and u are rounded to x's dtype first, the
activation is `(g * sigmoid(g)) * u` in fp32, rounded once. Oracle: `ref.gemv_swiglu_ref`.
Configs: the GEMV tuner's fastest unsplit config of the (2I, K) shape (`tune.unsplit_config_for`):
split-K cannot apply a nonlinearity to a partial sum, and a shape where cuBLAS won still
runs its best Triton candidate.
"""

from __future__ import annotations

import math

import torch
import triton
import triton.language as tl

from kernels.gemv.kernel import check_args, check_out
from kernels.gemv.shared import GemvConfig, accumulate, m_pad
from kernels.gemv.tune import unsplit_config_for
from kernels.gemv.tuning import DEFAULT_TUNING, GemvTuning
from kernels.pdl import launch_options, pdl_enter, use_pdl


@triton.jit
def _gemv_swiglu_kernel(
    x_ptr, w_ptr, y_ptr, M, N_OUT, K, s_xm, s_wn, s_ym,
    M_PAD: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
    NUM_STAGES: tl.constexpr, DOT: tl.constexpr, IEEE: tl.constexpr,
    EVEN_K: tl.constexpr, EVEN_N: tl.constexpr, PDL: tl.constexpr,
):
    """Grid (cdiv(I, BLOCK_N // 2), cdiv(M, M_PAD)), N_OUT = I: a (M, I) tile of BLOCK_N // 2
    columns."""
    pdl_enter(PDL)
    HALF: tl.constexpr = BLOCK_N // 2
    j0 = tl.program_id(0) * HALF
    m0 = tl.program_id(1) * M_PAD
    r = tl.arange(0, BLOCK_N)
    j = j0 + r // 2  # (BLOCK_N,) output column of tile row r; r % 2: gate 0, up 1
    m = m0 + tl.arange(0, M_PAD)
    m_ok = m < M
    w_rows = w_ptr + ((r % 2) * N_OUT + j).to(tl.int64) * s_wn
    acc = accumulate(x_ptr, w_rows, m, m0, M, j < N_OUT, m_ok, 0, K, s_xm, M_PAD, BLOCK_N,
                     BLOCK_K, NUM_STAGES, DOT, IEEE, EVEN_K, EVEN_N)
    acc = acc.to(y_ptr.dtype.element_ty).to(tl.float32)  # g and u as a projection stores them
    g, u = tl.split(tl.reshape(acc, (M_PAD, HALF, 2)))
    a = g * tl.sigmoid(g) * u
    jj = j0 + tl.arange(0, HALF)
    tl.store(y_ptr + m[:, None] * s_ym + jj[None, :], a.to(y_ptr.dtype.element_ty),
             mask=m_ok[:, None] & (jj < N_OUT)[None, :])


def gemv_swiglu(x: torch.Tensor, w: torch.Tensor, *, config: GemvConfig | None = None,
                out: torch.Tensor | None = None, tuning: GemvTuning | None = None,
                pdl: bool = False) -> torch.Tensor:
    """Triton version of `gemv_swiglu_ref`: silu(x @ w[:I]^T) * (x @ w[I:]^T) -> (..., I).

    Args:
        x: (..., K) fp32/fp16/bf16, last dim contiguous; meant for M = x.numel() / K <= 16.
        w: (2I, K) the fused gate_up weight (gate rows first), same dtype and device.
        config: launch parameters of the unsplit kernel (split_k must be 1; block_n >= 2
            rows of W, i.e. block_n // 2 output columns per program); None: the tuner's
            fastest unsplit config of the (2I, K) GEMV (`tune.unsplit_config_for`).
        out: optional (M, I) contiguous output buffer in x's dtype.
        tuning: how that config is picked (`kernels.gemv.tuning.GemvTuning`).
        pdl: a programmatic dependent launch (kernels/pdl.py; CUDA sm_90+ only).
    """
    check_args(x, w, config)
    n, k = w.shape
    if n % 2:
        raise ValueError(f"w must have an even number of rows (gate, then up), got {n}")
    if config is not None and (config.split_k != 1 or config.block_n < 2):
        raise ValueError(f"gemv_swiglu needs an unsplit config with block_n >= 2, got {config}")
    i, lead = n // 2, x.shape[:-1]
    m = math.prod(lead)
    if out is not None:
        check_out(out, m, i, x)
    y = out if out is not None else torch.empty(m, i, device=x.device, dtype=x.dtype)
    if m == 0 or i == 0:
        return y.view(*lead, i)
    if config is None:
        config = unsplit_config_for(m, n, k, w, tuning or DEFAULT_TUNING)
    x2 = x.reshape(m, k)
    pad = m_pad(m, config.dot)
    ieee = w.dtype == torch.float32 or (w.dtype == torch.bfloat16 and w.device.type == "cpu")
    half = config.block_n // 2
    pdl = use_pdl(pdl, x)
    grid = (triton.cdiv(i, half), triton.cdiv(m, pad))
    _gemv_swiglu_kernel[grid](
        x2, w, y, m, i, k, x2.stride(0), w.stride(0), y.stride(0),
        M_PAD=pad, BLOCK_N=config.block_n, BLOCK_K=config.block_k,
        NUM_STAGES=config.num_stages, DOT=config.dot, IEEE=ieee,
        EVEN_K=k % config.block_k == 0, EVEN_N=i % half == 0, PDL=pdl,
        num_warps=config.num_warps, num_stages=config.num_stages,
        **launch_options(pdl),
    )
    return y.view(*lead, i)
