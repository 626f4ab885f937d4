"""`gemv_silu_mul` and `gemv_rms_norm` (the GEMV with its input made in its loads) against
their oracles: the product with the tolerance of `gemv` (fp32 table; 16-bit: 2x rule on CUDA,
elementwise table under the CPU interpreter, which truncates), the residual stream exactly
(it is one add rounded once), both kernels (unsplit, split-K) and both inner products, the
cuBLAS fallback and the argument errors. The oracle's input is built here from torch's own
ops (F.silu, the HF RMSNorm written out), not from the oracle module under test."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, note
from hypothesis import strategies as st

from kernels import gemv_rms_norm_ref, gemv_silu_mul_ref
from kernels.gemv import tune
from kernels.gemv.kernel import gemv_rms_norm, gemv_silu_mul
from kernels.gemv.shared import GemvConfig
from tests.kernels.test_gemv import DEVICE, INTERPRETER_TRUNCATES, UNTUNED, check_against_oracle
from tests.strategies import sized
from workbench.numerics import assert_close

CONFIGS = (
    None,
    GemvConfig(16, 32, 4, 2, True), GemvConfig(32, 64, 8, 1, True),
    GemvConfig(4, 64, 2, 2, False), GemvConfig(8, 32, 4, 3, False),
    GemvConfig(16, 32, 4, 2, True, split_k=3), GemvConfig(8, 64, 4, 2, False, split_k=2),
)
EPS = 1e-6


def cast(t: torch.Tensor, dtype: torch.dtype, kernel: bool) -> torch.Tensor:
    """t rounded to dtype: to nearest, or as the kernel rounds (kernel=True), which under the
    CPU interpreter truncates to bf16 (its fp32 -> bf16 cast drops the low 16 bits)."""
    if kernel and INTERPRETER_TRUNCATES and dtype == torch.bfloat16:
        bits = t.float().view(torch.int32) & -65536  # 0xFFFF0000
        return bits.view(torch.float32).to(dtype)
    return t.to(dtype)


def silu_mul_by_hand(gate_up: torch.Tensor, kernel: bool = True) -> torch.Tensor:
    k = gate_up.shape[-1] // 2
    g, u = gate_up[..., :k].double(), gate_up[..., k:].double()
    return cast(g * torch.sigmoid(g) * u, gate_up.dtype, kernel)


def add_by_hand(x: torch.Tensor, residual: torch.Tensor) -> torch.Tensor:
    return cast(x.double() + residual.double(), x.dtype, True)


def rms_norm_by_hand(s: torch.Tensor, weight: torch.Tensor, kernel: bool = True) -> torch.Tensor:
    """HF Qwen3's RMSNorm: statistics in high precision, cast to s's dtype, then scale."""
    sd = s.double()
    normed = cast(sd / torch.sqrt(sd.pow(2).mean(-1, keepdim=True) + EPS), s.dtype, kernel)
    return cast(normed.double() * weight.double(), s.dtype, kernel)


@st.composite
def cases(draw):
    m = draw(st.one_of(st.sampled_from([1, 16]), sized(1, 18)))
    n = draw(st.one_of(st.sampled_from([16, 48]), sized(1, 70)))
    k = draw(st.one_of(st.sampled_from([64, 256]), sized(1, 200)))
    dtype = draw(st.sampled_from([torch.float32, torch.bfloat16]))
    config = draw(st.sampled_from(CONFIGS))
    seed = draw(st.integers(0, 2**31 - 1))
    note(f"M={m} N={n} K={k} {dtype=} config={config} {seed=}")
    g = torch.Generator().manual_seed(seed)
    scale = torch.exp(torch.randn(m, 1, generator=g))  # rows of different norms
    tensors = dict(
        gate_up=torch.randn(m, 2 * k, generator=g),
        x=torch.randn(m, k, generator=g) * scale,
        residual=torch.randn(m, k, generator=g) * scale,
        norm_weight=0.5 + torch.rand(k, generator=g),
        w=torch.randn(n, k, generator=g) / k**0.5,
    )
    return {name: t.to(DEVICE, dtype) for name, t in tensors.items()}, config


@given(cases())
def test_silu_mul_matches_oracle(case):
    t, config = case
    y = gemv_silu_mul(t["gate_up"], t["w"], config=config, tuning=UNTUNED)
    assert y.shape == (t["gate_up"].shape[0], t["w"].shape[0]) and y.dtype == t["w"].dtype
    check_against_oracle(y, silu_mul_by_hand(t["gate_up"]), t["w"])
    assert_close(gemv_silu_mul_ref(t["gate_up"], t["w"]).float(),
                 (silu_mul_by_hand(t["gate_up"], False).float() @ t["w"].float().t()),
                 dtype=y.dtype, name="oracle")


@pytest.mark.parametrize("with_residual", [True, False])
@given(case=cases())
def test_rms_norm_matches_oracle(case, with_residual):
    t, config = case
    res = t["residual"] if with_residual else None
    y, stream = gemv_rms_norm(t["x"], res, t["norm_weight"], t["w"], eps=EPS, config=config,
                              tuning=UNTUNED)
    s = add_by_hand(t["x"], res) if with_residual else t["x"]
    if with_residual:
        assert torch.equal(stream, s)
    else:
        assert stream is t["x"]
    check_against_oracle(y, rms_norm_by_hand(s, t["norm_weight"]), t["w"])
    y_ref, s_ref = gemv_rms_norm_ref(t["x"], res, t["norm_weight"], t["w"], eps=EPS)
    assert torch.equal(s_ref, t["x"] + res if with_residual else t["x"])
    assert_close(y_ref.float(), rms_norm_by_hand(s_ref, t["norm_weight"], False).float()
                 @ t["w"].float().t(), dtype=y.dtype, name="oracle")


def test_silu_mul_gate_and_up_are_the_halves():
    """Only the gate half through silu: swapping the halves must change the result."""
    g = torch.Generator().manual_seed(5)
    gu = torch.randn(2, 64, generator=g).to(DEVICE)
    w = torch.randn(8, 32, generator=g).to(DEVICE)
    swapped = torch.cat([gu[:, 32:], gu[:, :32]], dim=1)
    a = gemv_silu_mul(gu, w, tuning=UNTUNED)
    assert_close(a, (F.silu(gu[:, :32]) * gu[:, 32:]) @ w.t(), kind="reduction")
    assert not torch.allclose(a, gemv_silu_mul(swapped, w, tuning=UNTUNED))


def test_rms_norm_leading_dims_and_strided_input():
    """(bs, T, K) inputs and a row-strided x: reshaped rows, stream in x's shape."""
    g = torch.Generator().manual_seed(6)
    x = torch.randn(2, 3, 40 + 5, generator=g)[..., :40].to(DEVICE)
    res = torch.randn(2, 3, 40, generator=g).to(DEVICE)
    nw = torch.rand(40, generator=g).to(DEVICE) + 0.5
    w = torch.randn(24, 40, generator=g).to(DEVICE)
    y, stream = gemv_rms_norm(x, res, nw, w, eps=EPS, tuning=UNTUNED)
    assert y.shape == (2, 3, 24) and stream.shape == (2, 3, 40)
    assert torch.equal(stream, x + res)
    assert_close(y, rms_norm_by_hand(x + res, nw) @ w.t(), kind="reduction")


def test_a_key_tuned_to_cublas_makes_the_input_then_calls_the_matmul(monkeypatch):
    g = torch.Generator().manual_seed(7)
    gu, x, res = (torch.randn(3, n, generator=g).to(DEVICE) for n in (80, 40, 40))
    nw = torch.rand(40, generator=g).to(DEVICE) + 0.5
    w = torch.randn(24, 40, generator=g).to(DEVICE)
    monkeypatch.setitem(tune.CONFIGS, tune.key_of(3, 24, 40, w), None)
    assert torch.equal(gemv_silu_mul(gu, w), (F.silu(gu[:, :40]) * gu[:, 40:]) @ w.t())
    y, stream = gemv_rms_norm(x, res, nw, w, eps=EPS)
    s = x + res
    assert torch.equal(stream, s)
    assert torch.equal(y, (s * torch.rsqrt(s.pow(2).mean(-1, keepdim=True) + EPS) * nw) @ w.t())


BAD = {
    "gate_up columns": ("gate_up", lambda t: gemv_silu_mul(t["x"][:, :63], t["w"])),
    "gate_up dtype": ("x", lambda t: gemv_silu_mul(t["gu"].half(), t["w"])),
    "norm_weight size": ("norm_weight", lambda t: gemv_rms_norm(
        t["x"][:, :32], None, t["nw"][:31], t["w"], eps=EPS)),
    "norm_weight dtype": ("norm_weight", lambda t: gemv_rms_norm(
        t["x"][:, :32], None, t["nw"][:32].half(), t["w"], eps=EPS)),
    "residual shape": ("residual", lambda t: gemv_rms_norm(
        t["x"][:, :32], t["x"][:1, :32], t["nw"][:32], t["w"], eps=EPS)),
    "x columns": ("x", lambda t: gemv_rms_norm(t["x"][:, :31], None, t["nw"][:31], t["w"],
                                              eps=EPS)),
}


@pytest.mark.parametrize("what", sorted(BAD))
def test_bad_input_raises_value_error_naming_the_argument(what):
    name, call = BAD[what]
    t = dict(gu=torch.zeros(2, 64), x=torch.zeros(2, 64), nw=torch.ones(64),
             w=torch.zeros(8, 32))
    with pytest.raises(ValueError, match=name):
        call({k: v.to(DEVICE) for k, v in t.items()})
