"""Qwen3-MoE's sparse MLP block: a softmax router over E experts, top-k, the experts fused.

As transformers' `Qwen3MoeSparseMoeBlock`: router logits h @ router^T, softmax in fp32, the
k largest probabilities (renormalised to sum 1 when norm_topk_prob), cast to the model
dtype, then the k experts' SwiGLU MLPs weighted by them (`reference.ops.fused_moe`: the
Triton kernels on CUDA, the per-expert oracle on the CPU). Expert weights are stacked:
w_gate_up (E, 2F, H), gate rows first, and w_down (E, H, F); this module also reads them
from HF names (`mlp.experts.{e}.{gate,up,down}_proj.weight`, or transformers' own stacked
`mlp.experts.gate_up_proj` / `mlp.experts.down_proj`) and makes random ones.
"""

from __future__ import annotations

import torch

from reference import ops
from reference.config import ConfigError, ModelConfig


def route(h: torch.Tensor, router: torch.Tensor, top_k: int, norm_topk: bool):
    """(weights (M, k) in h's dtype, expert ids (M, k) i64) of tokens h (M, H); router (E, H)."""
    probs = torch.softmax(h @ router.t(), dim=-1, dtype=torch.float32)
    weights, ids = torch.topk(probs, top_k, dim=-1)
    if norm_topk:
        weights = weights / weights.sum(dim=-1, keepdim=True)
    return weights.to(h.dtype), ids


def sparse_mlp(h: torch.Tensor, router: torch.Tensor, w_gate_up: torch.Tensor,
               w_down: torch.Tensor, top_k: int, norm_topk: bool) -> torch.Tensor:
    """The MoE MLP of the post-attention-normed stream h (bs, T, H) -> (bs, T, H)."""
    flat = h.reshape(-1, h.shape[-1])
    weights, ids = route(flat, router, top_k, norm_topk)
    return ops.fused_moe(flat, w_gate_up, w_down, weights, ids).view_as(h)


def take_experts(weights: dict, prefix: str, cfg: ModelConfig, where: str, device, dtype):
    """(router (E, H), w_gate_up (E, 2F, H), w_down (E, H, F)) of the layer at `prefix`
    ("model.layers.{i}.mlp."); ConfigError names a missing or misshapen weight."""
    e, h, f = cfg.num_experts, cfg.hidden_size, cfg.moe_intermediate_size

    def take(name, shape):
        if name not in weights:
            raise ConfigError(f"{where}: missing weight '{name}'")
        t = weights[name]
        if tuple(t.shape) != shape:
            raise ConfigError(f"{where}: weight '{name}' has shape {tuple(t.shape)}, "
                              f"expected {shape}")
        return t.to(device=device, dtype=dtype)

    router = take(prefix + "gate.weight", (e, h))
    if prefix + "experts.gate_up_proj" in weights:
        return (router, take(prefix + "experts.gate_up_proj", (e, 2 * f, h)),
                take(prefix + "experts.down_proj", (e, h, f)))
    p = prefix + "experts."
    gate_up = torch.stack([torch.cat([take(f"{p}{j}.gate_proj.weight", (f, h)),
                                      take(f"{p}{j}.up_proj.weight", (f, h))])
                           for j in range(e)])
    down = torch.stack([take(f"{p}{j}.down_proj.weight", (h, f)) for j in range(e)])
    return router, gate_up, down


def random_experts(cfg: ModelConfig, prefix: str, rand) -> dict[str, torch.Tensor]:
    """Random stacked expert weights of one layer under transformers' own names (made where
    `rand` makes them: on the GPU, the 30B-A3B preset's 58 GB never pass through the host)."""
    e, h, f = cfg.num_experts, cfg.hidden_size, cfg.moe_intermediate_size
    return {prefix + "gate.weight": rand(e, h, std=0.5),
            prefix + "experts.gate_up_proj": rand(e, 2 * f, h),
            prefix + "experts.down_proj": rand(e, h, f, std=0.002)}


def active_weight_bytes(cfg: ModelConfig, dtype_bytes: int = 2) -> int:
    """Weight bytes one decode token reads: every layer's attention projections, norms and
    MLP (a sparse layer: its router and top-k experts only), the final norm and the LM head
    (the embedding row read is negligible). Qwen3-30B-A3B in bf16: 6.08 GB of 61 GB."""
    h, d = cfg.hidden_size, cfg.head_dim
    attention = h * (cfg.num_heads + 2 * cfg.num_kv_heads) * d + cfg.num_heads * d * h
    params = cfg.vocab_size * h + h
    for i in range(cfg.num_layers):
        mlp = (cfg.num_experts * h + cfg.num_experts_per_tok * 3 * cfg.moe_intermediate_size * h
               if cfg.is_sparse(i) else 3 * cfg.intermediate_size * h)
        params += attention + mlp + 2 * h + 2 * d
    return params * dtype_bytes
