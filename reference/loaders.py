"""Checkpoint loading: HF Qwen3ForCausalLM directories, z-lab DFlash drafters, random weights.

`load_target(path)` reads `config.json` plus `model.safetensors` or a sharded
`model.safetensors.index.json`; `load_dflash(path, target)` reads the z-lab drafter format
(docs/sglang.md 1.1 and 1.7). `random_state_dict(config)` makes HF-named
random weights (a `random:<preset>` checkpoint) that both this engine and transformers load.
"""

from __future__ import annotations

import json
from pathlib import Path

import torch
from safetensors import SafetensorError
from safetensors.torch import load_file

from common.engine_options import EngineOptions
from reference.config import ConfigError, DFlashConfig, ModelConfig, check_target_architecture
from reference.model import LayerWeights, Target, rope_cache

QWEN3_8B = dict(hidden_size=4096, num_hidden_layers=36, num_attention_heads=32,
                num_key_value_heads=8, head_dim=128, intermediate_size=12288, vocab_size=151936,
                rms_norm_eps=1e-6, rope_theta=1e6, max_position_embeddings=40960,
                tie_word_embeddings=False)
QWEN3_4B = {**QWEN3_8B, "hidden_size": 2560, "intermediate_size": 9728,
            "tie_word_embeddings": True}
# Llama-3.1-8B shapes on the Qwen3 layer (the engine's only architecture; its q/k norms are
# extra work of ~1% of a layer), for timing only.
LLAMA_3_1_8B = dict(hidden_size=4096, num_hidden_layers=32, num_attention_heads=32,
                    num_key_value_heads=8, head_dim=128, intermediate_size=14336,
                    vocab_size=128256, rms_norm_eps=1e-5, rope_theta=5e5,
                    max_position_embeddings=131072, tie_word_embeddings=False)
TOY = dict(hidden_size=256, num_hidden_layers=6, num_attention_heads=4, num_key_value_heads=2,
           head_dim=64, intermediate_size=768, vocab_size=4096, rms_norm_eps=1e-6,
           rope_theta=1e4, max_position_embeddings=4096, tie_word_embeddings=False)
PRESETS = {
    "qwen3-8b": QWEN3_8B,
    "qwen3-4b": QWEN3_4B,
    "llama-3.1-8b": LLAMA_3_1_8B,
    "toy": TOY,
    "tiny": dict(hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
                 num_key_value_heads=2, head_dim=16, intermediate_size=128, vocab_size=256,
                 rms_norm_eps=1e-6, rope_theta=1e4, max_position_embeddings=4096,
                 tie_word_embeddings=False),
}
DFLASH_PRESETS = {  # drafter config.json of random:<preset> drafters
    "qwen3-8b": {**QWEN3_8B, "num_hidden_layers": 5, "block_size": 16, "num_target_layers": 36,
                 "dflash_config": {"mask_token_id": 151669,
                                   "target_layer_ids": [1, 9, 17, 25, 33]}},
    "qwen3-4b": {**QWEN3_4B, "num_hidden_layers": 5, "block_size": 16, "num_target_layers": 36,
                 "dflash_config": {"mask_token_id": 151669,
                                   "target_layer_ids": [1, 9, 17, 25, 33]}},
    # z-lab's LLaMA3.1-8B drafter: B = 10; 5 layers and build_target_layer_ids(32, 5) assumed
    "llama-3.1-8b": {**LLAMA_3_1_8B, "num_hidden_layers": 5, "block_size": 10,
                     "num_target_layers": 32,
                     "dflash_config": {"mask_token_id": 128002,
                                       "target_layer_ids": [1, 8, 15, 22, 29]}},
    # the toy recipe's drafter: 2 layers, features build_target_layer_ids(6, 3)
    "toy": {**TOY, "num_hidden_layers": 2, "block_size": 16, "num_target_layers": 6,
            "dflash_config": {"mask_token_id": 4095, "target_layer_ids": [1, 2, 3]}},
    "tiny": {**PRESETS["tiny"], "num_hidden_layers": 1, "block_size": 8,
             "num_target_layers": 2, "dflash_config": {"mask_token_id": 255,
                                                       "target_layer_ids": [0, 1]}},
}


def _read_json(path: Path, what: str) -> dict:
    """The JSON object in `path`; FileNotFoundError or ValueError naming the file."""
    if not path.is_file():
        raise FileNotFoundError(f"{what}: {path} not found")
    try:
        out = json.loads(path.read_text())
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise ValueError(f"{what}: {path} is not valid JSON ({e})") from e
    if not isinstance(out, dict):
        raise ValueError(f"{what}: {path} holds a JSON {type(out).__name__}, not an object")
    return out


def _load_safetensors(path: Path) -> dict[str, torch.Tensor]:
    if not path.is_file():
        raise FileNotFoundError(f"weights: {path} not found")
    try:
        return load_file(str(path))
    except SafetensorError as e:  # truncated or corrupt: the library's message omits the file
        raise ValueError(f"weights: {path} is not a readable safetensors file ({e})") from e


def read_safetensors(directory: Path) -> dict[str, torch.Tensor]:
    """All tensors of `model.safetensors`, or of every shard named by the index."""
    index = directory / "model.safetensors.index.json"
    if index.is_file():
        weight_map = _read_json(index, "shard index").get("weight_map")
        if not isinstance(weight_map, dict):
            raise ValueError(f"shard index: {index} has no 'weight_map' object")
        out: dict[str, torch.Tensor] = {}
        for name in sorted(set(weight_map.values())):
            out.update(_load_safetensors(directory / name))
        return out
    single = directory / "model.safetensors"
    if not single.is_file():
        raise FileNotFoundError(f"{directory}: neither model.safetensors nor "
                                "model.safetensors.index.json found")
    return _load_safetensors(single)


def _take(weights: dict, name: str, shape: tuple[int, ...], where: str, device, dtype):
    if name not in weights:
        raise ConfigError(f"{where}: missing weight '{name}'")
    t = weights[name]
    if tuple(t.shape) != shape:
        raise ConfigError(f"{where}: weight '{name}' has shape {tuple(t.shape)}, expected {shape}")
    return t.to(device=device, dtype=dtype)


def _layers(cfg: ModelConfig, weights: dict, prefix: str, where: str, device, dtype):
    hdim, d = cfg.hidden_size, cfg.head_dim
    q_rows, kv_rows = cfg.num_heads * d, cfg.num_kv_heads * d
    out = []
    for i in range(cfg.num_layers):
        p = f"{prefix}layers.{i}."

        def take(name, shape, p=p):
            return _take(weights, p + name, shape, where, device, dtype)

        out.append(LayerWeights(
            input_norm=take("input_layernorm.weight", (hdim,)),
            wqkv=torch.cat([take("self_attn.q_proj.weight", (q_rows, hdim)),
                            take("self_attn.k_proj.weight", (kv_rows, hdim)),
                            take("self_attn.v_proj.weight", (kv_rows, hdim))]),
            q_norm=take("self_attn.q_norm.weight", (d,)),
            k_norm=take("self_attn.k_norm.weight", (d,)),
            wo=take("self_attn.o_proj.weight", (hdim, q_rows)),
            post_norm=take("post_attention_layernorm.weight", (hdim,)),
            w_gate_up=torch.cat([take("mlp.gate_proj.weight", (cfg.intermediate_size, hdim)),
                                 take("mlp.up_proj.weight", (cfg.intermediate_size, hdim))]),
            w_down=take("mlp.down_proj.weight", (hdim, cfg.intermediate_size)),
        ))
    return out


def target_from_state_dict(cfg: ModelConfig, weights: dict, *, device=None, dtype=None,
                           where: str = "target", options: EngineOptions | None = None
                           ) -> Target:
    """Build a Target from HF Qwen3ForCausalLM tensor names (`model.*`, `lm_head.weight`),
    running under `options` (None: the EngineOptions defaults)."""
    if options is not None and not isinstance(options, EngineOptions):
        raise ValueError(f"options must be an EngineOptions, got {type(options).__name__}")
    dtype = dtype or weights["model.embed_tokens.weight"].dtype
    device = torch.device(device or "cpu")
    vh = (cfg.vocab_size, cfg.hidden_size)
    embed = _take(weights, "model.embed_tokens.weight", vh, where, device, dtype)
    tied = cfg.tie_word_embeddings or "lm_head.weight" not in weights
    head = embed if tied else _take(weights, "lm_head.weight", vh, where, device, dtype)
    return Target(config=cfg, embed=embed,
                  layers=_layers(cfg, weights, "model.", where, device, dtype),
                  norm=_take(weights, "model.norm.weight", (cfg.hidden_size,), where, device,
                             dtype),
                  head=head,
                  cos_sin=rope_cache(cfg.head_dim, cfg.rope_theta, cfg.max_position, device),
                  options=options or EngineOptions())


def target_config(path) -> ModelConfig:
    """The ModelConfig of the HF directory `path`, read without its weights. Raises
    FileNotFoundError (the directory or its config.json missing), ValueError naming
    config.json when it is not JSON, and ConfigError when it is not a Qwen3ForCausalLM or a
    field is missing or wrong."""
    directory = Path(path)
    if not directory.is_dir():
        raise FileNotFoundError(f"target: {directory} " + ("is not a directory (an HF model "
                                "folder with config.json)" if directory.exists() else "not found"))
    where = directory / "config.json"
    raw = _read_json(where, "target config")
    check_target_architecture(raw, str(where))
    cfg = ModelConfig.from_dict(raw, str(where))
    if cfg.vocab_size <= 0:
        raise ConfigError(f"{where}: missing field 'vocab_size'")
    return cfg


def load_target(path, *, device=None, dtype=None,
                options: EngineOptions | None = None) -> Target:
    """Load an HF-format Qwen3ForCausalLM directory (config.json + safetensors); the target
    runs under `options` (None: the EngineOptions defaults). Errors name the file
    (`target_config`; ValueError for a truncated or corrupt safetensors file)."""
    return target_from_state_dict(target_config(path), read_safetensors(Path(path)),
                                  device=device, dtype=dtype, where=str(path), options=options)


def _random_layers(cfg: ModelConfig, prefix: str, rand, ones) -> dict[str, torch.Tensor]:
    h, d, inter = cfg.hidden_size, cfg.head_dim, cfg.intermediate_size
    out = {}
    for i in range(cfg.num_layers):
        p = f"{prefix}layers.{i}."
        out.update({
            p + "self_attn.q_proj.weight": rand(cfg.num_heads * d, h),
            p + "self_attn.k_proj.weight": rand(cfg.num_kv_heads * d, h),
            p + "self_attn.v_proj.weight": rand(cfg.num_kv_heads * d, h),
            p + "self_attn.o_proj.weight": rand(h, cfg.num_heads * d, std=0.002),
            p + "self_attn.q_norm.weight": ones(d),
            p + "self_attn.k_norm.weight": ones(d),
            p + "mlp.gate_proj.weight": rand(inter, h),
            p + "mlp.up_proj.weight": rand(inter, h),
            p + "mlp.down_proj.weight": rand(h, inter, std=0.002),
            p + "input_layernorm.weight": ones(h),
            p + "post_attention_layernorm.weight": ones(h),
        })
    return out


def _random(device, dtype, seed):
    gen = torch.Generator(device=device or "cpu").manual_seed(seed)

    def rand(*shape, std=0.02):
        x = torch.randn(shape, generator=gen, device=device, dtype=torch.float32)
        return (x * std).to(dtype)

    def ones(n):
        return torch.ones(n, device=device, dtype=dtype)

    return rand, ones


def random_state_dict(cfg: ModelConfig, *, device=None, dtype=torch.bfloat16,
                      seed: int = 0) -> dict[str, torch.Tensor]:
    """HF-named random Qwen3 weights (normal, std 0.02; norms 1).

    A successor rule is planted so that greedy decoding has wide logit margins and stays
    the same under bf16 rounding and batch shapes (the oracle proposer needs the engine to
    reproduce its plain greedy run): the embedding has std 1, the residual writers (o_proj,
    down_proj) std 0.002, and lm_head row v is 0.02 * embedding row v-1, so t predicts t+1.
    """
    rand, ones = _random(device, dtype, seed)
    embed = rand(cfg.vocab_size, cfg.hidden_size, std=1.0)
    return {"model.embed_tokens.weight": embed, "model.norm.weight": ones(cfg.hidden_size),
            "lm_head.weight": embed.roll(1, dims=0) * 0.02,
            **_random_layers(cfg, "model.", rand, ones)}


def random_dflash_state_dict(cfg: DFlashConfig, *, device=None, dtype=torch.bfloat16,
                             seed: int = 1) -> dict[str, torch.Tensor]:
    """z-lab-named random drafter weights (normal, std 0.02; norms 1)."""
    rand, ones = _random(device, dtype, seed)
    h, k = cfg.model.hidden_size, len(cfg.target_layer_ids)
    return {"fc.weight": rand(h, k * h), "hidden_norm.weight": ones(h), "norm.weight": ones(h),
            **_random_layers(cfg.model, "", rand, ones)}


def preset_config(name: str) -> ModelConfig:
    """ModelConfig of a `random:<preset>` checkpoint."""
    if name not in PRESETS:
        raise ValueError(f"unknown preset {name!r}; choose one of {sorted(PRESETS)}")
    return ModelConfig.from_dict(PRESETS[name], f"preset {name}")


def random_target(preset: str, *, device=None, dtype=torch.bfloat16, seed: int = 0,
                  state: dict | None = None, options: EngineOptions | None = None) -> Target:
    """A `random:<preset>` target (weights from `random_state_dict` unless given), running
    under `options` (None: the EngineOptions defaults)."""
    cfg = preset_config(preset)
    state = state if state is not None else random_state_dict(cfg, device=device, dtype=dtype,
                                                               seed=seed)
    return target_from_state_dict(cfg, state, device=device, dtype=dtype, where=preset,
                                  options=options)
