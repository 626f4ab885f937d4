"""`ISD`: I-DLM introspective strided decoding, self-speculation by the target itself.

No drafter weights and no draft KV pool: the target drafts at MASK positions with its own
layers, so the whole round is priced with the target's forward
(docs/methods.md 2.6, 3.6, 5). With stride N = spec.block_size, a
round is one causal target forward of 2N-1 query tokens per request (verify_lens), LM head
on all of them. A request is in state V (verify N-1 drafts: commit_len = 1 + accepted, 1..N,
drawn from the acceptance model at block N) or C (cold, after a rejection: commit_len 1).
The 2N-1 written KV slots are trimmed to the advance, so KV grows by commit_len per round as
for the other methods; the engine reserves R * (2N-1) slots ahead (`max_query`, as the
reference's ISD mode), which covers the 2N-1 writes of a round launched up to N tokens past
the host's view. No published tau: conf/spec/isd.yaml uses a constant acceptance.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from simulator.methods.base import SpecMethod, register

if TYPE_CHECKING:
    from simulator.acceptance import AcceptanceModel
    from simulator.costs import CostModel


@register
class ISD(SpecMethod):
    """I-DLM introspective strided decoding; block_size is the stride N."""

    name = "isd"

    def __init__(self, block_size: int = 4):
        super().__init__(block_size)
        self.cold = np.zeros(0, dtype=bool)  # per slot: the next round is a cold start

    @property
    def max_query(self) -> int:
        return 2 * self.block_size - 1

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
