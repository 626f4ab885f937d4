"""Triton `prepare_block`: block ids, positions and KV slots of a batch in one launch.

One program per request (grid (bs,)), BLOCK = next_pow2(B) lanes. For lane j < B:

    block_ids[b, j] = verified_id[b] if j == 0 else mask_token_id
    positions[b, j] = prefix_lens[b] + j
    cache_loc[b, j] = req_to_token[req_pool_indices[b], prefix_lens[b] + j]  if in the table
                      0                                                      otherwise

"In the table" means 0 <= prefix + j < W and 0 <= req < R. The oracle requires the
request index to be in range; the kernel masks it too so that a bad value can never read out
of bounds. Reference: docs/sglang.md section 4.1.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from kernels._checks import INT_DTYPES, check_int, check_len, check_runnable, check_tensor
from kernels._checks import num_warps_for as _num_warps


# Sizes and ids vary per call; not specializing them keeps the compiled variants few.
@triton.jit(do_not_specialize=["mask_token_id", "num_rows", "width", "stride_table",
                               "stride_out_kind", "B"])
def _prepare_block_kernel(
    verified_id_ptr,
    prefix_lens_ptr,
    req_pool_indices_ptr,
    req_to_token_ptr,
    out_ptr,
    mask_token_id,
    num_rows,
    width,
    stride_vid,
    stride_prefix,
    stride_req,
    stride_table,
    stride_out_kind,
    B,
    BLOCK: tl.constexpr,
):
    b = tl.program_id(0).to(tl.int64)
    j = tl.arange(0, BLOCK)
    lane = j < B
    anchor = tl.load(verified_id_ptr + b * stride_vid).to(tl.int64)
    prefix = tl.load(prefix_lens_ptr + b * stride_prefix).to(tl.int64)
    # Broadcast to lanes: the CPU interpreter cannot mask with a scalar-and-vector predicate.
    req = tl.load(req_pool_indices_ptr + b * stride_req).to(tl.int64) + tl.zeros_like(j)

    pos = prefix + j
    valid = lane & (pos >= 0) & (pos < width) & (req >= 0) & (req < num_rows)
    slot = tl.load(req_to_token_ptr + req * stride_table + pos, mask=valid, other=0)
    ids = tl.where(j == 0, anchor, tl.zeros([BLOCK], tl.int64) + mask_token_id)

    row = out_ptr + b * B + j
    tl.store(row, ids, mask=lane)
    tl.store(row + stride_out_kind, pos, mask=lane)
    tl.store(row + 2 * stride_out_kind, slot.to(tl.int64), mask=lane)


def prepare_block(
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
        verified_id: (bs,) int32/int64, the anchor (last committed token) of each request.
        prefix_lens: (bs,) int32/int64, tokens whose KV is committed (anchor excluded).
        req_pool_indices: (bs,) int32/int64, each request's row of `req_to_token`.
        req_to_token: (R, W) int32/int64, (request slot, position) -> KV slot; its last
            dimension must be contiguous.
        block_size: B >= 1, tokens per block (anchor included).
        mask_token_id: id written at block positions 1..B-1.

    Returns:
        block_ids, positions, cache_loc: each (bs, B) int64 and contiguous (three views of one
        allocation), as `prepare_block_ref`.
    """
    table = check_tensor("req_to_token", req_to_token, ndim=2, dtypes=INT_DTYPES,
                         inner_stride_one=True)
    dev = table.device
    for name, t in (("verified_id", verified_id), ("prefix_lens", prefix_lens),
                    ("req_pool_indices", req_pool_indices)):
        check_tensor(name, t, ndim=1, dtypes=INT_DTYPES, device=dev)
    bs = verified_id.shape[0]
    check_len("prefix_lens", prefix_lens, bs, "len(verified_id)")
    check_len("req_pool_indices", req_pool_indices, bs, "len(verified_id)")
    block = check_int("block_size", block_size, minimum=1)
    check_int("mask_token_id", mask_token_id)
    check_runnable("req_to_token", table)

    out = torch.empty((3, bs, block), dtype=torch.int64, device=dev)
    block_ids, positions, cache_loc = out  # views first, launch last
    if bs > 0:
        lanes = triton.next_power_of_2(block)
        _prepare_block_kernel[(bs,)](
            verified_id, prefix_lens, req_pool_indices, table, out,
            mask_token_id, table.shape[0], table.shape[1],
            verified_id.stride(0), prefix_lens.stride(0), req_pool_indices.stride(0),
            table.stride(0), bs * block, block,
            BLOCK=lanes, num_warps=_num_warps(lanes),
        )
    return block_ids, positions, cache_loc
