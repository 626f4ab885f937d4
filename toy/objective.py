"""The DFlash training objective: captured layers, anchors, blocks, labels, decayed loss.

Pure tensor functions (docs/dflash.md sections 1.2, 2.2, 2.3 and the three
traps of 2.6), used by toy/train_dflash.py and pinned by tests/toy/test_objective.py:

- a block is `[x_p, MASK * (B-1)]` at positions p..p+B-1 for an anchor p inside the loss
  mask with p <= len - B;
- block output k predicts x_{p+k}, the token at the *same* position (not p+k+1);
- block j sees the context strictly before its anchor (key w < p_j, never w == p_j: x_p
  enters only through the block's own embedding), itself bidirectionally, no other block
  (realised by toy/draft_model.py's `block_layout`);
- the loss covers block positions 1..B-1 only, weighted exp(-(k-1)/gamma), so the first
  drafted token weighs 1, and is normalised by the sum of the weights.
"""

from __future__ import annotations

import math

import torch


def build_target_layer_ids(num_target_layers: int, num_features: int) -> list[int]:
    """Target layers whose outputs feed the drafter: round(1 + i*(N-4)/(K-1)), N//2 for K=1.

    Spaced from the 2nd layer to the 3rd-from-last; (36, 5) -> [1, 9, 17, 25, 33].
    """
    if num_features < 1:
        raise ValueError(f"num_features must be >= 1, got {num_features}")
    if num_features == 1:
        return [num_target_layers // 2]
    if num_target_layers < 4:
        raise ValueError(f"{num_features} features need a target of >= 4 layers, got "
                         f"{num_target_layers}; use num_features=1")
    span = (num_target_layers - 4) / (num_features - 1)
    return [round(1 + i * span) for i in range(num_features)]


def position_weights(block_size: int, gamma: float | None) -> torch.Tensor:
    """(B,) loss weight of each block position: 0 at the anchor, exp(-(k-1)/gamma) after.

    gamma=None gives uniform weights (the no-decay ablation).
    """
    k = torch.arange(block_size, dtype=torch.float32)
    w = torch.ones(block_size) if gamma is None else torch.exp(-(k - 1) / gamma)
    w[0] = 0.0
    return w


def default_gamma(block_size: int) -> float:
    """The paper's gamma: 7 for B=16, 5 for B=10, 4 for B=8; otherwise about B/2 - 1."""
    return {16: 7.0, 10: 5.0, 8: 4.0}.get(block_size, max(1.0, block_size / 2 - 1))


def anchor_candidates(loss_mask: torch.Tensor, lens: torch.Tensor, block_size: int
                      ) -> torch.Tensor:
    """(bs, S) bool: positions p with loss_mask[p] and p <= len - B (the block fits)."""
    pos = torch.arange(loss_mask.shape[1], device=loss_mask.device)
    return loss_mask.bool() & (pos[None, :] <= (lens - block_size)[:, None])


def random_anchors(loss_mask: torch.Tensor, lens: torch.Tensor, block_size: int,
                   num_anchors: int, generator: torch.Generator
                   ) -> tuple[torch.Tensor, torch.Tensor]:
    """Up to num_anchors distinct random anchors per sequence, sorted (blocks may overlap).

    Args:
        loss_mask: (bs, S) 0/1, continuation tokens; lens: (bs,) i64 sequence lengths.
    Returns: anchors (bs, N) i64 (0 where invalid) and valid (bs, N) bool, N = num_anchors.
    """
    cand = anchor_candidates(loss_mask, lens, block_size)
    bs, s = cand.shape
    scores = torch.rand(bs, s, generator=generator, device=cand.device)
    scores = torch.where(cand, scores, -1.0)
    n = min(num_anchors, s)
    top = scores.topk(n, dim=1)
    valid = top.values >= 0
    anchors = torch.where(valid, top.indices, s)  # invalid last after sorting
    anchors, order = anchors.sort(dim=1)
    valid = valid.gather(1, order)
    anchors = torch.where(valid, anchors, 0)
    if n < num_anchors:
        pad = torch.zeros(bs, num_anchors - n, dtype=anchors.dtype, device=anchors.device)
        anchors, valid = torch.cat([anchors, pad], 1), torch.cat([valid, pad.bool()], 1)
    return anchors, valid


def uniform_anchors(loss_mask: torch.Tensor, lens: torch.Tensor, block_size: int,
                    num_anchors: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Ablation: the continuation tiled by back-to-back blocks from its first token.

    Same shapes as `random_anchors`; the first num_anchors tiles are kept.
    """
    first = loss_mask.bool().int().argmax(dim=1)  # (bs,) start of the continuation
    j = torch.arange(num_anchors, device=loss_mask.device)
    anchors = first[:, None] + j[None, :] * block_size
    cand = anchor_candidates(loss_mask, lens, block_size)
    valid = cand.gather(1, anchors.clamp(max=cand.shape[1] - 1)) & (anchors < cand.shape[1])
    return torch.where(valid, anchors, 0), valid


def block_inputs(ids: torch.Tensor, anchors: torch.Tensor, block_size: int,
                 mask_token_id: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Block tokens `[x_p, MASK * (B-1)]` and their positions p..p+B-1.

    ids: (bs, S); anchors: (bs, N). Returns block_ids, positions: (bs, N, B) i64.
    """
    k = torch.arange(block_size, device=ids.device)
    positions = anchors[:, :, None] + k
    block_ids = torch.full_like(positions, mask_token_id)
    block_ids[:, :, 0] = ids.gather(1, anchors)
    return block_ids, positions


def block_targets(ids: torch.Tensor, loss_mask: torch.Tensor, anchors: torch.Tensor,
                  valid: torch.Tensor, weights: torch.Tensor
                  ) -> tuple[torch.Tensor, torch.Tensor]:
    """Same-position labels and loss weights of every block position.

    Args:
        ids, loss_mask: (bs, S); anchors, valid: (bs, N); weights: (B,) `position_weights`.
    Returns: labels (bs, N, B) i64 = x_{p+k} (0 out of range) and w (bs, N, B) fp32, zero
        at k = 0, on invalid blocks, past the sequence and outside the loss mask.
    """
    s = ids.shape[1]
    pos = anchors[:, :, None] + torch.arange(weights.numel(), device=ids.device)
    inside = pos < s
    flat = pos.clamp(max=s - 1).flatten(1)
    labels = ids.gather(1, flat).view_as(pos)
    in_loss = loss_mask.gather(1, flat).view_as(pos).bool() & inside
    w = weights.to(ids.device) * (in_loss & valid[:, :, None])
    return torch.where(inside, labels, 0), w


def decayed_cross_entropy(logits: torch.Tensor, labels: torch.Tensor, weights: torch.Tensor
                          ) -> tuple[torch.Tensor, torch.Tensor]:
    """sum(w * CE) / sum(w) over M rows, and the top-1 accuracy over the rows of positive
    weight (rows of weight 0 add nothing to either).

    logits: (M, V); labels: (M,) i64; weights: (M,) >= 0.
    """
    ce = torch.nn.functional.cross_entropy(logits.float(), labels, reduction="none")
    loss = (ce * weights).sum() / weights.sum().clamp_min(math.ulp(1.0))
    kept = weights > 0
    hits = (logits.argmax(-1) == labels) & kept
    return loss, hits.sum() / kept.sum().clamp_min(1)


def block_loss(states: torch.Tensor, head, labels: torch.Tensor, weights: torch.Tensor
               ) -> tuple[torch.Tensor, torch.Tensor]:
    """Loss of the draft against same-position labels, anchor column excluded.

    Every position passes through the head, so no shape depends on the data and the host
    never waits for the device (a boolean selection of the kept rows would); positions of
    weight 0 (invalid blocks, outside the loss mask) add nothing.

    Args:
        states: (bs, N, B-1, X) draft outputs, column i = block position i+1 (label
            x_{p+i+1}); head maps them to logits (..., V) (the target's LM head).
        labels, weights: (bs, N, B) from `block_targets`.
    Returns: `decayed_cross_entropy` over the positions of positive weight.
    """
    w = weights[:, :, 1:].reshape(-1)
    logits = head(states).reshape(w.numel(), -1)
    return decayed_cross_entropy(logits, labels[:, :, 1:].reshape(-1), w)
