"""MoE expert GEMMs priced by the measured efficiency by tokens per expert
(simulator/moe_experts.py), with the roofline as the fallback when no measurement exists."""

from __future__ import annotations

import json

import numpy as np
import pytest

from simulator.costs import RooflineCostModel
from simulator.moe_experts import ExpertCurve, expert_curve, expert_gemm_s
from simulator.params import ConfigError, SimConfig
from simulator.shapes import Stack

CODER = {"name": "qwen3-coder-30b-a3b", "hidden_size": 2048, "num_layers": 48,
         "num_heads": 32, "num_kv_heads": 4, "head_dim": 128, "intermediate_size": 6144,
         "num_experts": 128, "experts_per_token": 8, "moe_intermediate_size": 768}


def _cfg(tmp_path, efficiency, tokens=(1.0, 16.0, 256.0)):
    path = tmp_path / "moe.json"
    path.write_text(json.dumps({"moe_experts": {"tokens_per_expert": list(tokens),
                                                "efficiency": list(efficiency)}}))
    return SimConfig.coerce({"model": CODER, "engine": {"moe_calibration": str(path)},
                             "spec": {"method": "none", "block_size": 1, "draft_layers": 0}})


def test_curve_interpolates_in_log_tokens_and_clamps():
    c = ExpertCurve(np.array([1.0, 16.0, 256.0]), np.array([0.02, 0.1, 0.5]), "-")
    assert c.at(4.0) == pytest.approx(0.06)  # halfway in log between 1 and 16
    assert c.at(0.5) == 0.02 and c.at(1e4) == 0.5


def test_one_token_routes_to_k_experts_of_one_token_each(tmp_path):
    curve = expert_curve(_cfg(tmp_path, (0.02, 0.1, 0.5)))
    st = Stack.of(SimConfig.coerce({"model": CODER}).model)
    # 48 layers x 2 FLOP x 8 experts x (3 x 2048 x 768) params, at 2% of 989 TFLOP/s
    want = 48 * 2 * 8 * 3 * 2048 * 768 / (989e12 * 0.02)
    assert expert_gemm_s(curve, st, 1.0, 989e12) == pytest.approx(want, rel=1e-9)


def test_forward_pays_the_expert_gemms_at_their_measured_efficiency(tmp_path):
    q, kv = np.ones(64, dtype=np.int64), np.full(64, 256, dtype=np.int64)
    slow = RooflineCostModel(_cfg(tmp_path, (0.05,) * 3)).target_forward_s(q, kv)
    fast = RooflineCostModel(_cfg(tmp_path, (0.10,) * 3)).target_forward_s(q, kv)
    peak = SimConfig().hardware.matmul_tflops * 1e12
    experts = 48 * 2 * 64 * 8 * 3 * 2048 * 768 / peak  # at efficiency 1
    assert slow - fast == pytest.approx(experts / 0.05 - experts / 0.10, rel=1e-9)


def test_without_a_measurement_the_roofline_prices_the_experts():
    cfg = SimConfig.coerce({"model": CODER})
    assert expert_curve(cfg) is None and RooflineCostModel(cfg).moe_curve is None


def test_a_bad_table_names_the_file(tmp_path):
    with pytest.raises(ConfigError, match="moe.json"):
        expert_curve(_cfg(tmp_path, (0.1, 0.2)))  # 3 tokens_per_expert, 2 efficiencies
