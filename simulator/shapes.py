"""Model arithmetic: parameter counts, weight and KV bytes, and the KV pool a replica gets.

A `Stack` is a run of identical decoder layers (the target, or a drafter made of layers of the
target's shape). `kv_budget` turns hardware memory, `mem_fraction_static`, the weights of the
target and drafter, and the KV bytes per token of both pools into the number of KV slots
(tokens) of one replica, as SGLang sizes its pools: the draft pool has one slot per target
token and shares slot indices with the target pool.
"""

from __future__ import annotations

from dataclasses import dataclass

from simulator.methods import METHODS
from simulator.params import ConfigError, ModelParams, SimConfig


@dataclass(frozen=True)
class Stack:
    """`layers` decoder layers of one shape (attention with GQA + SwiGLU MLP)."""

    layers: int
    hidden: int
    heads: int
    kv_heads: int
    head_dim: int
    intermediate: int
    dtype_bytes: int

    @classmethod
    def of(cls, m: ModelParams, layers: int | None = None) -> Stack:
        """The target's stack, or `layers` layers of the target's shape."""
        n = m.num_layers if layers is None else layers
        return cls(n, m.hidden_size, m.num_heads, m.num_kv_heads, m.head_dim,
                   m.intermediate_size, m.dtype_bytes)

    def shard(self, tp: int) -> Stack:
        """One rank's part under tensor parallelism of degree tp: query heads and the MLP
        split tp ways, KV heads too, or replicated once tp exceeds them (Megatron layout)."""
        if tp == 1:
            return self
        return Stack(self.layers, self.hidden, self.heads // tp, max(self.kv_heads // tp, 1),
                     self.head_dim, self.intermediate // tp, self.dtype_bytes)

    @property
    def params_per_layer(self) -> int:
        """q, k, v, o projections and the gate/up/down MLP (norms are negligible)."""
        attn = self.hidden * self.head_dim * (2 * self.heads + 2 * self.kv_heads)
        return attn + 3 * self.hidden * self.intermediate

    @property
    def params(self) -> int:
        return self.layers * self.params_per_layer

    @property
    def weight_bytes(self) -> int:
        return self.params * self.dtype_bytes

    @property
    def kv_bytes_per_token(self) -> int:
        """K and V of every layer for one token."""
        return 2 * self.layers * self.kv_heads * self.head_dim * self.dtype_bytes


def embedding_params(m: ModelParams) -> int:
    """Input embedding plus the LM head (counted once when tied)."""
    return m.vocab_size * m.hidden_size * (1 if m.tie_embeddings else 2)


def target_weight_bytes(m: ModelParams, tp: int = 1) -> int:
    """Target weights on one of tp ranks (the embedding and LM head split by vocabulary)."""
    return (Stack.of(m).shard(tp).params + embedding_params(m) // tp) * m.dtype_bytes


def draft_stack(cfg: SimConfig) -> Stack | None:
    """The drafter's own layers (it shares the target's embedding and LM head), or None;
    the method declares how many (`SpecMethod.draft_layers`)."""
    layers = METHODS[cfg.spec.method].draft_layers(cfg.spec)
    return Stack.of(cfg.model, layers) if layers else None


def fusion_params(cfg: SimConfig) -> int:
    """The drafter's input projection (DFlash `fc` K*H -> H, EAGLE-3's 3H -> H), as the
    method declares it (`SpecMethod.fusion_params`)."""
    return METHODS[cfg.spec.method].fusion_params(cfg.spec, cfg.model.hidden_size)


@dataclass(frozen=True)
class KVBudget:
    """How one replica's memory is split, and how many KV slots that leaves; bytes are per
    GPU (one of `tp_size` ranks), slots per replica."""

    tp_size: int
    usable_bytes: float
    target_weight_bytes: int
    draft_weight_bytes: int
    target_kv_bytes_per_token: int
    draft_kv_bytes_per_token: int
    capacity_tokens: int

    def as_dict(self) -> dict:
        return {
            "tp_size": self.tp_size,
            "usable_gb": self.usable_bytes / 1e9,
            "target_weights_gb": self.target_weight_bytes / 1e9,
            "draft_weights_gb": self.draft_weight_bytes / 1e9,
            "target_kv_bytes_per_token": self.target_kv_bytes_per_token,
            "draft_kv_bytes_per_token": self.draft_kv_bytes_per_token,
            "capacity_tokens": self.capacity_tokens,
        }


def kv_budget(cfg: SimConfig) -> KVBudget:
    """KV slots of one replica: (memory * mem_fraction_static - weights) / bytes per token,
    all per GPU under tensor parallelism (`engine.tp_size`; the drafter's fusion projection
    is replicated on every rank)."""
    m, tp = cfg.model, cfg.engine.tp_size
    usable = cfg.hardware.memory_gb * 1e9 * cfg.engine.mem_fraction_static
    target_w = target_weight_bytes(m, tp)
    draft = draft_stack(cfg)
    draft = draft.shard(tp) if draft else None
    draft_w = (draft.params + fusion_params(cfg)) * m.dtype_bytes if draft else 0
    target_kv = Stack.of(m).shard(tp).kv_bytes_per_token
    draft_kv = draft.kv_bytes_per_token if draft else 0
    capacity = int((usable - target_w - draft_w) // (target_kv + draft_kv))
    if capacity <= 0:
        raise ConfigError(
            f"model.{m.name} (+ drafter) does not fit: {(target_w + draft_w) / 1e9:.1f} GB of "
            f"weights vs {usable / 1e9:.1f} GB = hardware.memory_gb * "
            "engine.mem_fraction_static"
        )
    return KVBudget(tp, usable, target_w, draft_w, target_kv, draft_kv, capacity)
