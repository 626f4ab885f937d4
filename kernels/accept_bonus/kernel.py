"""Triton `accept_bonus`: greedy acceptance, bonus, commit and output rows in one launch.

One program per request (grid (bs,)), BLOCK = next_pow2(B) lanes. With the drafted tokens
d_{j+1} = candidates[b, j+1] and the target argmax t_j = target_top1[b, j]:

    accept     = first j in [0, B-1) with d_{j+1} != t_j, or B-1 if none
    bonus      = t_accept;  commit = accept + 1;  new_seq = prefix_lens[b] + commit
    out[b, j]  = bonus if j == accept else (d_{j+1} if j < B-1 else 0)

The first mismatch is a min-reduction over lanes, so no lane loop is needed.
Reference: docs/sglang.md section 4.2.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from kernels._checks import INT_DTYPES, check_len, check_runnable, check_tensor
from kernels._checks import num_warps_for as _num_warps
from kernels.accept_bonus.ref import AcceptResult


# Sizes vary per call; not specializing them keeps the compiled variants few.
@triton.jit(do_not_specialize=["stride_cand", "stride_top1", "bs", "B"])
def _accept_bonus_kernel(
    candidates_ptr,
    target_top1_ptr,
    prefix_lens_ptr,
    out64_ptr,
    out32_ptr,
    stride_cand,
    stride_top1,
    stride_prefix,
    bs,
    B,
    BLOCK: tl.constexpr,
):
    b = tl.program_id(0).to(tl.int64)
    j = tl.arange(0, BLOCK)
    lane = j < B
    drafted = tl.load(candidates_ptr + b * stride_cand + j + 1, mask=j + 1 < B, other=0)
    top1 = tl.load(target_top1_ptr + b * stride_top1 + j, mask=lane, other=0).to(tl.int64)
    drafted = drafted.to(tl.int64)

    match = (drafted == top1) & (j < B - 1)
    accept = tl.min(tl.where(match, BLOCK, j), axis=0)
    bonus = tl.sum(tl.where(j == accept, top1, 0), axis=0)
    commit = accept + 1
    new_seq = tl.load(prefix_lens_ptr + b * stride_prefix).to(tl.int64) + commit
    out = tl.where(j == accept, bonus, drafted)

    # out64 = [out_tokens (bs*B) | bonus (bs) | new_seq_lens (bs)], out32 = [accept | commit]
    tl.store(out64_ptr + b * B + j, out, mask=lane)
    tl.store(out64_ptr + bs * B + b, bonus)
    tl.store(out64_ptr + bs * (B + 1) + b, new_seq)
    tl.store(out32_ptr + b, accept.to(tl.int32))
    tl.store(out32_ptr + bs + b, commit.to(tl.int32))


def accept_bonus(
    candidates: torch.Tensor, target_top1: torch.Tensor, prefix_lens: torch.Tensor
) -> AcceptResult:
    """Greedy accept/bonus, as `accept_bonus_ref`.

    Args:
        candidates: (bs, B) int32/int64, [anchor, d_1 .. d_{B-1}]; last dim contiguous.
        target_top1: (bs, B) int32/int64, target argmax at each block position; last dim
            contiguous.
        prefix_lens: (bs,) int32/int64, committed KV length before this round.

    Returns:
        AcceptResult(accept_lens (bs,) i32, commit_lens (bs,) i32, bonus (bs,) i64,
        out_tokens (bs, B) i64, new_seq_lens (bs,) i64), each contiguous (views of two
        allocations, one int64 and one int32).
    """
    cand = check_tensor("candidates", candidates, ndim=2, dtypes=INT_DTYPES,
                        inner_stride_one=True)
    dev = cand.device
    check_tensor("target_top1", target_top1, ndim=2, dtypes=INT_DTYPES, device=dev,
                 inner_stride_one=True)
    check_tensor("prefix_lens", prefix_lens, ndim=1, dtypes=INT_DTYPES, device=dev)
    bs, block = cand.shape
    if tuple(target_top1.shape) != (bs, block):
        raise ValueError(
            f"target_top1 has shape {tuple(target_top1.shape)}, expected {(bs, block)} "
            "(the shape of candidates)"
        )
    check_len("prefix_lens", prefix_lens, bs, "candidates.shape[0]")
    if block < 1:
        raise ValueError(f"candidates must have at least one column (B >= 1), got B={block}")
    check_runnable("candidates", cand)

    out64 = torch.empty(bs * (block + 2), dtype=torch.int64, device=dev)
    out32 = torch.empty(2 * bs, dtype=torch.int32, device=dev)
    tokens = bs * block
    # Views first, launch last: no host work is left behind the kernel.
    result = AcceptResult(
        accept_lens=out32[:bs],
        commit_lens=out32[bs:],
        bonus=out64[tokens : tokens + bs],
        out_tokens=out64[:tokens].view(bs, block),
        new_seq_lens=out64[tokens + bs :],
    )
    if bs > 0:
        lanes = triton.next_power_of_2(block)
        _accept_bonus_kernel[(bs,)](
            cand, target_top1, prefix_lens, out64, out32,
            cand.stride(0), target_top1.stride(0), prefix_lens.stride(0), bs,
            block, BLOCK=lanes, num_warps=_num_warps(lanes),
        )
    return result
