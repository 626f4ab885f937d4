"""The one place where the engine picks a hot-path kernel: Triton on CUDA, else the oracle.

The CPU path (tests, fp32) always runs the pure-PyTorch oracles, even when the Triton
interpreter is on, so the engine's CPU tests stay fast; the kernels are tested against the
oracles in tests/kernels.
"""

from __future__ import annotations

import torch

import kernels
from kernels import AcceptResult

__all__ = ["AcceptResult", "accept_bonus", "fused_moe", "gemv", "kv_materialize", "paged_attention",
           "prepare_block", "qk_norm_rope_write"]

GEMV_MAX_ROWS = 16  # decode rows: above this the Triton GEMV streams W once per 16 rows


def _use_triton(tensor: torch.Tensor) -> bool:
    return tensor.is_cuda and kernels.triton_available(tensor)


def prepare_block(verified_id, prefix_lens, req_pool_indices, req_to_token, *, block_size,
                  mask_token_id):
    """See `kernels.prepare_block_ref`."""
    op = kernels.prepare_block if _use_triton(req_to_token) else kernels.prepare_block_ref
    return op(verified_id, prefix_lens, req_pool_indices, req_to_token, block_size=block_size,
              mask_token_id=mask_token_id)


def accept_bonus(candidates, target_top1, prefix_lens) -> AcceptResult:
    """See `kernels.accept_bonus_ref`."""
    op = kernels.accept_bonus if _use_triton(candidates) else kernels.accept_bonus_ref
    return op(candidates, target_top1, prefix_lens)


def kv_materialize(ctx_hidden, w_kv, k_norm_weight, cos_sin_cache, positions, cache_loc, k_pool,
                   v_pool, *, eps, commit_lens=None, block_size=None) -> None:
    """See `kernels.kv_materialize_ref`."""
    op = kernels.kv_materialize if _use_triton(ctx_hidden) else kernels.kv_materialize_ref
    op(ctx_hidden, w_kv, k_norm_weight, cos_sin_cache, positions, cache_loc, k_pool, v_pool,
       eps=eps, commit_lens=commit_lens, block_size=block_size)


@torch.compiler.disable
def paged_attention(q, k_pool, v_pool, req_to_token, req_rows, positions, kv_lens, *, causal,
                    window=None, unsplit_max_width=0, fused_merge=False, tree_mask=None,
                    pdl=False, tall_tree=False):
    """See `kernels.paged_attention_ref`; opaque to torch.compile (a Triton launch on CUDA).

    The oracle also runs whenever q needs a gradient (drafter training): the Triton kernel
    has no backward. unsplit_max_width, fused_merge and pdl are the kernel's launch switches
    (EngineOptions.unsplit_width, .fused_merge, .pdl); the oracle has none. tree_mask: a tree
    verify's ancestor mask (kernels/paged_attention/ref.py), or None; tall_tree: its launch
    in tall tiles (EngineOptions.tall_tree, kernels/paged_attention/tree.py).
    """
    grad = torch.is_grad_enabled() and q.requires_grad
    args = (q, k_pool, v_pool, req_to_token, req_rows, positions, kv_lens)
    if _use_triton(q) and not grad:
        return kernels.paged_attention(*args, causal=causal, window=window,
                                       unsplit_max_width=unsplit_max_width,
                                       fused_merge=fused_merge, tree_mask=tree_mask,
                                       pdl=pdl, tall_tree=tall_tree)
    return kernels.paged_attention_ref(*args, causal=causal, window=window, tree_mask=tree_mask)


@torch.compiler.disable
def qk_norm_rope_write(qkv, q_norm_weight, k_norm_weight, cos_sin, cache_loc, k_pool, v_pool, *,
                       num_heads, eps, pdl=False):
    """See `kernels.qk_norm_rope_write_ref`; opaque to torch.compile (a Triton launch on CUDA).

    The oracle (decoder_layer's own op sequence) runs on the CPU and whenever an input needs
    a gradient: the Triton kernel has no backward. pdl: EngineOptions.pdl (the kernel's).
    """
    grad = torch.is_grad_enabled() and any(
        t.requires_grad for t in (qkv, q_norm_weight, k_norm_weight))
    triton = _use_triton(qkv) and not grad
    op = kernels.qk_norm_rope_write if triton else kernels.qk_norm_rope_write_ref
    return op(qkv, q_norm_weight, k_norm_weight, cos_sin, cache_loc, k_pool, v_pool,
              num_heads=num_heads, eps=eps, pdl=pdl)


@torch.compiler.disable
def gemv(x, w, tuning=None, pdl=False):
    """x (..., K) @ w (N, K)^T: `kernels.gemv` (Triton) on CUDA, else `x @ w.t()`.

    Opaque to torch.compile. The Triton kernel runs for at most GEMV_MAX_ROWS rows, matching
    dtypes and no gradient; otherwise (and on the CPU) the layer's own matmul, which in fp32
    is the oracle `kernels.gemv_ref`. The first CUDA call of a shape tunes the kernel: make
    it outside CUDA-graph capture (the engine's GraphCache warms up before capturing), as
    `tuning` says (kernels.gemv.tune.GemvTuning; None: its defaults). pdl:
    EngineOptions.pdl (a programmatic dependent launch of the Triton kernel).
    """
    rows = x.numel() // max(x.shape[-1], 1)
    grad = torch.is_grad_enabled() and (x.requires_grad or w.requires_grad)
    if _use_triton(x) and rows <= GEMV_MAX_ROWS and not grad and x.dtype == w.dtype:
        return kernels.gemv(x, w, tuning=tuning, pdl=pdl)
    return x @ w.t()


@torch.compiler.disable
def fused_moe(x, w_gate_up, w_down, topk_weights, topk_ids):
    """See `kernels.fused_moe_ref`; opaque to torch.compile (two Triton launches on CUDA,
    grouped by expert without a host sync, so CUDA graphs capture it). The oracle (one
    expert at a time, as transformers) runs on the CPU and whenever x needs a gradient."""
    grad = torch.is_grad_enabled() and x.requires_grad
    op = kernels.fused_moe if _use_triton(x) and not grad else kernels.fused_moe_ref
    return op(x, w_gate_up, w_down, topk_weights, topk_ids)
