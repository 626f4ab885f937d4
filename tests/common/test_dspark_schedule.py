"""DSpark's verify-length scheduler (common/dspark_schedule.py): a hand-computed batch, the
vectorised walk against a plain-Python walk written here, non-anticipation of the lossless
and production policies, and the appendix-A anticipation of the unbroken walk."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, note
from hypothesis import strategies as st

from common.dspark_schedule import Scheduler, SPSTable, static_threshold, top_k, walk

# c = [[0.9, 0.5], [0.6, 0.1]]: prefix survival a = [[0.9, 0.45], [0.6, 0.06]], candidates
# in order (0.9, r0 j1), (0.6, r1 j1), (0.45, r0 j2), (0.06, r1 j2). With R = 2 and the
# table below, Theta_n = tau_n * SPS(2 + n):
#   n=0: 2.00 * 1.0 = 2.0;   n=1: 2.90 * 0.9 = 2.61;   n=2: 3.50 * 0.7 = 2.45;
#   n=3: 3.95 * 0.75 = 2.9625 (the max);   n=4: 4.01 * 0.5 = 2.005.
HAND_C = np.array([[0.9, 0.5], [0.6, 0.1]])
HAND_SPS = SPSTable([2, 3, 4, 5, 6], [1.0, 0.9, 0.7, 0.75, 0.5])


def test_hand_computed_batch():
    assert walk(HAND_C, HAND_SPS, lossless=True).tolist() == [1, 0]  # stops at n = 2
    assert walk(HAND_C, HAND_SPS, lossless=False).tolist() == [2, 1]  # argmax n = 3
    assert static_threshold(HAND_C, 0.55).tolist() == [1, 1]
    assert [top_k(HAND_C, k).tolist() for k in (0, 1, 2, 3, 9)] == [
        [0, 0], [1, 0], [1, 1], [2, 1], [2, 2]]
    assert Scheduler("full")(HAND_C).tolist() == [2, 2]


def test_production_uses_the_budget_of_lag_rounds_earlier():
    sched = Scheduler("production", HAND_SPS, lag=2)
    later = np.array([[0.2, 0.9], [0.95, 0.9]])  # a = [[0.2, 0.18], [0.95, 0.855]]
    assert sched(HAND_C).tolist() == [2, 2]  # warm-up: no budget yet
    assert sched(later).tolist() == [2, 2]
    # budget from HAND_C's global walk: 2 + 1 = 3 candidates, admitted by later's a
    assert sched(later).tolist() == [1, 2]


def test_sps_table_lookup():
    assert HAND_SPS(4) == 0.7 and isinstance(HAND_SPS(4), float)
    assert HAND_SPS(1) == 1.0
    assert HAND_SPS(12) == pytest.approx(0.5 * 6 / 12)
    assert HAND_SPS(np.array([2, 5, 7])).tolist() == pytest.approx([1.0, 0.75, 0.5 * 6 / 7])
    with pytest.raises(ValueError):
        SPSTable([1, 2], [1.0, 0.0])
    with pytest.raises(ValueError):
        Scheduler("best")
    with pytest.raises(ValueError):
        Scheduler("lossless")


def _loop_walk(c, sps, lossless):
    """The walk one candidate at a time, in plain Python (an independent oracle)."""
    a = np.cumprod(c, axis=1)
    R, G = a.shape
    cand = sorted(((float(a[r, j]), j + 1, r) for r in range(R) for j in range(G)
                   if a[r, j] > 0), key=lambda t: (-t[0], t[1], t[2]))
    ell, total, tau = [0] * R, R, float(R)
    best, best_ell = tau * float(sps(total)), list(ell)
    for p, j, r in cand:
        ell[r], total, tau = j, total + 1, tau + p
        theta = tau * float(sps(total))
        if theta > best:
            best, best_ell = theta, list(ell)
        elif lossless:
            break
    return best_ell


def _case(seed: int, R: int, G: int, jagged: bool):
    rng = np.random.default_rng(seed)
    c = rng.uniform(0.0, 1.0, (R, G)) ** rng.uniform(0.2, 2.0)
    c[rng.random((R, G)) < 0.05] = 0.0
    tokens = np.arange(1, R * (G + 1) + 8)
    sps = 1.0 / (1.0 + 0.02 * tokens + 0.01 * rng.random(tokens.size) * jagged)
    if jagged:
        sps = sps[np.minimum((tokens + 7) // 8 * 8, tokens[-1]) - 1]
    return c, SPSTable(tokens, sps)


@given(st.integers(0, 10_000), st.integers(1, 9), st.integers(1, 8), st.booleans())
def test_vectorised_walk_matches_the_loop(seed, R, G, jagged):
    c, table = _case(seed, R, G, jagged)
    note(f"{seed=} {R=} {G=} {jagged=}")
    for lossless in (True, False):
        assert walk(c, table, lossless).tolist() == _loop_walk(c, table, lossless)
    assert Scheduler("static", threshold=0.4)(c).tolist() == [
        next((k for k in range(G) if c[r, k] < 0.4), G) for r in range(R)]


@given(st.integers(0, 10_000), st.integers(1, 6), st.integers(2, 6), st.booleans())
def test_lossless_admission_ignores_later_confidences(seed, R, G, jagged):
    """Whether x_j is verified (l_r >= j) never depends on c[r, j+1:], which the sampled
    x_j determines; the production top-K admission has the same property."""
    c, table = _case(seed, R, G, jagged)
    rng = np.random.default_rng(seed + 1)
    ell = walk(c, table, lossless=True)
    budget = int(rng.integers(0, R * G + 1))
    ell_k = top_k(c, budget)
    for r in range(R):
        for j in range(1, G):
            c2 = c.copy()
            c2[r, j:] = rng.uniform(0.0, 1.0, G - j)
            if ell[r] >= j:
                assert walk(c2, table, lossless=True)[r] >= j
            if ell_k[r] >= j:
                assert top_k(c2, budget)[r] >= j


def test_global_walk_anticipates():
    """Appendix A's shape: without the break, c_2 (a function of x_1) decides whether x_1
    is verified at all."""
    table = SPSTable([1, 2, 3], [1.0, 0.6, 0.6])
    assert walk(np.array([[0.5, 0.9]]), table, lossless=False).tolist() == [2]
    assert walk(np.array([[0.5, 0.1]]), table, lossless=False).tolist() == [0]
    for c2 in (0.9, 0.1):
        assert walk(np.array([[0.5, c2]]), table, lossless=True).tolist() == [0]


def test_rules_at_their_boundaries():
    """static keeps c == threshold; lossless stops at a step that only ties Theta (R = 1,
    c = 0.5 with SPS 3, 2: Theta_0 = 1 * 3 = Theta_1 = 1.5 * 2); production rescales the
    budget of `lag` rounds earlier to the current batch: HAND_C's global walk admits 3
    candidates of 2 requests, so 4 requests get 6."""
    c = np.array([[0.5, 0.5, 0.4], [0.6, 0.49, 1.0]])
    assert static_threshold(c, 0.5).tolist() == [2, 1]
    tie = SPSTable([1, 2], [3.0, 2.0])
    assert walk(np.array([[0.5]]), tie, lossless=True).tolist() == [0]
    sched = Scheduler("production", HAND_SPS, lag=1)
    assert sched(HAND_C).tolist() == [2, 2]  # warm-up
    # a = .9 .81 | .8 .64 | .7 .49 | .6 .36: the top six are r0 x2, r1 x2, r2, r3
    wider = np.repeat([[0.9], [0.8], [0.7], [0.6]], 2, axis=1)
    assert sched(wider).tolist() == [2, 2, 1, 1]
