"""`gemv_silu_mul` (the down GEMV with SiLU-and-mul made in its loads) against its oracle:
the product with the tolerance of `gemv` (fp32 table; 16-bit: 2x rule on CUDA, elementwise
table under the CPU interpreter), both kernels (unsplit, split-K), the fma prologue and the
dot configs' input made first, the cuBLAS fallback and the argument errors. The input is
built here by hand (float64 silu, rounded as the kernel rounds), not by the oracle module."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, note
from hypothesis import strategies as st

from kernels import gemv_silu_mul_ref
from kernels.gemv import tune
from kernels.gemv.kernel import gemv_silu_mul
from kernels.gemv.shared import GemvConfig
from tests.kernels.test_gemv import DEVICE, INTERPRETER_TRUNCATES, UNTUNED, check_against_oracle
from tests.strategies import sized
from workbench.numerics import assert_close

CONFIGS = (
    None,  # default_config: fma at M <= 2, dot above (the input made first)
    GemvConfig(16, 32, 4, 2, True), GemvConfig(4, 64, 2, 2, False),
    GemvConfig(8, 32, 4, 3, False), GemvConfig(16, 128, 4, 2, False),
    GemvConfig(16, 32, 4, 2, True, split_k=3), GemvConfig(8, 64, 4, 2, False, split_k=2),
)


def silu_mul_by_hand(gate_up: torch.Tensor, kernel: bool = True) -> torch.Tensor:
    """silu(gate) * up in float64, rounded to nearest, or as the kernel rounds (kernel=True:
    under the CPU interpreter its fp32 -> bf16 cast truncates, dropping the low 16 bits)."""
    k = gate_up.shape[-1] // 2
    g, u = gate_up[..., :k].double(), gate_up[..., k:].double()
    exact = g * torch.sigmoid(g) * u
    if kernel and INTERPRETER_TRUNCATES and gate_up.dtype == torch.bfloat16:
        bits = exact.float().view(torch.int32) & -65536  # 0xFFFF0000
        return bits.view(torch.float32).to(torch.bfloat16)
    return exact.to(gate_up.dtype)


@st.composite
def cases(draw):
    m = draw(st.one_of(st.sampled_from([1, 4, 16]), sized(1, 18)))
    n = draw(st.one_of(st.sampled_from([16, 48]), sized(1, 70)))
    k = draw(st.one_of(st.sampled_from([64, 256]), sized(1, 200)))
    dtype = draw(st.sampled_from([torch.float32, torch.bfloat16]))
    config = draw(st.sampled_from(CONFIGS))
    seed = draw(st.integers(0, 2**31 - 1))
    note(f"M={m} N={n} K={k} {dtype=} config={config} {seed=}")
    g = torch.Generator().manual_seed(seed)
    gate_up = torch.randn(m, 2 * k, generator=g)
    w = torch.randn(n, k, generator=g) / k**0.5
    return gate_up.to(DEVICE, dtype), w.to(DEVICE, dtype), config


@given(cases())
def test_silu_mul_matches_oracle(case):
    gate_up, w, config = case
    y = gemv_silu_mul(gate_up, w, config=config, tuning=UNTUNED)
    assert y.shape == (gate_up.shape[0], w.shape[0]) and y.dtype == w.dtype
    check_against_oracle(y, silu_mul_by_hand(gate_up), w)
    assert_close(gemv_silu_mul_ref(gate_up, w).float(),
                 silu_mul_by_hand(gate_up, False).float() @ w.float().t(), dtype=y.dtype,
                 name="oracle")


def test_gate_and_up_are_the_halves_and_leading_dims_stay():
    """Only the gate half goes through silu: swapping the halves changes the result."""
    g = torch.Generator().manual_seed(5)
    gu = torch.randn(2, 3, 64, generator=g).to(DEVICE)
    w = torch.randn(8, 32, generator=g).to(DEVICE)
    fma = GemvConfig(8, 32, 4, 3, False)
    a = gemv_silu_mul(gu, w, config=fma)
    assert a.shape == (2, 3, 8)
    assert_close(a, (F.silu(gu[..., :32]) * gu[..., 32:]) @ w.t(), kind="reduction")
    swapped = torch.cat([gu[..., 32:], gu[..., :32]], dim=-1)
    assert not torch.allclose(a, gemv_silu_mul(swapped, w, config=fma))


def test_a_key_tuned_to_cublas_makes_the_input_then_calls_the_matmul(monkeypatch):
    g = torch.Generator().manual_seed(7)
    gu = torch.randn(3, 80, generator=g).to(DEVICE)
    w = torch.randn(24, 40, generator=g).to(DEVICE)
    monkeypatch.setitem(tune.CONFIGS, tune.key_of(3, 24, 40, w), None)
    assert torch.equal(gemv_silu_mul(gu, w), (F.silu(gu[:, :40]) * gu[:, 40:]) @ w.t())


BAD = {
    "gate_up columns": ("gate_up", dict(gate_up=torch.zeros(2, 63))),
    "gate_up rank": ("gate_up", dict(gate_up=torch.tensor(1.0))),
    "gate_up dtype": ("x", dict(gate_up=torch.zeros(2, 64, dtype=torch.float16))),
    "w rank": ("w", dict(w=torch.zeros(1, 8, 32))),
}


@pytest.mark.parametrize("what", sorted(BAD))
def test_bad_input_raises_value_error_naming_the_argument(what):
    name, over = BAD[what]
    args = dict(gate_up=torch.zeros(2, 64), w=torch.zeros(8, 32))
    args.update(over)
    with pytest.raises(ValueError, match=name):
        gemv_silu_mul(**{k: v.to(DEVICE) for k, v in args.items()}, tuning=UNTUNED)
