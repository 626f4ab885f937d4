"""Cost models: how long the GPU and the host take for one round of a batch.

`CostModel` is the interface the engine uses. The forward methods take per-request arrays
`q_lens` (n,) and `kv_lens` of shape (n,) or (rounds, n), so a whole stretch of rounds is
priced in one call; the answer is a float for one round, else an array of shape (rounds,).

`RooflineCostModel` prices a forward as max(FLOPs / matmul rate, bytes / HBM rate) for the
linear layers and, separately, for attention, plus the fixed GPU times of the engine profile
(a launch per forward, a floor per decoder layer and per MoE layer, a per-sequence term per
request and layer; simulator/engine_profiles.py `KernelFactors`); an MoE stack reads the
experts its tokens route to (simulator/shapes.py `Stack.weight_bytes_read`), and where the
engine's MoE measurement exists its expert GEMMs are priced by their measured efficiency
at the forward's tokens per expert instead (simulator/moe_experts.py). The LM head +
sampling and DFlash's draft-KV materialization are priced the same way; the host as a
constant plus a per-request term. Under tensor parallelism (`engine.tp_size` = tp > 1) each
GPU runs one rank's shard of every layer (`Stack.shard`; LM head split by vocabulary) and
every layer adds two all-reduces of the tokens' hidden states (after attention and after the
MLP), each priced analytically as a ring: allreduce_latency_s + 2 (tp - 1) / tp * tokens *
hidden * dtype bytes / NVLink bandwidth (hardware.nvlink_tbps); the argmax over the split
vocabulary adds one latency. Not measured: `label` says "analytic". `calibrated`
(simulator/calibrated.py) reads the reference engine's measured tables instead;
`engine.cost_model` picks one (simulator/cost_models.py).
"""

from __future__ import annotations

from typing import Protocol, runtime_checkable

import numpy as np

from simulator.engine_profiles import KernelFactors, roofline_source
from simulator.moe_experts import expert_curve, expert_gemm_s
from simulator.params import SimConfig
from simulator.shapes import Stack, draft_stack, fusion_params


@runtime_checkable
class CostModel(Protocol):
    """Time in seconds of each piece of a round."""

    def target_forward_s(self, q_lens: np.ndarray, kv_lens: np.ndarray) -> np.ndarray | float:
        """Target forward (prefill chunk, decode or verify): q_len new tokens per request
        attending causally to kv_len cached tokens plus themselves."""

    def draft_forward_s(self, q_lens: np.ndarray, kv_lens: np.ndarray,
                        causal: bool = True) -> np.ndarray | float:
        """One forward of the drafter's own layers (DFlash: causal=False inside the block)."""

    def prefill_forward_s(self, q_lens: np.ndarray, kv_lens: np.ndarray) -> float:
        """Target forward of a prefill batch (prompt chunks; an engine may run it eagerly)."""

    def lm_head_s(self, n_rows: float) -> float:
        """LM head over n_rows hidden states, plus argmax/sampling."""

    def kv_materialize_s(self, n_tokens: float) -> float:
        """DFlash: project target features into the draft KV pool for n_tokens tokens."""

    def host_plan_s(self, batch_size: int) -> float:
        """Scheduler work before a round: batch formation, KV allocation, input prep."""

    def host_process_s(self, batch_size: int) -> float:
        """Host work after a round: accept bookkeeping, stop checks, streaming."""

    def copy_s(self) -> float:
        """Device-to-host copy of a round's results."""


class RooflineCostModel:
    """Analytic roofline: FLOPs and bytes against the hardware's peak and bandwidth."""

    label = "roofline"

    def __init__(self, cfg: SimConfig):
        hw, m, e = cfg.hardware, cfg.model, cfg.engine
        self.k = KernelFactors.of(cfg)
        self.flops, self.attn_flops, self.bw = self.k.flops, self.k.attn_flops, self.k.bw
        self.launch = self.k.launch_s
        self.copy = hw.d2h_copy_s
        self.cost_source = roofline_source(cfg)
        tp = self.tp = e.tp_size
        self.target = Stack.of(m).shard(tp)
        d = draft_stack(cfg)
        self.draft = d.shard(tp) if d else None
        self.vocab = m.vocab_size
        self.head_params = m.vocab_size * m.hidden_size // tp
        self.dtype = m.dtype_bytes
        ring = 2.0 * (tp - 1) / tp * m.hidden_size * m.dtype_bytes / (hw.nvlink_tbps * 1e12)
        self.allreduce = (hw.allreduce_latency_s, ring) if tp > 1 else (0.0, 0.0)
        self.label = "roofline" if tp == 1 else (
            f"roofline, tp={tp} with analytic all-reduce ({hw.nvlink_tbps:g} TB/s NVLink, "
            f"{1e6 * hw.allreduce_latency_s:g} us each)")
        d = self.draft
        kv_proj = d.layers * d.hidden * 2 * d.kv_heads * d.head_dim if d else 0
        self.materialize_params = fusion_params(cfg) + kv_proj
        self._last: tuple = (None, None, None)
        self._target_coef = self._coefficients(self.target)
        self._draft_coef = self._coefficients(d) if d else None
        self.host = (e.host_plan_s, e.host_plan_per_req_s, e.host_process_s,
                     e.host_process_per_req_s)
        self.moe_curve = expert_curve(cfg)
        self.peak = hw.matmul_tflops * 1e12

    def _aggregates(self, q: np.ndarray, kv: np.ndarray) -> tuple:
        """(tokens, sum q*kv, sum kv + tokens, sum q(q+1)/2, sum q^2) of a batch; the last
        batch's are reused when the same arrays come again (draft and target of a round)."""
        if q is self._last[0] and kv is self._last[1]:
            return self._last[2]
        if kv.ndim == 1 and len(q) <= 8:  # a few prefill rows: plain floats are faster
            ql, kl = q.tolist(), kv.tolist()
            tokens = float(sum(ql))
            sq = float(sum(x * x for x in ql))
            qkv = float(sum(x * k for x, k in zip(ql, kl, strict=True)))
            agg = (tokens, qkv, sum(kl) + tokens, (sq + tokens) / 2.0, sq)
            self._last = (q, kv, agg)
            return agg
        tokens, sq = float(q.sum()), float(q @ q)
        kv_sum = kv.sum(axis=-1)
        n = q.shape[0]
        # all q equal (Cauchy-Schwarz equality): sum q*kv = q * sum kv, no matmul
        qkv = kv_sum * (tokens / n) if n and sq * n == tokens * tokens else kv @ q
        agg = (tokens, qkv, kv_sum + tokens, (sq + tokens) / 2.0, sq)
        self._last = (q, kv, agg)
        return agg

    def _coefficients(self, st: Stack) -> tuple:
        """Seconds per unit: weights read (a dense stack's), per token (matmul,
        activations), per attention pair (q_i, k_j) and per KV token read or written (a
        hybrid's softmax layers only); fixed seconds per forward (all-reduce latencies
        included) and per request (a hybrid's recurrent states read and written); the stack
        itself (an MoE stack's weight reads depend on the forward's tokens); all-reduce
        seconds per token (two per layer; zero without tensor parallelism)."""
        k = self.k
        act = st.layers * (6 * st.hidden + 3 * st.mlp_width_per_token) * st.dtype_bytes
        fixed = self.launch + st.layers * (k.layer_s + (k.moe_layer_s if st.experts else 0.0))
        latency, ring = self.allreduce
        state_s = 2.0 * st.state_bytes_per_request / self.bw  # read and written per forward
        return (st.weight_bytes / self.bw, 2.0 * st.active_params / self.flops, act / self.bw,
                4.0 * st.attention_layers * st.heads * st.head_dim / self.attn_flops,
                st.kv_bytes_per_token / self.bw, fixed + 2 * st.layers * latency,
                st.layers * k.request_layer_s + state_s, st if st.experts else None,
                2 * st.layers * ring)

    def _stack_s(self, coef: tuple, q: np.ndarray, kv: np.ndarray, causal: bool):
        w_s, tok_flop_s, tok_act_s, pair_s, kv_tok_s, fixed_s, req_s, moe, ar_tok_s = coef
        tokens, qkv, kv_tokens, pairs_causal, pairs_full = self._aggregates(q, kv)
        if moe is not None and self.moe_curve is not None:
            shared = 2.0 * moe.layers * moe.shared_params_per_layer
            linear = (max(tokens * shared / self.flops,
                          shared / 2.0 * self.dtype / self.bw + tokens * tok_act_s)
                      + expert_gemm_s(self.moe_curve, moe, tokens, self.peak))
        else:
            if moe is not None:
                w_s = moe.weight_bytes_read(tokens) / self.bw
            linear = max(tokens * tok_flop_s, w_s + tokens * tok_act_s)
        fixed = linear + fixed_s + req_s * q.shape[-1] + tokens * ar_tok_s
        pairs = qkv + (pairs_causal if causal else pairs_full)
        if kv.ndim == 1:
            return fixed + max(float(pairs) * pair_s, float(kv_tokens) * kv_tok_s)
        return np.maximum(pairs * pair_s, kv_tokens * kv_tok_s) + fixed

    def target_forward_s(self, q_lens: np.ndarray, kv_lens: np.ndarray) -> np.ndarray | float:
        return self._stack_s(self._target_coef, q_lens, kv_lens, causal=True)

    def draft_forward_s(self, q_lens: np.ndarray, kv_lens: np.ndarray,
                        causal: bool = True) -> np.ndarray | float:
        if self.draft is None:
            return np.zeros(np.shape(kv_lens)[:-1]) if np.ndim(kv_lens) > 1 else 0.0
        return self._stack_s(self._draft_coef, q_lens, kv_lens, causal)

    def prefill_forward_s(self, q_lens: np.ndarray, kv_lens: np.ndarray) -> float:
        return float(self.target_forward_s(q_lens, kv_lens))

    def lm_head_s(self, n_rows: float) -> float:
        n = float(n_rows)
        flops = 2.0 * self.head_params * n
        # fp32 logits of this rank's vocabulary shard, written and read
        nbytes = self.head_params * self.dtype + n * (self.vocab // self.tp) * 8
        return max(flops / self.flops, nbytes / self.bw) + self.allreduce[0]

    def kv_materialize_s(self, n_tokens: float) -> float:
        if self.draft is None:
            return 0.0
        n = float(n_tokens)
        flops = 2.0 * self.materialize_params * n
        nbytes = self.materialize_params * self.dtype + n * self.draft.kv_bytes_per_token
        return max(flops / self.flops, nbytes / self.bw) + self.launch

    def host_plan_s(self, batch_size: int) -> float:
        return self.host[0] + self.host[1] * batch_size

    def host_process_s(self, batch_size: int) -> float:
        return self.host[2] + self.host[3] * batch_size

    def copy_s(self) -> float:
        return self.copy
