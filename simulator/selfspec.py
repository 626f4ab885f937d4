"""Self-speculative methods: the target drafts at MASK positions with its own layers.

No drafter weights and no draft KV pool (spec.draft_layers = 0), so the whole round is
priced with the target's forward (shared/research/dspark-idlm-nemotron.md 2.6, 3.6, 5).

- `ISD` (I-DLM, stride N = spec.block_size): one causal target forward of 2N-1 query tokens
  per request per round (verify_lens), LM head on all of them. A request is in state V
  (verify N-1 drafts: commit_len = 1 + accepted, 1..N, drawn from the acceptance model at
  block N) or C (cold, after a rejection: commit_len 1). The 2N-1 written KV slots are
  trimmed to the advance, so KV grows by commit_len per round as for the other methods;
  the transient 2N-1 fits the engine's 2 * B reservation.
- `LinearSpec` (Nemotron): two sequential target forwards of B tokens per request (a
  bidirectional draft pass priced as a causal one: they differ only by the B^2/2 in-block
  attention pairs), LM heads on B-1 and B rows; B from a batch-size tier table capped at
  spec.block_size; commit_len = 1 + accepted greedy matches, KV trimmed to it.
"""

from __future__ import annotations

import numpy as np

from simulator.acceptance import AcceptanceModel
from simulator.costs import CostModel
from simulator.methods import SpecMethod

TIERS = ((4, 16), (32, 8), (1 << 30, 4))  # (max_running_bs, B): reference/selfspec's table


class ISD(SpecMethod):
    """I-DLM introspective strided decoding; block_size is the stride N."""

    name = "isd"

    def __init__(self, block_size: int = 4):
        super().__init__(block_size)
        self.cold = np.zeros(0, dtype=bool)  # per slot: the next round is a cold start

    def verify_lens(self, n: int) -> np.ndarray:
        return np.full(n, 2 * self.block_size - 1, dtype=np.int64)

    def commit_lens(self, acceptance: AcceptanceModel, slots: np.ndarray, rounds: int,
                    q: np.ndarray) -> np.ndarray:
        """The V/C chain over `rounds` rounds; a slot's state carries to its next stretch
        (as if every sampled round ran: the chain is stationary, so a cut stretch only
        shifts where it resumes)."""
        n = self.block_size
        if len(self.cold) <= slots.max(initial=0):
            grown = np.zeros(2 * int(slots.max()) + 2, dtype=bool)
            grown[: len(self.cold)] = self.cold
            self.cold = grown
        raw = acceptance.sample(slots, rounds, np.full(len(slots), n, dtype=np.int64))
        out = np.empty_like(raw)
        cold = self.cold[slots].copy()
        for r in range(rounds):
            out[r] = np.where(cold, 1, raw[r])
            cold = ~cold & (raw[r] < n)
        self.cold[slots] = cold
        return out

    def decode_gpu_s(self, cost: CostModel, q: np.ndarray,
                     kv: np.ndarray) -> np.ndarray | float:
        return cost.target_forward_s(q, kv) + cost.lm_head_s(q.sum())


def tier_block(running_bs: int, tiers=TIERS, cap: int | None = None) -> int:
    """B of the first tier whose max_running_bs >= running_bs, capped at `cap`."""
    block = next(b for m, b in tiers if running_bs <= m)
    return min(block, cap) if cap else block


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


SELF_SPEC: dict[str, type[SpecMethod]] = {"isd": ISD, "linearspec": LinearSpec}
