"""`gemv_swiglu` (the gate_up GEMV with SiLU-and-mul in its epilogue) against its oracle and
against a bound derived from fp64 math, both inner products at sizes that do not divide the
blocks, its config rule (unsplit, the tuner's fastest) and its argument errors. Tiny shapes:
the CPU runs TRITON_INTERPRET=1."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, note
from hypothesis import strategies as st

from kernels import gemv_swiglu_ref
from kernels.gemv import tune
from kernels.gemv.shared import GemvConfig, default_config
from kernels.gemv.swiglu import gemv_swiglu
from tests.strategies import sized
from workbench.numerics import assert_close, compare

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"
CONFIGS = (
    None,  # the tuner's unsplit choice (default_config on the CPU)
    GemvConfig(16, 32, 4, 2, True), GemvConfig(32, 64, 8, 1, True),
    GemvConfig(2, 16, 1, 1, False), GemvConfig(8, 64, 4, 2, False),
    GemvConfig(16, 128, 4, 2, False),
)
UNTUNED = tune.GemvTuning(tune=False)


def exact(x: torch.Tensor, w: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(g, u, silu(g) * u) in fp64 from the inputs, no intermediate rounding."""
    g, u = (x.double() @ w.double().t()).chunk(2, dim=-1)
    return g, u, g * torch.sigmoid(g) * u


def assert_within_rounding(y: torch.Tensor, x: torch.Tensor, w: torch.Tensor) -> None:
    """y may differ from the exact a = silu(g) * u only by the roundings the kernel makes:
    g and u each to the dtype (one ulp <= eps * |v|, to nearest on CUDA and truncated by
    the interpreter) and a once more. With |silu'| <= 1.1 the first-order sum is
    eps * (1.1 * |g * u| + |silu(g) * u| + |a|). The fp32 sums themselves may be off by
    K * eps32 * sum_k |x_k w_k| (S_g, S_u), seen through the activation the same way."""
    g, u, a = exact(x, w)
    eps = torch.finfo(y.dtype).eps
    bound = 1.02 * eps * (1.1 * (g * u).abs() + 2 * a.abs())
    s_g, s_u = (x.double().abs() @ w.double().abs().t()).chunk(2, dim=-1)
    sum_eps = x.shape[-1] * torch.finfo(torch.float32).eps
    bound = bound + sum_eps * (1.1 * s_g * u.abs() + (g.abs() + 0.3) * s_u)
    err = (y.double().cpu() - a.cpu()).abs()
    bad = err > bound.cpu()
    assert not bad.any(), (f"{int(bad.sum())} of {bad.numel()} outside the rounding bound; "
                           f"worst excess {float((err - bound.cpu()).max()):.3g}")


@st.composite
def swiglu_cases(draw):
    m = draw(st.one_of(st.sampled_from([1, 16]), sized(0, 17)))
    i = draw(st.one_of(st.sampled_from([1, 8, 24]), sized(1, 40)))
    k = draw(st.one_of(st.sampled_from([1, 64, 256]), sized(1, 300)))
    dtype = draw(st.sampled_from([torch.float32, torch.bfloat16, torch.float16]))
    config = draw(st.sampled_from(CONFIGS))
    seed = draw(st.integers(0, 2**31 - 1))
    note(f"gemv_swiglu: M={m} I={i} K={k} {dtype=} config={config} {seed=}")
    g = torch.Generator().manual_seed(seed)
    scale = torch.exp(torch.randn(m, 1, generator=g))  # rows of different norms
    x = (torch.randn(m, k, generator=g) * scale).to(DEVICE, dtype)
    w = (2 * torch.randn(2 * i, k, generator=g) / k**0.5).to(DEVICE, dtype)
    return x, w, config


@given(swiglu_cases())
def test_gemv_swiglu_matches_oracle_and_rounding_bound(case):
    x, w, config = case
    y = gemv_swiglu(x, w, config=config, tuning=UNTUNED)
    assert y.shape == (x.shape[0], w.shape[0] // 2) and y.dtype == x.dtype
    if not y.numel():
        return
    if y.dtype == torch.float32:
        assert_close(y, gemv_swiglu_ref(x, w), kind="reduction")
    assert_within_rounding(y, x, w)
    assert_within_rounding(gemv_swiglu_ref(x, w), x, w)  # the oracle obeys the same bound


def test_gate_and_up_are_not_swapped():
    """With W_up = 0 the output is 0; with W_gate = 0 it is silu(0) * u = 0 as well, so
    use a W whose halves differ in sign: silu(g) * u != silu(u) * g there."""
    x = torch.ones(1, 4, device=DEVICE)
    w = torch.cat([torch.full((3, 4), 1.0), torch.full((3, 4), -0.5)]).to(DEVICE)
    y = gemv_swiglu(x, w, config=GemvConfig(2, 16, 1, 1, False))
    g, u = torch.tensor(4.0), torch.tensor(-2.0)
    assert torch.allclose(y.cpu(), (g * torch.sigmoid(g) * u).expand(1, 3), rtol=1e-6)


def test_leading_dims_and_out_buffer():
    g = torch.Generator().manual_seed(3)
    x = torch.randn(2, 3, 40, generator=g).to(DEVICE)
    w = torch.randn(24, 40, generator=g).to(DEVICE)
    out = torch.full((6, 12), float("nan"), device=DEVICE)
    y = gemv_swiglu(x, w, out=out, tuning=UNTUNED)
    assert y.shape == (2, 3, 12) and y.data_ptr() == out.data_ptr()
    assert_close(out, gemv_swiglu_ref(x.reshape(6, 40), w), kind="reduction")


def test_the_config_is_the_tuners_fastest_unsplit_one(monkeypatch):
    """A key tuned to cuBLAS (None) or to split-K still launches Triton: the fastest unsplit
    candidate of the timings (NaN: a failed candidate, never chosen); untimed, the default."""
    w = torch.zeros(48, 64)
    key = tune.key_of(1, 48, 64, w)
    cands = [c for c in tune.candidates(1, 48, 64) if c.split_k == 1]
    split = GemvConfig(16, 512, 4, 3, False, 2)
    times = {str(c): 10.0 + n for n, c in enumerate(cands)}
    times[str(cands[0])] = float("nan")
    times[str(split)], times["cublas"] = 1.0, 2.0
    monkeypatch.setitem(tune.TUNE_LOG, key, times)
    for cached in (None, split):
        monkeypatch.setitem(tune.CONFIGS, key, cached)
        assert tune.unsplit_config_for(1, 48, 64, w) == cands[1]
    monkeypatch.setitem(tune.CONFIGS, key, cands[3])
    assert tune.unsplit_config_for(1, 48, 64, w) == cands[3]
    monkeypatch.delitem(tune.TUNE_LOG, key)
    monkeypatch.setitem(tune.CONFIGS, key, None)
    assert tune.unsplit_config_for(1, 48, 64, w) == default_config(1, 48, 64)


BAD = {
    "odd rows": ("even number", dict(w=torch.zeros(7, 32))),
    "split config": ("unsplit", dict(config=GemvConfig(16, 32, 4, 2, True, 2))),
    "one-row config": ("unsplit", dict(config=GemvConfig(1, 32, 1, 1, False))),
    "x columns": ("x", dict(x=torch.zeros(2, 31))),
    "out shape": ("out", dict(out=torch.zeros(2, 8))),
}


@pytest.mark.parametrize("what", sorted(BAD))
def test_bad_input_raises_value_error(what):
    match, over = BAD[what]
    args = dict(x=torch.zeros(2, 32), w=torch.zeros(8, 32), tuning=UNTUNED)
    args.update(over)
    args = {k: v.to(DEVICE) if isinstance(v, torch.Tensor) else v for k, v in args.items()}
    with pytest.raises(ValueError, match=match):
        gemv_swiglu(**args)
    with pytest.raises(ValueError, match="even number"):
        gemv_swiglu_ref(torch.zeros(2, 32), torch.zeros(7, 32))


@pytest.mark.gpu
def test_matches_the_unfused_engine_path_bitwise_on_qwen3_shapes():
    """bf16, K = 4096, I = 12288 at M = 1 and 16: against the same config's plain GEMV
    stored as gate_up and Inductor's compiled silu(g) * u, the path it replaces. The GEMV
    tiles differ (BLOCK_N rows of W either way), so the dot products may differ in fp32
    summation order only: at most one bf16 ulp of g or u, seen through the activation."""
    from kernels.gemv.kernel import gemv

    act = torch.compile(lambda gu: torch.nn.functional.silu(gu[..., :12288]) * gu[..., 12288:])
    g = torch.Generator(device="cuda").manual_seed(0)
    w = (torch.randn(24576, 4096, device="cuda", generator=g) / 64).to(torch.bfloat16)
    for m in (1, 16):
        x = torch.randn(m, 4096, device="cuda", generator=g).to(torch.bfloat16)
        cfg = tune.unsplit_config_for(m, 24576, 4096, w)
        fused = gemv_swiglu(x, w, config=cfg)
        unfused = act(gemv(x, w, config=cfg))
        rep = compare(fused.float(), unfused.float(), rtol=0.0, atol=0.0)
        print(f"M={m} {cfg}: fused vs unfused {rep}")
        assert rep.mismatches <= fused.numel() // 100, rep
        assert_within_rounding(fused, x, w)
