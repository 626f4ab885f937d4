"""`gemv` against its oracle (fp32 table, 2x rule for 16-bit on CUDA), both inner products
(dot, fma) at block sizes that do not divide M, N or K, the launcher's contracts and the
tuner's CPU behaviour. Tiny shapes: the CPU runs TRITON_INTERPRET=1."""

from __future__ import annotations

import warnings

import pytest
import torch
from hypothesis import given, note
from hypothesis import strategies as st

from kernels import gemv, gemv_ref
from kernels.gemv import tune
from kernels.gemv.shared import GemvConfig, default_config
from tests.strategies import sized
from workbench.numerics import assert_close, assert_two_x

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"
# The CPU interpreter truncates fp32 -> 16-bit (no round to nearest): one ulp more there, so
# the elementwise table applies instead of the 2x rule (as in test_qk_norm_rope_write).
INTERPRETER_TRUNCATES = DEVICE == "cpu"
SMALL_CONFIGS = (
    None,  # the launcher's choice (default_config on the CPU)
    GemvConfig(16, 32, 4, 2, True), GemvConfig(16, 128, 4, 3, True),
    GemvConfig(32, 64, 8, 1, True),
    GemvConfig(1, 16, 1, 1, False), GemvConfig(4, 64, 2, 2, False),
    GemvConfig(8, 32, 4, 3, False), GemvConfig(16, 128, 4, 2, False),
)
UNTUNED = tune.GemvTuning(tune=False)  # timing candidates per drawn shape is the tuner's job


def check_against_oracle(y: torch.Tensor, x: torch.Tensor, w: torch.Tensor) -> None:
    """fp32: the reduction table; 16-bit: 2x rule on CUDA, elementwise table on the CPU."""
    fp32 = x.float() @ w.float().t()  # the oracle before its one rounding
    if y.dtype == torch.float32:
        assert_close(y, fp32, kind="reduction", name="y")
    elif INTERPRETER_TRUNCATES:
        assert_close(y, fp32, dtype=y.dtype, name="y")
    else:
        assert_two_x(y, fp32, x @ w.t(), name="y")
    assert_close(gemv_ref(x, w), fp32, dtype=y.dtype, name="gemv_ref")


@st.composite
def gemv_cases(draw):
    m = draw(st.one_of(st.sampled_from([1, 16]), sized(0, 20)))
    n = draw(st.one_of(st.sampled_from([1, 16, 48]), sized(1, 70)))
    k = draw(st.one_of(st.sampled_from([1, 64, 256]), sized(1, 300)))
    dtype = draw(st.sampled_from([torch.float32, torch.bfloat16, torch.float16]))
    config = draw(st.sampled_from(SMALL_CONFIGS))
    lead = draw(st.sampled_from(["2d", "3d", "strided"]))
    seed = draw(st.integers(0, 2**31 - 1))
    note(f"gemv: M={m} N={n} K={k} {dtype=} config={config} {lead=} {seed=}")
    g = torch.Generator().manual_seed(seed)
    scale = torch.exp(torch.randn(m, 1, generator=g))  # rows of different norms
    x = (torch.randn(m, k + 3, generator=g) * scale).to(DEVICE, dtype)
    x = x[:, :k] if lead == "strided" else x[:, :k].contiguous()
    if lead == "3d" and m % 2 == 0:
        x = x.reshape(2, m // 2, k)
    w = (torch.randn(n, k, generator=g) / k**0.5).to(DEVICE, dtype)
    return x, w, config


@given(gemv_cases())
def test_gemv_matches_oracle(case):
    x, w, config = case
    y = gemv(x, w, config=config, tuning=UNTUNED)  # None: default_config (the tuner: below)
    assert y.shape == (*x.shape[:-1], w.shape[0]) and y.dtype == x.dtype
    if y.numel():
        check_against_oracle(y.reshape(-1, w.shape[0]), x.reshape(-1, x.shape[-1]), w)


@pytest.mark.parametrize("config", [None, GemvConfig(16, 512, 4, 3, True),
                                    GemvConfig(8, 1024, 4, 2, False)])
@pytest.mark.parametrize("m", [1, 4])
def test_wide_k_even_blocks(config, m):
    """K = 4096 (Qwen3-8B's hidden size) in 512/1024-wide chunks: the unmasked fast path."""
    g = torch.Generator().manual_seed(m)
    x = torch.randn(m, 4096, generator=g).to(DEVICE, torch.bfloat16)
    w = (torch.randn(64, 4096, generator=g) / 64).to(DEVICE, torch.bfloat16)
    check_against_oracle(gemv(x, w, config=config), x, w)


def test_out_buffer_is_written_and_returned():
    g = torch.Generator().manual_seed(1)
    x, w = torch.randn(3, 40, generator=g).to(DEVICE), torch.randn(24, 40, generator=g).to(DEVICE)
    out = torch.full((3, 24), float("nan"), device=DEVICE)
    y = gemv(x, w, out=out, tuning=UNTUNED)
    assert y.data_ptr() == out.data_ptr()
    assert_close(out, x @ w.t(), kind="reduction")


def test_empty_k_gives_zeros():
    y = gemv(torch.zeros(2, 0, device=DEVICE), torch.zeros(5, 0, device=DEVICE))
    assert torch.equal(y, torch.zeros(2, 5, device=DEVICE))


def test_l2_copies_fill_three_l2s_but_never_more_than_the_graph_reads():
    """A 4096 x 4096 bf16 W (32 MiB) needs cdiv(150 MiB, 32 MiB) = 5 tensors to stream past
    a 50 MiB L2 three times; a 1 x 1 W would need 39 million: capped at 24, the calls of a
    timing graph. An empty W must not divide by zero. Meta tensors: no memory is used."""
    big = torch.empty(4096, 4096, dtype=torch.bfloat16, device="meta")
    assert len(tune.l2_copies(big)) == 5
    assert len(tune.l2_copies(torch.empty(1, 1, device="meta"))) == 24
    assert len(tune.l2_copies(torch.empty(5, 0, device="meta"))) == 24
    assert len(tune.l2_copies(torch.empty(1 << 30, dtype=torch.int8, device="meta"))) == 2


def _valid(**over) -> dict:
    args = dict(x=torch.zeros(2, 32), w=torch.zeros(8, 32), tuning=UNTUNED)
    args.update(over)
    return {k: v.to(DEVICE) if isinstance(v, torch.Tensor) else v for k, v in args.items()}


BAD = {
    "w rank 3": ("w", dict(w=torch.zeros(1, 8, 32))),
    "w int": ("w", dict(w=torch.zeros(8, 32, dtype=torch.int32))),
    "w strided": ("w", dict(w=torch.zeros(32, 8).t())),
    "x dtype": ("x", dict(x=torch.zeros(2, 32, dtype=torch.float16))),
    "x columns": ("x", dict(x=torch.zeros(2, 31))),
    "x strided": ("x", dict(x=torch.zeros(32, 2).t())),
    "config type": ("config", dict(config=(16, 32, 4, 2, True))),
    "config block_k": ("config.block_k", dict(config=GemvConfig(16, 48, 4, 2, True))),
    "config dot block_n": ("config.block_n", dict(config=GemvConfig(8, 32, 4, 2, True))),
    "out shape": ("out", dict(out=torch.zeros(2, 9))),
    "out dtype": ("out", dict(out=torch.zeros(2, 8, dtype=torch.float16))),
}


@pytest.mark.parametrize("what", sorted(BAD))
def test_bad_input_raises_value_error_naming_the_argument(what):
    name, over = BAD[what]
    with pytest.raises(ValueError, match=name):
        gemv(**_valid(**over))
    gemv(**_valid())


def test_tuner_on_cpu_is_the_deterministic_default():
    w = torch.zeros(48, 64)
    for m in (1, 2, 3, 16):
        assert tune.config_for(m, 48, 64, w) == default_config(m, 48, 64)
    assert tune.config_for(3, 48, 64, w, tune.GemvTuning(tune=False)) == default_config(3, 48, 64)
    assert not tune.CONFIGS or all("cpu" not in k[4] for k in tune.CONFIGS)
    assert [tune.m_bucket(m) for m in (1, 2, 3, 5, 16, 17, 40)] == [1, 2, 4, 8, 16, 32, 48]


def test_a_key_tuned_to_cublas_calls_the_matmul(monkeypatch):
    g = torch.Generator().manual_seed(2)
    x = torch.randn(2, 3, 40, generator=g).to(DEVICE)
    w = torch.randn(24, 40, generator=g).to(DEVICE)
    monkeypatch.setitem(tune.CONFIGS, tune.key_of(6, 24, 40, w), None)
    assert torch.equal(gemv(x, w), x @ w.t())
    out = torch.empty(6, 24, device=DEVICE)
    assert gemv(x, w, out=out).data_ptr() == out.data_ptr()
    assert torch.equal(out, (x @ w.t()).reshape(6, 24))


def test_the_tuning_is_part_of_the_cache_key(monkeypatch):
    """A key cached as cuBLAS under the default tuning is not reused by a call that turns
    the cuBLAS fallback off (or times differently): each GemvTuning has its own entries."""
    w = torch.zeros(24, 40)
    keys = {tune.key_of(6, 24, 40, w, t) for t in (
        tune.GemvTuning(), tune.GemvTuning(cublas_fallback=False), tune.GemvTuning(graph=False))}
    assert len(keys) == 3
    monkeypatch.setitem(tune.CONFIGS, tune.key_of(6, 24, 40, w), None)
    assert tune.config_for(6, 24, 40, w) is None
    no_fallback = tune.GemvTuning(cublas_fallback=False)
    assert tune.config_for(6, 24, 40, w, no_fallback) == default_config(6, 24, 40)


def test_candidates_are_valid_configs():
    for m in (1, 16):
        for cfg in tune.candidates(m, 4096, 4096):
            for v in (cfg.block_n, cfg.block_k, cfg.num_warps):
                assert v & (v - 1) == 0
            assert cfg.block_n >= 16 or not cfg.dot
            assert m <= tune.FMA_MAX_ROWS or cfg.dot


@pytest.mark.gpu
def test_tuned_config_is_reused_inside_cuda_graph_capture():
    """warm_up tunes outside capture; the captured call then neither tunes nor warns."""
    g = torch.Generator(device="cuda").manual_seed(0)
    w = torch.randn(4096, 4096, device="cuda", generator=g).to(torch.bfloat16)
    x = torch.randn(1, 4096, device="cuda", generator=g).to(torch.bfloat16)
    tune.warm_up([w], rows=(1,))
    key = tune.key_of(1, 4096, 4096, w)
    assert key in tune.CONFIGS and "cublas" in tune.TUNE_LOG[key]
    print(f"tuned {key}: {tune.CONFIGS[key]} (None: cuBLAS), us {tune.TUNE_LOG[key]}")
    y = gemv(x, w)
    graph = torch.cuda.CUDAGraph()
    with warnings.catch_warnings():
        warnings.filterwarnings("error", message="gemv")
        with torch.cuda.graph(graph):
            y_graph = gemv(x, w)
    graph.replay()
    torch.cuda.synchronize()
    assert torch.equal(y, y_graph)
    check_against_oracle(y, x, w)


@pytest.mark.gpu
def test_graph_timed_tuning_times_every_candidate_and_cublas():
    """GemvTuning(graph=True): candidates and cuBLAS timed in CUDA-graph replays that
    stream W, without a fallback warning; the winner is a finite-timed candidate."""
    g = torch.Generator(device="cuda").manual_seed(1)
    w = torch.randn(2048, 4096, device="cuda", generator=g).to(torch.bfloat16)
    x = torch.randn(1, 4096, device="cuda", generator=g).to(torch.bfloat16)
    with warnings.catch_warnings():
        warnings.filterwarnings("error", message="gemv tuning in a CUDA graph")
        best = tune.tune(x, w, tuning=tune.GemvTuning(graph=True))
    times = tune.TUNE_LOG[tune.key_of(1, 2048, 4096, w, tune.GemvTuning(graph=True))]
    assert times["cublas"] > 0 and times[str(best)] > 0
    assert times[str(best)] == min(t for c, t in times.items() if c != "cublas" and t == t)
