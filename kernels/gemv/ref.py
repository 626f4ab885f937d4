"""PyTorch oracles of `gemv` and `gemv_swiglu`: decode rows times a weight, fp32 accumulation.

    y[m, n] = sum_k x[m, k] * W[n, k]      x (..., K), W (N, K) row-major (nn.Linear's layout)

computed in fp32 and rounded once to x's dtype. This is the fp32 reference of the 2x rule
(common/numerics.py); the same product in the low dtype (`x @ W.t()`, cuBLAS on CUDA) is
the other side of it. `gemv_swiglu_ref` is the MLP's gate_up GEMV followed by SiLU-and-mul
(W = [W_gate; W_up], (2I, K)), rounded as the kernel (swiglu.py) rounds.
"""

from __future__ import annotations

import torch

__all__ = ["gemv_ref", "gemv_swiglu_ref"]


def gemv_ref(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    """x (..., K) @ w (N, K)^T -> (..., N) in x's dtype; math in fp32, one rounding."""
    return (x.float() @ w.float().t()).to(x.dtype)


def gemv_swiglu_ref(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    """x (..., K), w (2I, K) -> silu(g) * u (..., I) in x's dtype, with g, u = the halves of
    gemv_ref(x, w) (each rounded to x's dtype); the activation in fp32, rounded once."""
    if w.shape[0] % 2:
        raise ValueError(f"w must have an even number of rows (gate, then up), got {w.shape[0]}")
    g, u = gemv_ref(x, w).float().chunk(2, dim=-1)
    return (g * torch.sigmoid(g) * u).to(x.dtype)
