"""Hazards only a GPU run can show, stressed: memory ordering in the fused split-K merge and
the fp32-output GEMM branch of kv_materialize (cuBLAS with out_dtype, CUDA only).

- Fused merge: tens of thousands of split programs race on their per-(request, head, tile)
  counters; the last one of each group merges partials other SMs just stored. Without
  release/acquire order (or with partial loads through L1) the merging program can read a
  stale partial, which shows as a run that differs from the others: 30 launches must agree
  bit for bit, match the two-launch path and the oracle, and leave every counter at zero.
- kv_materialize: 16-bit inputs keep the GEMM's fp32 accumulator, so K and V are rounded
  once, to the pool dtype. Against the fp32 oracle on the same rounded inputs, rounded once,
  most elements agree bit for bit: the fp32 summation order over K = 4096 moves a value by
  about sqrt(K) * 2^-24 ~ 2^-18 of its terms' scale, which crosses a rounding boundary for
  about 2^-18 / 2^-8 ~ 0.4% of bf16 elements and 2^-18 / 2^-11 ~ 3% of fp16 ones (an H200
  run: 0.2% and 1.5%). A projection rounded to 16 bits before the norm carries up to half an
  ulp into it, which moves a quarter or more of K's elements: the test asks for 90% equal.
  Every element must be within one ulp of max(|x|, its head's rms) (`assert_adjacent`):
  rope's cancellations leave elements far below their terms' scale, where an ulp of the
  element itself means nothing.
"""

from __future__ import annotations

import pytest
import torch

from kernels import kv_materialize, kv_materialize_ref
from kernels.paged_attention import merge, rules
from kernels.paged_attention.kernel import paged_attention
from kernels.paged_attention.ref import paged_attention_ref, paged_attention_sdpa
from workbench.numerics import assert_adjacent, assert_close, assert_two_x, row_rms

pytestmark = pytest.mark.gpu


def _splits(args, splits: int, fused: bool) -> torch.Tensor:
    with rules.forced(splits=splits):
        return paged_attention(*args, causal=True, fused_merge=fused)


def _racing_case(dtype: torch.dtype, t: int, seed: int = 0):
    """128 requests, nkv 8, group 4, D 128, tables of 512, ragged kv_lens (t..512)."""
    g = torch.Generator().manual_seed(seed)
    bs, nkv, group, d, width = 128, 8, 4, 128, 512
    slots = bs * width + 1
    table = torch.randperm(slots - 1, generator=g).add(1)[: bs * width].view(bs, width).int()
    kv_lens = torch.randint(t, width + 1, (bs,), generator=g)
    positions = kv_lens[:, None] - t + torch.arange(t)
    args = (
        torch.randn(bs, t, nkv * group, d, generator=g),
        torch.randn(slots, nkv, d, generator=g),
        torch.randn(slots, nkv, d, generator=g),
        table,
        torch.arange(bs),
        positions,
        kv_lens,
    )
    return [a.to("cuda", dtype) if a.is_floating_point() else a.to("cuda") for a in args]


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("t,splits", [(1, 32), (4, 16), (16, 8)])
def test_fused_merge_races_repeat_bit_for_bit(dtype, t, splits):
    """128 x 8 x tiles x splits programs (32,768 at decode) per launch, 30 launches."""
    args = _racing_case(dtype, t)
    two = _splits(args, splits, fused=False)
    runs = [_splits(args, splits, fused=True) for _ in range(30)]
    torch.cuda.synchronize()
    assert all(int(buf.abs().sum()) == 0 for buf in merge._COUNTERS.values())
    differ = [i for i, r in enumerate(runs) if not torch.equal(r, runs[0])]
    assert not differ, f"fused-merge launches {differ} differ from launch 0"
    fp32 = [a.float() if a.is_floating_point() else a for a in args]
    want = paged_attention_ref(*fp32, causal=True)
    if dtype == torch.float32:
        assert_close(runs[0], two, kind="reduction", name="fused vs two-launch")
        assert_close(runs[0], want, kind="reduction")
    else:  # the same fp32 partials merged in another order, rounded once
        assert_adjacent(runs[0], two, scale=row_rms(two), name="fused vs two-launch")
        assert_two_x(runs[0], want, paged_attention_sdpa(*args, causal=True).float())


def _kv_case(dtype: torch.dtype, seed: int = 0):
    """Qwen3-8B drafter shapes: L 2, nkv 8, D 128, H 4096, T 256 (full rotary)."""
    g = torch.Generator().manual_seed(seed)
    layers, nkv, d, hidden, t = 2, 8, 128, 4096, 256
    angle = torch.rand(4096, d // 2, generator=g) * 6.3
    args = [
        torch.randn(t, hidden, generator=g),
        torch.randn(layers, 2 * nkv * d, hidden, generator=g) / hidden**0.5,
        1 + 0.2 * torch.randn(layers, d, generator=g),
        torch.cat([angle.cos(), angle.sin()], dim=1),
        torch.randint(0, 4096, (t,), generator=g),
        torch.randperm(t + 8, generator=g)[:t],
        torch.zeros(layers, t + 8, nkv, d),
        torch.zeros(layers, t + 8, nkv, d),
    ]
    cuda = [a.cuda() for a in args]
    for i in (0, 1, 6, 7):
        cuda[i] = cuda[i].to(dtype)
    return cuda


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_kv_materialize_rounds_once_and_repeats(dtype):
    args = _kv_case(dtype)
    kv_materialize(*args, eps=1e-6)
    k, v = args[6].clone(), args[7].clone()
    for _ in range(5):  # repeated launches into fresh pools: bit for bit
        again = [a.clone() for a in args]
        again[6].zero_()
        again[7].zero_()
        kv_materialize(*again, eps=1e-6)
        assert torch.equal(again[6], k) and torch.equal(again[7], v)
    fp32 = [a.float() if a.is_floating_point() else a for a in args]
    fp32[6], fp32[7] = torch.zeros_like(fp32[6]), torch.zeros_like(fp32[7])
    kv_materialize_ref(*fp32, eps=1e-6)
    loc = args[5]
    for name, got, want in (("k", k, fp32[6]), ("v", v, fp32[7])):
        got, want = got[:, loc], want[:, loc].to(dtype)
        same = (got == want).float().mean().item()
        print(f"{name}: {same:.5f} of elements bitwise equal to the once-rounded oracle")
        assert same >= 0.9, f"{name}: only {same:.4f} equal: rounded more than once?"
        assert_adjacent(got, want, scale=row_rms(want), name=name)  # (L, T, nkv, D)
