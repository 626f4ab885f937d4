"""Roofline arithmetic: parameter counts, memory budget, monotonicity, vectorization."""

from __future__ import annotations

import numpy as np
import pytest

from simulator.cost_models import make_cost_model
from simulator.costs import CostModel, RooflineCostModel
from simulator.methods import make_method
from simulator.params import ConfigError, SimConfig
from simulator.shapes import Stack, kv_budget, target_weight_bytes


def test_qwen3_8b_shapes():
    m = SimConfig().model
    assert Stack.of(m).params == pytest.approx(6.95e9, rel=0.01)
    # 16.4 GB: docs/architecture.md, "Measuring"
    assert target_weight_bytes(m) / 1e9 == pytest.approx(16.4, abs=0.05)
    assert Stack.of(m).kv_bytes_per_token == 2 * 36 * 8 * 128 * 2


def test_kv_budget_counts_draft_weights_and_pool():
    cfg = SimConfig()
    b = kv_budget(cfg)
    assert b.draft_kv_bytes_per_token == 2 * 5 * 8 * 128 * 2
    assert b.draft_weight_bytes / 1e9 == pytest.approx(2.1, abs=0.05)  # 5 layers + fc
    used = b.target_weight_bytes + b.draft_weight_bytes + b.capacity_tokens * (
        b.target_kv_bytes_per_token + b.draft_kv_bytes_per_token)
    assert used <= b.usable_bytes < used + b.target_kv_bytes_per_token * 2
    cfg.spec.method, cfg.spec.block_size, cfg.spec.draft_layers = "none", 1, 0
    assert kv_budget(cfg).capacity_tokens > b.capacity_tokens


def test_model_that_does_not_fit_is_a_config_error():
    cfg = SimConfig()
    cfg.engine.mem_fraction_static = 0.1
    with pytest.raises(ConfigError, match="does not fit"):
        kv_budget(cfg)


def test_batch1_decode_is_weight_bandwidth_bound():
    cfg = SimConfig()
    cost = RooflineCostModel(cfg)
    t = cost.target_forward_s(np.array([1]), np.array([100])) + cost.lm_head_s(1)
    stream = (Stack.of(cfg.model).weight_bytes + 151936 * 4096 * 2) / 4.30e12
    assert stream < t < stream * 1.05 + 50e-6


def test_large_verify_is_compute_bound():
    cost = RooflineCostModel(SimConfig())
    q = np.full(128, 16)
    t = cost.target_forward_s(q, np.full(128, 500))
    assert t >= 2 * 6.95e9 * q.sum() / 790e12


def test_costs_grow_with_batch_context_and_block():
    cost = RooflineCostModel(SimConfig())
    f = cost.target_forward_s
    assert f(np.full(8, 16), np.full(8, 4000)) > f(np.full(8, 16), np.full(8, 100))
    assert f(np.full(64, 16), np.full(64, 100)) > f(np.full(8, 16), np.full(8, 100))
    assert f(np.full(64, 16), np.full(64, 100)) > f(np.full(64, 4), np.full(64, 100))


def test_stretch_pricing_equals_per_round_pricing():
    cfg = SimConfig()
    cost, method = make_cost_model(cfg), make_method(cfg)
    assert isinstance(cost, CostModel)
    q = np.full(5, 16)
    kv = np.array([[10, 200, 3000, 40, 5], [20, 210, 3010, 50, 15], [30, 230, 3020, 66, 31]])
    together = method.decode_gpu_s(cost, q, kv)
    apart = [method.decode_gpu_s(cost, q, row.copy()) for row in kv]
    np.testing.assert_allclose(together, apart, rtol=1e-12)


def test_dflash_round_costs_more_than_plain_decode_but_less_than_block_of_them():
    cfg = SimConfig()
    cost = make_cost_model(cfg)
    kv = np.full(4, 500)
    dflash = make_method(cfg).decode_gpu_s(cost, np.full(4, 16), kv)
    cfg.spec.method, cfg.spec.block_size = "none", 1
    plain = make_method(cfg).decode_gpu_s(cost, np.full(4, 1), kv)
    assert plain < dflash < 2 * plain
