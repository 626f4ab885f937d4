"""`qk_norm_rope_write` against its oracle (fp32 table, 2x rule for 16-bit), the pool-write
property on poisoned pools, and bad input. Tiny shapes: the CPU runs TRITON_INTERPRET=1."""

from __future__ import annotations

from dataclasses import dataclass

import pytest
import torch
from hypothesis import given, note
from hypothesis import strategies as st

from kernels import qk_norm_rope_write, qk_norm_rope_write_ref
from tests.strategies import sized
from workbench.numerics import assert_close, assert_two_x

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"
# Triton's CPU interpreter truncates fp32 -> 16-bit instead of rounding to nearest, so there
# a 16-bit result may be 1 ulp off: the elementwise table applies instead of the 2x rule.
INTERPRETER_TRUNCATES = DEVICE == "cpu"


@dataclass
class QKCase:
    """One call's tensors in fp32 on the CPU (T tokens, nh = nkv * group, S pool slots)."""

    qkv: torch.Tensor
    q_norm: torch.Tensor
    k_norm: torch.Tensor
    cos_sin: torch.Tensor
    cache_loc: torch.Tensor
    poison: torch.Tensor  # (2, S, nkv, D), the pools before the call
    num_heads: int
    dtype: torch.dtype

    def args(self, dtype: torch.dtype, upcast: bool = False) -> tuple[tuple, dict]:
        """(args, kwargs) in `dtype` on DEVICE; upcast: then every float input as fp32 (the
        fp32-math reference of a 16-bit call), cos_sin always fp32."""
        def to(t):
            t = t.to(DEVICE, dtype)
            return t.float() if upcast else t
        pools = to(self.poison)
        args = (to(self.qkv), to(self.q_norm), to(self.k_norm), self.cos_sin.to(DEVICE),
                self.cache_loc.to(DEVICE), pools[0].clone(), pools[1].clone())
        return args, dict(num_heads=self.num_heads, eps=1e-6)


@st.composite
def qk_cases(draw) -> QKCase:
    tokens = draw(st.one_of(st.sampled_from([0, 1]), sized(2, 6)))
    nkv, group = draw(sized(1, 3)), draw(sized(1, 4, (1, 4)))
    d = draw(st.sampled_from([16, 32, 80, 128]))
    extra, seed = draw(st.integers(0, 5)), draw(st.integers(0, 2**31 - 1))
    dtype = draw(st.sampled_from([torch.float32, torch.bfloat16, torch.float16]))
    note(f"qk_norm_rope_write: T={tokens} {nkv=} {group=} D={d} S=T+{extra} {seed=} {dtype=}")
    g = torch.Generator().manual_seed(seed)
    nh, slots = nkv * group, tokens + extra
    angle = torch.rand(tokens, d // 2, generator=g) * 6.3
    scale = torch.exp(torch.randn(tokens, 1, generator=g))  # rows of different norms
    return QKCase(
        qkv=torch.randn(tokens, (nh + 2 * nkv) * d, generator=g) * scale,
        q_norm=1 + 0.2 * torch.randn(d, generator=g),
        k_norm=1 + 0.2 * torch.randn(d, generator=g),
        cos_sin=torch.cat([angle.cos(), angle.sin()], dim=1),
        cache_loc=torch.randperm(max(slots, 1), generator=g)[:tokens],
        poison=torch.randn(2, max(slots, 1), nkv, d, generator=g),
        num_heads=nh, dtype=dtype,
    )


def _run(fn, case: QKCase, dtype: torch.dtype, upcast: bool = False):
    """(q, k_pool, v_pool) after fn on the case."""
    args, kw = case.args(dtype, upcast)
    q = fn(*args, **kw)
    return q, args[5], args[6]


def _bits(t: torch.Tensor) -> torch.Tensor:
    return t.view({4: torch.int32, 2: torch.int16}[t.element_size()])


@given(qk_cases())
def test_qk_norm_rope_write_matches_ref(case):
    got = _run(qk_norm_rope_write, case, case.dtype)
    want = _run(qk_norm_rope_write_ref, case, case.dtype, upcast=True)
    low = _run(qk_norm_rope_write_ref, case, case.dtype)
    nh, d = case.num_heads, case.qkv.shape[1] // (case.num_heads + 2 * case.poison.shape[2])
    assert got[0].shape == (case.qkv.shape[0], nh, d) and got[0].dtype == case.dtype
    for name, g, w, lo in zip(("q", "k_pool"), got, want, low):
        if g.numel() == 0:
            continue
        if case.dtype == torch.float32:
            assert_close(g, w, kind="reduction", name=name)
        elif INTERPRETER_TRUNCATES:
            assert_close(g, w, dtype=case.dtype, name=name)
        else:
            assert_two_x(g, w, lo, name=name)
    assert torch.equal(_bits(got[2]), _bits(low[2])), "v_pool is a copy: bit for bit"


@given(qk_cases())
def test_only_cache_loc_slots_are_written(case):
    """Pool slots outside cache_loc keep their poison, bit for bit; V lands at cache_loc."""
    _, k_pool, v_pool = _run(qk_norm_rope_write, case, case.dtype)
    poison = case.poison.to(DEVICE, case.dtype)
    written = torch.zeros(poison.shape[1], dtype=torch.bool)
    written[case.cache_loc] = True
    written = written.to(DEVICE)
    for pool, before in zip((k_pool, v_pool), poison):
        assert torch.equal(_bits(pool[~written]), _bits(before[~written]))
    nkv, d = poison.shape[2], poison.shape[3]
    v = case.qkv.to(DEVICE, case.dtype)[:, (case.num_heads + nkv) * d:].reshape(-1, nkv, d)
    assert torch.equal(_bits(v_pool[case.cache_loc.to(DEVICE)]), _bits(v))


def test_qwen3_8b_head_layout_at_decode():
    """nh=32, nkv=8, D=128 (Qwen3-8B), T=1 and T=3: 48 heads over 6 programs of 8."""
    g = torch.Generator().manual_seed(3)
    for tokens in (1, 3):
        angle = torch.rand(tokens, 64, generator=g)
        case = QKCase(torch.randn(tokens, 48 * 128, generator=g), 1 + torch.rand(128, generator=g),
                      1 + torch.rand(128, generator=g),
                      torch.cat([angle.cos(), angle.sin()], 1), torch.tensor([5, 2, 7][:tokens]),
                      torch.randn(2, 9, 8, 128, generator=g), 32, torch.float32)
        for g_, w in zip(_run(qk_norm_rope_write, case, torch.float32),
                         _run(qk_norm_rope_write_ref, case, torch.float32)):
            assert_close(g_, w, kind="reduction")


def _valid(**over) -> dict:
    g = torch.Generator().manual_seed(0)
    T, nh, nkv, D, S = 3, 4, 2, 16, 8  # noqa: N806
    args = dict(qkv=torch.randn(T, (nh + 2 * nkv) * D, generator=g), q_norm_weight=torch.ones(D),
                k_norm_weight=torch.ones(D), cos_sin=torch.rand(T, D, generator=g),
                cache_loc=torch.tensor([1, 4, 6]), k_pool=torch.zeros(S, nkv, D),
                v_pool=torch.zeros(S, nkv, D), num_heads=nh, eps=1e-6)
    args.update(over)
    return {k: v.to(DEVICE) if isinstance(v, torch.Tensor) else v for k, v in args.items()}


BAD = {
    "qkv rank 3": ("qkv", dict(qkv=torch.zeros(1, 3, 128))),
    "qkv int": ("qkv", dict(qkv=torch.zeros(3, 128, dtype=torch.int64))),
    "qkv columns": ("qkv", dict(qkv=torch.zeros(3, 112))),
    "qkv strided": ("qkv", dict(qkv=torch.zeros(128, 3).t())),
    "num_heads 0": ("num_heads", dict(num_heads=0)),
    "q_norm_weight len": ("q_norm_weight", dict(q_norm_weight=torch.ones(8))),
    "k_norm_weight rank": ("k_norm_weight", dict(k_norm_weight=torch.ones(1, 16))),
    "cos_sin fp16": ("cos_sin", dict(cos_sin=torch.zeros(3, 16).half())),
    "cos_sin rows": ("cos_sin", dict(cos_sin=torch.zeros(2, 16))),
    "cache_loc len": ("cache_loc", dict(cache_loc=torch.tensor([1, 2]))),
    "cache_loc float": ("cache_loc", dict(cache_loc=torch.zeros(3))),
    "k_pool rank": ("k_pool", dict(k_pool=torch.zeros(8, 32))),
    "v_pool shape": ("v_pool", dict(v_pool=torch.zeros(9, 2, 16))),
    "eps negative": ("eps", dict(eps=-1.0)),
}


@pytest.mark.parametrize("what", sorted(BAD))
def test_bad_input_raises_value_error_naming_the_argument(what):
    name, over = BAD[what]
    with pytest.raises(ValueError, match=name):
        qk_norm_rope_write(**_valid(**over))
    qk_norm_rope_write(**_valid())
