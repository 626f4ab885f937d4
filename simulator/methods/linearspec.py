"""`LinearSpec`: Nemotron linear self-speculation with a tiered block size.

No drafter weights and no draft KV pool (docs/methods.md 3.6): a
round is two sequential target forwards of B tokens per request (a bidirectional draft pass
priced as a causal one: they differ only by the B^2/2 in-block attention pairs), LM heads on
B-1 and B rows; B comes from LinearSpec's batch-size tier table (`common.methods.TIERS`) capped
at spec.block_size; commit_len = 1 + accepted greedy matches, KV trimmed to it. No published
tau: conf/spec/linearspec.yaml uses a constant acceptance.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from common.methods import TIERS
from simulator.methods.base import SpecMethod, register

if TYPE_CHECKING:
    from simulator.costs import CostModel


def tier_block(running_bs: int, tiers=TIERS, cap: int | None = None) -> int:
    """B of the first tier whose max_running_bs >= running_bs, capped at `cap`."""
    block = next(b for m, b in tiers if running_bs <= m)
    return min(block, cap) if cap else block


@register
class LinearSpec(SpecMethod):
    """Nemotron linear self-speculation with a tiered block size (at most block_size)."""

    name = "linearspec"

    def __init__(self, block_size: int = 16, tiers=TIERS):
        super().__init__(block_size)
        self.tiers = tiers

    def verify_lens(self, n: int) -> np.ndarray:
        return np.full(n, tier_block(n, self.tiers, self.block_size), dtype=np.int64)

    def decode_gpu_s(self, cost: CostModel, q: np.ndarray,
                     kv: np.ndarray) -> np.ndarray | float:
        rows = float(q.sum())
        forward = cost.target_forward_s(q, kv)
        return 2 * forward + cost.lm_head_s(rows - len(q)) + cost.lm_head_s(rows)
