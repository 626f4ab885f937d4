"""Tensor parallelism: per-rank shapes and memory, the analytic all-reduce in a forward's
time (written out here from Qwen3-32B's config numbers), and its config rules."""

from __future__ import annotations

import numpy as np
import pytest

from simulator.costs import RooflineCostModel
from simulator.params import ConfigError, SimConfig
from simulator.shapes import Stack, kv_budget

QWEN3_32B = {
    "name": "qwen3-32b",
    "hidden_size": 5120,
    "num_layers": 64,
    "num_heads": 64,
    "num_kv_heads": 8,
    "head_dim": 128,
    "intermediate_size": 25600,
    "vocab_size": 151936,
    "tie_embeddings": False,
    "dtype_bytes": 2,
}
H, L, V = 5120, 64, 151936


def _cfg(tp: int, **spec) -> SimConfig:
    return SimConfig.coerce(
        {
            "model": QWEN3_32B,
            "engine": {"tp_size": tp},
            "spec": {"method": "none", "block_size": 1, "draft_layers": 0, **spec},
        }
    )


def test_shard_splits_heads_mlp_and_kv_heads():
    st = Stack.of(_cfg(1).model)
    # per layer: q, o (64 heads) + k, v (8 heads) of 128, and gate/up/down of 25600
    assert st.params_per_layer == H * 128 * (2 * 64 + 2 * 8) + 3 * H * 25600
    half = st.shard(2)
    assert half.params_per_layer == H * 128 * (2 * 32 + 2 * 4) + 3 * H * 12800
    assert half.kv_bytes_per_token == 2 * L * 4 * 128 * 2
    assert st.shard(16).kv_bytes_per_token == 2 * L * 1 * 128 * 2  # 8 KV heads replicated


def test_kv_budget_per_gpu_under_tp():
    b1, b2 = kv_budget(_cfg(1)), kv_budget(_cfg(2))
    layer = H * 128 * (2 * 64 + 2 * 8) + 3 * H * 25600
    assert b1.target_weight_bytes == (L * layer + 2 * V * H) * 2
    assert b2.target_weight_bytes == (L * layer // 2 + V * H) * 2
    usable = 141e9 * 0.85
    assert b2.capacity_tokens == int((usable - b2.target_weight_bytes) // (2 * L * 4 * 128 * 2))
    assert b2.capacity_tokens > 2 * b1.capacity_tokens  # half the KV, and weights freed


def test_batch1_decode_time_is_half_the_stream_plus_two_allreduces_per_layer():
    """One token at a short context: the forward reads one rank's weights (bandwidth-bound),
    then 64 layers x 2 all-reduces of H bf16 values, ring 2 (tp-1)/tp over 0.45 TB/s."""
    kv = 10
    t1 = float(RooflineCostModel(_cfg(1)).target_forward_s(np.array([1]), np.array([kv])))
    cost2 = RooflineCostModel(_cfg(2))
    t2 = float(cost2.target_forward_s(np.array([1]), np.array([kv])))
    layer = H * 128 * (2 * 64 + 2 * 8) + 3 * H * 25600
    act = L * (6 * H + 3 * 12800) * 2  # per token: hidden-sized and MLP-shard activations
    attn = (kv + 1) * 2 * L * 4 * 128 * 2  # KV read + written, one rank's 4 KV heads
    allreduce = 2 * L * (10e-6 + 2 * (2 - 1) / 2 * H * 2 / 0.45e12)
    expect = (L * layer // 2 * 2 + act) / 4.30e12 + attn / 4.30e12 + 30e-6 + allreduce
    assert t2 == pytest.approx(expect, rel=1e-9)
    assert t2 < t1
    assert "analytic" in cost2.label


def test_lm_head_split_by_vocabulary_plus_one_gather():
    c1, c2 = RooflineCostModel(_cfg(1)), RooflineCostModel(_cfg(2))
    assert c2.lm_head_s(1) == pytest.approx(
        (V * H // 2 * 2 + V // 2 * 8) / 4.30e12 + 10e-6, rel=1e-12
    )
    assert c1.lm_head_s(1) == pytest.approx((V * H * 2 + V * 8) / 4.30e12, rel=1e-12)


@pytest.mark.parametrize(
    "override,match",
    [
        ({"engine": {"tp_size": 3}}, "must divide model.num_heads"),
        ({"engine": {"tp_size": 2, "cost_model": "calibrated"}}, "roofline"),
    ],
)
def test_tp_config_errors(override, match):
    with pytest.raises(ConfigError, match=match):
        SimConfig.coerce(override)


def test_shard_keeps_an_moe_stack_moe():
    # Qwen3-Coder-30B-A3B (conf/model/qwen3-coder-30b-a3b.yaml): 48 layers, hidden 2048,
    # 32/4 heads of 128, 128 experts of width 768, 8 routed per token
    moe = SimConfig.coerce({"model": {"name": "qwen3-coder-30b-a3b", "hidden_size": 2048,
                                      "num_layers": 48, "num_heads": 32, "num_kv_heads": 4,
                                      "head_dim": 128, "intermediate_size": 6144,
                                      "num_experts": 128, "experts_per_token": 8,
                                      "moe_intermediate_size": 768}}).model
    half = Stack.of(moe).shard(2)
    attn = 2048 * 128 * (2 * 16 + 2 * 2)
    router = 2048 * 128
    assert (half.experts, half.experts_per_token) == (128, 8)
    assert half.params_per_layer == attn + router + 128 * 3 * 2048 * 384
    assert half.active_params_per_layer == attn + router + 8 * 3 * 2048 * 384
    assert 14e9 < half.params < 15e9  # half of the 29B in the layers, not a 1.4B dense stack


def test_hybrid_stack_keeps_kv_for_its_softmax_layers_and_a_state_pool():
    # Qwen3.5-9B (conf/model/qwen3.5-9b.yaml): 32 layers, 8 of them softmax (one in 4),
    # 4 KV heads of 256; 24 linear layers of 2,146,304 state bytes per request
    model = {"name": "qwen3.5-9b", "hidden_size": 4096, "num_layers": 32, "num_heads": 16,
             "num_kv_heads": 4, "head_dim": 256, "intermediate_size": 12288,
             "vocab_size": 248320}

    def cfg(**m):
        return SimConfig.coerce({"model": {**model, **m}, "engine": {"max_running_requests": 32},
                                 "spec": {"method": "none", "block_size": 1, "draft_layers": 0}})

    hybrid = cfg(full_attention_interval=4, linear_state_bytes_per_layer=2146304)
    dense = cfg()
    st = Stack.of(hybrid.model)
    assert st.kv_bytes_per_token == 2 * 8 * 4 * 256 * 2
    assert st.state_bytes_per_request == 24 * 2146304
    b_h, b_d = kv_budget(hybrid), kv_budget(dense)
    assert b_h.target_weight_bytes - b_d.target_weight_bytes == 32 * 24 * 2146304
    usable = 141e9 * 0.85
    assert b_h.capacity_tokens == int((usable - b_h.target_weight_bytes)
                                      // (2 * 8 * 4 * 256 * 2))
    # a decode step of one request at kv 0 reads and writes its state once per forward
    cost_h, cost_d = RooflineCostModel(hybrid), RooflineCostModel(dense)
    q, kv = np.ones(1, dtype=np.int64), np.zeros(1, dtype=np.int64)
    extra = cost_h.target_forward_s(q, kv) - cost_d.target_forward_s(q, kv)
    bw = 4.3e12  # h200 hbm_tbps, the hardware file's bandwidth efficiency 1.0
    assert extra == pytest.approx(2 * 24 * 2146304 / bw, rel=0.05)
