"""`paged_attention` with FUSED_MERGE: the split programs merge themselves (the last one of
each (request, KV head, tile), found by an atomic counter), no merge launch. Same output as
the two-launch path and the oracle, counters back at 0 after every call, empty splits (keys
beyond kv_len) never read back."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from kernels.paged_attention import kernel, merge, rules
from kernels.paged_attention.kernel import paged_attention
from kernels.paged_attention.ref import paged_attention_ref, paged_attention_sdpa
from tests.strategies import attention_cases
from workbench.numerics import assert_adjacent, assert_close, assert_two_x, row_rms

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"
DTYPES = [torch.float32] if DEVICE == "cpu" else [torch.float32, torch.bfloat16]


def _run(args, kw, *, splits: int | None, fused: bool) -> torch.Tensor:
    with rules.forced(splits=splits):
        return paged_attention(*args, **kw, fused_merge=fused)


def _counters_zero() -> bool:
    return all(int(buf.abs().sum()) == 0 for buf in merge._COUNTERS.values())


@pytest.mark.parametrize("dtype", DTYPES)
@given(case=attention_cases(), splits=st.sampled_from([2, 3, 8, 64]))
def test_fused_merge_equals_two_launch_and_oracle(case, splits, dtype):
    """Ragged kv_lens (padding rows of kv_len 0), GQA 1..4, windows, T 1..20; 64 splits of
    at most 70 keys leave most splits empty. Called twice: the counters reset."""
    args, kw = case.args(dtype, DEVICE)
    two = _run(args, kw, splits=splits, fused=False)
    fused = _run(args, kw, splits=splits, fused=True)
    again = _run(args, kw, splits=splits, fused=True)
    assert _counters_zero(), "the last split program must put its counter back to 0"
    assert torch.equal(fused, again)
    if DEVICE == "cpu":  # one merge routine, the same partials: bit for bit
        assert torch.equal(fused, two)
    elif dtype == torch.float32:
        assert_close(fused, two, kind="reduction", name="fused vs two-launch")
    else:  # the same fp32 partials merged in another order, rounded once
        assert_adjacent(fused, two, scale=row_rms(two), name="fused vs two-launch")
    if fused.numel() == 0:
        return
    fp32_args, _ = case.args(dtype, DEVICE)
    want = paged_attention_ref(*(a.float() if a.is_floating_point() else a for a in fp32_args),
                               **kw)
    if dtype == torch.float32:
        assert_close(fused, want, kind="reduction", name="out")
    else:
        assert_two_x(fused.float(), want, paged_attention_sdpa(*args, **kw).float(), name="out")


def _decode_case(width: int, kv_len: int, nkv: int = 2, group: int = 4, seed: int = 0):
    """One decode query (nh = nkv * group, D 128) over kv_len keys of a table of `width`."""
    g = torch.Generator().manual_seed(seed)
    slots = width + 3
    table = torch.randperm(slots, generator=g)[:width].view(1, width).int()
    args = (torch.randn(1, 1, nkv * group, 128, generator=g),
            torch.randn(slots, nkv, 128, generator=g), torch.randn(slots, nkv, 128, generator=g),
            table, torch.tensor([0]), torch.tensor([[kv_len - 1]]), torch.tensor([kv_len]))
    return [a.to(DEVICE) for a in args]


@pytest.mark.parametrize("kv_len", [1, 33, 100, 256])
@pytest.mark.parametrize("splits", [8, 64])
def test_fused_merge_no_merge_launch_and_empty_splits(kv_len, splits, monkeypatch):
    """Short contexts in a wide table (W = 256, BLOCK_N 32): splits past the keys are empty.
    The fused call launches no merge kernel; partial buffers full of NaN show that no
    empty split's acc (never written) is read; three calls in a row agree."""
    args = _decode_case(256, kv_len)
    launched = []
    real_merge, real_empty = kernel._merge_kernel, torch.empty

    class Spy:
        def __getitem__(self, grid):
            launched.append(grid)
            return real_merge[grid]

    def nan_empty(*shape, **kw):
        return real_empty(*shape, **kw).fill_(float("nan"))

    monkeypatch.setattr(kernel, "_merge_kernel", Spy())
    monkeypatch.setattr(kernel.torch, "empty", nan_empty)
    want = paged_attention_ref(*args, causal=True)
    two = _run(args, dict(causal=True), splits=splits, fused=False)
    assert len(launched) == 1
    outs = [_run(args, dict(causal=True), splits=splits, fused=True) for _ in range(3)]
    assert len(launched) == 1, "the fused merge must not launch _merge_kernel"
    assert _counters_zero()
    for got in (two, *outs):
        assert not got.isnan().any()
        assert_close(got, want, kind="reduction")
    assert all(torch.equal(o, outs[0]) for o in outs)


def test_fused_merge_off_by_default_and_unsplit_untouched():
    """Default off (the launch argument's default); with one split nothing changes."""
    import inspect

    assert inspect.signature(paged_attention).parameters["fused_merge"].default is False
    args = _decode_case(64, 40)
    want = paged_attention_ref(*args, causal=True)
    assert_close(_run(args, dict(causal=True), splits=1, fused=True), want, kind="reduction")


@given(rows=st.integers(1, 64), block_d=st.sampled_from([16, 32, 64, 128, 256]),
       splits=st.integers(2, 64))
def test_merge_blocks(rows, block_d, splits):
    block_m = min(64, max(16, 1 << (rows - 1).bit_length()))
    c = merge.merge_blocks(rows, block_m, block_d, splits)
    assert c["SPLITS_P2"] >= splits and c["SPLITS_P2"] % c["SB"] == 0
    assert c["MERGE_M"] <= min(block_m, 16) and c["MERGE_M"] & (c["MERGE_M"] - 1) == 0
    assert c["SB"] == 1 or c["SB"] * c["MERGE_M"] * block_d <= 8192


def test_counters_are_kept_and_zeroed():
    dev = torch.device(DEVICE)
    a = merge.counters(dev, 5)
    assert a.dtype == torch.int32 and a.numel() >= 5 and int(a.abs().sum()) == 0
    assert merge.counters(dev, 7).data_ptr() == a.data_ptr()  # one buffer per size class
    assert merge.counters(dev, 1000).numel() >= 1000


@pytest.mark.gpu
@pytest.mark.parametrize("warm", [True, False])
def test_fused_merge_in_a_cuda_graph(warm, monkeypatch):
    """64 splits (W = 32768, nkv 8: Qwen3-8B's bs-1 decode) captured once, replayed while
    kv_len changes in place: every replay matches the eager two-launch path. warm=False
    captures with no counter buffer cached (its zero-fill is then part of the graph)."""
    args = _decode_case(32768, 300, nkv=8, group=4)
    kw = dict(causal=True, fused_merge=True)
    if warm:
        paged_attention(*args, **kw)
    else:
        monkeypatch.setattr(merge, "_COUNTERS", {})  # others' graphs keep theirs
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = paged_attention(*args, **kw)
    for kv_len in (300, 300, 1, 33, 4000, 300):
        args[5].fill_(kv_len - 1)
        args[6].fill_(kv_len)
        graph.replay()
        torch.cuda.synchronize()
        want = _run(args, dict(causal=True), splits=None, fused=False)
        assert_close(out, want, kind="reduction", name=f"replay kv_len={kv_len}")
