"""`EagleTree`: EAGLE-3-style tree drafting, as SGLang runs it with `--speculative-num-steps
S --speculative-eagle-topk k --speculative-num-draft-tokens N`.

A round runs S sequential draft steps, the first on the anchor (one token per request), each
later one on the k candidates kept per request, every step followed by the draft LM head on
its rows (`spec.options.draft_vocab_size` rows: EAGLE-3's reduced draft vocabulary); then a
target verify of the N-token tree per request (tree attention priced as causal attention over N
tokens) with the target LM head on all N rows; then a draft extend over the S + 1 positions
of the accepted path (padded to S + 1, as a CUDA-graph engine runs it). `spec.block_size` is
B = S + 1, the deepest commit; `spec.options.tree_tokens` is N; `spec.options.draft_topk` is
k. The drafter is `spec.draft_layers` target-shaped layers behind EAGLE-3's 3H -> H
projection, and prefills over the prompt with the target. Acceptance: the EAGLE-3 rows of the
presets (the `eagle` key), or `spec.tau`; a commit never exceeds B.

The `eagle` method (simulator/methods/eagle.py) builds it when `spec.options.tree_tokens` is
set, and holds its config rules; this class registers nothing.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from simulator.methods.base import Drafted

if TYPE_CHECKING:
    from simulator.costs import CostModel


class EagleTree(Drafted):
    """Tree drafter: S draft steps of k candidates, an N-token tree verify, a draft extend.

    Args:
        block_size: B = S + 1 (draft steps plus the bonus: the longest commit).
        tree_tokens: N, tokens verified per request (anchor included).
        topk: k, candidates per request at every draft step after the first.
        head_ratio: draft LM head rows over the target's vocabulary.
    """

    name = "eagle"

    def __init__(self, block_size: int, tree_tokens: int, topk: int, head_ratio: float):
        super().__init__(block_size)
        self.tree_tokens, self.topk, self.head_ratio = tree_tokens, topk, head_ratio

    def verify_lens(self, n: int) -> np.ndarray:
        return np.full(n, self.tree_tokens, dtype=np.int64)

    def decode_gpu_s(self, cost: CostModel, q: np.ndarray, kv: np.ndarray) -> np.ndarray | float:
        steps = self.block_size - 1
        if steps == 0:
            return cost.target_forward_s(q, kv) + cost.lm_head_s(q.sum())
        n = len(q)
        first = cost.draft_forward_s(np.ones(n), kv) + self.head_ratio * cost.lm_head_s(n)
        # steps 2..S: k candidates per request, context grown by the steps before (priced
        # at the mean step)
        later = (steps - 1) * (
            cost.draft_forward_s(np.full(n, float(self.topk)), kv + steps / 2.0)
            + self.head_ratio * cost.lm_head_s(n * self.topk)
        )
        extend = cost.draft_forward_s(np.full(n, float(self.block_size)), kv)
        verify = cost.target_forward_s(q, kv) + cost.lm_head_s(q.sum())
        return first + later + extend + verify

    def prefill_gpu_s(self, cost: CostModel, q: np.ndarray, kv: np.ndarray) -> float:
        base = super().prefill_gpu_s(cost, q, kv)
        if self.block_size == 1:
            return base
        return base + float(cost.draft_forward_s(q, kv))
