"""Analytic anchors: M/M/1 sojourn time, the chained-acceptance law through a whole run,
and Little's law (checked by `simulate` on every run of the suite)."""

from __future__ import annotations

import numpy as np
import pytest

from tests.simulator.helpers import FixedRoundCost, simulate, small


def test_mm1_mean_time_in_system():
    """No speculation, batch 1, one-token prompts, geometric output lengths (mean m) and a
    fixed time r per forward: service times are r * Geometric(1/m), close to exponential
    with rate mu = 1/(r m) (M/G/1 correction (2 - 1/m)/2 on E[S^2], under 0.3% here)."""
    r, m, lam = 1e-3, 200, 2.5
    mu = 1.0 / (r * m)
    cfg = small("none", engine__mode="sync", engine__max_running_requests=1,
                workload__arrival="poisson", workload__rate_rps=lam,
                workload__num_requests=12_000, workload__prompt_tokens_mean=1,
                workload__prompt_tokens_cv=0.0, workload__output_dist="exponential",
                workload__output_tokens_mean=m, workload__max_new_tokens=1 << 20,
                metrics__sample_period_s=0.5)
    _, res = simulate(cfg, cost_model=FixedRoundCost(r))
    e2e = res.requests["e2e_s"]
    batches = np.array_split(e2e[2000:], 20)  # drop the warm-up, then batch means
    means = np.array([b.mean() for b in batches])
    se = means.std(ddof=1) / np.sqrt(len(means))
    expected = 1.0 / (mu - lam)
    assert abs(means.mean() - expected) < 3 * se + 0.005 * expected, (means.mean(), expected)
    # and the service-time distribution itself is the exponential one
    service = res.requests["finish_s"] - np.maximum(
        res.requests["arrival_s"], np.concatenate([[0], res.requests["finish_s"][:-1]]))
    assert service.mean() == pytest.approx(1 / mu, rel=0.03)
    assert service.std() == pytest.approx(1 / mu, rel=0.05)


@pytest.mark.parametrize("alpha,B", [(0.6, 4), (0.8, 16), (0.95, 8)])
def test_constant_acceptance_tau_through_the_engine(alpha, B):
    cfg = small("dflash", spec__acceptance="constant", spec__alpha=alpha,
                spec__block_size=B, workload__num_requests=200,
                workload__output_tokens_mean=400)
    _, res = simulate(cfg)
    sp = res.summary["speculation"]
    rounds = np.asarray(sp["commit_hist"]).sum()
    expected = (1 - alpha**B) / (1 - alpha)
    var = sum((k**2) * p for k, p in enumerate(_pmf(alpha, B))) - expected**2
    assert abs(sp["tau"] - expected) < 4 * np.sqrt(var / rounds), (sp["tau"], expected)


def _pmf(alpha, B):
    surv = alpha ** np.arange(B)  # P(commit >= k+1), k = 0..B-1
    p = np.append(surv[:-1] - surv[1:], surv[-1])
    return np.concatenate([[0.0], p])  # index = commit length


@pytest.mark.parametrize("mode", ["sync", "overlap"])
@pytest.mark.parametrize("arrival", ["poisson", "gamma", "closed_loop"])
def test_littles_law(mode, arrival):
    cfg = small("dflash", engine__mode=mode, workload__arrival=arrival,
                workload__rate_rps=40.0, workload__num_requests=400,
                metrics__sample_period_s=0.002)
    _, res = simulate(cfg)
    law = res.summary["littles_law"]
    assert law["samples"] > 1000 and law["rel_err"] < 0.02, law
