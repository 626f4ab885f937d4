"""Qwen3 decoder over a paged KV pool: the target model, and the layer the drafter reuses.

One forward runs a padded batch `[bs, T]` in which request b extends its own prefix by its
own number of tokens (prefill, a verify block of B, or a decode step of 1): token t of row b
sits at absolute position `positions[b, t]`, writes its K/V to slot `cache_loc[b, t]`, and
attends to keys `w < kv_lens[b]` of its request's row of `req_to_token` (causally, and within
the window on sliding layers). Padding tokens use slot 0 and never reach real keys.
Attention reads K/V in place from the pool (reference/ops.py: the Triton paged_attention
kernel on CUDA, its oracle on the CPU). Which kernels run is the target's `EngineOptions`
(common/engine_options.py), passed down as arguments: the layer takes fused_qk, triton_gemv and
the GEMV tuning, AttentionMeta carries the attention kernel's launch switches.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import NamedTuple

import torch
import torch.nn.functional as F

from common.engine_options import EngineOptions
from kernels.gemv.tuning import GemvTuning
from kernels.kv_materialize.ref import rope_neox
from kernels.qk_norm_rope_write.ref import rms_norm_hf
from reference import moe, ops
from reference.config import ModelConfig

rms_norm = rms_norm_hf  # HF Qwen3 RMSNorm over the last dim: fp32 statistics, cast, scale


def rope_cache(head_dim: int, theta: float, max_position: int, device) -> torch.Tensor:
    """(P, D) fp32 table, cos in [:, :D/2] and sin in [:, D/2:] (kv_materialize's layout)."""
    exponent = torch.arange(0, head_dim, 2, dtype=torch.int64).float() / head_dim
    inv_freq = 1.0 / (theta**exponent)
    freqs = torch.arange(max_position, dtype=torch.float32)[:, None] * inv_freq[None, :]
    return torch.cat([freqs.cos(), freqs.sin()], dim=-1).to(device)


def apply_rope(x: torch.Tensor, cos_sin: torch.Tensor) -> torch.Tensor:
    """Neox RoPE of x (bs, T, heads, D) with cos_sin (bs, T, D) fp32; math in fp32."""
    bs, t, heads, d = x.shape
    cs = cos_sin.reshape(bs * t, d)
    out = rope_neox(x.reshape(bs * t, heads, d).float(), cs[:, : d // 2], cs[:, d // 2 :])
    return out.view(bs, t, heads, d).to(x.dtype)


class LayerWeights(NamedTuple):
    """One Qwen3 decoder layer; wqkv is (nh*D + 2*nkv*D, H), w_gate_up is (2*I, H).

    A Qwen3-MoE sparse layer (reference/moe.py) has a router (E, H), routes each token to
    top_k experts (norm_topk: weights renormalised), and stacks its experts: w_gate_up
    (E, 2F, H), w_down (E, H, F). Dense layers have router None.
    """

    input_norm: torch.Tensor
    wqkv: torch.Tensor
    q_norm: torch.Tensor
    k_norm: torch.Tensor
    wo: torch.Tensor
    post_norm: torch.Tensor
    w_gate_up: torch.Tensor
    w_down: torch.Tensor
    router: torch.Tensor | None = None
    top_k: int = 0
    norm_topk: bool = False

    def tensors(self) -> tuple[torch.Tensor, ...]:
        """The layer's weight tensors (its router too when sparse)."""
        return tuple(t for t in self if isinstance(t, torch.Tensor))


class ForwardBatch(NamedTuple):
    """Where the tokens of a padded batch go.

    positions (bs, T) i64, cache_loc (bs, T) i64 (0 for padding), req_rows (bs,) i64 rows of
    req_to_token, kv_lens (bs,) i64 keys visible per request (prefix + its new tokens).
    """

    positions: torch.Tensor
    cache_loc: torch.Tensor
    req_rows: torch.Tensor
    kv_lens: torch.Tensor


class AttentionMeta(NamedTuple):
    """Which keys each query of a padded batch sees (kernels/paged_attention/ref.py).

    req_to_token (R, W) int32, req_rows (bs,) i64, positions (bs, T) i64, kv_lens (bs,) i64;
    causal and window (None: unbounded) are per layer. unsplit_max_width and fused_merge are
    the Triton kernel's launch switches (EngineOptions.unsplit_width, .fused_merge), and
    tall_tree its tree verify path (EngineOptions.tall_tree).
    tree_mask (bs, T, T) bool: a tree verify's ancestor mask (reference/tree.py), or None.
    """

    req_to_token: torch.Tensor
    req_rows: torch.Tensor
    positions: torch.Tensor
    kv_lens: torch.Tensor
    causal: bool
    window: int | None
    unsplit_max_width: int = 0
    fused_merge: bool = False
    tree_mask: torch.Tensor | None = None
    tall_tree: bool = False


def attention_meta(batch: ForwardBatch, req_to_token: torch.Tensor, *, causal: bool,
                   window: int | None, options: EngineOptions | None = None,
                   tree_mask: torch.Tensor | None = None) -> AttentionMeta:
    """The batch's AttentionMeta for one layer, with `options`' attention switches (None:
    the kernel's defaults) and a tree verify's mask."""
    opts = options or EngineOptions()
    return AttentionMeta(req_to_token, batch.req_rows, batch.positions, batch.kv_lens, causal,
                         window, opts.unsplit_width, opts.fused_merge, tree_mask,
                         opts.tall_tree)


def decoder_layer(x: torch.Tensor, w: LayerWeights, cos_sin: torch.Tensor, attn: AttentionMeta,
                  cache_loc: torch.Tensor, k_pool: torch.Tensor, v_pool: torch.Tensor,
                  num_heads: int, eps: float, fused_qk: bool = False,
                  triton_gemv: bool = False, gemv_gate_up: bool = False,
                  gemv_tuning: GemvTuning | None = None, pdl: bool = False) -> torch.Tensor:
    """One pre-norm Qwen3 layer on x (bs, T, H); returns the residual stream after it.

    The new K/V are written to the pool at cache_loc (bs*T,) before attention reads it.
    fused_qk: norm, rotate and write q/k/v through ops.qk_norm_rope_write (one Triton launch
    on CUDA; on the CPU its oracle, which is the sequence below).
    triton_gemv: the wqkv, wo and down projections of at most ops.GEMV_MAX_ROWS tokens
    through ops.gemv (gate_up too with gemv_gate_up), tuned as gemv_tuning says.
    pdl: those Triton launches (and the attention's) as programmatic dependent launches
    (kernels/pdl.py).
    """
    _, x, mlp = residual_layer(x, None, w, cos_sin, attn, cache_loc, k_pool, v_pool, num_heads,
                               eps, fused_qk, triton_gemv, gemv_gate_up, gemv_tuning, pdl)
    return x + mlp


def residual_layer(x: torch.Tensor, delta: torch.Tensor | None, w: LayerWeights,
                   cos_sin: torch.Tensor, attn: AttentionMeta, cache_loc: torch.Tensor,
                   k_pool: torch.Tensor, v_pool: torch.Tensor, num_heads: int, eps: float,
                   fused_qk: bool = False, triton_gemv: bool = False,
                   gemv_gate_up: bool = False, gemv_tuning: GemvTuning | None = None,
                   pdl: bool = False,
                   reduce: Callable[[torch.Tensor], torch.Tensor] | None = None
                   ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """`decoder_layer` with its residual adds left open: the stream entering the layer is
    x + delta (delta: the previous layer's MLP output, or None), and the stream leaving it is
    x_mid + mlp. Returns (stream in, x_mid, mlp) (bs, T, H) each; compiled, the add of delta
    and the input RMSNorm are one kernel. The switches: decoder_layer. reduce: a
    tensor-parallel shard's all-reduce of the o and down projections' outputs
    (reference/parallel.py); None on one device.
    """
    bs, t, _ = x.shape
    nkv, d = k_pool.shape[1], k_pool.shape[2]
    gemv = triton_gemv and bs * t <= ops.GEMV_MAX_ROWS
    if delta is not None:
        x = x + delta
    qkv = _linear(rms_norm(x, w.input_norm, eps), w.wqkv, gemv, gemv_tuning, pdl)
    if fused_qk:
        q = ops.qk_norm_rope_write(qkv.reshape(bs * t, -1), w.q_norm, w.k_norm,
                                   cos_sin.reshape(bs * t, d), cache_loc, k_pool, v_pool,
                                   num_heads=num_heads, eps=eps, pdl=pdl
                                   ).view(bs, t, num_heads, d)
    else:
        q, k, v = qkv.split([num_heads * d, nkv * d, nkv * d], dim=-1)
        q = apply_rope(rms_norm(q.view(bs, t, num_heads, d), w.q_norm, eps), cos_sin)
        k = apply_rope(rms_norm(k.view(bs, t, nkv, d), w.k_norm, eps), cos_sin)
        k_pool.index_copy_(0, cache_loc, k.reshape(bs * t, nkv, d))
        v_pool.index_copy_(0, cache_loc, v.reshape(bs * t, nkv, d))
    out = ops.paged_attention(q, k_pool, v_pool, attn.req_to_token, attn.req_rows,
                              attn.positions, attn.kv_lens, causal=attn.causal,
                              window=attn.window, unsplit_max_width=attn.unsplit_max_width,
                              fused_merge=attn.fused_merge, tree_mask=attn.tree_mask,
                              pdl=pdl, tall_tree=attn.tall_tree)
    attn_out = _linear(out.reshape(bs, t, num_heads * d), w.wo, gemv, gemv_tuning, pdl)
    if reduce is not None:
        attn_out = reduce(attn_out)
    x_mid = x + attn_out
    if w.router is not None:
        return x, x_mid, moe.sparse_mlp(rms_norm(x_mid, w.post_norm, eps), w.router,
                                        w.w_gate_up, w.w_down, w.top_k, w.norm_topk)
    gate_up = _linear(rms_norm(x_mid, w.post_norm, eps), w.w_gate_up, gemv and gemv_gate_up,
                      gemv_tuning, pdl)
    gate, up = gate_up.chunk(2, dim=-1)
    mlp = _linear(F.silu(gate) * up, w.w_down, gemv, gemv_tuning, pdl)
    return x, x_mid, mlp if reduce is None else reduce(mlp)


def uses_pdl(options: EngineOptions, x: torch.Tensor, kernels_on: bool) -> bool:
    """Whether a stack of layers over x (bs, T, H) launches its Triton kernels with PDL:
    options.pdl, on the kernels' path, and a decode step (T = 1). On an H200 PDL took ~50 us
    off a batch-1 Qwen3-8B decode step but added ~65 us to the 16-token verify and ~9 us to
    the draft, so blocks launch plainly."""
    return options.pdl and kernels_on and x.shape[1] == 1


def _compile(fn: Callable, options: EngineOptions) -> Callable:
    torch._dynamo.config.cache_size_limit = max(torch._dynamo.config.cache_size_limit, 64)
    torch.fx.experimental._config.use_duck_shape = False  # batch and heads may coincide
    return torch.compile(fn, dynamic=True if options.compile_dynamic else None)


def _linear(x: torch.Tensor, weight: torch.Tensor, gemv: bool,
            tuning: GemvTuning | None, pdl: bool = False) -> torch.Tensor:
    return ops.gemv(x, weight, tuning, pdl) if gemv else x @ weight.t()


@dataclass
class Target:
    """A Qwen3ForCausalLM's (or Qwen3MoeForCausalLM's) weights plus the forward that runs
    them over a KVPool.

    embed: (V, H); head: (V, H) (the same tensor when tied); cos_sin: (P, D) fp32.
    `fast_layer` is the torch.compile'd `residual_layer` after `enable_compile()`; the
    fixed-shape forwards (decode, draft, verify) use it, prefill stays eager (unless
    options.compiled_prefill). `options` picks the kernels; change them with `with_options`.
    `run_layers` is the one loop over a stack of layers (the target's, a drafter's).
    `tp`: the TensorParallel of a tensor-parallel shard (reference/parallel.py: the layers
    hold this rank's heads, the config counts them), None on one device.
    """

    config: ModelConfig
    embed: torch.Tensor
    layers: list[LayerWeights]
    norm: torch.Tensor
    head: torch.Tensor
    cos_sin: torch.Tensor
    fast_layer: Callable = residual_layer
    runtime: object = None  # the engine's pool and CUDA graphs (reference/engine.py)
    options: EngineOptions = field(default_factory=EngineOptions)
    tp: object = None

    @property
    def device(self) -> torch.device:
        return self.embed.device

    @property
    def dtype(self) -> torch.dtype:
        return self.embed.dtype

    def with_options(self, options: EngineOptions) -> Target:
        """This target (same weights, same compiled layer) under `options`.

        The kernel switches are baked into CUDA graphs at capture, so the runtime moves to
        the new target with its KV pool kept and its graphs dropped (recaptured on first
        use); this target is left with no runtime (its next run builds a new pool).
        """
        if not isinstance(options, EngineOptions):
            raise ValueError(f"options must be an EngineOptions, got {type(options).__name__}")
        fast = self.fast_layer
        if fast is not residual_layer and options.compile_dynamic != self.options.compile_dynamic:
            fast = _compile(residual_layer, options)
        rt = self.runtime
        if rt is not None:
            from reference.cuda_graphs import GraphCache

            rt = dataclasses.replace(rt, graphs=GraphCache(self.device))
            self.runtime = None
        return dataclasses.replace(self, options=options, runtime=rt, fast_layer=fast)

    def gemv_tuning(self) -> GemvTuning:
        """The GEMV tuning of `options`, as the kernels take it."""
        o = self.options
        return GemvTuning(o.gemv_tune, o.gemv_tune_graph, o.gemv_cublas_fallback)

    def warm_up_gemv(self) -> None:
        """Tune the Triton GEMV of each projection it runs (wqkv, wo, down; gate_up too with
        triton_gemv_gate_up) at every M bucket up to ops.GEMV_MAX_ROWS, now, outside any
        capture: a serving loop's prefill chunks meet any M, and a shape first met mid-run
        is tuned there (host syncs, tens of milliseconds inside a round). A no-op without
        triton_gemv, gemv_tune or CUDA."""
        o = self.options
        if not (o.triton_gemv and o.gemv_tune and self.device.type == "cuda"):
            return
        from kernels.gemv.tune import m_bucket, warm_up

        names = ("wqkv", "wo", "w_down") + (("w_gate_up",) if o.triton_gemv_gate_up else ())
        rows = sorted({m_bucket(m) for m in range(1, ops.GEMV_MAX_ROWS + 1)})
        weights = [getattr(w, n) for w in self.layers for n in names]
        warm_up([t for t in weights if t.dim() == 2], rows, self.gemv_tuning())  # not experts

    def enable_compile(self) -> None:
        """Fuse each layer's elementwise work with torch.compile (CUDA fast path), dynamic as
        options.compile_dynamic says."""
        self.fast_layer = _compile(residual_layer, self.options)

    def logits(self, h: torch.Tensor) -> torch.Tensor:
        """(..., H) final-normed hidden -> (..., V) logits in the model dtype."""
        return h @ self.head.t()

    def forward(self, input_ids: torch.Tensor, batch: ForwardBatch, req_to_token: torch.Tensor,
                k_pool: torch.Tensor, v_pool: torch.Tensor,
                capture: tuple[int, ...] = (), fast: bool = True, causal: bool = True,
                rope_positions: torch.Tensor | None = None,
                tree_mask: torch.Tensor | None = None
                ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Run input_ids (bs, T) through every layer, reading and writing the pool.

        Returns the final-normed hidden (bs, T, H) and, if `capture` names layer ids, the
        residual stream after each of them concatenated in that order (bs, T, K*H).
        fast=False runs the eager layer (prefill: one-off shapes, not worth compiling).
        causal=False lets every token see all keys < kv_lens (bidirectional inside the new
        tokens, as a self-speculative draft pass; sliding layers stay causal).
        Tree verify: batch.positions are the nodes' table positions (prefix + node index),
        rope_positions (bs, T) their token positions (prefix + depth) and tree_mask (bs, T, T)
        the ancestor mask (reference/tree.py).
        """
        cfg = self.config
        cos_sin = self.cos_sin[batch.positions if rope_positions is None else rope_positions]

        def meta(i: int) -> AttentionMeta:
            win = cfg.window(i)
            return attention_meta(batch, req_to_token, causal=causal or win is not None,
                                  window=win, options=self.options, tree_mask=tree_mask)

        x, after = self.run_layers(self.embed[input_ids], self.layers, meta, cos_sin,
                                   batch.cache_loc.reshape(-1), k_pool, v_pool, cfg.num_heads,
                                   cfg.rms_norm_eps, capture=capture, fast=fast)
        hidden = rms_norm(x, self.norm, cfg.rms_norm_eps)
        if not capture:
            return hidden, None
        return hidden, torch.cat([after[i] for i in capture], dim=-1)

    def run_layers(self, x: torch.Tensor, layers: list[LayerWeights],
                   meta: Callable[[int], AttentionMeta], cos_sin: torch.Tensor,
                   cache_loc: torch.Tensor, k_pool: torch.Tensor, v_pool: torch.Tensor,
                   num_heads: int, eps: float, *, capture: tuple[int, ...] = (),
                   fast: bool = True, kernels: bool = True, sharded: bool = True
                   ) -> tuple[torch.Tensor, dict[int, torch.Tensor]]:
        """Run x (bs, T, H) through `layers`; layer i attends as meta(i) says and writes its
        K/V to k_pool[i], v_pool[i] (pools (L, S, nkv, D)) at cache_loc (bs*T,).

        Returns the residual stream after the last layer and {i: stream after layer i} for
        the ids in `capture`. The options' kernel switches apply on CUDA (kernels=False:
        cuBLAS and the eager q/k sequence whatever they say); with deferred_residual each
        layer's MLP output is added inside the next layer (fused with its input norm).
        fast=False runs the eager layer. On a tensor-parallel shard, `sharded` layers (the
        target's, a sharded drafter's) all-reduce their o and down outputs; whole ones (a
        replicated drafter's) do not.
        """
        o = self.options
        on = kernels and x.is_cuda  # bool arguments: torch.compile guards on them
        switches = (o.fused_qk and on, o.triton_gemv and on, o.triton_gemv_gate_up,
                    self.gemv_tuning(), uses_pdl(o, x, on))
        if self.tp is not None and sharded:  # one device: the call as without TP
            switches += (self.tp.all_reduce,)
        layer = self.fast_layer if fast else residual_layer
        defer = o.deferred_residual and kernels
        delta, after = None, {}
        for i, w in enumerate(layers):
            stream, x, mlp = layer(x, delta, w, cos_sin, meta(i), cache_loc, k_pool[i],
                                   v_pool[i], num_heads, eps, *switches)
            if delta is not None and i - 1 in capture:
                after[i - 1] = stream
            delta = mlp
            if not defer:
                x, delta = x + mlp, None
                if i in capture:
                    after[i] = x
        if delta is not None:
            x = x + delta
            if len(layers) - 1 in capture:
                after[len(layers) - 1] = x
        return x, after
