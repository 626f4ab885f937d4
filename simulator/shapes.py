"""Model arithmetic: parameter counts, weight and KV bytes, and the KV pool a replica gets.

A `Stack` is a run of decoder layers of one shape (the target, or a drafter made of layers of
the target's shape); a hybrid target (Qwen3.5) has softmax attention with a KV cache in one
layer of `attention_every` and linear attention with a fixed recurrent state per request in
the others, their projections counted as the softmax layers' [INF]; an MoE target's layers
route each token to k of E experts, so the weight bytes a forward reads grow with its tokens
(`Stack.weight_bytes_read`, `expected_experts`).
`kv_budget` turns hardware memory, `mem_fraction_static`, the weights of the target and
drafter, and the KV bytes per token of both pools into the number of KV slots (tokens) of one
replica, as SGLang sizes its pools: the draft pool has one slot per target
token and shares slot indices with the target pool.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import numpy as np

from simulator.methods import METHODS
from simulator.params import ConfigError, ModelParams, SimConfig


@dataclass(frozen=True)
class Stack:
    """`layers` decoder layers of one shape: attention with GQA, then a SwiGLU MLP of width
    `intermediate`, or (experts > 0) a router and `experts` SwiGLU experts of width
    `expert_intermediate`, `experts_per_token` of them routed per token."""

    layers: int
    hidden: int
    heads: int
    kv_heads: int
    head_dim: int
    intermediate: int
    dtype_bytes: int
    experts: int = 0
    experts_per_token: int = 0
    expert_intermediate: int = 0
    attention_every: int = 1
    state_bytes: int = 0

    @classmethod
    def of(cls, m: ModelParams, layers: int | None = None) -> Stack:
        """The target's stack, or (a drafter) `layers` dense layers of the target's attention
        shape and `intermediate_size` MLP (an MoE config's dense width)."""
        if layers is not None:
            return cls(layers, m.hidden_size, m.num_heads, m.num_kv_heads, m.head_dim,
                       m.intermediate_size, m.dtype_bytes)
        return cls(m.num_layers, m.hidden_size, m.num_heads, m.num_kv_heads, m.head_dim,
                   m.intermediate_size, m.dtype_bytes, m.num_experts, m.experts_per_token,
                   m.moe_intermediate_size, m.full_attention_interval,
                   m.linear_state_bytes_per_layer)

    @property
    def attention_layers(self) -> int:
        """Layers with softmax attention and a KV cache (a hybrid's one in
        `attention_every`; every layer otherwise)."""
        return self.layers // self.attention_every if self.attention_every > 1 else self.layers

    @property
    def linear_layers(self) -> int:
        """A hybrid's linear-attention layers (a fixed-size recurrent state per request)."""
        return self.layers - self.attention_layers

    @property
    def state_bytes_per_request(self) -> int:
        """One request's recurrent state over all linear-attention layers."""
        return self.linear_layers * self.state_bytes

    @property
    def attn_params(self) -> int:
        """q, k, v, o projections of one layer (norms are negligible)."""
        return self.hidden * self.head_dim * (2 * self.heads + 2 * self.kv_heads)

    @property
    def expert_params(self) -> int:
        """One expert's gate/up/down (MoE), or the dense MLP."""
        width = self.expert_intermediate if self.experts else self.intermediate
        return 3 * self.hidden * width

    @property
    def shared_params_per_layer(self) -> int:
        """What every token of a layer reads: attention, and the router of an MoE layer."""
        return self.attn_params + self.hidden * self.experts

    def shard(self, tp: int) -> Stack:
        """One rank's part under tensor parallelism of degree tp: query heads and the MLP
        split tp ways, KV heads too, or replicated once tp exceeds them (Megatron layout);
        an MoE layer keeps all its experts and routing, each expert's width split tp ways
        (SGLang's default tensor-parallel MoE), the router replicated."""
        if tp == 1:
            return self
        return dataclasses.replace(
            self, heads=self.heads // tp, kv_heads=max(self.kv_heads // tp, 1),
            intermediate=self.intermediate // tp,
            expert_intermediate=self.expert_intermediate // tp,
            state_bytes=self.state_bytes // tp)

    @property
    def params_per_layer(self) -> int:
        """All of a layer's weights: attention, router and every expert, or the dense MLP."""
        return self.shared_params_per_layer + max(self.experts, 1) * self.expert_params

    @property
    def active_params_per_layer(self) -> int:
        """Weights one token multiplies: attention, router and its k experts (MoE)."""
        return self.shared_params_per_layer + max(self.experts_per_token, 1) * self.expert_params

    @property
    def params(self) -> int:
        return self.layers * self.params_per_layer

    @property
    def active_params(self) -> int:
        return self.layers * self.active_params_per_layer

    @property
    def mlp_width_per_token(self) -> int:
        """SwiGLU width one token goes through (k experts' for MoE): its activation size."""
        if self.experts:
            return self.experts_per_token * self.expert_intermediate
        return self.intermediate

    @property
    def weight_bytes(self) -> int:
        return self.params * self.dtype_bytes

    def weight_bytes_read(self, tokens: np.ndarray | float) -> np.ndarray | float:
        """Weight bytes one forward over `tokens` tokens reads: all of a dense stack; for MoE,
        the shared part plus the experts the tokens touch (`expected_experts`)."""
        if not self.experts:
            return float(self.weight_bytes)
        touched = expected_experts(tokens, self.experts, self.experts_per_token)
        per_layer = self.shared_params_per_layer + touched * self.expert_params
        return self.layers * per_layer * self.dtype_bytes

    @property
    def kv_bytes_per_token(self) -> int:
        """K and V of every softmax-attention layer for one token."""
        return 2 * self.attention_layers * self.kv_heads * self.head_dim * self.dtype_bytes


def expected_experts(tokens: np.ndarray | float, experts: int, k: int) -> np.ndarray | float:
    """Expected number of distinct experts of one layer that `tokens` tokens route to.

    Each token picks k of the E experts; with every expert equally likely and tokens routed
    independently, an expert is missed by one token with probability 1 - k/E, by all n tokens
    with (1 - k/E)^n, so the expected count touched is E * (1 - (1 - k/E)^n): k at n = 1,
    approaching E as n grows (n * k for n * k << E). Real routers are skewed and a request's
    tokens share experts, so this is an upper estimate of the weight bytes an MoE step reads.
    """
    n = np.maximum(np.asarray(tokens, dtype=np.float64), 0.0)
    out = experts * (1.0 - (1.0 - k / experts) ** n)
    return float(out) if out.ndim == 0 else out


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
    """KV slots of one replica: (memory * mem_fraction_static - weights - a hybrid's
    recurrent states) / bytes per token, all per GPU under tensor parallelism
    (`engine.tp_size`; the drafter's fusion projection is replicated on every rank). A
    hybrid target's states are a pool of `engine.max_running_requests` slots allocated
    up front, as SGLang sizes its state pool; they count as target weights here."""
    m, tp = cfg.model, cfg.engine.tp_size
    usable = cfg.hardware.memory_gb * 1e9 * cfg.engine.mem_fraction_static
    target_w = (target_weight_bytes(m, tp) + cfg.engine.max_running_requests
                * Stack.of(m).shard(tp).state_bytes_per_request)
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
