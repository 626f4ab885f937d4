"""plan_rounds: a request's commit lengths at the curve's mean tau, its shape kept."""

from __future__ import annotations

import numpy as np
import pytest

from common.survival import commit_pmf, geometric_survival, plan_rounds


@pytest.mark.parametrize("block", [4, 8, 16])
@pytest.mark.parametrize("frac", [0.0, 0.3, 0.6, 1.0])
@pytest.mark.parametrize("tokens", [255, 511])
def test_plan_mean_is_tau_within_one_percent(block, frac, tokens):
    """tau from 1.5 to B - 0.5: over a request of >= 255 commits the plan's mean is within 1%
    of tau, and its last round is the first whose running sum reaches `tokens`."""
    tau = 1.5 + frac * (block - 2.0)
    curve = geometric_survival(tau, block)
    for seed in range(20):
        lengths = plan_rounds(curve, tokens, (seed, 3))
        assert abs(np.mean(lengths) / tau - 1) <= 0.01, (seed, np.mean(lengths))
        assert all(1 <= x <= block for x in lengths)
        running = np.cumsum(lengths)
        assert running[-1] >= tokens and (len(running) == 1 or running[-2] < tokens)


def test_plan_keeps_the_survival_shape():
    """Pooled over seeds, P(commit_len >= k + 1) is the curve's s_k (k = 1..B-1), and the
    commit-length law is the curve's differences."""
    block, tau = 8, 4.0
    curve = geometric_survival(tau, block)
    lengths = np.concatenate([plan_rounds(curve, 200, (seed, 0)) for seed in range(300)])
    measured = [(lengths >= k + 1).mean() for k in range(1, block)]
    np.testing.assert_allclose(measured, curve, atol=0.02)
    law = np.bincount(lengths, minlength=block + 1)[1:] / lengths.size
    np.testing.assert_allclose(law, commit_pmf(curve), atol=0.02)


def test_plan_is_reproducible_from_its_seed():
    curve = geometric_survival(6.5, 16)
    assert plan_rounds(curve, 255, (7, 2)) == plan_rounds(curve, 255, (7, 2))
    assert plan_rounds(curve, 255, (7, 2)) != plan_rounds(curve, 255, (7, 3))


def test_plan_edges():
    """A curve of ones commits whole blocks, one of zeros one token a round; the pmf of a
    geometric curve sums to one with mean tau."""
    assert plan_rounds([1.0] * 3, 10, 0) == [4, 4, 4]
    assert plan_rounds([0.0] * 3, 5, 0) == [1] * 5
    pmf = commit_pmf(geometric_survival(3.0, 6))
    assert pmf.sum() == pytest.approx(1.0)
    assert (pmf * np.arange(1, 7)).sum() == pytest.approx(3.0)
    with pytest.raises(ValueError, match="tokens"):
        plan_rounds([0.5], 0, 0)
