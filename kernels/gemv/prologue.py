"""GEMV prologues: the elementwise op that makes a projection's input, run inside its loads.

A decode layer launches a small kernel before two of its projections only to make their
input: the input RMSNorm (fused with the deferred residual add) before wqkv, and
SiLU-and-mul before down. At batch 1 each costs a launch and a round trip of the vector
through memory, ~2 us, against ~12-25 us of weight streaming. A prologue computes that
input chunk by chunk as the GEMV loads x, so the small kernel disappears:

    PLAIN     u = x
    SILU_MUL  x = [gate | up] (M, 2K):  u = bf16(silu(gate) * up), fp32 math, one rounding
    RMS_NORM  s = x + residual (rounded to x's dtype; residual optional)
              u = bf16(bf16(s * rstd) * g),  rstd = rsqrt(mean_k(s^2) + eps)

RMS_NORM's rounding is `reference.model.rms_norm`'s (HF Qwen3: fp32 statistics, cast, then
scale). Its rstd needs the whole row before the first product, so every program first walks
K once (`input_rstd`: M x K reads from L2, the row being hot) and the first program of each
row block also stores s (the residual stream, which the layer needs again after attention).
"""

from __future__ import annotations

from typing import NamedTuple

import torch
import triton
import triton.language as tl

PLAIN, SILU_MUL, RMS_NORM = 0, 1, 2


class Prologue(NamedTuple):
    """A launch's prologue (kernels/gemv/prologue.py): `kind`, and for RMS_NORM the norm's
    weight g (K,), eps, and optionally the residual (M, K) added first with the stream
    (M, K) buffer that receives x + residual. Tensors contiguous, in x's dtype."""

    kind: int = PLAIN
    norm_weight: torch.Tensor | None = None
    eps: float = 0.0
    residual: torch.Tensor | None = None
    stream: torch.Tensor | None = None


@triton.jit
def load_input(x_ptr, res_ptr, g_ptr, rows, k, mask, k_ok, s_xm, k_up, rstd,
               PRO: tl.constexpr, HAS_RES: tl.constexpr):
    """The GEMV's input u at rows x columns k (broadcast shapes: (R, 1) x (1, C) for a tile,
    a scalar row x (C,) for one row), in x's dtype; masked entries are 0. k_up: the offset
    of `up` in a SILU_MUL row (K); rstd: the rows' RMS scale (RMS_NORM), shaped like rows."""
    offs = rows * s_xm + k
    if PRO == 1:
        g = tl.load(x_ptr + offs, mask=mask, other=0.0, eviction_policy="evict_last")
        up = tl.load(x_ptr + offs + k_up, mask=mask, other=0.0, eviction_policy="evict_last")
        g = g.to(tl.float32)
        return (g * tl.sigmoid(g) * up.to(tl.float32)).to(x_ptr.dtype.element_ty)
    elif PRO == 2:
        s = tl.load(x_ptr + offs, mask=mask, other=0.0, eviction_policy="evict_last")
        if HAS_RES:
            r = tl.load(res_ptr + offs, mask=mask, other=0.0, eviction_policy="evict_last")
            s = (s.to(tl.float32) + r.to(tl.float32)).to(x_ptr.dtype.element_ty)
        h = (s.to(tl.float32) * rstd).to(x_ptr.dtype.element_ty)
        gw = tl.load(g_ptr + k, mask=k_ok, other=0.0, eviction_policy="evict_last")
        return (h.to(tl.float32) * gw.to(tl.float32)).to(x_ptr.dtype.element_ty)
    else:
        return tl.load(x_ptr + offs, mask=mask, other=0.0, eviction_policy="evict_last")


@triton.jit
def input_rstd(x_ptr, res_ptr, s_ptr, m, m_ok, K, s_xm, eps, write_rows,
               BLOCK_R: tl.constexpr, PRO: tl.constexpr, HAS_RES: tl.constexpr):
    """(M_PAD,) fp32 rsqrt(mean(s^2) + eps) of rows m of s = x (+ residual) for RMS_NORM
    (zeros for other prologues); with HAS_RES, rows m < write_rows (M in the one program of
    a row block that writes, else 0) also store s to the stream s_ptr (rows of K,
    contiguous). BLOCK_R (`stats_block`): columns per load, the whole row where it fits."""
    ssq = tl.zeros(m.shape, dtype=tl.float32)
    if PRO == 2:
        kk = tl.arange(0, BLOCK_R)
        for k0 in range(0, K, BLOCK_R):
            k = k0 + kk
            ok = m_ok[:, None] & (k < K)[None, :]
            offs = m[:, None] * s_xm + k[None, :]
            s = tl.load(x_ptr + offs, mask=ok, other=0.0)
            if HAS_RES:
                r = tl.load(res_ptr + offs, mask=ok, other=0.0)
                s = (s.to(tl.float32) + r.to(tl.float32)).to(x_ptr.dtype.element_ty)
                mine = ok & (m < write_rows)[:, None]
                tl.store(s_ptr + m[:, None] * K + k[None, :], s, mask=mine)
            s = s.to(tl.float32)
            ssq += tl.sum(s * s, axis=1)
        ssq = tl.rsqrt(ssq / K + eps)
    return ssq


STATS_ELEMENTS = 8192  # a program's statistics tile: 64 fp32 values a thread at 4 warps


def stats_block(m_pad: int, k: int, block_k: int) -> int:
    """Columns per step of `input_rstd`: the whole row (next power of two of K) where
    M_PAD rows of it fit STATS_ELEMENTS, so a batch-1 program reads its row in one round
    trip instead of K / BLOCK_K dependent ones; never less than BLOCK_K."""
    return max(block_k, min(triton.next_power_of_2(k), STATS_ELEMENTS // m_pad))


def kernel_args(x2: torch.Tensor, pro: Prologue | None, m_pad: int, k: int,
                block_k: int) -> tuple[tuple, dict]:
    """The prologue's runtime arguments (res_ptr, g_ptr, s_ptr, eps, k_up) and constexprs
    (PRO, HAS_RES, BLOCK_R) for a launch over x2 (M, K_in) whose W has K columns; unused
    pointers are x2."""
    if pro is None or pro.kind == PLAIN:
        return (x2, x2, x2, 0.0, 0), {"PRO": PLAIN, "HAS_RES": False, "BLOCK_R": block_k}
    if pro.kind == SILU_MUL:
        return (x2, x2, x2, 0.0, k), {"PRO": SILU_MUL, "HAS_RES": False, "BLOCK_R": block_k}
    has_res = pro.residual is not None
    res = pro.residual if has_res else x2
    stream = pro.stream if has_res else x2
    return (res, pro.norm_weight, stream, float(pro.eps), 0), {
        "PRO": RMS_NORM, "HAS_RES": has_res, "BLOCK_R": stats_block(m_pad, k, block_k)}
