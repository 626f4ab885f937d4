"""PyTorch oracle of `qk_norm_rope_write`: the q/k/v tail of a Qwen3 layer's QKV projection.

Exactly the sequence `reference.model.decoder_layer` runs after its fused wqkv GEMM (and
tests/reference checks that the two agree bit for bit):

    q, k, v = qkv.split([nh*D, nkv*D, nkv*D])
    q = rope(rms_norm(q per head) * q_norm_weight);  k = rope(rms_norm(k per head) * k_norm_weight)
    k_pool[cache_loc[t]] = k;  v_pool[cache_loc[t]] = v;  return q

rms_norm is HF Qwen3's (fp32 statistics, cast to the input dtype, then the weight multiply
in the input dtype) and RoPE is neox in fp32 cast back: three roundings for 16-bit inputs.
The Triton kernel does all of it in fp32 and rounds once.
"""

from __future__ import annotations

import torch

from kernels.kv_materialize.ref import rope_neox


def rms_norm_hf(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """HF Qwen3 RMSNorm over the last dim (= reference.model.rms_norm)."""
    xf = x.float()
    return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)).to(x.dtype) * weight


def rope_rows(x: torch.Tensor, cos_sin: torch.Tensor) -> torch.Tensor:
    """Neox RoPE of x (T, heads, D) with cos_sin (T, D) fp32, math in fp32, cast back."""
    d = x.shape[-1]
    return rope_neox(x.float(), cos_sin[:, : d // 2], cos_sin[:, d // 2 :]).to(x.dtype)


def qk_norm_rope_write_ref(
    qkv: torch.Tensor,
    q_norm_weight: torch.Tensor,
    k_norm_weight: torch.Tensor,
    cos_sin: torch.Tensor,
    cache_loc: torch.Tensor,
    k_pool: torch.Tensor,
    v_pool: torch.Tensor,
    *,
    num_heads: int,
    eps: float,
    pdl: bool = False,
) -> torch.Tensor:
    """Norm and rotate q and k of T tokens, write k and v to the pool, return q.

    Args:
        qkv: (T, nh*D + 2*nkv*D), the wqkv GEMM output (q heads, then k heads, then v heads).
        q_norm_weight, k_norm_weight: (D,) per-head RMSNorm weights.
        cos_sin: (T, D) fp32 rows of the RoPE table at each token's position (cos in [:D/2],
            sin in [D/2:]).
        cache_loc: (T,) int pool slots; k_pool, v_pool: (S, nkv, D), written in place.
        num_heads: nh (query heads); eps: RMSNorm epsilon.
        pdl: the Triton kernel's launch switch, accepted so both take the same arguments;
            no effect here.

    Returns: q (T, nh, D) in qkv's dtype.
    """
    t = qkv.shape[0]
    nkv, d = k_pool.shape[1], k_pool.shape[2]
    q, k, v = qkv.split([num_heads * d, nkv * d, nkv * d], dim=-1)
    q = rope_rows(rms_norm_hf(q.reshape(t, num_heads, d), q_norm_weight, eps), cos_sin)
    k = rope_rows(rms_norm_hf(k.reshape(t, nkv, d), k_norm_weight, eps), cos_sin)
    loc = cache_loc.to(torch.int64)
    k_pool.index_copy_(0, loc, k.to(k_pool.dtype))
    v_pool.index_copy_(0, loc, v.reshape(t, nkv, d).to(v_pool.dtype))
    return q
