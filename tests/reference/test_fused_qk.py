"""decoder_layer's fused q/k path (ops.qk_norm_rope_write) against its eager sequence, and
Target.forward under the fused_qk option (CPU: the oracle, and the Triton kernel under
TRITON_INTERPRET=1)."""

from __future__ import annotations

import pytest
import torch

import kernels
from common.engine_options import EngineOptions
from kernels.gemv.tuning import GemvTuning
from reference import model, ops
from reference.config import ModelConfig
from reference.model import AttentionMeta, LayerWeights, decoder_layer, rope_cache
from workbench.numerics import assert_close

H, NH, NKV, D, INTER, S = 32, 4, 2, 16, 48, 40


def _layer(g: torch.Generator) -> LayerWeights:
    def r(*shape, scale=0.2):
        return torch.randn(*shape, generator=g) * scale
    return LayerWeights(1 + r(H), r((NH + 2 * NKV) * D, H), 1 + r(D), 1 + r(D), r(H, NH * D),
                        1 + r(H), r(2 * INTER, H), r(H, INTER))


def _inputs(seed: int, bs: int = 2, t: int = 3):
    g = torch.Generator().manual_seed(seed)
    prefix = torch.tensor([5, 2])[:bs]
    positions = prefix[:, None] + torch.arange(t)
    table = torch.randperm(S - 1, generator=g)[: bs * 16].view(bs, 16).int() + 1
    cache_loc = table[torch.arange(bs)[:, None], positions].long().reshape(-1)
    attn = AttentionMeta(table, torch.arange(bs), positions, prefix + t, True, None)
    cos_sin = rope_cache(D, 10000.0, 64, "cpu")[positions]
    pools = torch.randn(2, S, NKV, D, generator=g)
    return torch.randn(bs, t, H, generator=g), _layer(g), cos_sin, attn, cache_loc, pools


def _run(seed: int, fused: bool):
    x, w, cos_sin, attn, loc, pools = _inputs(seed)
    k_pool, v_pool = pools[0].clone(), pools[1].clone()
    out = decoder_layer(x, w, cos_sin, attn, loc, k_pool, v_pool, NH, 1e-6, fused_qk=fused)
    return out, k_pool, v_pool


@pytest.mark.parametrize("seed", [0, 1])
def test_oracle_is_decoder_layers_own_sequence(seed):
    """On the CPU the fused branch runs the oracle: equal to the eager branch, bit for bit."""
    for got, want in zip(_run(seed, True), _run(seed, False)):
        assert torch.equal(got, want)


@pytest.mark.parametrize("seed", [0, 1])
def test_triton_kernel_inside_decoder_layer(seed, monkeypatch):
    """The Triton kernel (interpreter) in the layer, fp32: within the fp32 reduction table."""
    if not kernels.triton_available(torch.zeros(1)):
        pytest.skip("needs TRITON_INTERPRET=1 or CUDA")
    calls = []
    real = kernels.qk_norm_rope_write

    def spy(*a, **kw):
        calls.append(1)
        return real(*a, **kw)

    monkeypatch.setattr(ops, "_use_triton", lambda t: True)
    monkeypatch.setattr(kernels, "qk_norm_rope_write", spy)
    got = _run(seed, True)
    monkeypatch.undo()
    assert calls, "the Triton kernel did not run"
    for name, g, w in zip(("out", "k_pool", "v_pool"), got, _run(seed, False)):
        assert_close(g, w, kind="reduction", name=name)


@pytest.mark.parametrize("switch, position", [("fused_qk", 10), ("triton_gemv", 11)])
def test_forward_switches_are_cuda_only(switch, position):
    """A kernel switch on in the target's options: a CPU Target.forward still passes False
    for it to the layer (fused_qk is residual_layer's argument 10, triton_gemv 11), and the
    attention and GEMV-tuning options reach the layer as given."""
    seen = []

    def layer(*args):
        seen.append((args[position], args[4].unsplit_max_width, args[4].fused_merge,
                     args[12], args[13]))
        return args[0], args[0], torch.zeros_like(args[0])

    opts = EngineOptions().replace(**{switch: True}, unsplit_width=96, fused_merge=True,
                                   triton_gemv_gate_up=True, gemv_tune_graph=False)
    g = torch.Generator().manual_seed(0)
    cfg = ModelConfig(vocab_size=8, hidden_size=H, intermediate_size=INTER, num_layers=1,
                      num_heads=NH, num_kv_heads=NKV, head_dim=D, rms_norm_eps=1e-6,
                      rope_theta=1e4, max_position=64, layer_types=("full_attention",))
    target = model.Target(cfg, torch.randn(8, H, generator=g), [_layer(g)], torch.ones(H),
                          torch.randn(8, H, generator=g), rope_cache(D, 1e4, 64, "cpu"),
                          fast_layer=layer, options=opts)
    x, _, _, attn, loc, pools = _inputs(0)
    batch = model.ForwardBatch(attn.positions, loc.view(2, 3), attn.req_rows, attn.kv_lens)
    target.forward(torch.zeros(2, 3, dtype=torch.int64), batch, attn.req_to_token,
                   pools[:1], pools[1:])
    assert seen == [(False, 96, True, True, GemvTuning(True, False, True))]
