"""Model configurations read from HF-style `config.json` dicts, validated field by field.

`ModelConfig` describes one Qwen3 decoder stack (the target, or the layers of a DFlash
drafter), dense or Qwen3-MoE (routed experts on the layers `is_sparse` names);
`DFlashConfig` adds the drafter's fields (docs/sglang.md 1.7).
Every validation error names the offending field, prefixed by the file it came from.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


class ConfigError(ValueError):
    """A missing or inconsistent configuration field; the message names the field."""


def _field(cfg: dict, name: str, kind: type, where: str, default: Any = ...) -> Any:
    if name not in cfg or cfg[name] is None:
        if default is ...:
            raise ConfigError(f"{where}: missing field '{name}'")
        return default
    value = cfg[name]
    if kind is float and isinstance(value, int) and not isinstance(value, bool):
        value = float(value)
    if not isinstance(value, kind) or isinstance(value, bool) and kind is not bool:
        raise ConfigError(f"{where}: field '{name}' must be {kind.__name__}, got {value!r}")
    return value


# The target architectures the engine runs (its one layer: Qwen3's, q/k norms included).
TARGET_ARCHITECTURES = ("Qwen3ForCausalLM", "Qwen3MoeForCausalLM")
TARGET_MODEL_TYPES = ("qwen3", "qwen3_moe")


def check_target_architecture(cfg: dict, where: str = "config.json") -> None:
    """Raise ConfigError when `architectures` or `model_type` names a model other than Qwen3's
    (a config without either, as the presets, passes: its fields are checked one by one)."""
    found = cfg.get("architectures") or []
    found = found if isinstance(found, list) else [found]
    bad = [a for a in found if a not in TARGET_ARCHITECTURES]
    if bad:
        raise ConfigError(f"{where}: architecture {', '.join(map(str, bad))} is not supported "
                          f"(supported: {', '.join(TARGET_ARCHITECTURES)})")
    model_type = cfg.get("model_type", TARGET_MODEL_TYPES[0])
    if model_type not in TARGET_MODEL_TYPES:
        raise ConfigError(f"{where}: model_type {model_type!r} is not supported (supported: "
                          f"{', '.join(TARGET_MODEL_TYPES)})")


def _rope_theta(cfg: dict, where: str) -> float:
    params = cfg.get("rope_parameters") or cfg.get("rope_scaling") or {}
    rope_type = params.get("rope_type", params.get("type", "default"))
    if rope_type != "default":
        raise ConfigError(f"{where}: field 'rope_parameters.rope_type'={rope_type!r} unsupported")
    if "rope_theta" in cfg:
        return _field(cfg, "rope_theta", float, where)
    return _field(params, "rope_theta", float, f"{where} rope_parameters", 10000.0)


def _moe_fields(cfg: dict, where: str) -> dict:
    """The Qwen3-MoE fields of `cfg` ({} for a dense config: no num_experts, or 0).
    transformers 5 writes the expert count as `num_local_experts`."""
    name = "num_experts" if cfg.get("num_experts") is not None else "num_local_experts"
    experts = _field(cfg, name, int, where, 0)
    if not experts:
        return {}
    only = cfg.get("mlp_only_layers") or []
    if not isinstance(only, list) or not all(isinstance(i, int) for i in only):
        raise ConfigError(f"{where}: field 'mlp_only_layers' must be a list of ints")
    return dict(num_experts=experts,
                num_experts_per_tok=_field(cfg, "num_experts_per_tok", int, where),
                moe_intermediate_size=_field(cfg, "moe_intermediate_size", int, where),
                norm_topk_prob=_field(cfg, "norm_topk_prob", bool, where, False),
                decoder_sparse_step=_field(cfg, "decoder_sparse_step", int, where, 1),
                mlp_only_layers=tuple(only))


@dataclass(frozen=True)
class ModelConfig:
    """One Qwen3 decoder stack: H hidden, L layers, nh query heads, nkv KV heads of dim D.

    Qwen3-MoE (num_experts E > 0): layer i routes each token to num_experts_per_tok experts
    of width moe_intermediate_size when `is_sparse(i)`, else runs the dense MLP of width
    intermediate_size; norm_topk_prob renormalises the k routing weights to sum to 1.
    """

    hidden_size: int
    num_layers: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    intermediate_size: int
    vocab_size: int
    rms_norm_eps: float
    rope_theta: float
    max_position: int
    tie_word_embeddings: bool = False
    sliding_window: int | None = None
    layer_types: tuple[str, ...] = ()
    num_experts: int = 0
    num_experts_per_tok: int = 0
    moe_intermediate_size: int = 0
    norm_topk_prob: bool = False
    decoder_sparse_step: int = 1
    mlp_only_layers: tuple[int, ...] = ()

    @classmethod
    def from_dict(cls, cfg: dict, where: str = "config.json") -> ModelConfig:
        """Read and validate Qwen3 fields; raise ConfigError naming the first bad field."""
        if cfg.get("hidden_act", "silu") != "silu":
            raise ConfigError(f"{where}: field 'hidden_act' must be 'silu'")
        if cfg.get("attention_bias", False):
            raise ConfigError(f"{where}: field 'attention_bias' must be false")
        hidden = _field(cfg, "hidden_size", int, where)
        heads = _field(cfg, "num_attention_heads", int, where)
        kv_heads = _field(cfg, "num_key_value_heads", int, where, heads)
        layers = _field(cfg, "num_hidden_layers", int, where)
        layer_types = tuple(cfg.get("layer_types") or ("full_attention",) * layers)
        window = _field(cfg, "sliding_window", int, where, None)
        if not cfg.get("use_sliding_window", True) and "sliding_window" in cfg:
            window = None
        out = cls(
            hidden_size=hidden,
            num_layers=layers,
            num_heads=heads,
            num_kv_heads=kv_heads,
            head_dim=_field(cfg, "head_dim", int, where, hidden // max(heads, 1)),
            intermediate_size=_field(cfg, "intermediate_size", int, where),
            vocab_size=_field(cfg, "vocab_size", int, where, 0),
            rms_norm_eps=_field(cfg, "rms_norm_eps", float, where, 1e-6),
            rope_theta=_rope_theta(cfg, where),
            max_position=_field(cfg, "max_position_embeddings", int, where, 32768),
            tie_word_embeddings=_field(cfg, "tie_word_embeddings", bool, where, False),
            sliding_window=window,
            layer_types=layer_types,
            **_moe_fields(cfg, where),
        )
        out.validate(where)
        return out

    def validate(self, where: str = "config") -> None:
        for name in ("hidden_size", "num_layers", "num_heads", "num_kv_heads", "head_dim",
                     "intermediate_size"):
            if getattr(self, name) <= 0:
                raise ConfigError(f"{where}: field '{name}' must be positive")
        if self.num_heads % self.num_kv_heads:
            raise ConfigError(f"{where}: field 'num_key_value_heads'={self.num_kv_heads} must "
                              f"divide num_attention_heads={self.num_heads}")
        if self.head_dim % 2:
            raise ConfigError(f"{where}: field 'head_dim' must be even for RoPE")
        if len(self.layer_types) != self.num_layers:
            raise ConfigError(f"{where}: field 'layer_types' has {len(self.layer_types)} "
                              f"entries, expected num_hidden_layers={self.num_layers}")
        for kind in self.layer_types:
            if kind not in ("full_attention", "sliding_attention"):
                raise ConfigError(f"{where}: field 'layer_types' has unknown entry {kind!r}")
            if kind == "sliding_attention" and not self.sliding_window:
                raise ConfigError(f"{where}: field 'sliding_window' is required by "
                                  "'sliding_attention' layers")

        if self.num_experts:
            for name in ("num_experts_per_tok", "moe_intermediate_size", "decoder_sparse_step"):
                if getattr(self, name) <= 0:
                    raise ConfigError(f"{where}: field '{name}' must be positive")
            if self.num_experts_per_tok > self.num_experts:
                raise ConfigError(f"{where}: field 'num_experts_per_tok'="
                                  f"{self.num_experts_per_tok} exceeds num_experts="
                                  f"{self.num_experts}")

    def is_sparse(self, layer: int) -> bool:
        """Whether `layer` runs routed experts (transformers' Qwen3MoeDecoderLayer rule)."""
        return (self.num_experts > 0 and layer not in self.mlp_only_layers
                and (layer + 1) % self.decoder_sparse_step == 0)

    def window(self, layer: int) -> int | None:
        """Sliding window (keys counted with the query, as HF) of `layer`, or None."""
        return self.sliding_window if self.layer_types[layer] == "sliding_attention" else None


@dataclass(frozen=True)
class DFlashConfig:
    """A DFlash drafter: its decoder stack plus block size, mask id and captured layers."""

    model: ModelConfig
    block_size: int
    mask_token_id: int
    target_layer_ids: tuple[int, ...]

    @classmethod
    def from_dict(cls, cfg: dict, target: ModelConfig, block_size: int | None = None,
                  where: str = "drafter config.json") -> DFlashConfig:
        """Read the z-lab format and check it against the target; errors name the field.
        The drafter shares the target's embedding and LM head, so a `vocab_size` it states
        must equal the target's."""
        stated = cfg.get("vocab_size")
        if stated is not None and stated != target.vocab_size:
            raise ConfigError(f"{where}: field 'vocab_size'={stated} differs from the "
                              f"target's vocab_size={target.vocab_size} (the drafter shares "
                              "the target's embedding and LM head)")
        model = ModelConfig.from_dict({**cfg, "vocab_size": target.vocab_size}, where)
        dflash = cfg.get("dflash_config")
        if not isinstance(dflash, dict):
            raise ConfigError(f"{where}: missing field 'dflash_config'")
        if model.hidden_size != target.hidden_size:
            raise ConfigError(f"{where}: field 'hidden_size'={model.hidden_size} differs from "
                              f"the target's hidden_size={target.hidden_size}")
        n_target = _field(cfg, "num_target_layers", int, where, target.num_layers)
        if n_target != target.num_layers:
            raise ConfigError(f"{where}: field 'num_target_layers'={n_target} differs from the "
                              f"target's num_hidden_layers={target.num_layers}")
        mask_id = _field(dflash, "mask_token_id", int, f"{where} dflash_config")
        if not 0 <= mask_id < target.vocab_size:
            raise ConfigError(f"{where}: field 'dflash_config.mask_token_id'={mask_id} is "
                              f"outside the target vocabulary [0, {target.vocab_size})")
        ids = dflash.get("target_layer_ids")
        if not isinstance(ids, list) or not ids or not all(isinstance(i, int) for i in ids):
            raise ConfigError(f"{where}: field 'dflash_config.target_layer_ids' must be a "
                              "non-empty list of ints")
        bad = [i for i in ids if not 0 <= i < target.num_layers]
        if bad:
            raise ConfigError(f"{where}: field 'dflash_config.target_layer_ids' has {bad} "
                              f"outside the target's layers [0, {target.num_layers})")
        stored = _field(cfg, "block_size", int, where, _field(dflash, "block_size", int, where, 16))
        block = stored if block_size is None else block_size
        if block < 1:
            raise ConfigError(f"{where}: field 'block_size' must be >= 1, got {block}")
        return cls(model=model, block_size=block, mask_token_id=mask_id,
                   target_layer_ids=tuple(ids))
