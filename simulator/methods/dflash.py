"""`DFlash`: the block drafter, one non-causal draft forward per round.

A round runs one draft forward over the whole block [anchor, MASK * (B-1)] (non-causal
inside the block), the target LM head on its B-1 outputs, a target verify of B tokens per
request, and the materialization of the verified rows into the draft KV pool. With B = 1
nothing is drafted and the round costs exactly a plain-decoding round. A verify schedule
(`spec.verify_schedule`) shortens the block to K + 1 for the round's batch size; at K = 0 the
round is a plain decode plus the materialization of its token. The drafter is
`spec.draft_layers` target-shaped layers fed by `spec.target_features` captured target
layers through `fc` (K*H -> H). Its acceptance preset is the DFlash paper's tau
(simulator/presets.py); the reference engine's calibration tables measure it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from simulator.errors import ConfigError
from simulator.methods.base import Drafted, register

if TYPE_CHECKING:
    from simulator.costs import CostModel
    from simulator.params import SpecParams


@register
class DFlash(Drafted):
    """Block drafter: one non-causal draft forward per round, target-feature KV injection."""

    name = "dflash"
    preset = "dflash"
    calibration = "dflash"

    @classmethod
    def fusion_params(cls, spec: SpecParams, hidden: int) -> int:
        """`fc` over the captured target layers: K*H -> H."""
        return spec.target_features * hidden * hidden

    @classmethod
    def check_calibration(cls, spec: SpecParams, doc: dict) -> None:
        """The table's drafter must have spec's layers and captured target features."""
        d = doc["drafter"]
        if spec.block_size > 1 and (d["num_layers"] != spec.draft_layers
                                    or len(d["target_layer_ids"]) != spec.target_features):
            raise ConfigError(
                f"calibration table {doc['path']}: drafter of {d['num_layers']} layers and "
                f"{len(d['target_layer_ids'])} target features, but spec.draft_layers = "
                f"{spec.draft_layers} and spec.target_features = {spec.target_features}")

    def decode_gpu_s(self, cost: CostModel, q: np.ndarray,
                     kv: np.ndarray) -> np.ndarray | float:
        if self.block_size == 1:
            return super().decode_gpu_s(cost, q, kv)
        rows = float(q.sum())
        verify = cost.target_forward_s(q, kv) + cost.lm_head_s(rows) + cost.kv_materialize_s(rows)
        if rows == len(q):  # K = 0 (spec.verify_schedule): no draft, the draft KV kept current
            return verify
        return cost.draft_forward_s(q, kv, causal=False) + cost.lm_head_s(rows - len(q)) + verify

    def prefill_gpu_s(self, cost: CostModel, q: np.ndarray, kv: np.ndarray) -> float:
        base = super().prefill_gpu_s(cost, q, kv)
        if self.block_size == 1:
            return base
        return base + float(cost.kv_materialize_s(q.sum()))
