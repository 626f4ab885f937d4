"""PyTorch oracle of `kv_materialize`: DFlash KV injection into the draft pool.

For every draft layer l and context token t (docs/sglang.md section 2.1):

    K = rope(rmsnorm_per_head(ctx_hidden @ W_k[l]^T) * k_norm_weight[l], positions[t])
    V = ctx_hidden @ W_v[l]^T

written to k_pool[l, cache_loc[t]] and v_pool[l, cache_loc[t]]. The oracle runs the eager
per-layer loop a serving engine would (one GEMM, norm, RoPE, pool write per layer), with the
norm and RoPE in fp32 and one rounding to the pool dtype.
"""

from __future__ import annotations

import torch


def rope_neox(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Neox rotation of the first R = 2 * cos.shape[-1] dims of each head.

    x: (T, heads, D) fp32; cos, sin: (T, R/2) fp32. Dims R..D pass through.
    """
    half = cos.shape[-1]
    c, s = cos[:, None, :], sin[:, None, :]
    x1, x2, rest = x[..., :half], x[..., half : 2 * half], x[..., 2 * half :]
    return torch.cat([x1 * c - x2 * s, x2 * c + x1 * s, rest], dim=-1)


def kv_materialize_ref(
    ctx_hidden: torch.Tensor,
    w_kv: torch.Tensor,
    k_norm_weight: torch.Tensor,
    cos_sin_cache: torch.Tensor,
    positions: torch.Tensor,
    cache_loc: torch.Tensor,
    k_pool: torch.Tensor,
    v_pool: torch.Tensor,
    *,
    eps: float,
    commit_lens: torch.Tensor | None = None,
    block_size: int | None = None,
) -> None:
    """Write injected K/V of `T` context tokens into every layer's pool, in place.

    Args:
        ctx_hidden: (T, H), hidden_norm(fc(target features)).
        w_kv: (L, 2*nkv*D, H), per layer the K rows then the V rows of qkv_proj.
        k_norm_weight: (L, D), per-head RMSNorm weight of K.
        cos_sin_cache: (P, R) fp32, cos in [:, :R/2], sin in [:, R/2:].
        positions: (T,) i64 absolute positions; cache_loc: (T,) i64 pool slots.
        k_pool, v_pool: (L, S, nkv, D) pools, written in place.
        eps: RMSNorm epsilon.
        commit_lens: optional (bs,) int; then T = bs*B and token b*B + j is written only if
            j < commit_lens[b].
        block_size: B, required with commit_lens.
    """
    num_layers, _, nkv, head_dim = k_pool.shape
    keep = torch.ones(ctx_hidden.shape[0], dtype=torch.bool, device=ctx_hidden.device)
    if commit_lens is not None:
        j = torch.arange(block_size, device=ctx_hidden.device)
        keep = (j[None, :] < commit_lens.to(torch.int64)[:, None]).reshape(-1)
    loc = cache_loc.to(torch.int64)[keep]
    pos = positions.to(torch.int64)[keep]
    half = cos_sin_cache.shape[1] // 2
    cos, sin = cos_sin_cache[pos, :half].float(), cos_sin_cache[pos, half:].float()
    x = ctx_hidden[keep]
    for layer in range(num_layers):
        kv = (x.float() @ w_kv[layer].float().t()).view(-1, 2, nkv, head_dim)
        k, v = kv[:, 0], kv[:, 1]
        k = k * torch.rsqrt(k.pow(2).mean(-1, keepdim=True) + eps) * k_norm_weight[layer].float()
        k_pool[layer, loc] = rope_neox(k, cos, sin).to(k_pool.dtype)
        v_pool[layer, loc] = v.to(v_pool.dtype)
