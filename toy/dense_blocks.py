"""Dense training forward of a block drafter: all blocks of a sequence in one attention call.

`draft_model.block_logits` trains through the engine's own paged draft forward: each of the
M = bs*N blocks is a request whose table row gathers its whole context from the pool, so a
step gathers (and scatters the gradient of) M*S pool rows per layer. Here the same function
is computed per sequence: the queries are the sequence's N blocks laid side by side (N*B
tokens at positions p_n + j), the keys are the sequence's injected context K/V (S positions)
followed by the blocks' own K/V, and a mask gives block n the context strictly before its
anchor p_n and its own block (bidirectional; causal for the "ar" variant). The "fusion"
variant runs the context through the layers as tokens (causal among themselves) instead of
injecting it. tests/toy/test_dense_blocks.py checks these logits against `block_logits`.

Shapes: ids (bs, S); anchors, valid (bs, N); features (bs, S, K*H); logits (bs, N, B-1, V).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from reference.methods.dflash_drafter import Drafter, context_hidden
from reference.model import LayerWeights, Target, apply_rope, rms_norm
from toy.objective import block_inputs

DENSE_VARIANTS = ("dflash", "no_features", "ar", "fusion")


def block_mask(anchors: torch.Tensor, lens: torch.Tensor, s: int, block_size: int, *,
               causal_block: bool, context_queries: bool) -> torch.Tensor:
    """(bs, Tq, S + N*B) bool: may each query see each key.

    Keys are the S context positions then the N*B block tokens. Block n's queries see context
    w < p_n and their own block (only j' <= j when causal_block). With context_queries the
    S context tokens come first among the queries too and see context w <= t, w < len.
    """
    bs, n = anchors.shape
    dev = anchors.device
    w = torch.arange(s, device=dev)
    j = torch.arange(block_size, device=dev)
    blk = torch.arange(n, device=dev).repeat_interleave(block_size)  # (N*B,) block of a key
    jj = j.repeat(n)  # (N*B,) position inside its block
    p = anchors.repeat_interleave(block_size, dim=1)  # (bs, N*B) anchor of each query
    to_ctx = w[None, None, :] < p[:, :, None]  # (bs, N*B, S)
    same = blk[:, None] == blk[None, :]
    if causal_block:
        same = same & (jj[None, :] <= jj[:, None])
    rows = torch.cat([to_ctx, same.expand(bs, -1, -1)], dim=2)
    if not context_queries:
        return rows
    ctx = (w[None, :] <= w[:, None])[None] & (w[None, None, :] < lens[:, None, None])
    ctx = torch.cat([ctx, torch.zeros(bs, s, n * block_size, dtype=torch.bool, device=dev)], 2)
    return torch.cat([ctx, rows], dim=1)


def dense_layer(x: torch.Tensor, w: LayerWeights, cos_sin: torch.Tensor, ctx_kv,
                mask: torch.Tensor, num_heads: int, eps: float, return_kv: bool = False):
    """One pre-norm Qwen3 layer (reference/model.py `decoder_layer`) with dense attention.

    x (bs, T, H) queries; ctx_kv: (k, v) (bs, S, nkv, D) keys placed before x's own, or
    None; mask (bs, T, S + T) or (bs, T, T) bool. Returns the residual stream (bs, T, H),
    and with return_kv also the (k, v) it attended, (bs, S + T, nkv, D) (ctx_kv then x's
    own), for later queries to attend.
    """
    bs, t, _ = x.shape
    d = w.q_norm.shape[0]
    nkv = (w.wqkv.shape[0] - num_heads * d) // (2 * d)
    h = rms_norm(x, w.input_norm, eps)
    q, k, v = (h @ w.wqkv.t()).split([num_heads * d, nkv * d, nkv * d], dim=-1)
    q = apply_rope(rms_norm(q.view(bs, t, num_heads, d), w.q_norm, eps), cos_sin)
    k = apply_rope(rms_norm(k.view(bs, t, nkv, d), w.k_norm, eps), cos_sin)
    v = v.view(bs, t, nkv, d)
    if ctx_kv is not None:
        k, v = torch.cat([ctx_kv[0], k], 1), torch.cat([ctx_kv[1], v], 1)
    kv = (k, v)
    group = num_heads // nkv
    k, v = (z.repeat_interleave(group, dim=2).transpose(1, 2) for z in (k, v))
    out = F.scaled_dot_product_attention(q.transpose(1, 2), k, v, attn_mask=mask[:, None])
    x = x + out.transpose(1, 2).reshape(bs, t, num_heads * d) @ w.wo.t()
    gate, up = (rms_norm(x, w.post_norm, eps) @ w.w_gate_up.t()).chunk(2, dim=-1)
    x = x + (F.silu(gate) * up) @ w.w_down.t()
    return (x, kv) if return_kv else x


def _injected_kv(drafter: Drafter, layer: int, ctx: torch.Tensor, cos_sin: torch.Tensor):
    """`kv_materialize`'s K/V of context hidden states ctx (bs, S, H) for one layer."""
    cfg = drafter.config.model
    bs, s, _ = ctx.shape
    nkv, d = cfg.num_kv_heads, cfg.head_dim
    k, v = (ctx @ drafter.w_kv[layer].t()).split(nkv * d, dim=-1)
    k = apply_rope(rms_norm(k.view(bs, s, nkv, d), drafter.k_norm[layer], cfg.rms_norm_eps),
                   cos_sin)
    return k.to(ctx.dtype), v.reshape(bs, s, nkv, d)


def dense_block_hidden(drafter: Drafter, target: Target, features: torch.Tensor,
                       ids: torch.Tensor, lens: torch.Tensor, anchors: torch.Tensor,
                       block_size: int, mask_token_id: int, variant: str = "dflash",
                       all_columns: bool = False) -> torch.Tensor:
    """Final-normed draft states (bs, N, B-1, H) of every block (invalid ones too), whose
    LM head (`Target.logits`) gives the draft logits; select kept positions first, since
    the logits are the step's largest tensor.

    Column i scores block position i+1 (label x_{p+i+1}); for "ar" the block input is the
    teacher-forced x_p..x_{p+B-1} under causal attention and column i is output i. With
    all_columns every block slot is returned, (bs, N, B, H): DSpark's block of gamma = B
    slots, whose slot k (anchor included) scores x_{p+k+1}.
    """
    if variant not in DENSE_VARIANTS:
        raise ValueError(f"dense training covers {DENSE_VARIANTS}, not {variant!r}")
    cfg = drafter.config.model
    if any(cfg.window(i) is not None for i in range(len(drafter.layers))):
        raise NotImplementedError("dense block training has no sliding-window layers")
    bs, s = ids.shape
    n = anchors.shape[1]
    block_ids, positions = block_inputs(ids, anchors, block_size, mask_token_id)
    if variant == "ar":
        block_ids = ids.gather(1, positions.clamp(max=s - 1).flatten(1)).view_as(positions)
    x = target.embed[block_ids.flatten(1)]  # (bs, N*B, H)
    ctx = context_hidden(drafter, features.reshape(bs * s, -1)).view(bs, s, -1)
    ctx_pos = torch.arange(s, device=ids.device).expand(bs, s)
    fusion = variant == "fusion"
    mask = block_mask(anchors, lens, s, block_size, causal_block=variant == "ar",
                      context_queries=fusion)
    if fusion:
        x = torch.cat([ctx, x], dim=1)
        positions = torch.cat([ctx_pos, positions.flatten(1)], dim=1)
    cos_sin = drafter.cos_sin[positions.flatten(1)]
    ctx_cos_sin = drafter.cos_sin[ctx_pos]
    for i, w in enumerate(drafter.layers):
        kv = None if fusion else _injected_kv(drafter, i, ctx, ctx_cos_sin)
        x = dense_layer(x, w, cos_sin, kv, mask, cfg.num_heads, cfg.rms_norm_eps)
    if fusion:
        x = x[:, s:]
    x = x.view(bs, n, block_size, -1)
    if not all_columns:
        x = x[:, :, :-1] if variant == "ar" else x[:, :, 1:]
    return rms_norm(x, drafter.norm, cfg.rms_norm_eps)


def dense_block_logits(drafter: Drafter, target: Target, *args, **kwargs) -> torch.Tensor:
    """Draft logits (bs, N, B-1, V) of every block: `dense_block_hidden`'s LM head."""
    return target.logits(dense_block_hidden(drafter, target, *args, **kwargs))
