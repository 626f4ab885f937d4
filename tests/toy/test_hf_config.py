"""HF configs the project writes load with the right rotary base in transformers 4.5x and
5.x: the top-level `rope_theta` (what 4.5x reads) and `rope_parameters` (what 5.x writes)
agree, and transformers' AutoConfig reads the same value back.

The base is 1e6 here, not the 10000 that 4.5x falls back to, so a missing field shows.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

transformers = pytest.importorskip("transformers")

from reference.config import ModelConfig  # noqa: E402
from toy.draft_model import drafter_config_dict  # noqa: E402
from toy.hf_config import add_top_level_rope_theta, save_pretrained  # noqa: E402

THETA = 1e6
ZOO = Path(__file__).parents[2] / "experiments" / "zoo"


def _theta(config) -> float:
    """The rotary base transformers loaded: a field in 4.5x, inside rope_parameters in 5.x."""
    params = getattr(config, "rope_parameters", None) or {}
    return params.get("rope_theta", getattr(config, "rope_theta", None))


def _tiny_target(tmp_path: Path) -> Path:
    cfg = transformers.Qwen3Config(
        vocab_size=64,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=2,
        num_key_value_heads=1,
        head_dim=16,
        rope_theta=THETA,
    )
    save_pretrained(transformers.Qwen3ForCausalLM(cfg), tmp_path)
    return tmp_path


def test_a_saved_target_has_rope_theta_at_the_top_level_too(tmp_path):
    raw = json.loads((_tiny_target(tmp_path) / "config.json").read_text())
    assert raw["rope_theta"] == THETA
    if "rope_parameters" in raw:
        assert raw["rope_parameters"]["rope_theta"] == THETA
    assert _theta(transformers.AutoConfig.from_pretrained(tmp_path)) == THETA
    assert ModelConfig.from_dict(raw).rope_theta == THETA


def test_a_drafter_config_loads_with_its_rope_theta(tmp_path):
    target = ModelConfig.from_dict(json.loads((_tiny_target(tmp_path) / "config.json").read_text()))
    raw = drafter_config_dict(
        target, num_layers=1, block_size=4, mask_token_id=1, target_layer_ids=[0]
    )
    assert raw["rope_theta"] == THETA
    (tmp_path / "drafter").mkdir()
    (tmp_path / "drafter" / "config.json").write_text(json.dumps(raw))
    assert _theta(transformers.AutoConfig.from_pretrained(tmp_path / "drafter")) == THETA


@pytest.mark.parametrize("folder", ["target", "dflash-b16", "dflash-b8"])
def test_committed_zoo_configs_carry_a_top_level_rope_theta(folder):
    raw = json.loads((ZOO / folder / "config.json").read_text())
    loaded = _theta(transformers.AutoConfig.from_pretrained(ZOO / folder))
    assert raw["rope_theta"] == loaded
    assert (raw.get("rope_parameters") or {}).get("rope_theta", loaded) == loaded


def test_the_top_level_field_is_copied_only_when_missing():
    assert add_top_level_rope_theta({"rope_parameters": {"rope_theta": 5.0}}) == {
        "rope_parameters": {"rope_theta": 5.0},
        "rope_theta": 5.0,
    }
    assert add_top_level_rope_theta({"rope_theta": 7.0}) == {"rope_theta": 7.0}
    assert add_top_level_rope_theta({}) == {}
