"""DSpark in the simulator: the round cost pads to token buckets; selected by config, fixed
gamma = B - 1 is DFlash's round plus the Markov loop, and no verify policy verifies more
tokens than fixed. The scheduler's own tests are tests/common/test_dspark_schedule.py."""

from __future__ import annotations

import numpy as np
from hypothesis import given
from hypothesis import strategies as st

import simulator
from common.buckets import bucket
from common.dspark_schedule import POLICIES
from simulator.acceptance import AcceptanceModel
from simulator.costs import RooflineCostModel
from simulator.methods import make_method
from simulator.methods.dflash import DFlash
from simulator.methods.dspark import DSpark
from simulator.params import SimConfig


def test_round_cost_pads_to_bucket_and_sps_falls():
    cost = RooflineCostModel(SimConfig())
    m = DSpark(gamma=7)
    kv = np.full(32, 400)
    q = np.full(32, 3)
    padded = bucket(int(q.sum()), m.buckets, beyond=None)
    assert padded >= q.sum() and padded in m.buckets
    assert m.decode_gpu_s(cost, q, kv) > m.draft_s(cost, 32, kv) > m.markov_s(cost, 32) > 0
    table = m.sps_table(cost, 32, kv)
    assert np.all(np.diff(table.sps) <= 1e-15)
    assert m.verify_s(cost, np.full(32, 8), kv) >= m.verify_s(cost, q, kv)


def _run(method: str, c: int, **options):
    base = {"method": method, "block_size": 8, "acceptance": "constant", "alpha": 0.85}
    cfg = SimConfig.coerce({"spec": {**base, "options": options},
                            "workload": {"concurrency": c, "num_requests": 4 * c}})
    return simulator.run(cfg).summary


def test_fixed_policy_at_gamma_b_minus_1_is_dflash():
    """gamma = B - 1 drafts verified in full: DFlash's round plus the Markov loop (one fewer
    draft row), and the same commits, so the same throughput within the Markov cost."""
    cost = RooflineCostModel(SimConfig())
    for n in (1, 16, 48, 256):
        q, kv = np.full(n, 8), np.full(n, 600)
        ds = DSpark(7, 256, policy="fixed").decode_gpu_s(cost, q, kv)
        df = DFlash(8).decode_gpu_s(cost, q, kv)
        assert df < ds < 1.1 * df
        assert ds - df < DSpark(7, 256).markov_s(cost, n) + 1e-9
    for c in (4, 32):
        ds, df = _run("dspark", c, verify_policy="fixed"), _run("dflash", c)
        assert ds["speculation"]["committed_tokens"] == df["speculation"]["committed_tokens"]
        ratio = ds["throughput"]["output_tok_s"] / df["throughput"]["output_tok_s"]
        assert 0.9 < ratio <= 1.0 + 1e-9


def test_config_selects_dspark_and_budgets_never_exceed_fixed():
    cfg = SimConfig.coerce({"spec": {"method": "dspark", "block_size": 6, "temperature": 1.0,
                                     "options": {"markov_rank": 32,
                                                 "verify_policy": "lossless"}}})
    m = make_method(cfg)
    assert isinstance(m, DSpark) and (m.gamma, m.rank, m.policy) == (5, 32, "lossless")
    fixed = _run("dspark", 64, verify_policy="fixed")["speculation"]
    for policy in ("production", "lossless", "static"):
        s = _run("dspark", 64, verify_policy=policy, confidence_threshold=0.9)["speculation"]
        assert s["committed_tokens"] == fixed["committed_tokens"]
        assert s["verified_tokens"] <= fixed["verified_tokens"], policy
        assert max(i for i, k in enumerate(s["commit_hist"]) if k) <= 8


@given(st.integers(0, 10_000), st.integers(1, 40), st.sampled_from(POLICIES[:-1]))
def test_schedule_lengths_stay_in_one_to_b(seed, n, policy):
    rng = np.random.default_rng(seed)
    acc = AcceptanceModel(n, 8)
    acc.S = np.cumprod(rng.uniform(0.3, 1.0, (n, 7)), axis=1)
    m = DSpark(7, 64, policy="fixed" if policy == "full" else policy)
    q = m.schedule(RooflineCostModel(SimConfig()), acc, np.arange(n), np.full(n, 500))
    assert q.shape == (n,) and q.min() >= 1 and q.max() <= 8
