"""PyTorch oracle of `paged_attention`: attention of a ragged batch over a paged KV pool.

Request b's key at position w lives in pool slot `req_to_token[req_rows[b], w]`. Query t of
request b, at absolute position `positions[b, t]`, may see key w iff

    w < kv_lens[b]  and  (not causal or w <= positions[b, t])
                    and  (window is None or positions[b, t] - w < window)
                    and  (tree_mask is None or not 0 <= w - positions[b, 0] < T
                          or tree_mask[b, t, w - positions[b, 0]])

A tree of T draft nodes (a tree verify) sits at positions[b, 0] .. positions[b, 0] + T - 1,
node t at positions[b, t] = positions[b, 0] + t; `tree_mask[b, t, j]` says node j is node t
or one of its ancestors (reference/tree.py `ancestors`), so a node sees the context and its
own path only.

Grouped-query attention: query head i reads KV head i // (nh / nkv). A query that may see no
key (a padding row) outputs zeros. Math in fp32 (fp64 for fp64 inputs), one rounding to
q's dtype.
"""

from __future__ import annotations

import torch


def visible_keys(positions: torch.Tensor, kv_lens: torch.Tensor, width: int, *, causal: bool,
                 window: int | None, tree_mask: torch.Tensor | None = None) -> torch.Tensor:
    """(bs, T, W) bool: may query t of request b see key position w."""
    w = torch.arange(width, device=positions.device)
    allowed = w[None, None, :] < kv_lens.to(torch.int64)[:, None, None]
    if causal:
        allowed = allowed & (w[None, None, :] <= positions[:, :, None])
    if window is not None:
        allowed = allowed & (positions[:, :, None] - w[None, None, :] < window)
    if tree_mask is not None:
        t = positions.shape[1]
        j = (w[None, :] - positions[:, :1]).expand(-1, width)  # (bs, W) node index of key w
        inside = (j >= 0) & (j < t)
        bit = tree_mask.gather(2, j.clamp(0, t - 1)[:, None, :].expand(-1, t, -1))
        allowed = allowed & (~inside[:, None, :] | bit)
    return allowed


def paged_attention_ref(
    q: torch.Tensor,
    k_pool: torch.Tensor,
    v_pool: torch.Tensor,
    req_to_token: torch.Tensor,
    req_rows: torch.Tensor,
    positions: torch.Tensor,
    kv_lens: torch.Tensor,
    *,
    causal: bool,
    window: int | None = None,
    sm_scale: float | None = None,
    unsplit_max_width: int = 0,
    fused_merge: bool = False,
    tree_mask: torch.Tensor | None = None,
    pdl: bool = False,
) -> torch.Tensor:
    """Softmax attention of every query over its request's visible keys.

    Args:
        q: (bs, T, nh, D) queries (normed and rotated).
        k_pool, v_pool: (S, nkv, D) one layer's pools.
        req_to_token: (R, W) int, (request row, position) -> slot.
        req_rows: (bs,) int rows of req_to_token; positions: (bs, T) i64; kv_lens: (bs,) int.
        causal, window: the visibility rule above; sm_scale defaults to D ** -0.5.
        unsplit_max_width, fused_merge, pdl: the Triton kernel's launch switches (how it
            splits the key range, how it launches), accepted so both take the same
            arguments; no effect here.
        tree_mask: (bs, T, T) bool, the ancestor mask of a tree verify (module docstring).

    Returns: (bs, T, nh, D) in q's dtype.
    """
    bs, t, nh, d = q.shape
    nkv = k_pool.shape[1]
    scale = d**-0.5 if sm_scale is None else sm_scale
    math = torch.promote_types(q.dtype, torch.float32)
    slots = req_to_token[req_rows.to(torch.int64)].to(torch.int64)  # (bs, W)
    keys = k_pool[slots].to(math).permute(0, 2, 1, 3)  # (bs, nkv, W, D)
    values = v_pool[slots].to(math).permute(0, 2, 1, 3)
    qg = q.to(math).view(bs, t, nkv, nh // nkv, d).permute(0, 2, 3, 1, 4)  # (bs, nkv, g, T, D)
    scores = torch.einsum("bhgtd,bhwd->bhgtw", qg, keys) * scale
    allowed = visible_keys(positions, kv_lens, slots.shape[1], causal=causal, window=window,
                           tree_mask=tree_mask)
    scores = scores.masked_fill(~allowed[:, None, None], float("-inf"))
    probs = torch.softmax(scores, dim=-1).nan_to_num(0.0)  # rows with no visible key -> 0
    out = torch.einsum("bhgtw,bhwd->bhgtd", probs, values)
    return out.permute(0, 3, 1, 2, 4).reshape(bs, t, nh, d).to(q.dtype)


def paged_attention_sdpa(q, k_pool, v_pool, req_to_token, req_rows, positions, kv_lens, *,
                         causal: bool, window: int | None = None, sm_scale: float | None = None):
    """The same attention with every op in q's dtype (gather, then SDPA with a mask).

    Not the oracle: the 2x rule's same-dtype reference, whose error against the fp32 oracle
    bounds a 16-bit kernel's (common/numerics.py).
    """
    bs, t, nh, d = q.shape
    group = nh // k_pool.shape[1]
    slots = req_to_token[req_rows.to(torch.int64)].to(torch.int64)
    keys = k_pool[slots].repeat_interleave(group, dim=2).transpose(1, 2)  # (bs, nh, W, D)
    values = v_pool[slots].repeat_interleave(group, dim=2).transpose(1, 2)
    mask = visible_keys(positions, kv_lens, slots.shape[1], causal=causal, window=window)
    out = torch.nn.functional.scaled_dot_product_attention(
        q.transpose(1, 2), keys, values, attn_mask=mask[:, None], scale=sm_scale)
    return out.transpose(1, 2).nan_to_num(0.0)
