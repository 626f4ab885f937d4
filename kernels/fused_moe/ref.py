"""Oracle of `fused_moe`: the experts of a top-k routed MoE MLP, one expert at a time.

The same sequence as transformers' `Qwen3MoeExperts.forward`: for each expert hit, its tokens'
gate/up projection, SwiGLU, down projection, scaled by the routing weight, summed into the
output in the activations' dtype. It reads the hit experts on the host (a sync per call), so
the engine runs it on the CPU only; CUDA runs kernel.py.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F


def fused_moe_ref(x: torch.Tensor, w_gate_up: torch.Tensor, w_down: torch.Tensor,
                  topk_weights: torch.Tensor, topk_ids: torch.Tensor) -> torch.Tensor:
    """Sum over j of topk_weights[m, j] * expert_{topk_ids[m, j]}(x[m]).

    x (M, H); w_gate_up (E, 2F, H), gate rows first then up rows; w_down (E, H, F);
    topk_weights (M, k) float; topk_ids (M, k) int. Returns (M, H) in x's dtype, where
    expert_e(v) = w_down[e] @ (silu(g) * u), [g; u] = w_gate_up[e] @ v.
    """
    out = torch.zeros_like(x)
    weights = topk_weights.to(x.dtype)
    for e in torch.unique(topk_ids).tolist():
        token, slot = torch.where(topk_ids == e)
        gate, up = (x[token] @ w_gate_up[e].t()).chunk(2, dim=-1)
        y = (F.silu(gate) * up) @ w_down[e].t()
        out.index_add_(0, token, y * weights[token, slot, None])
    return out
