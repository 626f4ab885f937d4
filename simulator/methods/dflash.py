"""`DFlash`: the block drafter, one non-causal draft forward per round.

A round runs one draft forward over the whole block [anchor, MASK * (B-1)] (non-causal
inside the block), the target LM head on its B-1 outputs, a target verify of B tokens per
request, and the materialization of the verified rows into the draft KV pool. With B = 1
nothing is drafted and the round costs exactly a plain-decoding round. A verify schedule
(`spec.verify_schedule`) shortens the block to K + 1 for the round's batch size; at K = 0 the
round is a plain decode plus the materialization of its token. The drafter is
`spec.draft_layers` target-shaped layers fed by `spec.options.target_features` captured
target layers through `fc` (K*H -> H). Its acceptance preset is the DFlash paper's tau
(simulator/presets.py); the reference engine's calibration tables measure the chain.

With `spec.options.tree_budget` N (or `spec.options.tree_policy = load_aware`) the block is
verified as a tree of N nodes instead (`DFlashTree`, simulator/methods/dflash_tree.py), as
the reference's `dflash:tree_budget=N`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from simulator.errors import ConfigError
from simulator.fields import param
from simulator.methods.base import Drafted, MethodOptions, register
from simulator.methods.dflash_tree import DFlashTree

if TYPE_CHECKING:
    from simulator.costs import CostModel
    from simulator.params import SimConfig, SpecParams


@dataclass(frozen=True)
class DFlashOptions(MethodOptions):
    """`spec.options` of `dflash`: the drafter's input and the tree (neither tree_budget
    nor the load-aware policy: the chain)."""

    target_features: int = param(5, 1, 1024, doc="K, captured target layers fed to fc")
    tree_budget: int | None = param(None, 1, 4096, doc="N, tree nodes verified per request "
                                    "per round (anchor included); None: the chain")
    tree_top_k: int = param(4, choices=(1, 4), doc="tree: candidates per depth (4: the "
                            "fitted tree; 1: the chain, N = B)")
    tree_policy: str = param("fixed", choices=("fixed", "load_aware"),
                             doc="tree: N fixed, or per batch from tree_budgets")
    tree_budgets: list[int] = param([16, 32, 64, 128], 1, 4096,
                                    doc="tree, load_aware: the budgets it picks from")

    @property
    def tree(self) -> bool:
        """Whether the block is verified as a tree."""
        return self.tree_budget is not None or self.tree_policy == "load_aware"


@register
class DFlash(Drafted):
    """Block drafter: one non-causal draft forward per round, target-feature KV injection."""

    name = "dflash"
    preset = "dflash"
    calibration = "dflash"
    options_class = DFlashOptions

    @classmethod
    def validate(cls, spec: SpecParams) -> None:
        super().validate(spec)
        o = cls.options(spec)
        if o.tree:
            DFlashTree.check(spec, o)

    @classmethod
    def fusion_params(cls, spec: SpecParams, hidden: int) -> int:
        """`fc` over the captured target layers: K*H -> H."""
        return cls.options(spec).target_features * hidden * hidden

    @classmethod
    def label(cls, spec: SpecParams) -> str:
        tree = cls.options(spec).tree
        return f"{cls.name}{' tree' if tree else ''} B={spec.block_size}"

    @classmethod
    def calibration_rows(cls, spec: SpecParams) -> str | None:
        """The chain's rows; a tree's rounds are not measured (None)."""
        return None if cls.options(spec).tree else super().calibration_rows(spec)

    @classmethod
    def check_calibration(cls, spec: SpecParams, doc: dict) -> None:
        """The table's drafter must have spec's layers and captured target features."""
        d, k = doc["drafter"], cls.options(spec).target_features
        if spec.block_size > 1 and (d["num_layers"] != spec.draft_layers
                                    or len(d["target_layer_ids"]) != k):
            raise ConfigError(
                f"calibration table {doc['path']}: drafter of {d['num_layers']} layers and "
                f"{len(d['target_layer_ids'])} target features, but spec.draft_layers = "
                f"{spec.draft_layers} and spec.options.target_features = {k}")

    @classmethod
    def from_config(cls, cfg: SimConfig) -> Drafted:
        o = cls.options(cfg.spec)
        if not o.tree:
            return super().from_config(cfg)
        return DFlashTree.of(cfg, o.tree_budget, o.tree_top_k, o.tree_policy, o.tree_budgets)

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
