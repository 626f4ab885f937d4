"""Loader errors name the file: a missing folder, a corrupt config.json, a config of another
architecture, a truncated or corrupt safetensors file, a shard index naming a missing shard."""

from __future__ import annotations

import json
import re
import shutil

import pytest

from reference.config import ConfigError
from reference.loaders import load_target, target_config
from reference.methods.dflash import load_dflash


@pytest.fixture
def copy(tiny_dir, tmp_path):
    """A fresh copy of the tiny transformers-written target, to damage."""
    out = tmp_path / "target"
    shutil.copytree(tiny_dir, out)
    return out


def _edit_config(path, **changes):
    cfg = json.loads((path / "config.json").read_text())
    cfg.update(changes)
    (path / "config.json").write_text(json.dumps(cfg))


def test_the_undamaged_copy_loads(copy):
    assert load_target(copy).config.vocab_size == 48


def test_missing_folder_is_named(tmp_path):
    with pytest.raises(FileNotFoundError, match=re.escape(f"{tmp_path / 'nope'} not found")):
        load_target(tmp_path / "nope")


def test_a_file_given_as_the_folder_is_named(copy):
    with pytest.raises(FileNotFoundError, match="config.json is not a directory"):
        target_config(copy / "config.json")


@pytest.mark.parametrize("text", ['{"hidden_size": 3', "", "[1, 2]", "\xff\xfe"])
def test_corrupt_config_names_the_file(copy, text):
    (copy / "config.json").write_bytes(text.encode("latin-1"))
    with pytest.raises(ValueError, match=re.escape(str(copy / "config.json"))):
        load_target(copy)


@pytest.mark.parametrize(
    "changes, found",
    [
        ({"architectures": ["LlamaForCausalLM"], "model_type": "llama"}, "LlamaForCausalLM"),
        ({"architectures": ["Qwen2ForCausalLM"]}, "Qwen2ForCausalLM"),
        ({"architectures": None, "model_type": "mistral"}, "'mistral'"),
    ],
)
def test_other_architectures_are_named_with_the_supported_one(copy, changes, found):
    _edit_config(copy, **changes)
    with pytest.raises(ConfigError) as e:
        target_config(copy)
    message = str(e.value)
    assert str(copy / "config.json") in message and found in message
    assert "supported: Qwen3ForCausalLM" in message or "supported: qwen3" in message


@pytest.mark.parametrize("keep", [0.5, 0.0, None])
def test_truncated_or_corrupt_weights_name_the_file(copy, keep):
    file = copy / "model.safetensors"
    data = file.read_bytes()
    file.write_bytes(b"not a safetensors file" if keep is None else data[: int(len(data) * keep)])
    with pytest.raises(ValueError, match=re.escape(f"{file} is not a readable safetensors file")):
        load_target(copy)


def test_missing_shard_is_named(copy):
    (copy / "model.safetensors").rename(copy / "part-1.safetensors")
    index = {
        "weight_map": {
            "model.norm.weight": "part-1.safetensors",
            "lm_head.weight": "part-2.safetensors",
        }
    }
    (copy / "model.safetensors.index.json").write_text(json.dumps(index))
    with pytest.raises(
        FileNotFoundError, match=re.escape(f"{copy / 'part-2.safetensors'} not found")
    ):
        load_target(copy)


def test_corrupt_drafter_config_names_the_file(target, drafter_dir, tmp_path):
    bad = tmp_path / "drafter"
    shutil.copytree(drafter_dir, bad)
    (bad / "config.json").write_text("{")
    with pytest.raises(ValueError, match=re.escape(f"{bad / 'config.json'} is not valid JSON")):
        load_dflash(bad, target)


def test_a_drafter_of_another_vocabulary_is_named(target, drafter_dir, tmp_path):
    other = tmp_path / "drafter"
    shutil.copytree(drafter_dir, other)
    vocab = target.config.vocab_size
    _edit_config(other, vocab_size=2 * vocab)
    with pytest.raises(ConfigError, match=f"'vocab_size'={2 * vocab} differs from the "
                                          f"target's vocab_size={vocab}"):
        load_dflash(other, target)
