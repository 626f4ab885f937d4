"""Speculative methods behind one interface: what a round verifies, costs and commits.

A `SpecMethod` answers, for a decode batch, the verify length of each request (`verify_lens`:
B for every request here; DSpark's dynamic verify budgets override it per request), the GPU
time of the whole round (draft + verify + LM heads + method extras, priced by a `CostModel`),
the extra GPU time of a prefill (draft KV for the prompt), and the commit lengths
(`commit_lens`, from the acceptance model by default). Self-speculation plugs in by pricing
its draft with the target's own layers in `decode_gpu_s`.

- `NoSpec`: one target forward with q_len = 1 per request, then the LM head.
- `ArChain` (EAGLE/MTP style): B-1 sequential one-token draft steps, each with an LM head,
  then a target verify of B tokens and a draft extend over the block.
- `DFlash`: one draft forward over the whole block [anchor, MASK * (B-1)] (non-causal inside
  the block), the target LM head on its B-1 outputs, a target verify of B tokens per request,
  and the materialization of the verified rows into the draft KV pool. With B = 1 nothing is
  drafted and the round costs exactly a NoSpec round.
- `ISD`, `LinearSpec` (simulator/selfspec.py): self-speculation, drafted by the target itself.
- `DSpark` (simulator/dspark.py): DFlash's backbone + a Markov head; per-request verify
  lengths from its scheduler (`schedule`, or per round in `plan_rounds` when its confidences
  carry per-round information), the ragged verify padded to token buckets.
"""

from __future__ import annotations

import numpy as np

from simulator.acceptance import AcceptanceModel
from simulator.costs import CostModel
from simulator.params import SimConfig


class SpecMethod:
    """Base class: plain decoding (B = 1)."""

    name = "none"

    def __init__(self, block_size: int = 1):
        self.block_size = block_size

    def verify_lens(self, n: int) -> np.ndarray:
        """Tokens verified per request this round (anchor included)."""
        return np.full(n, self.block_size, dtype=np.int64)

    def schedule(self, cost: CostModel, acceptance: AcceptanceModel, slots: np.ndarray,
                 kv: np.ndarray) -> np.ndarray:
        """Verify lengths of a stretch's rounds for these slots (kv: their committed KV);
        `verify_lens` unless the method schedules per request (DSpark)."""
        return self.verify_lens(len(slots))

    def plan_rounds(self, cost: CostModel, acceptance: AcceptanceModel, slots: np.ndarray,
                    kv: np.ndarray, rounds: int) -> tuple[np.ndarray, np.ndarray]:
        """(q, commits) of the next `rounds` rounds: q is (n,) for all rounds, or (rounds, n)
        when the method schedules every round (DSpark with per-round confidences); commits
        (rounds, n) are cut by q."""
        q = self.schedule(cost, acceptance, slots, kv)
        return q, self.commit_lens(acceptance, slots, rounds, q)

    def commit_lens(self, acceptance: AcceptanceModel, slots: np.ndarray, rounds: int,
                    q: np.ndarray) -> np.ndarray:
        """Commit lengths (rounds, n) of the next `rounds` rounds of these slots."""
        return acceptance.sample(slots, rounds, q)

    def decode_gpu_s(self, cost: CostModel, q: np.ndarray,
                     kv: np.ndarray) -> np.ndarray | float:
        """GPU time of decode rounds; kv is (n,) or (rounds, n) committed KV lengths."""
        return cost.target_forward_s(q, kv) + cost.lm_head_s(q.sum())

    def prefill_gpu_s(self, cost: CostModel, q: np.ndarray, kv: np.ndarray) -> float:
        """GPU time of a prefill (extend) of q new prompt tokens on top of kv cached ones;
        the LM head runs on each request's last position."""
        return float(cost.prefill_forward_s(q, kv) + cost.lm_head_s(len(q)))


NoSpec = SpecMethod


class ArChain(SpecMethod):
    """Autoregressive chain drafter (EAGLE-3 / MTP style)."""

    name = "ar_chain"

    def decode_gpu_s(self, cost: CostModel, q: np.ndarray,
                     kv: np.ndarray) -> np.ndarray | float:
        steps = self.block_size - 1
        if steps == 0:
            return super().decode_gpu_s(cost, q, kv)
        n = len(q)
        one = np.ones(n)
        # B-1 sequential steps of one token; their context grows by one token per step, priced
        # at the mean context (exact where the cost is linear in kv_len).
        draft = steps * (cost.draft_forward_s(one, kv + (steps - 1) / 2.0) + cost.lm_head_s(n))
        extend = cost.draft_forward_s(q, kv)
        return draft + extend + cost.target_forward_s(q, kv) + cost.lm_head_s(q.sum())

    def prefill_gpu_s(self, cost: CostModel, q: np.ndarray, kv: np.ndarray) -> float:
        base = super().prefill_gpu_s(cost, q, kv)
        if self.block_size == 1:
            return base
        return base + float(cost.draft_forward_s(q, kv))


class DFlash(SpecMethod):
    """Block drafter: one non-causal draft forward per round, target-feature KV injection."""

    name = "dflash"

    def decode_gpu_s(self, cost: CostModel, q: np.ndarray,
                     kv: np.ndarray) -> np.ndarray | float:
        if self.block_size == 1:
            return super().decode_gpu_s(cost, q, kv)
        rows = float(q.sum())
        heads = cost.lm_head_s(rows - len(q)) + cost.lm_head_s(rows) + cost.kv_materialize_s(rows)
        return cost.draft_forward_s(q, kv, causal=False) + cost.target_forward_s(q, kv) + heads

    def prefill_gpu_s(self, cost: CostModel, q: np.ndarray, kv: np.ndarray) -> float:
        base = super().prefill_gpu_s(cost, q, kv)
        if self.block_size == 1:
            return base
        return base + float(cost.kv_materialize_s(q.sum()))


METHODS: dict[str, type[SpecMethod]] = {"none": NoSpec, "ar_chain": ArChain, "dflash": DFlash}


def make_method(cfg: SimConfig) -> SpecMethod:
    """The method named by `spec.method`."""
    if cfg.spec.method in ("isd", "linearspec"):  # they subclass SpecMethod: import here
        from simulator.selfspec import SELF_SPEC

        return SELF_SPEC[cfg.spec.method](cfg.spec.block_size)
    if cfg.spec.method == "dspark":
        from simulator.dspark import DSpark

        s = cfg.spec
        return DSpark(s.block_size - 1, s.markov_rank, policy=s.verify_policy,
                      threshold=s.confidence_threshold, confidence_corr=s.confidence_corr)
    return METHODS[cfg.spec.method](cfg.spec.block_size)
