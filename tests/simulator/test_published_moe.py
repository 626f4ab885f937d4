"""MoE shapes: the expected number of distinct experts a batch touches, the weight bytes an MoE
forward reads, and how the roofline prices them; expectations are hand computations from the
Qwen3-Coder-30B-A3B config and a brute-force enumeration of routings."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from simulator.costs import RooflineCostModel
from simulator.params import ConfigError, ModelParams, SimConfig
from simulator.shapes import Stack, expected_experts

CODER = dict(
    name="qwen3-coder-30b-a3b",
    hidden_size=2048,
    num_layers=48,
    num_heads=32,
    num_kv_heads=4,
    head_dim=128,
    intermediate_size=6144,
    vocab_size=151936,
    num_experts=128,
    experts_per_token=8,
    moe_intermediate_size=768,
)


def test_expected_experts_by_enumeration():
    """E = 5 experts, k = 2 per token, n = 3 tokens: average the distinct count over all
    C(5, 2)^3 = 1000 equally likely routings."""
    subsets = list(itertools.combinations(range(5), 2))
    counts = [len(set(a) | set(b) | set(c)) for a, b, c in itertools.product(subsets, repeat=3)]
    assert expected_experts(3, 5, 2) == pytest.approx(np.mean(counts), rel=1e-12)


def test_expected_experts_limits():
    assert expected_experts(1, 128, 8) == pytest.approx(8.0)  # one token: its k experts
    assert expected_experts(0, 128, 8) == 0.0
    # 2 tokens: 8 + 8 * (120/128) new on average = 15.5
    assert expected_experts(2, 128, 8) == pytest.approx(15.5)
    assert expected_experts(10_000, 128, 8) == pytest.approx(128.0)
    np.testing.assert_allclose(expected_experts(np.array([1.0, 2.0]), 128, 8), [8.0, 15.5])


def test_coder_weight_bytes_read_by_hand():
    st = Stack.of(ModelParams(**CODER))
    attn = 2048 * 128 * (2 * 32 + 2 * 4)  # q, k, v, o = 18,874,368
    router = 2048 * 128  # 262,144
    expert = 3 * 2048 * 768  # 4,718,592
    assert st.weight_bytes_read(1) == 48 * (attn + router + 8 * expert) * 2  # 5,460,983,808
    assert st.weight_bytes == 48 * (attn + router + 128 * expert) * 2
    assert st.active_params == 48 * (attn + router + 8 * expert)
    touched_32 = 128 * (1 - (1 - 8 / 128) ** 32)  # 111.78 of 128 experts
    assert st.weight_bytes_read(32) == pytest.approx(48 * (attn + router + touched_32 * expert) * 2)


def test_drafter_of_an_moe_target_is_dense():
    m = ModelParams(**CODER)
    d = Stack.of(m, layers=8)
    assert d.experts == 0 and d.params == 8 * (2048 * 128 * 72 + 3 * 2048 * 6144)


def test_roofline_reads_more_experts_as_the_batch_grows():
    """Memory-bound decode at tiny context: the step grows by exactly the extra expert bytes
    over the bandwidth; a dense model's weight term does not grow."""
    cfg = SimConfig(model=ModelParams(**CODER))
    cfg.hardware.matmul_tflops = 1e6  # compute never binds
    cost = RooflineCostModel(cfg)
    kv = np.zeros(32)
    t1 = cost.target_forward_s(np.ones(1), np.zeros(1))
    t32 = cost.target_forward_s(np.ones(32), kv)
    extra_experts = 128 * (1 - (1 - 8 / 128) ** 32) - 8
    extra_bytes = 48 * extra_experts * 3 * 2048 * 768 * 2
    act = 48 * (6 * 2048 + 3 * 8 * 768) * 2 * 31  # activations of the 31 extra tokens
    kv_bytes = 2 * 48 * 4 * 128 * 2 * 31  # KV written by the 31 extra tokens
    expected = (extra_bytes + act + kv_bytes) / (cfg.hardware.hbm_tbps * 1e12)
    assert t32 - t1 == pytest.approx(expected, rel=1e-6)


def test_bad_moe_shapes_are_refused():
    with pytest.raises(ConfigError, match="model.experts_per_token = 0 must lie in"):
        SimConfig.coerce({"model": {**CODER, "experts_per_token": 0}})
