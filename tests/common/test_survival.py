"""Survival-curve identities (common/survival.py) against closed forms and hand counts."""

import math

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from common.survival import (
    conditional,
    empirical_survival,
    geometric_curve,
    geometric_survival,
    logistic_survival,
    survival_labels,
)


def test_geometric_curve_by_hand():
    assert geometric_curve(0.5, 4) == [0.5, 0.25, 0.125]
    assert geometric_curve(0.9, 1) == []


@given(st.floats(1.0, 2.0))
def test_geometric_survival_b2_is_tau_minus_one(tau):
    """B = 2: 1 + alpha = tau."""
    assert geometric_survival(tau, 2) == pytest.approx([tau - 1], abs=1e-12)


@given(st.floats(1.0, 3.0))
def test_geometric_survival_b3_solves_the_quadratic(tau):
    """B = 3: 1 + alpha + alpha^2 = tau, alpha = (-1 + sqrt(4 tau - 3)) / 2."""
    alpha = (-1 + math.sqrt(4 * tau - 3)) / 2
    assert geometric_survival(tau, 3) == pytest.approx([alpha, alpha**2], abs=1e-12)


def test_geometric_survival_ends_and_range():
    assert geometric_survival(1.0, 5) == pytest.approx([0.0] * 4, abs=1e-12)
    assert geometric_survival(5.0, 5) == pytest.approx([1.0] * 4, abs=1e-12)
    with pytest.raises(ValueError):
        geometric_survival(5.5, 5)


def test_logistic_survival_by_hand():
    """logit0 = 0, decay = ln 3: alpha = 1/2, 1/4, 1/10 (sigmoid(-ln 3^k) = 1 / (1 + 3^k))."""
    s = logistic_survival(0.0, math.log(3.0), 4)
    assert s == pytest.approx([1 / 2, 1 / 8, 1 / 80])
    assert logistic_survival(np.zeros((2, 3)), 0.0, 3).shape == (2, 3, 2)


def test_conditional_by_hand():
    assert conditional([0.8, 0.4, 0.1]) == pytest.approx([0.8, 0.5, 0.25])
    assert conditional([0.5, 0.0, 0.0]).tolist() == [0.5, 0.0, 0.0]
    assert conditional(np.array([[1.0, 0.5], [0.2, 0.1]])) == pytest.approx(
        np.array([[1.0, 0.5], [0.2, 0.5]]))


def test_empirical_survival_and_labels_by_hand():
    accept = [0, 2, 3, 1, 2]
    assert survival_labels(accept, 3).tolist() == [
        [0, 0, 0], [1, 1, 0], [1, 1, 1], [1, 0, 0], [1, 1, 0]]
    assert empirical_survival(accept, 3) == pytest.approx([4 / 5, 3 / 5, 1 / 5])
    assert empirical_survival([], 2).tolist() == [0.0, 0.0]
