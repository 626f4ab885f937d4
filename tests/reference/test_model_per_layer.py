"""The engine against transformers' own Qwen3 on a checkpoint whose every layer differs where
a random init leaves them equal: RMSNorm weights drawn per layer (input, post-attention, q
and k norms, the final norm) and a RoPE theta no default has. A weight read from the wrong
layer, or a default theta, that a kernel and its oracle share agrees with itself in a
kernel-vs-oracle test; here it changes the logits."""

from __future__ import annotations

import pytest
import torch
from transformers import Qwen3Config, Qwen3ForCausalLM

from reference.generate import generate
from reference.loaders import load_target
from reference.methods import build
from reference.methods.dflash import load_dflash
from tests.reference.conftest import TINY, drafter_config, write_drafter
from tests.reference.test_model import _extend, _pool
from workbench.numerics import assert_close

THETA = 31_337.0
NORMS = ("input_layernorm", "post_attention_layernorm", "self_attn.q_norm", "self_attn.k_norm")


@pytest.fixture(scope="module")
def distinct(tmp_path_factory):
    """(checkpoint dir, the HF model): TINY with THETA and per-layer random norm weights."""
    torch.manual_seed(5)
    model = Qwen3ForCausalLM(Qwen3Config(**{**TINY, "rope_theta": THETA})).eval()
    g = torch.Generator().manual_seed(6)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("norm.weight"):
                p.copy_(1.0 + 0.5 * torch.randn(p.shape, generator=g))
    path = tmp_path_factory.mktemp("distinct")
    model.save_pretrained(path)
    return path, model


def test_the_checkpoint_differs_per_layer(distinct):
    _, model = distinct
    layers = model.model.layers
    for norm in NORMS:
        w = [layers[i].get_submodule(norm).weight for i in range(len(layers))]
        assert all(not torch.allclose(w[0], x) for x in w[1:]), norm
    assert model.config.rope_parameters["rope_theta"] == THETA


def _hf_greedy(model, prompt: list[int], n: int) -> list[int]:
    ids = list(prompt)
    with torch.no_grad():
        for _ in range(n):
            ids.append(int(model(torch.tensor([ids])).logits[0, -1].argmax()))
    return ids[len(prompt):]


def test_prefill_logits_equal_transformers(distinct):
    path, model = distinct
    target = load_target(path)
    g = torch.Generator().manual_seed(1)
    prompt = torch.randint(0, TINY["vocab_size"], (1, 20), generator=g)
    pool = _pool(target, 1)
    row = pool.admit(40)
    with torch.no_grad():
        got = _extend(target, pool, [row], [0], [prompt[0].tolist()])[0]
        want = model(prompt).logits[0]
    assert_close(got, want, kind="reduction", name="prefill logits")


@pytest.mark.parametrize("method", ["plain", "dflash", "tree"])
def test_greedy_decoding_equals_transformers(distinct, tmp_path, method):
    """Plain decoding, DFlash and DFlash trees (a drafter with the same theta) give
    transformers' greedy tokens, past the 2B look-ahead of several rounds."""
    path, model = distinct
    target = load_target(path)
    g = torch.Generator().manual_seed(2)
    prompts = [torch.randint(0, TINY["vocab_size"], (n,), generator=g).tolist() for n in (9, 4)]
    proposer = None
    if method != "plain":
        write_drafter(tmp_path / "d", drafter_config({**TINY, "rope_theta": THETA}))
        proposer = load_dflash(tmp_path / "d", target)
        if method == "tree":
            proposer = build(f"dflash:path={tmp_path / 'd'},tree_budget=9,tree_top_k=2",
                             target)
    out = generate(target, prompts, proposer=proposer, max_new_tokens=14)
    assert out.tokens == [_hf_greedy(model, p, 14) for p in prompts]
