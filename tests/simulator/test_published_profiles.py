"""Engine profiles: what overlaps with what (Spec V2 hides host work behind the GPU round,
Spec V1 adds it), the kernel factors the roofline prices with, how `auto` picks the cost
model, and how eagle_tree assembles a round; expectations are hand computations from the
profile files' numbers and from piece costs chosen here."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import yaml

from common.paths import conf_dir
from simulator.costs import RooflineCostModel
from simulator.engine_profiles import KernelFactors, cost_model_name
from simulator.methods import make_method
from simulator.params import ConfigError, SimConfig
from tests.simulator.helpers import FixedRoundCost, simulate, small


def profile(name: str) -> dict:
    cfg = yaml.safe_load(open(f"{conf_dir()}/engine/{name}.yaml"))
    cfg.pop("defaults")
    return cfg


class ProfileHost(FixedRoundCost):
    """A fixed GPU time per forward, and the host and copy times of a real profile."""

    def __init__(self, round_s: float, cfg: SimConfig):
        super().__init__(round_s)
        self.roof = RooflineCostModel(cfg)

    def host_plan_s(self, batch_size):
        return self.roof.host_plan_s(batch_size)

    def host_process_s(self, batch_size):
        return self.roof.host_process_s(batch_size)

    def copy_s(self):
        return self.roof.copy_s()


def _tpot(engine: str, round_s: float) -> float:
    """TPOT of one 2000-token request with a 1-token prompt under profile `engine`."""
    base = small(
        "none",
        workload__num_requests=1,
        workload__concurrency=1,
        workload__prompt_tokens_mean=1,
        workload__prompt_tokens_cv=0.0,
        workload__output_tokens_mean=2000,
        workload__output_tokens_cv=0.0,
    )
    cfg = SimConfig.coerce(
        {
            **dataclasses.asdict(base),
            "engine": profile(engine),
            "hardware": {"name": "b200", "d2h_copy_s": 20e-6},
        }
    )
    _, res = simulate(cfg, cost_model=ProfileHost(round_s, cfg))
    return float(res.requests["tpot_s"][0])


# Both SGLang profiles: plan = process = 0.519 ms, no per-request term; b200 copy 20 us.
HOST_1 = 0.519e-3  # one request


@pytest.mark.parametrize("round_s", [5e-3, 0.1e-3])
def test_spec_v1_adds_the_host_to_every_round(round_s):
    assert _tpot("sglang_v1", round_s) == pytest.approx(HOST_1 + round_s + 20e-6 + HOST_1, rel=1e-9)


def test_spec_v2_hides_the_host_behind_a_longer_gpu_round():
    """GPU 5 ms > host 0.48 ms: rounds run back to back (one edge round in 2000 tokens)."""
    assert _tpot("sglang_v2", 5e-3) == pytest.approx(5e-3, rel=1e-3)


def test_spec_v2_is_host_bound_when_the_host_is_longer():
    """GPU 0.1 ms < plan + process 0.48 ms: one round per plan + process."""
    assert _tpot("sglang_v2", 0.1e-3) == pytest.approx(2 * HOST_1, rel=1e-3)


def test_kernel_factors_take_the_profile_over_the_hardware():
    e = profile("sglang_v2")
    cfg = SimConfig.coerce(
        {
            "hardware": {
                "name": "b200",
                "hbm_tbps": 8.0,
                "matmul_tflops": 2250.0,
                "matmul_efficiency": 0.8,
                "bandwidth_efficiency": 0.9,
            },
            "engine": e,
        }
    )
    k = KernelFactors.of(cfg)
    assert k.flops == pytest.approx(2250e12 * e["matmul_efficiency"])
    assert k.bw == pytest.approx(8e12 * e["bandwidth_efficiency"])
    assert k.layer_s == e["layer_overhead_s"]
    generic = KernelFactors.of(SimConfig.coerce({"hardware": dataclasses.asdict(cfg.hardware)}))
    assert generic.flops == pytest.approx(2250e12 * 0.8)
    assert generic.bw == pytest.approx(8e12 * 0.9)


def test_fixed_gpu_times_per_layer_and_per_request():
    """Qwen3-8B (36 dense layers): +1 ms per layer and +0.1 ms per request and layer add
    36 ms + 3 * 36 * 0.1 ms to a 3-request forward, nothing to the LM head."""
    plain = RooflineCostModel(SimConfig())
    cfg = SimConfig()
    cfg.engine.layer_overhead_s, cfg.engine.request_layer_overhead_s = 1e-3, 1e-4
    cfg.engine.moe_layer_overhead_s = 5.0  # no MoE layer here
    slow = RooflineCostModel(cfg)
    q, kv = np.ones(3), np.full(3, 100.0)
    diff = slow.target_forward_s(q, kv) - plain.target_forward_s(q, kv)
    assert diff == pytest.approx(36e-3 + 3 * 36 * 1e-4)
    assert slow.lm_head_s(3) == plain.lm_head_s(3)


@pytest.mark.parametrize(
    "overrides,expected",
    [
        ({}, "calibrated"),  # h200/qwen3-8b exists and measures dflash
        ({"hardware": {"name": "b200"}}, "roofline"),  # no b200 table
        ({"spec": {"method": "eagle", "block_size": 8, "draft_layers": 1}}, "roofline"),
        ({"spec": {"method": "dflash", "options": {"tree_budget": 32}}}, "roofline"),
        (
            {
                "model": {
                    "name": "toy",
                    "hidden_size": 256,
                    "num_layers": 6,
                    "num_heads": 4,
                    "num_kv_heads": 2,
                    "head_dim": 64,
                    "intermediate_size": 768,
                    "vocab_size": 4096,
                }
            },
            "roofline",
        ),  # toy table: a 2-layer drafter
    ],
)
def test_auto_picks_the_calibration_table_only_where_it_prices_the_run(overrides, expected):
    cfg = SimConfig.coerce({**overrides, "engine": {"cost_model": "auto"}})
    assert cost_model_name(cfg) == expected


class PieceCost:
    """Linear piece costs chosen for a hand computation (seconds)."""

    def draft_forward_s(self, q, kv, causal=True):
        return 1e-3 * float(np.sum(q)) + 1e-4 * len(q)

    def target_forward_s(self, q, kv):
        return 3e-3 + 5e-5 * float(np.sum(q))

    def lm_head_s(self, rows):
        return 2e-5 * float(rows)


def test_eagle_tree_round_by_hand():
    cfg = SimConfig.coerce(
        {
            "model": {"vocab_size": 128000},
            "spec": {
                "method": "eagle",
                "block_size": 8,
                "draft_layers": 1,
                "options": {"draft_topk": 10, "tree_tokens": 60, "draft_vocab_size": 32000},
            },
        }
    )
    m = make_method(cfg)
    q = m.verify_lens(2)
    assert q.tolist() == [60, 60]
    r = 32000 / 128000
    first = (1e-3 * 2 + 2e-4) + r * 2e-5 * 2
    later = 6 * ((1e-3 * 20 + 2e-4) + r * 2e-5 * 20)
    extend = 1e-3 * 16 + 2e-4
    verify = 3e-3 + 5e-5 * 120 + 2e-5 * 120
    got = m.decode_gpu_s(PieceCost(), q, np.zeros(2))
    assert got == pytest.approx(first + later + extend + verify)


@pytest.mark.parametrize(
    "options,message",
    [
        ({"tree_tokens": 4}, "spec.options.tree_tokens = 4 must be at least spec.block_size = 8"),
        ({"draft_topk": 10}, "spec.options.draft_topk = 10 needs spec.options.tree_tokens"),
        ({"tree_tokens": 0}, r"spec.options.tree_tokens = 0 is outside \[1, 4096\]"),
    ],
)
def test_eagle_tree_needs_a_tree_holding_the_path(options, message):
    with pytest.raises(ConfigError, match=message):
        SimConfig.coerce(
            {"spec": {"method": "eagle", "block_size": 8, "draft_layers": 1, "options": options}}
        )
