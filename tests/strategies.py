"""Hypothesis strategies for the kernel tests: awkward shapes, seeded tensors, noted cases.

Each strategy draws the named dimensions and a seed, builds the tensors on the CPU from a
torch.Generator (cheap to shrink: Hypothesis shrinks the seed and the shape, not the data),
and `note()`s the case so that a failure prints what to rerun. Move them to the device in
the test. Sizes stay tiny so that the CPU interpreter (TRITON_INTERPRET=1) is fast; the
kv case caps T*L*nkv*D.

Under HYPOTHESIS_PROFILE=gpu every size comes from `sized`'s few buckets (the range's ends,
1, primes, powers of two): a kernel's compiled variant depends on sizes through its
constexprs (block widths, head dims, group sizes) and Triton's specialization of integer
arguments, so bucketed draws keep the compilations per kernel to a bounded few while the
examples still cross every branch (edges, ragged tails, the padding row).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass

import torch
from hypothesis import note
from hypothesis import strategies as st

SEEDS = st.integers(0, 2**31 - 1)
INT_DTYPES = st.sampled_from([torch.int32, torch.int64])
FLOAT_DTYPES = st.sampled_from([torch.float32, torch.bfloat16, torch.float16])
HEAD_DIMS = st.sampled_from([32, 64, 80, 128])
KV_MAX_NUMEL = 16384  # T * L * nkv * D
GPU = os.environ.get("HYPOTHESIS_PROFILE") == "gpu"
BUCKETS = (1, 2, 3, 5, 8, 16, 17, 31, 48, 64, 70, 128, 256, 300)


def sized(lo: int, hi: int, buckets: Sequence[int] = BUCKETS) -> st.SearchStrategy[int]:
    """An int in [lo, hi]: any of them on the CPU; under the gpu profile only lo, hi and the
    buckets inside the range (module docstring)."""
    if not GPU:
        return st.integers(lo, hi)
    return st.sampled_from(sorted({v for v in (lo, hi, *buckets) if lo <= v <= hi}))


def batch_sizes(max_bs: int = 12) -> st.SearchStrategy[int]:
    """bs with 0 and 1 drawn often, not only by shrinking."""
    return st.one_of(st.sampled_from([0, 1]), sized(2, max_bs))


@st.composite
def prepare_block_cases(draw) -> dict:
    """Arguments of `prepare_block`, many blocks straddling the table width W."""
    bs, block = draw(batch_sizes()), draw(sized(1, 32))
    rows, width = draw(sized(1, 6)), draw(sized(1, 48))
    seed, dtype = draw(SEEDS), draw(INT_DTYPES)
    note(f"prepare_block: {bs=} B={block} R={rows} W={width} {seed=} {dtype=}")
    g = torch.Generator().manual_seed(seed)
    near_edge = width - block + torch.randint(-2, 3, (bs,), generator=g)
    anywhere = torch.randint(0, width + 2, (bs,), generator=g)
    prefix = torch.where(torch.rand(bs, generator=g) < 0.5, near_edge, anywhere).clamp(min=0)
    return dict(
        verified_id=torch.randint(0, 1000, (bs,), generator=g, dtype=dtype),
        prefix_lens=prefix.to(dtype),
        req_pool_indices=torch.randint(0, rows, (bs,), generator=g, dtype=dtype),
        req_to_token=torch.randint(1, 10_000, (rows, width), generator=g, dtype=torch.int32),
        block_size=block,
        mask_token_id=draw(st.sampled_from([0, 151_669, 2**40])),
    )


@st.composite
def accept_cases(draw) -> dict:
    """Arguments of `accept_bonus` with every accept length in 0..B-1 equally likely.

    Row b copies the target's argmax into the drafts up to a cut, puts a mismatch right after
    it, then random tokens from a vocabulary of `vocab` (small: later matches happen too).
    """
    bs, block = draw(batch_sizes()), draw(sized(1, 32))
    vocab, seed, dtype = draw(st.integers(2, 6)), draw(SEEDS), draw(INT_DTYPES)
    note(f"accept_bonus: {bs=} B={block} {vocab=} {seed=} {dtype=}")
    g = torch.Generator().manual_seed(seed)
    top1 = torch.randint(0, vocab, (bs, block), generator=g)
    cand = torch.randint(0, vocab, (bs, block), generator=g)
    cut = torch.randint(0, block, (bs,), generator=g)
    for b in range(bs):
        k = int(cut[b])
        cand[b, 1 : k + 1] = top1[b, :k]
        if k + 1 < block:
            cand[b, k + 1] = (top1[b, k] + 1) % vocab
    prefix = torch.randint(0, 4096, (bs,), generator=g, dtype=dtype)
    return dict(candidates=cand.to(dtype), target_top1=top1.to(dtype), prefix_lens=prefix)


@dataclass
class KVCase:
    """Inputs of `kv_materialize`, in fp32 (the test casts to the case's dtype)."""

    ctx_hidden: torch.Tensor  # (T, H)
    w_kv: torch.Tensor  # (L, 2*nkv*D, H)
    k_norm_weight: torch.Tensor  # (L, D)
    cos_sin_cache: torch.Tensor  # (P, R) fp32
    positions: torch.Tensor  # (T,) i64
    cache_loc: torch.Tensor  # (T,) i64, distinct slots
    pool_poison: torch.Tensor  # (2, L, S, nkv, D), random initial pool contents
    commit_lens: torch.Tensor | None  # (bs,) or None
    block_size: int | None
    dtype: torch.dtype
    eps: float = 1e-6

    def args(self, dtype: torch.dtype, device) -> tuple[tuple, dict]:
        """(args, kwargs) with inputs and fresh pools in `dtype` (k_norm_weight stays fp32)."""
        to = lambda t: t.to(device=device, dtype=dtype)
        pools = self.pool_poison.to(device=device, dtype=dtype)
        commit = None if self.commit_lens is None else self.commit_lens.to(device)
        args = (to(self.ctx_hidden), to(self.w_kv), self.k_norm_weight.to(device),
                self.cos_sin_cache.to(device), self.positions.to(device),
                self.cache_loc.to(device), pools[0].clone(), pools[1].clone())
        return args, dict(eps=self.eps, commit_lens=commit, block_size=self.block_size)


@st.composite
def kv_cases(draw, dtypes: st.SearchStrategy = FLOAT_DTYPES) -> KVCase:
    """A KV-injection case: D in {32, 64, 80, 128}, partial rotary R, with or without commit."""
    layers, nkv, head_dim = draw(sized(1, 3)), draw(sized(1, 8)), draw(HEAD_DIMS)
    rotary = 2 * draw(sized(0, head_dim // 2))
    hidden, dtype, seed = draw(sized(4, 48)), draw(dtypes), draw(SEEDS)
    max_tokens = max(1, KV_MAX_NUMEL // (layers * nkv * head_dim))
    commit = draw(st.booleans())
    if commit:
        block = draw(sized(1, min(8, max_tokens)))
        bs = draw(sized(0, max_tokens // block))
        tokens = bs * block
    else:
        block, bs, tokens = None, None, draw(sized(0, max_tokens))
    slots, max_pos = tokens + draw(st.integers(0, 6)), draw(sized(1, 64))
    note(f"kv_materialize: T={tokens} L={layers} {nkv=} D={head_dim} R={rotary} H={hidden} "
         f"S={slots} P={max_pos} B={block} {bs=} {dtype=} {seed=}")
    g = torch.Generator().manual_seed(seed)
    angle = torch.rand(max_pos, rotary // 2, generator=g) * 2 * torch.pi
    return KVCase(
        ctx_hidden=torch.randn(tokens, hidden, generator=g),
        w_kv=torch.randn(layers, 2 * nkv * head_dim, hidden, generator=g) / hidden**0.5,
        k_norm_weight=1 + 0.2 * torch.randn(layers, head_dim, generator=g),
        cos_sin_cache=torch.cat([angle.cos(), angle.sin()], dim=1),
        positions=torch.randint(0, max_pos, (tokens,), generator=g),
        cache_loc=torch.randperm(slots, generator=g)[:tokens],
        pool_poison=torch.randn(2, layers, slots, nkv, head_dim, generator=g),
        commit_lens=None if bs is None else torch.randint(0, block + 1, (bs,), generator=g),
        block_size=block,
        dtype=dtype,
    )


@dataclass
class AttentionCase:
    """Arguments of `paged_attention` (CPU tensors) plus the visibility rule."""

    q: torch.Tensor
    k_pool: torch.Tensor
    v_pool: torch.Tensor
    req_to_token: torch.Tensor
    req_rows: torch.Tensor
    positions: torch.Tensor
    kv_lens: torch.Tensor
    causal: bool
    window: int | None

    def args(self, dtype: torch.dtype, device: str) -> tuple[tuple, dict]:
        f = lambda t: t.to(device=device, dtype=dtype)  # noqa: E731
        i = lambda t: t.to(device)  # noqa: E731
        return ((f(self.q), f(self.k_pool), f(self.v_pool), i(self.req_to_token),
                 i(self.req_rows), i(self.positions), i(self.kv_lens)),
                dict(causal=self.causal, window=self.window))


ATTENTION_GPU_CLASSES = ((1, 2, 4, 32), (4, 1, 1, 80), (12, 3, 2, 16))  # (T, nkv, group, D)


@st.composite
def attention_cases(draw, max_numel: int = 6144) -> AttentionCase:
    """Ragged batches: each request's T new tokens end at its kv_len (decode, verify,
    prefill chunks), padding rows with kv_len 0, GQA groups 1..4, sliding windows."""
    bs = draw(sized(0, 4))
    if GPU:  # a few shape classes (decode GQA 4, verify MHA at D 80, prefill chunk at D 32)
        t, nkv, group, d = draw(st.sampled_from(ATTENTION_GPU_CLASSES))
    else:
        t, nkv, group, d = (draw(st.integers(1, 20)), draw(st.integers(1, 3)),
                            draw(st.integers(1, 4)), draw(st.sampled_from([16, 32, 80])))
    while bs * t * nkv * group * d > max_numel and t > 1:
        t //= 2
    width, rows = draw(sized(t, 70)), draw(sized(max(bs, 1), 6))
    causal = draw(st.booleans())
    window = draw(st.one_of(st.none(), sized(1, 24, (7,))))
    seed = draw(SEEDS)
    note(f"paged_attention: {bs=} {t=} {nkv=} {group=} {d=} W={width} R={rows} "
         f"{causal=} {window=} {seed=}")
    g = torch.Generator().manual_seed(seed)
    slots = 3 * rows * width
    kv_lens = torch.randint(t, width + 1, (bs,), generator=g)
    if bs > 1:
        kv_lens[-1] = 0  # a padding row: sees no key, outputs zeros
    positions = (kv_lens[:, None] - t + torch.arange(t)).clamp(min=0)
    return AttentionCase(
        q=torch.randn(bs, t, nkv * group, d, generator=g),
        k_pool=torch.randn(slots, nkv, d, generator=g),
        v_pool=torch.randn(slots, nkv, d, generator=g),
        req_to_token=torch.randperm(slots, generator=g)[: rows * width].view(rows, width)
        .to(torch.int32),
        req_rows=torch.randperm(rows, generator=g)[:bs],
        positions=positions,
        kv_lens=kv_lens,
        causal=causal,
        window=window,
    )
