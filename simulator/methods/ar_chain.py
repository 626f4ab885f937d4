"""`ArChain`: an autoregressive chain drafter (EAGLE-3 / MTP style).

A round runs B-1 sequential one-token draft steps, each with an LM head, then a target
verify of B tokens per request and a draft extend over the block. The drafter is
`spec.draft_layers` target-shaped layers behind EAGLE-3's fused input projection (3H -> H);
its acceptance preset is the EAGLE-3 tau of the DFlash paper's tables (simulator/presets.py).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from simulator.methods.base import Drafted, register

if TYPE_CHECKING:
    from simulator.costs import CostModel
    from simulator.params import SpecParams


@register
class ArChain(Drafted):
    """Autoregressive chain drafter (EAGLE-3 / MTP style)."""

    name = "ar_chain"
    preset = "ar_chain"

    @classmethod
    def fusion_params(cls, spec: SpecParams, hidden: int) -> int:
        """EAGLE-3's projection of three captured target layers: 3H -> H."""
        return 3 * hidden * hidden

    def decode_gpu_s(self, cost: CostModel, q: np.ndarray,
                     kv: np.ndarray) -> np.ndarray | float:
        if self.block_size == 1:
            return super().decode_gpu_s(cost, q, kv)
        steps = int(q.max()) - 1  # B - 1, or a verify schedule's K
        n = len(q)
        one = np.ones(n)
        # `steps` sequential steps of one token; their context grows by one token per step,
        # priced at the mean context (exact where the cost is linear in kv_len).
        draft = steps * (cost.draft_forward_s(one, kv + (steps - 1) / 2.0) + cost.lm_head_s(n))
        extend = cost.draft_forward_s(q, kv)
        return draft + extend + cost.target_forward_s(q, kv) + cost.lm_head_s(q.sum())

    def prefill_gpu_s(self, cost: CostModel, q: np.ndarray, kv: np.ndarray) -> float:
        base = super().prefill_gpu_s(cost, q, kv)
        if self.block_size == 1:
            return base
        return base + float(cost.draft_forward_s(q, kv))
