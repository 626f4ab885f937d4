"""DSpark's per-round latent confidences (simulator/dspark_confidence.py): the marginal curve,
hence tau under fixed verification, is unchanged; the confidences are calibrated; rho -> 0
(noise -> infinity) is the per-request-curve model; the AUC is right on known cases; in the
simulator, per-round schedules keep lengths in [1, B] and never verify more than fixed."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

import simulator
from common.dspark_schedule import POLICIES
from simulator import dspark_confidence as conf
from simulator.acceptance import AcceptanceModel
from simulator.costs import RooflineCostModel
from simulator.methods.dspark import DSpark
from simulator.params import SimConfig

_Y = np.linspace(-9.0, 9.0, 18_001)  # a fine grid: a_k(y) is steep as rho -> 1
_W = np.exp(-0.5 * _Y**2) / np.exp(-0.5 * _Y**2).sum()


def _curves(seed: int, m: int, G: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return np.cumprod(rng.uniform(0.4, 0.98, (m, G)), axis=1)


def test_norm_cdf_and_ppf():
    z = np.array([-8.0, -3.0, -1.0, 0.0, 0.5, 2.0, 6.0])
    ref = np.array([6.22096057e-16, 1.34989803e-03, 1.58655254e-01, 0.5, 6.91462461e-01,
                    9.77249868e-01, 9.99999999e-01])
    assert np.allclose(conf.norm_cdf(z), ref, rtol=2e-7, atol=1e-12)
    p = np.array([1e-200, 1e-9, 0.01, 0.3, 0.5, 0.9, 1 - 1e-12])
    assert np.allclose(conf.norm_cdf(conf.norm_ppf(p)), p, rtol=1e-9, atol=0)


@settings(max_examples=30, deadline=None)
@given(st.integers(0, 10_000), st.floats(0.0, 0.999))
def test_posterior_survival_averages_to_the_curve(seed, rho):
    """E_y a_k(y) = S_k (y ~ N(0, 1) on a grid): the marginal curve is the preset's."""
    S = _curves(seed, 5, 7)
    a = conf.posterior_survival(conf.thresholds(S), _Y[:, None], rho)  # (grid, 5, 7)
    assert np.allclose(np.tensordot(_W, a, axes=1), S, rtol=0, atol=2e-6)
    assert np.all(np.diff(a, axis=-1) <= 1e-15)  # prefix survival never rises
    c = conf.conditional(a)
    assert np.allclose(np.cumprod(c, axis=-1), a, atol=1e-12) and c.min() >= 0 <= 1 - c.max()


def test_fixed_verification_tau_unchanged():
    """Full verification under the latent model: commit pmf and tau are the curve's (MC)."""
    S = _curves(3, 4, 7)
    pmf = -np.diff(np.concatenate([np.ones((4, 1)), S, np.zeros((4, 1))], axis=1), axis=1)
    tau = 1.0 + S.sum(axis=1)
    rng, N = np.random.default_rng(0), 100_000
    for rho in (0.5, 0.9, 0.99):
        a = conf.posterior_survival(conf.thresholds(S), rng.standard_normal((N, 4)), rho)
        commits = conf.draw_commits(a, np.full((N, 4), 7), rng.random((N, 4)))
        se = commits.std(axis=0) / np.sqrt(N)
        assert np.all(np.abs(commits.mean(axis=0) - tau) < 4 * se), rho
        hist = np.stack([np.bincount(commits[:, r], minlength=9)[1:] / N for r in range(4)])
        assert np.abs(hist - pmf).max() < 4 * np.sqrt(0.25 / N), rho


def test_confidences_are_calibrated():
    """Among rounds whose drafts 1..k-1 were accepted, draft k is accepted at rate c_k."""
    S = _curves(5, 3, 6)
    rng, N, rho = np.random.default_rng(1), 200_000, 0.8
    t = conf.thresholds(S)
    y = rng.standard_normal((N, 3))
    x = rho * y + np.sqrt(1 - rho**2) * rng.standard_normal((N, 3))
    c = conf.conditional(conf.posterior_survival(t, y, rho))
    acc = x[..., None] < t
    for k in (0, 2, 5):
        alive = acc[..., k - 1] if k else np.ones_like(x, dtype=bool)
        ck, hit = c[..., k][alive], acc[..., k][alive]
        bins = np.minimum((ck * 10).astype(int), 9)
        for b in range(10):
            sel = bins == b
            if sel.sum() > 1000:
                p = ck[sel].mean()
                se = np.sqrt(p * (1 - p) / sel.sum())
                assert abs(hit[sel].mean() - p) < 4 * se + 1e-3, (k, b)


def test_rho_zero_is_the_per_request_curve():
    """Noise -> infinity: the confidences are each request's curve, the same every round."""
    S = _curves(7, 6, 7)
    y = np.random.default_rng(0).standard_normal((50, 6))
    for rho in (0.0, 1e-9):
        a = conf.posterior_survival(conf.thresholds(S), y, rho)
        assert np.allclose(a, np.broadcast_to(S, a.shape), rtol=1e-6, atol=1e-12)
    assert np.allclose(conf.position_auc(S[:1], 0.0, 5000, np.random.default_rng(0)), 0.5)


def test_auc_known_cases():
    assert conf.auc([0.1, 0.4, 0.35, 0.8], [0, 0, 1, 1]) == 0.75
    assert conf.auc([0.5, 0.5, 0.5], [1, 0, 1]) == 0.5  # ties count one half
    assert conf.auc([3, 2, 1], [1, 1, 0]) == 1.0
    rng = np.random.default_rng(0)
    pos, neg = rng.normal(1.0, 1.0, 40_000), rng.normal(0.0, 1.0, 40_000)
    binormal = float(conf.norm_cdf(np.array(1.0 / np.sqrt(2.0))))  # Phi(d / sqrt(2))
    got = conf.auc(np.r_[pos, neg], np.r_[np.ones(pos.size), np.zeros(neg.size)])
    assert abs(got - binormal) < 0.006
    S = _curves(9, 1, 5)
    assert np.allclose(conf.position_auc(S, 1.0, 20_000, rng), 1.0)
    lo, hi = (conf.position_auc(S, r, 20_000, np.random.default_rng(2)) for r in (0.5, 0.9))
    assert np.all((0.5 < lo) & (lo < hi) & (hi < 1.0))


def _acceptance(n: int, seed: int) -> AcceptanceModel:
    acc = AcceptanceModel(n, 8)
    acc.S = np.cumprod(np.random.default_rng(seed).uniform(0.5, 0.97, (n, 7)), axis=1)
    acc.rng = np.random.default_rng(seed + 1)
    return acc


@given(st.integers(0, 10_000), st.integers(1, 40), st.sampled_from(POLICIES[:-1]))
def test_per_round_schedule_lengths_in_one_to_b(seed, n, policy):
    m = DSpark(7, 64, policy="fixed" if policy == "full" else policy, confidence_corr=0.8)
    q, commits = m.plan_rounds(RooflineCostModel(SimConfig()), _acceptance(n, seed),
                               np.arange(n), np.full(n, 500), 5)
    assert q.shape == commits.shape == (5, n)
    assert q.min() >= 1 and q.max() <= 8 and np.all((commits >= 1) & (commits <= q))


def test_tiny_rho_reproduces_the_stretch_schedule():
    """rho -> 0: every round's lengths are the per-stretch schedule of the curve model."""
    cost = RooflineCostModel(SimConfig())
    for policy in ("lossless", "static", "production"):
        kw = {"policy": policy, "threshold": 0.7}
        old = DSpark(7, 64, **kw)
        new = DSpark(7, 64, confidence_corr=1e-9, **kw)
        acc = _acceptance(24, 11)
        ref = [old.schedule(cost, acc, np.arange(24), np.full(24, 700)) for _ in range(3)]
        q, _ = new.plan_rounds(cost, acc, np.arange(24), np.full(24, 700), 3)
        assert np.array_equal(q, np.stack(ref)), policy


def _run(c: int, rho: float, seed: int = 0, **options) -> dict:
    cfg = SimConfig.coerce({
        "spec": {"method": "dspark", "block_size": 8, "acceptance": "preset", "tau": 5.5,
                 "trained_block_size": 8, "decay_logit": 0.05, "temperature": 1.0,
                 "options": {"confidence_corr": rho, **options}},
        "engine": {"max_running_requests": 256},
        "workload": {"concurrency": c, "num_requests": 8 * c}, "seed": seed})
    return simulator.run(cfg).summary["speculation"]


def test_simulator_tau_unchanged_and_budgets_never_exceed_fixed():
    """Fixed verification: tau with the latent model equals tau without (statistically);
    the per-round schedules commit the same tokens and verify no more than fixed."""
    base = [_run(32, 0.0, seed=s, verify_policy="fixed")["tau"] for s in range(3)]
    latent = [_run(32, 0.9, seed=s, verify_policy="fixed")["tau"] for s in range(3)]
    assert abs(np.mean(latent) / np.mean(base) - 1) < 0.02
    fixed = _run(64, 0.9, verify_policy="fixed")
    for policy in ("production", "lossless", "static"):
        s = _run(64, 0.9, verify_policy=policy, confidence_threshold=0.6)
        assert s["committed_tokens"] == fixed["committed_tokens"]
        assert s["verified_tokens"] < fixed["verified_tokens"], policy
        assert max(i for i, k in enumerate(s["commit_hist"]) if k) <= 8


def test_simulator_tiny_rho_reproduces_rho_zero():
    """Noise -> infinity through simulator.run: tau and verify tokens per round as rho = 0."""
    for policy in ("lossless", "production"):
        runs = {rho: [_run(32, rho, seed=s, verify_policy=policy) for s in range(3)]
                for rho in (0.0, 1e-9)}
        tau = {r: np.mean([s["tau"] for s in v]) for r, v in runs.items()}
        ver = {r: np.mean([s["verified_tokens"] / sum(s["commit_hist"]) for s in v])
               for r, v in runs.items()}
        assert abs(tau[1e-9] / tau[0.0] - 1) < 0.02, policy
        assert abs(ver[1e-9] / ver[0.0] - 1) < 0.02, policy
