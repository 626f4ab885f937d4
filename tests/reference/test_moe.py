"""Qwen3-MoE targets: the engine's paged forward equals transformers' Qwen3MoeForCausalLM
(fp32, CPU) on folders written by its own `save_pretrained`, greedy decoding matches its
`generate` token for token, and every registered method stays lossless on an MoE target."""

from __future__ import annotations

import json

import pytest
import torch
from safetensors.torch import save_file
from transformers import Qwen3MoeConfig, Qwen3MoeForCausalLM

from reference.config import ConfigError, DFlashConfig
from reference.generate import generate
from reference.loaders import load_target, preset_config, random_state_dict, random_target
from reference.methods import BuildContext, MethodSpec, build, names
from reference.methods.dflash_drafter import random_dflash_state_dict
from reference.methods.variants import drafter_spec
from toy.draft_model import TrainableDrafter, drafter_config_dict

pytestmark = pytest.mark.usefixtures("one_thread")

MOE = dict(vocab_size=64, hidden_size=32, intermediate_size=48, moe_intermediate_size=16,
           num_experts=6, num_experts_per_tok=2, num_hidden_layers=3, num_attention_heads=4,
           num_key_value_heads=2, head_dim=8, rope_theta=10000.0, max_position_embeddings=512)
# sparse layers: 0 and 2 (layer 1 dense by mlp_only_layers); 1 only (every 2nd layer)
LAYOUTS = {"mlp_only": dict(mlp_only_layers=[1], norm_topk_prob=True),
           "sparse_step": dict(decoder_sparse_step=2, norm_topk_prob=False)}
PROMPTS = [[3, 17, 42, 5, 9], [60, 1], [7, 7, 7, 8, 30, 31, 2]]
NEW = 14


def write_moe(path, **overrides) -> Qwen3MoeForCausalLM:
    """Save a random fp32 Qwen3MoeForCausalLM (router std 1: routing far from ties)."""
    torch.manual_seed(0)
    model = Qwen3MoeForCausalLM(Qwen3MoeConfig(**{**MOE, **overrides}, initializer_range=0.2))
    with torch.no_grad():
        for layer in model.model.layers:
            if hasattr(layer.mlp, "gate"):
                layer.mlp.gate.weight.normal_(0.0, 1.0)
    model.eval().save_pretrained(path)
    return model


@pytest.fixture(scope="module", params=sorted(LAYOUTS))
def pair(request, tmp_path_factory):
    path = tmp_path_factory.mktemp(request.param)
    model = write_moe(path, **LAYOUTS[request.param])
    return load_target(path), model, path


def hf_greedy(model, prompt: list[int], new: int) -> list[int]:
    ids = torch.tensor([prompt])
    with torch.no_grad():
        out = model.generate(ids, max_new_tokens=new, min_new_tokens=new, do_sample=False,
                             pad_token_id=0, eos_token_id=None)
    return out[0, len(prompt):].tolist()


def test_layer_pattern_follows_the_config(pair):
    target, model, _ = pair
    routed = [layer.router is not None for layer in target.layers]
    want = [type(layer.mlp).__name__ == "Qwen3MoeSparseMoeBlock" for layer in model.model.layers]
    assert routed == want and any(want) and not all(want)
    for layer in target.layers:
        if layer.router is not None:
            assert layer.w_gate_up.shape == (6, 32, 32) and layer.w_down.shape == (6, 32, 16)


def test_greedy_decoding_equals_transformers_generate(pair):
    target, model, _ = pair
    out = generate(target, PROMPTS, max_new_tokens=NEW)
    assert out.tokens == [hf_greedy(model, p, NEW) for p in PROMPTS]
    assert len(set(map(tuple, out.tokens))) == len(PROMPTS)  # not one degenerate stream


def test_transformers_stacked_expert_names_load_the_same(pair, tmp_path):
    """transformers' in-memory names (mlp.experts.gate_up_proj, .down_proj) load as the
    per-expert names of its saved files do."""
    target, model, path = pair
    (tmp_path / "config.json").write_text((path / "config.json").read_text())
    save_file({k: v.contiguous() for k, v in model.state_dict().items()},
              str(tmp_path / "model.safetensors"))
    other = load_target(tmp_path)
    for a, b in zip(target.layers, other.layers):
        assert all(torch.equal(x, y) for x, y in zip(a.tensors(), b.tensors()))
        assert (a.top_k, a.norm_topk) == (b.top_k, b.norm_topk)


def test_a_missing_expert_weight_is_named(pair, tmp_path):
    _, model, path = pair
    cfg = json.loads((path / "config.json").read_text())
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    sparse = next(i for i, layer in enumerate(model.model.layers) if hasattr(layer.mlp, "gate"))
    name = f"model.layers.{sparse}.mlp.experts.3.up_proj.weight"
    from safetensors.torch import load_file
    weights = load_file(str(path / "model.safetensors"))
    del weights[name]
    save_file(weights, str(tmp_path / "model.safetensors"))
    with pytest.raises(ConfigError, match=name.replace(".", r"\.")):
        load_target(tmp_path)


def test_config_errors_name_the_moe_field(tmp_path):
    cfg = {**MOE, "architectures": ["Qwen3MoeForCausalLM"], "model_type": "qwen3_moe",
           "num_experts_per_tok": 7}
    tmp_path.joinpath("config.json").write_text(json.dumps(cfg))
    with pytest.raises(ConfigError, match="num_experts_per_tok"):
        load_target(tmp_path)


def test_random_preset_runs_in_transformers_with_the_same_logits():
    """random:tiny-moe's weights, under transformers' names, give transformers the logits
    the engine computes."""
    from tests.reference.test_model import _extend, _pool

    cfg = preset_config("tiny-moe")
    state = random_state_dict(cfg, dtype=torch.float32)
    target = random_target("tiny-moe", dtype=torch.float32, state=state)
    from reference.loaders import PRESETS
    model = Qwen3MoeForCausalLM(Qwen3MoeConfig(**PRESETS["tiny-moe"])).eval()
    model.load_state_dict(state)
    seq = [5, 9, 200, 13, 13, 77]
    pool = _pool(target, 1)
    row = pool.admit(16)
    with torch.no_grad():
        got = _extend(target, pool, [row], [0], [seq])[0]
        want = model(torch.tensor([seq])).logits[0]
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-4)


def _drafters(target, root) -> dict[str, MethodSpec]:
    """A spec of every registered method on `target`, drafters with random weights."""
    cfg = target.config
    specs = {"none": MethodSpec.of("none"),
             "oracle": MethodSpec.of("oracle", tau=3.0, block_size=6, seed=0),
             "isd": MethodSpec.of("isd", stride=3, mask_token_id=63),
             "linearspec": MethodSpec.of("linearspec", block_size=4, mask_token_id=63),
             "prompt_lookup": MethodSpec.of("prompt_lookup", block_size=4)}
    for variant, layers, ids in (("dflash", 2, [0, 2]), ("fusion", 1, [0, 2]),
                                 ("ar", 1, [0, 2]), ("no_features", 1, [0]),
                                 ("eagle", 1, [0, 1, 2])):
        raw = drafter_config_dict(cfg, num_layers=layers, block_size=6, mask_token_id=63,
                                  target_layer_ids=ids, variant=variant)
        TrainableDrafter(raw, target, seed=3).save(root / variant, dtype=torch.float32)
        spec = drafter_spec(root / variant)
        specs[spec.name] = spec
    raw = {**drafter_config_dict(cfg, num_layers=1, block_size=6, mask_token_id=63,
                                 target_layer_ids=[0, 2]), "dspark_config": {"markov_rank": 4}}
    dcfg = DFlashConfig.from_dict(raw, cfg)
    g = torch.Generator().manual_seed(5)
    weights = {**random_dflash_state_dict(dcfg, dtype=torch.float32),
               "markov_head.embed.weight": torch.randn(64, 4, generator=g),
               "markov_head.proj.weight": torch.randn(64, 4, generator=g),
               "confidence_head.weight": torch.randn(1, 36, generator=g),
               "confidence_head.bias": torch.zeros(1)}
    (root / "dspark").mkdir()
    (root / "dspark" / "config.json").write_text(json.dumps(raw))
    save_file(weights, str(root / "dspark" / "model.safetensors"))
    specs["dspark"] = MethodSpec.of("dspark", path=str(root / "dspark"))
    return specs


def test_every_registered_method_and_the_tree_are_lossless(pair, tmp_path):
    target = pair[0]
    specs = _drafters(target, tmp_path)
    assert sorted(specs) == names()
    specs["dflash tree"] = specs["dflash"].with_options(tree_budget=7)
    plain = generate(target, PROMPTS, max_new_tokens=NEW).tokens
    for label, spec in specs.items():
        proposer = build(spec, target, BuildContext(PROMPTS, NEW, plain))
        out = generate(target, PROMPTS, proposer=proposer, max_new_tokens=NEW)
        assert out.tokens == plain, label


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_cuda_graph_engine_on_moe_is_lossless(pair, tmp_path, dtype):
    """CUDA graphs and the fused MoE kernel (bf16: the compiled layer too, as the bench runs
    it): fp32 greedy equals the CPU's; in both dtypes DFlash (B = 1, 6), its tree and the
    oracle equal plain greedy."""
    from reference import ops
    from reference.methods.dflash import load_dflash

    cpu, _, path = pair
    gpu = load_target(path, device="cuda", dtype=dtype)
    if dtype == torch.bfloat16:
        gpu.enable_compile()
    assert ops._use_triton(gpu.embed)
    plain = generate(gpu, PROMPTS, max_new_tokens=NEW)
    if dtype == torch.float32:
        assert plain.tokens == generate(cpu, PROMPTS, max_new_tokens=NEW).tokens
    spec = _drafters(cpu, tmp_path)["dflash"]
    for block in (1, 6):
        dflash = load_dflash(dict(spec.options)["path"], gpu, block_size=block)
        assert generate(gpu, PROMPTS, proposer=dflash, max_new_tokens=NEW).tokens == plain.tokens
    for s in (spec.with_options(tree_budget=7), MethodSpec.of("oracle", tau=3.0, block_size=6)):
        proposer = build(s, gpu, BuildContext(PROMPTS, NEW, plain.tokens))
        assert generate(gpu, PROMPTS, proposer=proposer, max_new_tokens=NEW).tokens == plain.tokens
