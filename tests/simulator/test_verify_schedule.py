"""Verify lengths by batch size (`spec.verify_schedule`): lengths per batch, the price of a
round at K = 0 and at K < B - 1, and runs against their schedule-free equivalents."""

from __future__ import annotations

import numpy as np
import pytest

import simulator
from simulator.costs import RooflineCostModel
from simulator.methods import make_method
from simulator.params import ConfigError, SimConfig

SCHEDULE = [[1, 4, 7], [5, 16, 3], [17, 1024, 0]]


def _cfg(method="dflash", B=8, schedule=SCHEDULE, **workload) -> SimConfig:
    return SimConfig.coerce(
        {
            "spec": {
                "method": method,
                "block_size": B,
                "verify_schedule": schedule,
                "draft_layers": 1 if method == "eagle" else 5,
            },
            "workload": {
                "concurrency": 8,
                "num_requests": 64,
                "prompt_tokens_mean": 64,
                "output_tokens_mean": 96,
                **workload,
            },
        }
    )


def test_verify_lengths_follow_the_batch_size():
    m = make_method(_cfg())
    assert [int(m.verify_lens(n)[0]) for n in (1, 4, 5, 16, 17, 300)] == [8, 8, 4, 4, 1, 1]
    assert make_method(_cfg(B=3)).verify_lens(2).tolist() == [3, 3]  # K + 1 capped at B


def test_dflash_round_at_k0_is_a_plain_decode_plus_materialization():
    cfg = _cfg()
    cost, m = RooflineCostModel(cfg), make_method(cfg)
    q, kv = m.verify_lens(20), np.full(20, 300)
    plain = cost.target_forward_s(q, kv) + cost.lm_head_s(20)
    assert m.decode_gpu_s(cost, q, kv) == pytest.approx(plain + cost.kv_materialize_s(20))
    q4 = m.verify_lens(8)  # K = 3: a draft block of 4, heads on 3 and 4 rows per request
    expect = (
        cost.draft_forward_s(q4, np.full(8, 300), causal=False)
        + cost.target_forward_s(q4, np.full(8, 300))
        + cost.lm_head_s(24)
        + cost.lm_head_s(32)
        + cost.kv_materialize_s(32)
    )
    assert m.decode_gpu_s(cost, q4, np.full(8, 300)) == pytest.approx(expect)


def test_eagle_chain_drafts_k_steps():
    cfg = _cfg("eagle")
    cost, m = RooflineCostModel(cfg), make_method(cfg)
    q, kv, one = m.verify_lens(8), np.full(8, 300), np.ones(8)
    steps = 3 * (cost.draft_forward_s(one, kv + 1.0) + cost.lm_head_s(8))
    expect = steps + cost.draft_forward_s(q, kv) + cost.target_forward_s(q, kv) + cost.lm_head_s(32)
    assert m.decode_gpu_s(cost, q, kv) == pytest.approx(expect)


def test_a_schedule_of_the_full_block_changes_nothing():
    plain = simulator.run(_cfg(schedule=None)).summary
    full = simulator.run(_cfg(schedule=[[1, 1024, 7]])).summary
    for key in ("throughput", "speculation", "tpot_s"):
        assert full[key] == plain[key]


def test_k0_everywhere_commits_one_token_per_round():
    s = simulator.run(_cfg(schedule=[[1, 1024, 0]])).summary["speculation"]
    assert s["tau"] == 1.0
    assert s["commit_hist"][1] == sum(s["commit_hist"])


def test_methods_with_their_own_lengths_refuse_a_schedule():
    with pytest.raises(ConfigError, match="verify_schedule"):
        SimConfig.coerce(
            {
                "spec": {
                    "method": "dspark",
                    "block_size": 8,
                    "temperature": 1.0,
                    "verify_schedule": SCHEDULE,
                }
            }
        )
    with pytest.raises(ConfigError, match="starts at batch 2"):
        _cfg(schedule=[[2, 8, 3]])
