"""Split-K `gemv` (kernels/gemv/split_k.py): the oracle at split_k 1-4 with ragged N and K,
both inner products, the counters left at zero (a second call, another shape sharing the
cached buffers), bitwise determinism, the fixed-order sum of the slices, argument checks and
the tuner's split-K candidates. Tiny shapes: the CPU runs TRITON_INTERPRET=1."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, note
from hypothesis import strategies as st

from kernels import gemv
from kernels.gemv import split_k, tune
from kernels.gemv.shared import GemvConfig
from tests.kernels.test_gemv import DEVICE, _valid, check_against_oracle
from tests.strategies import GPU, sized


@st.composite
def split_cases(draw):
    """(x (M, K), w (N, K), config): M in {1, 2, 5, 16}, N and K ragged, split_k 1-4."""
    m = draw(st.sampled_from([1, 2, 5, 16]))
    n = draw(st.one_of(st.sampled_from([16, 48]), sized(1, 70)))
    k = draw(st.one_of(st.sampled_from([1, 64, 192]), sized(1, 200)))
    dtype = draw(st.sampled_from([torch.float32, torch.bfloat16]))
    dot = draw(st.booleans())
    block_n = draw(st.sampled_from([16, 32] if dot else [8, 16]))
    stages = st.just(2) if GPU else st.sampled_from([1, 2, 3])  # GPU: fewer compiled variants
    config = GemvConfig(block_n, draw(st.sampled_from([32, 64])), draw(st.sampled_from([1, 4])),
                        draw(stages), dot, draw(st.sampled_from([1, 2, 3, 4])))
    seed = draw(st.integers(0, 2**31 - 1))
    note(f"split-K gemv: M={m} N={n} K={k} {dtype=} config={config} {seed=}")
    g = torch.Generator().manual_seed(seed)
    scale = torch.exp(torch.randn(m, 1, generator=g))  # rows of different norms
    x = (torch.randn(m, k, generator=g) * scale).to(DEVICE, dtype)
    w = (torch.randn(n, k, generator=g) / k**0.5).to(DEVICE, dtype)
    return x, w, config


def counters_are_zero() -> bool:
    return all(int(buf.abs().sum()) == 0 for (kind, _, _), buf in split_k._BUFFERS.items()
               if kind == "counters")


@given(split_cases())
def test_split_k_gemv_matches_oracle_and_repeats_bitwise(case):
    x, w, config = case
    y = gemv(x, w, config=config)
    assert y.shape == (x.shape[0], w.shape[0]) and y.dtype == x.dtype
    check_against_oracle(y, x, w)
    assert counters_are_zero()
    assert torch.equal(gemv(x, w, config=config), y)  # the counters were reset


def _inputs(m: int, n: int, k: int, dtype: torch.dtype, seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(m, k, generator=g).to(DEVICE, dtype)
    w = (torch.randn(n, k, generator=g) / k**0.5).to(DEVICE, dtype)
    return x, w


@pytest.mark.parametrize("dot", [True, False])
def test_repeated_and_interleaved_calls_are_bitwise_identical(dot):
    """Five calls, with another shape (same cached buffers) in between: one result."""
    cfg = GemvConfig(16, 32, 4, 2, dot, 3)
    x, w = _inputs(5, 40, 150, torch.bfloat16)
    x2, w2 = _inputs(3, 23, 70, torch.bfloat16, seed=1)
    first, other = gemv(x, w, config=cfg), gemv(x2, w2, config=cfg)
    buffers = {key: buf.data_ptr() for key, buf in split_k._BUFFERS.items()}
    for _ in range(4):
        assert torch.equal(gemv(x, w, config=cfg), first)
        assert torch.equal(gemv(x2, w2, config=cfg), other)
    assert counters_are_zero()
    assert {key: buf.data_ptr() for key, buf in split_k._BUFFERS.items()} == buffers
    check_against_oracle(first, x, w)


@pytest.mark.parametrize("split", [2, 3, 4])
@pytest.mark.parametrize("dot", [True, False])
def test_result_is_the_fixed_order_sum_of_the_k_slices(dot, split):
    """fp32: y = ((0 + p_0) + p_1) + ..., p_s the unsplit kernel on slice s of K (K = 140:
    the last slice ragged, at split 4 empty); exact in the interpreter, close on CUDA."""
    m, n, k = 2, 30, 140
    x, w = _inputs(m, n, k, torch.float32, seed=split)
    cfg = GemvConfig(16, 32, 4, 2, dot, split)
    step = split_k.k_split(k, split, cfg.block_k)
    total = torch.zeros(m, n, device=DEVICE)
    for lo in range(0, split * step, step):
        if lo < k:
            total += gemv(x[:, lo:lo + step], w[:, lo:lo + step].contiguous(),
                          config=cfg._replace(split_k=1))
    y = gemv(x, w, config=cfg)
    if DEVICE == "cpu":
        assert torch.equal(y, total)
    else:
        torch.testing.assert_close(y, total, rtol=1e-5, atol=1e-5)


def test_wide_k_even_slices():
    """K = 4096 in 4 slices of 2 x 512 (the unmasked path), bf16, as at Qwen3-8B's o_proj."""
    x, w = _inputs(1, 64, 4096, torch.bfloat16)
    for cfg in (GemvConfig(16, 512, 4, 3, True, 4), GemvConfig(16, 512, 4, 3, False, 4)):
        check_against_oracle(gemv(x, w, config=cfg), x, w)


def test_config_string_shows_split_k():
    assert str(GemvConfig(16, 512, 4, 3, False, 4)) == "fma n16 k512 w4 s3 sk4"
    assert str(GemvConfig(16, 512, 4, 3, False)) == "fma n16 k512 w4 s3"
    assert GemvConfig(16, 512, 4, 3, True).split_k == 1


@pytest.mark.parametrize("split", [0, -2, 2.0, True])
def test_bad_split_k_raises_value_error(split):
    with pytest.raises(ValueError, match="config.split_k"):
        gemv(**_valid(config=GemvConfig(16, 32, 4, 2, True, split)))


def test_split_candidates_fit_the_shapes():
    """Narrow N only, <= 12 per shape, slices of >= one chunk, 2-8 programs per SM."""
    qwen = {(6144, 4096): 9, (4096, 4096): 11, (4096, 12288): 11, (24576, 4096): 0}
    for (n, k), count in qwen.items():
        assert len(tune.split_candidates(1, n, k)) == count
        assert len(tune.split_candidates(16, n, k)) <= 5
        for m in (1, 16):
            for cfg in tune.split_candidates(m, n, k):
                assert cfg.split_k in tune.SPLIT_KS and k >= cfg.split_k * cfg.block_k
                assert 2 * tune.SMS <= -(-n // cfg.block_n) * cfg.split_k <= 8 * tune.SMS
                assert cfg.dot or m <= tune.FMA_MAX_ROWS
                assert cfg in tune.candidates(m, n, k)


@pytest.mark.gpu
def test_split_k_inside_cuda_graph_replays():
    """Eager call first (buffers cached), then a captured call replayed three times."""
    x, w = _inputs(1, 4096, 4096, torch.bfloat16)
    cfg = GemvConfig(16, 512, 4, 3, False, 4)
    y = gemv(x, w, config=cfg)
    out = torch.empty_like(y)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        gemv(x, w, config=cfg, out=out)
    for _ in range(3):
        out.zero_()
        graph.replay()
        torch.cuda.synchronize()
        assert torch.equal(out, y)
    assert counters_are_zero()
    check_against_oracle(y, x, w)
