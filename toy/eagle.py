"""How the toy world trains the EAGLE-3-style baseline (engine: reference/methods/eagle.py).

One Qwen3 layer whose input at position t is `in_proj([embed(x_t) ; g_{t-1}])` (in_proj:
(H, 2H)), where g_{t-1} = hidden_norm(fc(captured target states of t-1)) for committed
context; its output at t predicts x_{t+1}. Drafting from anchor p takes B-1 sequential
one-token steps: step j reads the drafted token x_{p+j} and, in place of the target
feature it does not have yet, its own previous output (through hidden_norm, a choice of
this reproduction for scale), attending causally to the context K/V and its earlier steps.
Training unrolls the same chain from random anchors (EAGLE-3's "training-time test"), with
teacher-forced tokens and the decayed loss of the DFlash objective. Stored like a DFlash
drafter (config.json with dflash_config.variant = "eagle", one layer) plus `in_proj.weight`.

Training cost (`dense_eagle_hidden`): the chain is sequential, each step one pass of the
layer and its backward, ~195 aten ops (toy/step_cost.py, fp32) against ~510
for a whole two-layer DFlash step, and on a GPU shared by the parallel ablations step time
follows that count (toy/ablations.py). Step 0 is the context pass's own state at
the anchor (same input, position and keys), so only steps 1..T-1 run in sequence; tokens,
positions, mask and final norm are computed once. `chain_depth` (train_dflash's config)
trains the first T < B-1 steps, as EAGLE-3 trains a few steps and drafts deeper; the
engine drafts B-1 either way, later steps applying the same weights to their own features
more times than in training.
"""

from __future__ import annotations

import torch

from reference.methods.dflash_drafter import Drafter, context_hidden, draft_stack
from reference.methods.eagle import chain, eagle_inputs
from reference.model import ForwardBatch, Target, rms_norm
from toy.dense_blocks import dense_layer


def shifted_context(drafter: Drafter, features: torch.Tensor) -> torch.Tensor:
    """g_{t-1} for every t of (bs, S, K*H) captured states: (bs, S, H), zeros at t = 0."""
    g = context_hidden(drafter, features.flatten(0, 1)).view(*features.shape[:2], -1)
    return torch.cat([torch.zeros_like(g[:, :1]), g[:, :-1]], dim=1)


def eagle_block_logits(drafter: Drafter, in_proj: torch.Tensor, target: Target,
                       ids: torch.Tensor, features: torch.Tensor, layout, pool) -> torch.Tensor:
    """Training logits (M, B-1, V) of the chain unrolled from every block's anchor.

    ids: (bs, S); features: (bs, S, K*H); layout: draft_model.BlockLayout; pool: [k, v]
    zeroed (L, slots, nkv, D) tensors. The context runs through the layer causally first.
    """
    bs, s = ids.shape
    dev = ids.device
    g_prev = shifted_context(drafter, features)
    ctx_slots = 1 + torch.arange(bs * s, device=dev).view(bs, s)
    table = torch.cat([layout.req_to_token, ctx_slots.to(layout.req_to_token.dtype)])
    rows = table.shape[0] - bs + torch.arange(bs, device=dev)
    ctx = ForwardBatch(torch.arange(s, device=dev).expand(bs, s), ctx_slots, rows,
                       torch.full((bs,), s, device=dev))
    draft_stack(drafter, target, eagle_inputs(drafter, in_proj, target, ids, g_prev), ctx,
                table, pool[0], pool[1], causal=True)
    b, p = layout.index[:, 0], layout.positions[:, 0]
    teacher = ids[b[:, None], layout.positions]
    return chain(drafter, in_proj, target, None, g_prev[b, p], layout.positions,
                 layout.cache_loc, layout.req_rows, p, table, pool[0], pool[1],
                 teacher=teacher)


def chain_mask(anchors: torch.Tensor, s: int, steps: int, dtype: torch.dtype) -> torch.Tensor:
    """Additive mask (bs, N, W), 0 or -inf, of chain steps 1..steps; W = S + steps*N rounded
    up to a multiple of 8, so that every step's column slice has aligned rows (CUDA's
    memory-efficient SDPA would copy an unaligned mask once per step).

    Keys: the S context positions, then the chain's own keys step-major (step j >= 1 of
    block m at S + (j-1)*N + m). Block m (anchor p_m) sees context w <= p_m (position p_m
    holds its step 0's key) and its own chain keys; step j reads the first S + j*N columns.
    """
    bs, n = anchors.shape
    dev = anchors.device
    blocks = torch.arange(n, device=dev)
    to_ctx = torch.arange(s, device=dev)[None, None, :] <= anchors[:, :, None]
    own = blocks.repeat(steps)[None, :] == blocks[:, None]
    seen = torch.cat([to_ctx, own.expand(bs, n, -1)], dim=2)
    seen = torch.nn.functional.pad(seen, (0, -seen.shape[2] % 8), value=False)
    return torch.zeros(seen.shape, dtype=dtype, device=dev).masked_fill_(~seen, float("-inf"))


def dense_eagle_hidden(drafter: Drafter, in_proj: torch.Tensor, target: Target,
                       ids: torch.Tensor, features: torch.Tensor, anchors: torch.Tensor,
                       block_size: int, depth: int | None = None) -> torch.Tensor:
    """`eagle_block_logits`' chain for every block at once: final-normed states (bs, N, T,
    H), T = depth or B-1 (invalid blocks too), dense per sequence as dense_blocks.py does.

    ids: (bs, S); features: (bs, S, K*H); anchors: (bs, N). The context runs through the
    layers causally; chain step j of block n (position p_n + j, input token x_{p_n + j})
    sees the context before p_n and its own steps 0..j. Step 0's input, position and keys
    are the context's own at p_n, so its state is the context pass's at p_n; steps
    1..T-1 run in sequence (each reads the previous state as its feature), everything else
    (token embeddings, positions, mask, final norm) once for all steps. A depth < B-1 (a
    shorter training-time test) returns the first `depth` columns of the full chain.
    """
    cfg = drafter.config.model
    eps = cfg.rms_norm_eps
    steps = block_size - 1 if depth is None else min(depth, block_size - 1)
    bs, s = ids.shape
    n = anchors.shape[1]
    dev = ids.device
    g_prev = shifted_context(drafter, features)
    w_ctx = torch.arange(s, device=dev)
    x = eagle_inputs(drafter, in_proj, target, ids, g_prev)
    causal = (w_ctx[None, :] <= w_ctx[:, None]).expand(bs, s, s)
    ctx_cos_sin = drafter.cos_sin[w_ctx.expand(bs, s)]
    kv = []  # per layer: (k, v) (bs, S + (j-1)*N, nkv, D) of the context, then steps 1..j-1
    for w in drafter.layers:
        x, layer_kv = dense_layer(x, w, ctx_cos_sin, None, causal, cfg.num_heads, eps,
                                  return_kv=True)
        kv.append(layer_kv)
    rows = torch.arange(bs, device=dev)[:, None]
    out = [x[rows, anchors]]  # step 0: (bs, N, H)
    pos = anchors[None] + torch.arange(1, steps, device=dev)[:, None, None]  # (T-1, bs, N)
    w_tok, w_feat = in_proj.split(cfg.hidden_size, dim=1)
    tok = target.embed[ids[rows, pos.clamp(max=s - 1)]] @ w_tok.t()  # (T-1, bs, N, H)
    cos_sin = drafter.cos_sin[pos]  # (T-1, bs, N, D)
    mask = chain_mask(anchors, s, steps - 1, x.dtype)
    for j in range(1, steps):
        x = tok[j - 1] + rms_norm(out[-1], drafter.hidden_norm, eps) @ w_feat.t()
        for i, w in enumerate(drafter.layers):
            x, kv[i] = dense_layer(x, w, cos_sin[j - 1], kv[i], mask[:, :, : s + j * n],
                                   cfg.num_heads, eps, return_kv=True)
        out.append(x)
    return rms_norm(torch.stack(out, dim=2), drafter.norm, eps)
