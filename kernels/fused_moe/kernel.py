"""Triton `fused_moe`: tokens grouped by expert, then two grouped GEMMs.

`align` groups the (token, slot) pairs by expert and pads each expert's run to a multiple of
BM rows, in one Triton launch and without a host sync (the engine captures it in CUDA graphs):
`sorted_pairs[r]` is the pair of padded row r (n = M*k for a padding row) and
`block_expert[b]` the expert of rows [b*BM, (b+1)*BM) (-1 past the last). A block of BM rows
then meets one expert's weights:

1. `_gate_up_kernel`: rows x[token] times w_gate_up[e] (gate and up tiles side by side),
   SwiGLU in fp32, written to the padded intermediate (R, F).
2. `_down_kernel`: the intermediate times w_down[e], scaled by the pair's routing weight in
   the kernel, written to its pair's row of (n, H) fp32.

The k pair rows of a token are summed in fp32 and cast to x's dtype.
"""

from __future__ import annotations

from typing import NamedTuple

import torch
import triton
import triton.language as tl


class MoeConfig(NamedTuple):
    """Tile sizes: BM rows per block (one expert), BN output columns, BK reduction step."""

    bm: int
    bn: int
    bk: int
    warps: int
    stages: int


def default_config(pairs: int, experts: int) -> MoeConfig:
    """Tiles by mean pairs per expert: narrow blocks streaming weights at decode sizes,
    square tensor-core tiles from about 100 rows per expert."""
    mean = pairs / max(experts, 1)
    if mean <= 16:
        return MoeConfig(16, 32, 128, 4, 4)
    if mean <= 48:
        return MoeConfig(32, 64, 64, 4, 4)
    if mean <= 96:
        return MoeConfig(64, 64, 64, 4, 3)
    return MoeConfig(128, 64, 64, 8, 3)


def align(topk_ids: torch.Tensor, experts: int, bm: int):
    """(sorted_pairs (blocks*BM,) i64, block_expert (blocks,) i32) of topk_ids (M, k), by
    `_align_kernel` in one launch (the decode step runs this once per MoE layer)."""
    flat = topk_ids.reshape(-1)
    n = flat.numel()
    blocks = min(n, triton.cdiv(n, bm) + min(experts, n))  # at least one real row each
    sorted_pairs = torch.empty(blocks * bm, dtype=torch.long, device=flat.device)
    block_expert = torch.empty(blocks, dtype=torch.int32, device=flat.device)
    if n:
        _align_kernel[(1,)](flat, n, experts, sorted_pairs, block_expert, blocks, BM=bm,
                            CHUNK=ALIGN_CHUNK, BLOCK_E=triton.next_power_of_2(experts))
    return sorted_pairs, block_expert


ALIGN_CHUNK = 64  # pairs (and blocks) per step of the align kernel's loops


@triton.jit
def _align_kernel(ids_ptr, n, E, sorted_ptr, expert_ptr, n_blocks, BM: tl.constexpr,
                  CHUNK: tl.constexpr, BLOCK_E: tl.constexpr):
    """One program: counts per expert, each run padded to BM rows and laid out in expert
    order; padding rows get pair n; pair p goes to its expert's start + the number of
    earlier pairs of that expert; block b's expert is the first whose run ends after b*BM."""
    experts = tl.arange(0, BLOCK_E)
    counts = tl.zeros((BLOCK_E,), dtype=tl.int32)
    for c in range(0, n, CHUNK):
        p = c + tl.arange(0, CHUNK)
        e = tl.load(ids_ptr + p, mask=p < n, other=-1)
        counts += tl.sum((e[:, None] == experts[None, :]).to(tl.int32), axis=0)
    padded = (counts + BM - 1) // BM * BM
    pad_end = tl.cumsum(padded, axis=0)
    pad_start = pad_end - padded
    for r in range(0, n_blocks * BM, CHUNK):
        rows = r + tl.arange(0, CHUNK)
        tl.store(sorted_ptr + rows, tl.full((CHUNK,), n, tl.int64), mask=rows < n_blocks * BM)
    tl.debug_barrier()  # the padding fill lands before the pairs overwrite their rows
    seen = tl.zeros((BLOCK_E,), dtype=tl.int32)
    for c in range(0, n, CHUNK):
        p = c + tl.arange(0, CHUNK)
        e = tl.load(ids_ptr + p, mask=p < n, other=-1)
        hot = (e[:, None] == experts[None, :]).to(tl.int32)
        before = tl.cumsum(hot, axis=0) - hot + seen[None, :]
        dest = tl.sum((before + pad_start[None, :]) * hot, axis=1)
        tl.store(sorted_ptr + dest, p.to(tl.int64), mask=p < n)
        seen += tl.sum(hot, axis=0)
    for b0 in range(0, n_blocks, CHUNK):
        b = b0 + tl.arange(0, CHUNK)
        ended = tl.sum((pad_end[None, :] <= (b * BM)[:, None]).to(tl.int32), axis=1)
        tl.store(expert_ptr + b, tl.where(ended < E, ended, -1), mask=b < n_blocks)


@triton.jit
def _dot(a, b, acc, IEEE: tl.constexpr):
    """acc + a @ b: on tensor cores, or (IEEE) in full fp32, as for fp32 inputs and under
    the CPU interpreter, whose dot mishandles bf16 (products of bf16 are exact in fp32)."""
    if IEEE:
        return tl.dot(a.to(tl.float32), b.to(tl.float32), acc, input_precision="ieee")
    return tl.dot(a, b, acc)


@triton.jit
def _gate_up_kernel(x_ptr, w_ptr, out_ptr, pairs_ptr, expert_ptr, n_pairs, top_k, H, F,
                    sx, swe, swn, swk, so,
                    BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr, IEEE: tl.constexpr):
    pid_m, pid_n = tl.program_id(0), tl.program_id(1)
    e = tl.load(expert_ptr + pid_m).to(tl.int64)
    if e < 0:
        return
    rows = pid_m * BM + tl.arange(0, BM)
    pair = tl.load(pairs_ptr + rows)
    valid = pair < n_pairs
    token = pair // top_k
    cols = pid_n * BN + tl.arange(0, BN)
    cmask = cols < F
    w = w_ptr + e * swe
    gate = tl.zeros((BM, BN), dtype=tl.float32)
    up = tl.zeros((BM, BN), dtype=tl.float32)
    for k0 in range(0, H, BK):
        ks = k0 + tl.arange(0, BK)
        kmask = ks < H
        a = tl.load(x_ptr + token[:, None] * sx + ks[None, :],
                    mask=valid[:, None] & kmask[None, :], other=0.0)
        wmask = kmask[:, None] & cmask[None, :]
        wg = tl.load(w + cols[None, :] * swn + ks[:, None] * swk, mask=wmask, other=0.0)
        wu = tl.load(w + (cols[None, :] + F) * swn + ks[:, None] * swk, mask=wmask, other=0.0)
        gate = _dot(a, wg, gate, IEEE)
        up = _dot(a, wu, up, IEEE)
    act = gate * tl.sigmoid(gate) * up
    tl.store(out_ptr + rows[:, None].to(tl.int64) * so + cols[None, :],
             act.to(out_ptr.dtype.element_ty), mask=valid[:, None] & cmask[None, :])


@triton.jit
def _down_kernel(a_ptr, w_ptr, out_ptr, pairs_ptr, expert_ptr, topw_ptr, n_pairs, H, F,
                 sa, swe, swn, swk, so,
                 BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr, IEEE: tl.constexpr):
    pid_m, pid_n = tl.program_id(0), tl.program_id(1)
    e = tl.load(expert_ptr + pid_m).to(tl.int64)
    if e < 0:
        return
    rows = pid_m * BM + tl.arange(0, BM)
    pair = tl.load(pairs_ptr + rows)
    valid = pair < n_pairs
    cols = pid_n * BN + tl.arange(0, BN)
    cmask = cols < H
    w = w_ptr + e * swe
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    for k0 in range(0, F, BK):
        ks = k0 + tl.arange(0, BK)
        kmask = ks < F
        a = tl.load(a_ptr + rows[:, None].to(tl.int64) * sa + ks[None, :],
                    mask=valid[:, None] & kmask[None, :], other=0.0)
        wd = tl.load(w + cols[None, :] * swn + ks[:, None] * swk,
                     mask=kmask[:, None] & cmask[None, :], other=0.0)
        acc = _dot(a, wd, acc, IEEE)
    scale = tl.load(topw_ptr + pair, mask=valid, other=0.0).to(tl.float32)
    acc = acc * scale[:, None]
    tl.store(out_ptr + pair[:, None] * so + cols[None, :], acc,
             mask=valid[:, None] & cmask[None, :])


def fused_moe(x: torch.Tensor, w_gate_up: torch.Tensor, w_down: torch.Tensor,
              topk_weights: torch.Tensor, topk_ids: torch.Tensor,
              config: MoeConfig | None = None) -> torch.Tensor:
    """See `kernels.fused_moe_ref`; `config` overrides `default_config`'s tiles."""
    m, h = x.shape
    experts, two_f, _ = w_gate_up.shape
    f, top_k = two_f // 2, topk_ids.shape[1]
    n = m * top_k
    if n == 0:
        return torch.zeros_like(x)
    cfg = config or default_config(n, experts)
    x, w_gate_up, w_down = x.contiguous(), w_gate_up.contiguous(), w_down.contiguous()
    sorted_pairs, block_expert = align(topk_ids, experts, cfg.bm)
    blocks = block_expert.numel()
    inter = torch.empty(blocks * cfg.bm, f, dtype=x.dtype, device=x.device)
    ieee = x.dtype == torch.float32 or not x.is_cuda
    meta = dict(BM=cfg.bm, BN=cfg.bn, BK=cfg.bk, IEEE=ieee, num_warps=cfg.warps,
                num_stages=cfg.stages)
    _gate_up_kernel[(blocks, triton.cdiv(f, cfg.bn))](
        x, w_gate_up, inter, sorted_pairs, block_expert, n, top_k, h, f,
        x.stride(0), *w_gate_up.stride(), inter.stride(0), **meta)
    out = torch.empty(n, h, dtype=torch.float32, device=x.device)
    topw = topk_weights.reshape(-1).contiguous()  # cast to fp32 in the kernel
    _down_kernel[(blocks, triton.cdiv(h, cfg.bn))](
        inter, w_down, out, sorted_pairs, block_expert, topw, n, h, f,
        inter.stride(0), *w_down.stride(), out.stride(0), **meta)
    return out.view(m, top_k, h).sum(1).to(x.dtype)
