"""The `gemv` launch for a given config: the unsplit kernel, and the dispatch to split-K.

Batch-1 decode is weight streaming: each layer reads wqkv, wo, gate_up and down once per
step. One program of `_gemv_kernel` owns BLOCK_N rows of W (N, K) and walks the whole K in
BLOCK_K-wide chunks with `accumulate` (shared.py: contiguous, vectorised loads; W evicted
first, x kept), accumulating in fp32; grid axis 0 covers N, axis 1 the rows of x in blocks
of M_PAD (one block for M <= 16). That keeps enough bytes in flight for wide N (gate_up,
24576 rows). A config with split_k > 1 runs split_k.py instead, for narrow N and long K.

`launch` takes the config as given and checks nothing: the public `gemv` (kernel.py) checks
its arguments and picks the config, and the tuner (tune.py) times its candidates through
`launch` without a cycle back to the launcher that asks it.
"""

from __future__ import annotations

import math

import torch
import triton
import triton.language as tl

from kernels.gemv.shared import GemvConfig, accumulate, m_pad
from kernels.gemv.split_k import gemv_split_k
from kernels.pdl import launch_options, pdl_enter, use_pdl


@triton.jit
def _gemv_kernel(
    x_ptr, w_ptr, y_ptr, M, N, K, s_xm, s_wn, s_ym,
    M_PAD: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
    NUM_STAGES: tl.constexpr, DOT: tl.constexpr, IEEE: tl.constexpr,
    EVEN_K: tl.constexpr, EVEN_N: tl.constexpr, PDL: tl.constexpr,
):
    """Grid (cdiv(N, BLOCK_N), cdiv(M, M_PAD)): y (M, N) tile of program (n, m) over all of K.
    PDL: launched as a programmatic dependent launch (kernels/pdl.py)."""
    pdl_enter(PDL)
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


def launch(x: torch.Tensor, w: torch.Tensor, config: GemvConfig,
           out: torch.Tensor | None = None, pdl: bool = False) -> torch.Tensor:
    """x (..., K) @ w (N, K)^T -> (..., N) in x's dtype with `config` (split_k > 1: split_k.py).

    Arguments as `kernels.gemv.kernel.gemv` takes them, already checked there; out, when
    given, is (M, N) with M = x.numel() / K. pdl: launch the unsplit kernel as a
    programmatic dependent launch (kernels/pdl.py; split-K launches without).
    """
    n, k = w.shape
    lead = x.shape[:-1]
    m = math.prod(lead)
    x2 = x.reshape(m, k)
    y = out if out is not None else torch.empty(m, n, device=x.device, dtype=x.dtype)
    if m == 0 or n == 0:
        return y.view(*lead, n)
    if k == 0:
        return y.zero_().view(*lead, n)
    pad = m_pad(m, config.dot)
    ieee = w.dtype == torch.float32 or (w.dtype == torch.bfloat16 and w.device.type == "cpu")
    if config.split_k > 1:
        gemv_split_k(x2, w, y, config, pad, ieee)
        return y.view(*lead, n)
    grid = (triton.cdiv(n, config.block_n), triton.cdiv(m, pad))
    pdl = use_pdl(pdl, x)
    _gemv_kernel[grid](
        x2, w, y, m, n, k, x2.stride(0), w.stride(0), y.stride(0),
        M_PAD=pad, BLOCK_N=config.block_n, BLOCK_K=config.block_k,
        NUM_STAGES=config.num_stages, DOT=config.dot, IEEE=ieee,
        EVEN_K=k % config.block_k == 0, EVEN_N=n % config.block_n == 0, PDL=pdl,
        num_warps=config.num_warps, num_stages=config.num_stages,
        **launch_options(pdl),
    )
    return y.view(*lead, n)
