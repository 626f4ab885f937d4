"""decoder_layer's projections through ops.gemv (the Triton GEMV) against its matmuls, the
row limit, and Target.forward under the triton_gemv option (CPU: the Triton kernel under
TRITON_INTERPRET=1, with ops told to use it)."""

from __future__ import annotations

import pytest
import torch

import kernels
from common.engine_options import EngineOptions
from reference import ops
from reference.model import decoder_layer
from tests.reference.test_fused_qk import INTER, NH, NKV, D, H, _inputs
from workbench.numerics import assert_close


def _run(seed: int, gemv: bool, bs: int = 2, t: int = 3, fused: bool = False,
         gate_up: bool = False):
    x, w, cos_sin, attn, loc, pools = _inputs(seed, bs, t)
    k_pool, v_pool = pools[0].clone(), pools[1].clone()
    out = decoder_layer(x, w, cos_sin, attn, loc, k_pool, v_pool, NH, 1e-6, fused_qk=fused,
                        triton_gemv=gemv, gemv_gate_up=gate_up)
    return out, k_pool, v_pool


def _spy(monkeypatch) -> list[tuple[int, ...]]:
    """Route ops to Triton on the CPU and record the weight shape of each kernels.gemv.

    Attention stays on its oracle: this is about the projections (tests/kernels covers it).
    """
    if not kernels.triton_available(torch.zeros(1)):
        pytest.skip("needs TRITON_INTERPRET=1 or CUDA")
    calls = []
    real = kernels.gemv

    def spy(x, w, **kw):
        calls.append(tuple(w.shape))
        return real(x, w, **kw)

    monkeypatch.setattr(ops, "_use_triton", lambda t: True)
    monkeypatch.setattr(kernels, "gemv", spy)

    def attention_oracle(*args, unsplit_max_width=0, fused_merge=False, pdl=False,
                         tall_tree=False, **kw):  # the kernel's launch switches: none here
        return kernels.paged_attention_ref(*args, **kw)

    monkeypatch.setattr(kernels, "paged_attention", attention_oracle)
    return calls


def test_ops_gemv_on_the_cpu_is_the_layers_matmul():
    g = torch.Generator().manual_seed(0)
    x, w = torch.randn(2, 3, 40, generator=g), torch.randn(24, 40, generator=g)
    assert torch.equal(ops.gemv(x, w), x @ w.t())
    for got, want in zip(_run(0, True), _run(0, False)):
        assert torch.equal(got, want)


@pytest.mark.parametrize("gate_up", [False, True])
@pytest.mark.parametrize("seed,bs,t", [(0, 1, 1), (1, 2, 3), (2, 1, 10)])
def test_triton_gemv_inside_decoder_layer(seed, bs, t, gate_up, monkeypatch):
    """The kernel (interpreter) in the layer, fp32: within the fp32 reduction table."""
    calls = _spy(monkeypatch)
    got = _run(seed, True, bs, t, gate_up=gate_up)
    monkeypatch.undo()
    want = [((NH + 2 * NKV) * D, H), (H, NH * D), (H, INTER)]
    if gate_up:
        want.insert(2, (2 * INTER, H))
    assert calls == want
    for name, g, w in zip(("out", "k_pool", "v_pool"), got, _run(seed, False, bs, t)):
        assert_close(g, w, kind="reduction", name=name)


def test_with_fused_qk_too(monkeypatch):
    calls = _spy(monkeypatch)
    got = _run(3, True, fused=True)
    monkeypatch.undo()
    assert len(calls) == 3
    for name, g, w in zip(("out", "k_pool", "v_pool"), got, _run(3, False, fused=True)):
        assert_close(g, w, kind="reduction", name=name)


def test_more_than_max_rows_stays_on_the_matmul(monkeypatch):
    """bs * T = 18 > ops.GEMV_MAX_ROWS: no kernel call, bit-equal to the switch off."""
    calls = _spy(monkeypatch)
    got = _run(4, True, bs=2, t=9)
    monkeypatch.undo()
    assert calls == []
    for g, w in zip(got, _run(4, False, bs=2, t=9)):
        assert torch.equal(g, w)


@pytest.mark.slow
@pytest.mark.timeout(600)  # compiles kernels and graphs: about 2 minutes on a cold GPU
@pytest.mark.gpu
def test_cuda_engine_with_triton_gemv_is_lossless(tiny_dir, drafter_dir, monkeypatch):
    """fp32 tiny target on CUDA (graphs): the switch on gives plain decode's tokens, and
    DFlash on top of it stays lossless; the kernel ran (tuned before capture)."""
    from reference.generate import generate
    from reference.loaders import load_target
    from reference.methods.dflash import load_dflash

    g = torch.Generator().manual_seed(0)
    prompts = [torch.randint(0, 48, (n,), generator=g).tolist() for n in (5, 9, 3)]
    off = generate(load_target(tiny_dir, device="cuda", options=EngineOptions(triton_gemv=False)),
                   prompts, max_new_tokens=24)
    calls = []
    real = kernels.gemv
    monkeypatch.setattr(kernels, "gemv", lambda x, w, **kw: calls.append(1) or real(x, w, **kw))
    gpu = load_target(tiny_dir, device="cuda", options=EngineOptions(triton_gemv=True))
    on = generate(gpu, prompts, max_new_tokens=24)
    assert calls and on.tokens == off.tokens
    spec = generate(gpu, prompts, proposer=load_dflash(drafter_dir, gpu, block_size=4),
                    max_new_tokens=24)
    assert spec.tokens == on.tokens



@pytest.mark.slow
@pytest.mark.timeout(600)  # compiles kernels and graphs: about 2 minutes on a cold GPU
@pytest.mark.gpu
def test_cuda_engine_with_deferred_residual_and_draft_kernels_is_lossless(tiny_dir,
                                                                          drafter_dir):
    """fp32 tiny target on CUDA (graphs): deferred_residual and draft_kernels (the defaults)
    give the greedy tokens of both off, plain and DFlash."""
    from reference.generate import generate
    from reference.loaders import load_target
    from reference.methods.dflash import load_dflash

    g = torch.Generator().manual_seed(1)
    prompts = [torch.randint(0, 48, (n,), generator=g).tolist() for n in (6, 2, 11)]
    off = EngineOptions(deferred_residual=False, draft_kernels=False)
    base = load_target(tiny_dir, device="cuda", options=off)
    want = generate(base, prompts, max_new_tokens=24).tokens
    on = load_target(tiny_dir, device="cuda", options=EngineOptions())
    assert generate(on, prompts, max_new_tokens=24).tokens == want
    spec = generate(on, prompts, proposer=load_dflash(drafter_dir, on, block_size=4),
                    max_new_tokens=24)
    assert spec.tokens == want


@pytest.mark.slow
@pytest.mark.timeout(600)  # compiles kernels and graphs: about 2 minutes on a cold GPU
@pytest.mark.gpu
def test_cuda_engine_with_pdl_gives_the_same_tokens(tiny_dir, drafter_dir):
    """EngineOptions.pdl launches the same kernels, only earlier: bf16 tiny target on CUDA
    (graphs), the greedy tokens of plain and DFlash decoding equal those without it."""
    from reference.generate import generate
    from reference.loaders import load_target
    from reference.methods.dflash import load_dflash

    g = torch.Generator().manual_seed(2)
    prompts = [torch.randint(0, 48, (n,), generator=g).tolist() for n in (5, 9, 3)]
    outs = []
    for pdl in (False, True):
        target = load_target(tiny_dir, device="cuda", dtype=torch.bfloat16,
                             options=EngineOptions(pdl=pdl))
        plain = generate(target, prompts, max_new_tokens=24).tokens
        spec = generate(target, prompts, proposer=load_dflash(drafter_dir, target,
                                                              block_size=4),
                        max_new_tokens=24).tokens
        outs.append((plain, spec))
    assert outs[0] == outs[1]
