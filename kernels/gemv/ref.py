"""PyTorch oracles of `gemv` and its fused-input form, fp32 accumulation.

    y[m, n] = sum_k x[m, k] * W[n, k]      x (..., K), W (N, K) row-major (nn.Linear's layout)

computed in fp32 and rounded once to x's dtype. This is the fp32 reference of the 2x rule
(common/numerics.py); the same product in the low dtype (`x @ W.t()`, cuBLAS on CUDA) is
the other side of it. The fused form makes the down projection's input first
(kernels/gemv/prologue.py): `silu_mul_ref`, rounded once to x's dtype.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

__all__ = ["gemv_ref", "gemv_silu_mul_ref", "silu_mul_ref"]


def gemv_ref(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    """x (..., K) @ w (N, K)^T -> (..., N) in x's dtype; math in fp32, one rounding."""
    return (x.float() @ w.float().t()).to(x.dtype)


def silu_mul_ref(gate_up: torch.Tensor) -> torch.Tensor:
    """gate_up (..., 2K) = [gate | up] -> silu(gate) * up (..., K): fp32 math, one rounding."""
    gate, up = gate_up.float().chunk(2, dim=-1)
    return (F.silu(gate) * up).to(gate_up.dtype)


def gemv_silu_mul_ref(gate_up: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    """silu(gate) * up (`silu_mul_ref`) @ w (N, K)^T -> (..., N) for gate_up (..., 2K)."""
    return gemv_ref(silu_mul_ref(gate_up), w)

