"""PyTorch oracle of `gemv`: y = x @ W^T for a few decode rows, fp32 accumulation.

    y[m, n] = sum_k x[m, k] * W[n, k]      x (..., K), W (N, K) row-major (nn.Linear's layout)

computed in fp32 and rounded once to x's dtype. This is the fp32 reference of the 2x rule
(common/numerics.py); the same product in the low dtype (`x @ W.t()`, cuBLAS on CUDA) is
the other side of it.
"""

from __future__ import annotations

import torch


def gemv_ref(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    """x (..., K) @ w (N, K)^T -> (..., N) in x's dtype; math in fp32, one rounding."""
    return (x.float() @ w.float().t()).to(x.dtype)
