"""`Eagle`: an autoregressive drafter (EAGLE-3 / MTP style), verified as a chain or a tree.

The chain: a round runs B-1 sequential one-token draft steps, each with an LM head, then a
target verify of B tokens per request and a draft extend over the block. The drafter is
`spec.draft_layers` target-shaped layers behind EAGLE-3's fused input projection (3H -> H);
its acceptance preset is the EAGLE-3 tau of the DFlash paper's tables (simulator/presets.py).
With `spec.options.tree_tokens` N the round drafts and verifies an N-token tree instead, as
SGLang runs EAGLE-3 (`EagleTree`, simulator/methods/eagle_tree.py). The reference engine's
`eagle` method is the chain.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from simulator.errors import ConfigError
from simulator.fields import BIG, param
from simulator.methods.base import Drafted, MethodOptions, register
from simulator.methods.eagle_tree import EagleTree

if TYPE_CHECKING:
    from simulator.costs import CostModel
    from simulator.params import SimConfig, SpecParams


@dataclass(frozen=True)
class EagleOptions(MethodOptions):
    """`spec.options` of `eagle`: the tree's shape (no tree_tokens: the chain)."""

    tree_tokens: int | None = param(None, 1, 4096, doc="N, tokens verified per request (the "
                                    "tree, anchor included); None: the chain of B")
    draft_topk: int = param(1, 1, 1024, doc="tree: candidates per request drafted at every "
                            "step after the first")
    draft_vocab_size: int | None = param(None, 2, BIG, doc="tree: rows of the drafter's LM "
                                         "head; None: the target's vocabulary")


@register
class Eagle(Drafted):
    """Autoregressive chain drafter (EAGLE-3 / MTP style); a tree with `tree_tokens`."""

    name = "eagle"
    preset = "eagle"
    options_class = EagleOptions

    @classmethod
    def validate(cls, spec: SpecParams) -> None:
        super().validate(spec)
        o = cls.options(spec)
        if o.tree_tokens is None:
            for key, value, default in (("draft_topk", o.draft_topk, 1),
                                        ("draft_vocab_size", o.draft_vocab_size, None)):
                if value != default:
                    raise ConfigError(f"spec.options.{key} = {value} needs "
                                      "spec.options.tree_tokens (a tree)")
            return
        if o.tree_tokens < spec.block_size:
            raise ConfigError(
                f"spec.options.tree_tokens = {o.tree_tokens} must be at least "
                f"spec.block_size = {spec.block_size} (the tree holds a path of B tokens)")
        if spec.verify_schedule is not None:
            raise ConfigError("spec.verify_schedule (the chain's drafts by batch size) does "
                              "not apply to a tree (spec.options.tree_tokens)")

    @classmethod
    def fusion_params(cls, spec: SpecParams, hidden: int) -> int:
        """EAGLE-3's projection of three captured target layers: 3H -> H."""
        return 3 * hidden * hidden

    @classmethod
    def label(cls, spec: SpecParams) -> str:
        tree = cls.options(spec).tree_tokens is not None
        return f"{cls.name}{' tree' if tree else ''} B={spec.block_size}"

    @classmethod
    def from_config(cls, cfg: SimConfig) -> Drafted:
        o = cls.options(cfg.spec)
        if o.tree_tokens is None:
            return super().from_config(cfg)
        vocab = cfg.model.vocab_size
        return EagleTree(cfg.spec.block_size, o.tree_tokens, o.draft_topk,
                         (o.draft_vocab_size or vocab) / vocab)

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
