"""PyTorch oracles of `gemv` and its two fused-input forms, fp32 accumulation.

    y[m, n] = sum_k x[m, k] * W[n, k]      x (..., K), W (N, K) row-major (nn.Linear's layout)

computed in fp32 and rounded once to x's dtype. This is the fp32 reference of the 2x rule
(common/numerics.py); the same product in the low dtype (`x @ W.t()`, cuBLAS on CUDA) is
the other side of it. The fused forms make the input first (kernels/gemv/prologue.py):
`silu_mul_ref` before down, `add_rms_norm_ref` (the deferred residual add and the input
RMSNorm) before wqkv, each rounded to x's dtype as the unfused layer stores it.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from kernels.qk_norm_rope_write.ref import rms_norm_hf

__all__ = ["add_rms_norm_ref", "gemv_ref", "gemv_rms_norm_ref", "gemv_silu_mul_ref",
           "silu_mul_ref"]


def gemv_ref(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    """x (..., K) @ w (N, K)^T -> (..., N) in x's dtype; math in fp32, one rounding."""
    return (x.float() @ w.float().t()).to(x.dtype)


def silu_mul_ref(gate_up: torch.Tensor) -> torch.Tensor:
    """gate_up (..., 2K) = [gate | up] -> silu(gate) * up (..., K): fp32 math, one rounding."""
    gate, up = gate_up.float().chunk(2, dim=-1)
    return (F.silu(gate) * up).to(gate_up.dtype)


def add_rms_norm_ref(x: torch.Tensor, residual: torch.Tensor | None, norm_weight: torch.Tensor,
                     eps: float) -> tuple[torch.Tensor, torch.Tensor]:
    """(stream, h): stream = x + residual in x's dtype (x when residual is None), h its HF
    Qwen3 RMSNorm: fp32 statistics, cast to x's dtype, then times norm_weight (K,)."""
    stream = x if residual is None else x + residual
    return stream, rms_norm_hf(stream, norm_weight, eps)


def gemv_silu_mul_ref(gate_up: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    """silu(gate) * up (`silu_mul_ref`) @ w (N, K)^T -> (..., N) for gate_up (..., 2K)."""
    return gemv_ref(silu_mul_ref(gate_up), w)


def gemv_rms_norm_ref(x: torch.Tensor, residual: torch.Tensor | None,
                      norm_weight: torch.Tensor, w: torch.Tensor, *,
                      eps: float) -> tuple[torch.Tensor, torch.Tensor]:
    """(y, stream): y = RMSNorm(x + residual) @ w^T (..., N), stream = x + residual (..., K)
    (`add_rms_norm_ref`; x itself when residual is None)."""
    stream, h = add_rms_norm_ref(x, residual, norm_weight, eps)
    return gemv_ref(h, w), stream
