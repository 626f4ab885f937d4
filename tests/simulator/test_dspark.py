"""DSpark's scheduler: the numpy twin agrees with the reference walk; the lossless and
production policies are non-anticipating; the round cost pads to token buckets. The method
in the simpy simulator: selected by config, fixed gamma = B - 1 is DFlash's round plus the
Markov loop, and no verify policy verifies more tokens than fixed."""

from __future__ import annotations

import numpy as np
from hypothesis import given, note
from hypothesis import strategies as st

import simulator
from reference import dspark_schedule as ref
from simulator import dspark as sim
from simulator.acceptance import AcceptanceModel
from simulator.costs import RooflineCostModel
from simulator.methods import make_method
from simulator.methods.dflash import DFlash
from simulator.methods.dspark import DSpark
from simulator.params import SimConfig


def _case(seed: int, R: int, G: int, jagged: bool):
    rng = np.random.default_rng(seed)
    c = rng.uniform(0.0, 1.0, (R, G)) ** rng.uniform(0.2, 2.0)
    c[rng.random((R, G)) < 0.05] = 0.0
    tokens = np.arange(1, R * (G + 1) + 8)
    sps = 1.0 / (1.0 + 0.02 * tokens + 0.01 * rng.random(tokens.size) * jagged)
    if jagged:
        sps = sps[np.minimum((tokens + 7) // 8 * 8, tokens[-1]) - 1]
    return c, tokens, sps


@given(st.integers(0, 10_000), st.integers(1, 9), st.integers(1, 8), st.booleans())
def test_numpy_twin_agrees_with_reference(seed, R, G, jagged):
    c, tokens, sps = _case(seed, R, G, jagged)
    note(f"{seed=} {R=} {G=} {jagged=}")
    t_ref, t_sim = ref.SPSTable(tokens, sps), sim.SPS(tokens, sps)
    for policy in ("full", "static", "lossless", "global"):
        a = ref.Scheduler(policy, t_ref, threshold=0.4)(c)
        b = sim.Scheduler(policy, t_sim, threshold=0.4)(c)
        assert list(a) == b.tolist(), policy
    pr, ps = ref.Scheduler("production", t_ref), sim.Scheduler("production", t_sim)
    for k in range(4):
        ck = np.roll(c, k, axis=0)
        assert list(pr(ck)) == ps(ck).tolist()
    assert ref.top_k(c, 5) == sim.top_k(c, 5).tolist()


@given(st.integers(0, 10_000), st.integers(1, 6), st.integers(2, 6), st.booleans())
def test_lossless_admission_ignores_later_confidences(seed, R, G, jagged):
    """Whether x_j is verified (l_r >= j) never depends on c[r, j+1:], which the sampled
    x_j determines; the production top-K admission has the same property."""
    c, tokens, sps = _case(seed, R, G, jagged)
    table = sim.SPS(tokens, sps)
    rng = np.random.default_rng(seed + 1)
    ell = sim.walk(c, table, lossless=True)
    budget = int(rng.integers(0, R * G + 1))
    ell_k = sim.top_k(c, budget)
    for r in range(R):
        for j in range(1, G):
            c2 = c.copy()
            c2[r, j:] = rng.uniform(0.0, 1.0, G - j)
            if ell[r] >= j:
                assert sim.walk(c2, table, lossless=True)[r] >= j
            if ell_k[r] >= j:
                assert sim.top_k(c2, budget)[r] >= j


def test_global_walk_anticipates():
    """Appendix A's shape: without the break, c_2 (a function of x_1) decides whether x_1
    is verified at all."""
    table = sim.SPS([1, 2, 3], [1.0, 0.6, 0.6])
    assert sim.walk(np.array([[0.5, 0.9]]), table, lossless=False).tolist() == [2]
    assert sim.walk(np.array([[0.5, 0.1]]), table, lossless=False).tolist() == [0]
    for c2 in (0.9, 0.1):
        assert sim.walk(np.array([[0.5, c2]]), table, lossless=True).tolist() == [0]


def test_round_cost_pads_to_bucket_and_sps_falls():
    cost = RooflineCostModel(SimConfig())
    m = DSpark(gamma=7)
    kv = np.full(32, 400)
    q = np.full(32, 3)
    padded = sim.pad_to_bucket(int(q.sum()), m.buckets)
    assert padded >= q.sum() and padded in m.buckets
    assert m.decode_gpu_s(cost, q, kv) > m.draft_s(cost, 32, kv) > m.markov_s(cost, 32) > 0
    table = m.sps_table(cost, 32, kv)
    assert np.all(np.diff(table.sps) <= 1e-15)
    assert m.verify_s(cost, np.full(32, 8), kv) >= m.verify_s(cost, q, kv)


def _run(method: str, c: int, **spec):
    base = {"method": method, "block_size": 8, "acceptance": "constant", "alpha": 0.85}
    cfg = SimConfig.coerce({"spec": {**base, **spec},
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
    cfg = SimConfig.coerce({"spec": {"method": "dspark", "block_size": 6, "markov_rank": 32,
                                     "verify_policy": "lossless", "temperature": 1.0}})
    m = make_method(cfg)
    assert isinstance(m, DSpark) and (m.gamma, m.rank, m.policy) == (5, 32, "lossless")
    fixed = _run("dspark", 64, verify_policy="fixed")["speculation"]
    for policy in ("production", "lossless", "static"):
        s = _run("dspark", 64, verify_policy=policy, confidence_threshold=0.9)["speculation"]
        assert s["committed_tokens"] == fixed["committed_tokens"]
        assert s["verified_tokens"] <= fixed["verified_tokens"], policy
        assert max(i for i, k in enumerate(s["commit_hist"]) if k) <= 8


@given(st.integers(0, 10_000), st.integers(1, 40), st.sampled_from(sim.POLICIES[:-1]))
def test_schedule_lengths_stay_in_one_to_b(seed, n, policy):
    rng = np.random.default_rng(seed)
    acc = AcceptanceModel(n, 8)
    acc.S = np.cumprod(rng.uniform(0.3, 1.0, (n, 7)), axis=1)
    m = DSpark(7, 64, policy="fixed" if policy == "full" else policy)
    q = m.schedule(RooflineCostModel(SimConfig()), acc, np.arange(n), np.full(n, 500))
    assert q.shape == (n,) and q.min() >= 1 and q.max() <= 8
