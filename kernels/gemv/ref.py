"""PyTorch oracle of `gemv`: y = x @ W^T for a few decode rows, fp32 accumulation.

    y[m, n] = sum_k x[m, k] * W[n, k]      x (..., K), W (N, K) row-major (nn.Linear's layout)

computed in fp32 and rounded once to x's dtype. This is the fp32 reference of the 2x rule
(common/numerics.py); the same product in the low dtype (`x @ W.t()`, cuBLAS on CUDA) is
the other side of it. With glu, x (..., 2K) = [gate | up] and the input is `swiglu(x)`.
"""

from __future__ import annotations

import torch

__all__ = ["gemv_ref", "swiglu"]


def swiglu(x: torch.Tensor) -> torch.Tensor:
    """silu(gate) * up of x (..., 2K) = [gate | up] -> (..., K): fp32 math, one rounding to
    x's dtype (as Inductor fuses a Qwen3 MLP's `F.silu(gate) * up`)."""
    gate, up = x.float().chunk(2, dim=-1)
    return (gate * torch.sigmoid(gate) * up).to(x.dtype)


def gemv_ref(x: torch.Tensor, w: torch.Tensor, glu: bool = False) -> torch.Tensor:
    """x (..., K) @ w (N, K)^T -> (..., N) in x's dtype; math in fp32, one rounding.
    glu: x is (..., 2K) and the input is swiglu(x) (rounded to x's dtype first)."""
    x = swiglu(x) if glu else x
    return (x.float() @ w.float().t()).to(x.dtype)
