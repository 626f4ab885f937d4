"""Statistics of the distribution tests: the false-alarm budget, normal and chi-square tails,
and the seeds the slow profile runs them over.

Every statistical test is sized so that a correct implementation fails it less than
FALSE_ALARM of the time (over seeds), all its checks together (a Bonferroni split), while the
error it guards against (5% unless its docstring says otherwise) is detected with high power;
each docstring gives that computation. CI runs one seed; `HYPOTHESIS_PROFILE=slow` runs
`seeds()` over twelve, which a correct implementation passes with probability > 0.988.
"""

from __future__ import annotations

import math
import os
from statistics import NormalDist

FALSE_ALARM = 1e-3


def seeds(slow: int = 12) -> list[int]:
    """[0] in CI, 0..slow-1 under HYPOTHESIS_PROFILE=slow."""
    return list(range(slow)) if os.environ.get("HYPOTHESIS_PROFILE") == "slow" else [0]


def z_bound(checks: int = 1, alarm: float = FALSE_ALARM) -> float:
    """Two-sided normal bound each of `checks` checks may use (3.29 for one, 3.89 for ten)."""
    return NormalDist().inv_cdf(1 - alarm / (2 * checks))


def chi2_sf(stat: float, dof: int) -> float:
    """P(X >= stat) for X ~ chi-square(dof): the regularized upper incomplete gamma
    Q(dof/2, stat/2), by its series below a + 1 and its continued fraction above."""
    a, x = dof / 2.0, stat / 2.0
    if x <= 0:
        return 1.0
    log_front = a * math.log(x) - x - math.lgamma(a)
    if x < a + 1:  # P(a, x) = e^-x x^a / Gamma(a) * sum x^n / (a (a+1) .. (a+n))
        term = total = 1.0 / a
        for n in range(1, 1000):
            term *= x / (a + n)
            total += term
            if term < total * 1e-15:
                break
        return max(0.0, 1.0 - math.exp(log_front) * total)
    # Q(a, x) by Lentz's continued fraction
    b, c, d = x + 1 - a, 1e300, 1 / (x + 1 - a)
    h = d
    for i in range(1, 1000):
        an = -i * (i - a)
        b += 2
        d = 1 / (an * d + b if abs(an * d + b) > 1e-300 else 1e-300)
        c = b + an / c if abs(b + an / c) > 1e-300 else 1e-300
        h *= d * c
        if abs(d * c - 1) < 1e-15:
            break
    return math.exp(log_front) * h


def chi2_pvalue(counts, probs) -> float:
    """Pearson chi-square p-value of observed counts against probabilities (sequences of one
    length); cells expecting fewer than 5 are pooled into one."""
    counts, probs = [float(c) for c in counts], [float(p) for p in probs]
    n = sum(counts)
    obs, exp, pool_o, pool_e = [], [], 0.0, 0.0
    for c, p in zip(counts, probs, strict=True):
        if p * n < 5:
            pool_o, pool_e = pool_o + c, pool_e + p * n
        else:
            obs.append(c)
            exp.append(p * n)
    if pool_e > 0:
        obs.append(pool_o)
        exp.append(pool_e)
    if any(o > 0 for o, e in zip(obs, exp) if e == 0):
        return 0.0  # a count where nothing is expected
    stat = sum((o - e) ** 2 / e for o, e in zip(obs, exp) if e > 0)
    dof = sum(e > 0 for e in exp) - 1
    return chi2_sf(stat, dof) if dof > 0 else 1.0
