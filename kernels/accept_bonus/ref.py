"""PyTorch oracle of `accept_bonus`: the greedy DFlash acceptance rule.

docs/sglang.md section 4.2. With candidates = [anchor, d_1 .. d_{B-1}] and
the target's argmax t_j at block position j, accept_len is the number of leading j with
d_{j+1} == t_j; the bonus is t_{accept_len}; commit_len = accept_len + 1.
"""

from __future__ import annotations

from typing import NamedTuple

import torch

__all__ = ["AcceptResult", "accept_bonus_ref"]


class AcceptResult(NamedTuple):
    """Result of one greedy verification, per request.

    accept_lens (bs,) i32, commit_lens (bs,) i32, bonus (bs,) i64, out_tokens (bs, B) i64
    (only the first commit_len entries are meaningful: d_1..d_accept then the bonus),
    new_seq_lens (bs,) i64 = prefix_lens + commit_lens.
    """

    accept_lens: torch.Tensor
    commit_lens: torch.Tensor
    bonus: torch.Tensor
    out_tokens: torch.Tensor
    new_seq_lens: torch.Tensor


def accept_bonus_ref(
    candidates: torch.Tensor, target_top1: torch.Tensor, prefix_lens: torch.Tensor
) -> AcceptResult:
    """Greedy accept/bonus.

    Args:
        candidates: (bs, B) i64, [anchor, d_1 .. d_{B-1}].
        target_top1: (bs, B) i64, target argmax at each block position.
        prefix_lens: (bs,) i64, committed KV length before this round.
    """
    bs, block = candidates.shape
    match = (candidates[:, 1:] == target_top1[:, :-1]).to(torch.int64)
    accept = match.cumprod(dim=1).sum(dim=1)
    bonus = target_top1.gather(1, accept[:, None])[:, 0]
    out = torch.cat([candidates[:, 1:], candidates.new_zeros(bs, 1)], dim=1)
    out = out.scatter(1, accept[:, None], bonus[:, None])
    commit = accept + 1
    return AcceptResult(
        accept_lens=accept.to(torch.int32),
        commit_lens=commit.to(torch.int32),
        bonus=bonus.to(torch.int64),
        out_tokens=out.to(torch.int64),
        new_seq_lens=prefix_lens.to(torch.int64) + commit,
    )
