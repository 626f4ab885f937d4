"""The DSpark proposer on the tiny random target: greedy output equals plain greedy decoding
for every verify-length policy; sampling runs with q and records (c, l, accept_len); the
loader checks the extra heads."""

from __future__ import annotations

import json

import pytest
import torch
from safetensors.torch import save_file

from common.dspark_schedule import Scheduler, SPSTable
from reference.config import ConfigError
from reference.generate import generate
from reference.methods.dspark_proposer import load_dspark
from tests.reference.conftest import TINY, drafter_config, drafter_weights

GAMMA, RANK = 4, 8
SPS = SPSTable([1, 2, 4, 8, 12, 16, 24], [1.0, 0.9, 0.8, 0.55, 0.5, 0.4, 0.3])


def dspark_weights(cfg: dict, seed: int = 0) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(seed + 7)
    v, h = TINY["vocab_size"], cfg["hidden_size"]
    return {
        **drafter_weights(cfg, seed),
        "markov_head.embed.weight": torch.randn(v, RANK, generator=g),
        "markov_head.proj.weight": torch.randn(v, RANK, generator=g) * 0.5,
        "confidence_head.weight": torch.randn(1, h + RANK, generator=g) * 0.3,
        "confidence_head.bias": torch.tensor([0.5]),
    }


@pytest.fixture(scope="module")
def dspark_dir(tmp_path_factory):
    path = tmp_path_factory.mktemp("dspark")
    cfg = drafter_config(block_size=GAMMA + 1, dspark_config={"markov_rank": RANK})
    (path / "config.json").write_text(json.dumps(cfg))
    save_file(dspark_weights(cfg), str(path / "model.safetensors"))
    (path / "calibration.json").write_text(json.dumps({"temperatures": [1.0, 1.5, 2.0, 0.8]}))
    return path


PROMPTS = [[1, 5, 9, 2, 7], [3, 3, 8], [11, 4, 6, 12, 30, 2, 9]]


@pytest.mark.parametrize("policy", ["full", "static", "lossless", "global", "production"])
def test_greedy_equals_plain_greedy(target, dspark_dir, policy):
    plain = generate(target, PROMPTS, max_new_tokens=20)
    records = []
    prop = load_dspark(
        dspark_dir, target, scheduler=Scheduler(policy, SPS, threshold=0.5), records=records
    )
    spec = generate(target, PROMPTS, proposer=prop, max_new_tokens=20)
    assert spec.tokens == plain.tokens
    ell = torch.cat([r[1] for r in records])
    acc = torch.cat([r[2] for r in records])
    assert (acc <= ell).all() and (ell <= GAMMA).all()
    if policy == "full":
        assert (ell == GAMMA).all()


def test_sampling_records_confidences(target, dspark_dir):
    records = []
    prop = load_dspark(
        dspark_dir, target, scheduler=Scheduler("lossless", SPS), temperature=1.0, records=records
    )
    out = generate(target, PROMPTS, proposer=prop, max_new_tokens=16, temperature=1.0)
    assert all(len(t) == 16 for t in out.tokens)
    c = torch.cat([r[0] for r in records])
    assert c.shape[1] == GAMMA and ((c > 0) & (c < 1)).all()
    assert torch.allclose(prop.heads.temps, torch.tensor([1.0, 1.5, 2.0, 0.8]))


def test_loader_names_missing_head(target, dspark_dir, tmp_path):
    cfg = json.loads((dspark_dir / "config.json").read_text())
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    weights = dspark_weights(cfg)
    del weights["confidence_head.bias"]
    save_file(weights, str(tmp_path / "model.safetensors"))
    with pytest.raises(ConfigError, match="confidence_head.bias"):
        load_dspark(tmp_path, target)
    cfg.pop("dspark_config")
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(ConfigError, match="markov_rank"):
        load_dspark(tmp_path, target)
