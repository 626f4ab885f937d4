"""PyTorch oracle of `prepare_block` (docs/sglang.md section 4.1)."""

from __future__ import annotations

import torch


def prepare_block_ref(
    verified_id: torch.Tensor,
    prefix_lens: torch.Tensor,
    req_pool_indices: torch.Tensor,
    req_to_token: torch.Tensor,
    *,
    block_size: int,
    mask_token_id: int,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Block ids, absolute positions and KV slots of every request's next block.

    Args:
        verified_id: (bs,) int, the anchor (last committed token) of each request.
        prefix_lens: (bs,) int, tokens whose KV is committed (anchor excluded).
        req_pool_indices: (bs,) int, each request's row of `req_to_token`.
        req_to_token: (R, W) int32, (request slot, position) -> KV slot.
        block_size: B, tokens per block (anchor included).
        mask_token_id: id written at block positions 1..B-1.

    Returns:
        block_ids (bs, B) i64 = [anchor, MASK * (B-1)], positions (bs, B) i64 = prefix + j,
        cache_loc (bs, B) i64 = req_to_token[req, prefix + j], or 0 where prefix + j >= W.
    """
    bs, width = verified_id.shape[0], req_to_token.shape[1]
    device = req_to_token.device
    j = torch.arange(block_size, device=device, dtype=torch.int64)
    positions = prefix_lens.to(torch.int64)[:, None] + j
    valid = positions < width
    rows = req_pool_indices.to(torch.int64)[:, None].expand(bs, block_size)
    slots = req_to_token[rows, positions.clamp(max=width - 1)].to(torch.int64)
    cache_loc = torch.where(valid, slots, torch.zeros_like(slots))
    block_ids = torch.full((bs, block_size), mask_token_id, dtype=torch.int64, device=device)
    block_ids[:, 0] = verified_id.to(torch.int64)
    return block_ids, positions, cache_loc
