"""Context-dependent acceptance: the logit shift, its closed form under a constant curve, a
simulated run against that closed form, and the fit's round trip."""

from __future__ import annotations

import numpy as np
import pytest

import simulator
from simulator.acceptance import make_acceptance, mean_commit
from simulator.context_decay import context_shift, fit_context_decay, tau_at
from simulator.params import ConfigError, SimConfig


def _constant_tau(alpha: float, B: int) -> float:
    """E[commit_len] of a constant per-position alpha: 1 + alpha + ... + alpha^(B-1)."""
    return (1 - alpha**B) / (1 - alpha)


def test_shift_is_zero_below_the_knee_then_beta_per_doubling():
    assert context_shift(4096, 1.3, 4096) == 0.0
    assert context_shift(1000, 1.3, 4096) == 0.0
    assert context_shift(8192, 1.3, 4096) == pytest.approx(1.3)  # one doubling
    assert context_shift(32768, 1.3, 4096) == pytest.approx(3.9)  # three
    with pytest.raises(ValueError, match="knee_tokens"):
        context_shift(1, 1.0, 0.0)


def test_constant_curve_shifted_per_request_matches_closed_form():
    cfg = SimConfig()
    cfg.spec.acceptance, cfg.spec.alpha, cfg.spec.block_size = "constant", 0.8, 8
    ctx = np.array([500, 1000, 2000, 8000])
    shift = context_shift(ctx, 0.7, 1000.0)  # 0, 0, 0.7, 2.1 logits
    model = make_acceptance(cfg, 4, np.zeros(4), np.random.default_rng(0), shift)
    slots = np.arange(4)
    model.admit(slots, slots)
    logit = np.log(0.8 / 0.2) - np.array([0.0, 0.0, 0.7, 2.1])
    alpha = 1 / (1 + np.exp(-logit))
    expected = [_constant_tau(a, 8) for a in alpha]
    np.testing.assert_allclose(model.expected[slots], expected, rtol=1e-12)


def test_simulated_tau_at_long_prompts_matches_closed_form():
    """Every request's prompt is 4 knees long, so each position accepts with alpha' =
    sigmoid(logit(0.85) - 2 beta). Pooled tau over R request-rounds has standard error
    sd / sqrt(R) (the rounds are independent draws of one truncated geometric law);
    R is about 7,000 here, SE about 0.02, so |error| < 4 SE fails < 1e-4 of the time for a
    correct run while a 5% error in tau (0.12 at tau 2.4) is 6 SE away."""
    B, beta, knee = 8, 0.5, 2000.0
    cfg = SimConfig.coerce(
        {
            "spec": {
                "method": "dflash",
                "block_size": B,
                "acceptance": "constant",
                "alpha": 0.85,
                "context_decay": beta,
                "context_knee_tokens": knee,
            },
            "workload": {
                "concurrency": 16,
                "num_requests": 96,
                "prompt_tokens_mean": 4 * knee,
                "prompt_tokens_cv": 0.0,
                "output_tokens_mean": 200,
                "output_tokens_cv": 0.0,
            },
            "seed": 3,
        }
    )
    spec = simulator.run(cfg).summary["speculation"]
    hist = np.array(spec["commit_hist"], dtype=np.float64)
    rounds = hist.sum()
    a = 1 / (1 + np.exp(-(np.log(0.85 / 0.15) - 2 * beta)))
    k = np.arange(1, B + 1)
    pmf = np.append(a ** (k[:-1] - 1) * (1 - a), a ** (B - 1))  # P(commit_len = k)
    tau, sd = float(pmf @ k), float(np.sqrt(pmf @ k**2 - (pmf @ k) ** 2))
    assert tau == pytest.approx(_constant_tau(a, B))
    assert abs(spec["tau"] - tau) < 4 * sd / np.sqrt(rounds)


def test_fit_recovers_the_parameters_it_generated():
    decay, sigma, B, beta, knee = 0.1, 0.5, 16, 1.1, 2.0**12
    offsets = {"a": 2.0, "b": 1.4}
    ctx = [1024, 2048, 4096, 8192, 16384, 32768]
    points = {
        ds: dict(zip(ctx, tau_at(ctx, a, beta, knee, decay, sigma, B), strict=True))
        for ds, a in offsets.items()
    }
    fit = fit_context_decay(points, decay=decay, sigma=sigma, block_size=B)
    assert fit.knee_tokens == knee
    assert fit.beta == pytest.approx(beta, abs=1e-6)
    for ds, a in offsets.items():
        assert fit.logit0[ds] == pytest.approx(a, abs=1e-6)
        assert fit.short_tau(ds, decay, sigma, B) == pytest.approx(mean_commit(a, decay, sigma, B))
    assert fit.rms_tau < 1e-6


def test_decay_needs_a_per_position_curve():
    with pytest.raises(ConfigError, match="context_decay"):
        SimConfig.coerce({"spec": {"acceptance": "mean", "context_decay": 1.0}})
    with pytest.raises(ValueError, match="at least one"):
        fit_context_decay({}, decay=0.1, sigma=0.5, block_size=16)
