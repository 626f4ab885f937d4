"""DSpark's per-round confidences: a latent difficulty per (request, round), calibrated.

Request r has the survival curve S_k = P(accept_len >= k), k = 1..gamma, of its acceptance
model. Each round draws a latent difficulty x ~ N(0, 1) per request; draft k of that round is
accepted iff x < t_k = Phi^-1(S_k). The t_k do not increase with k, so the accepted drafts
are a prefix and accept_len = #{k : x < t_k}: P(accept_len >= k) = S_k exactly, so the
distribution of a round's commit under fixed verification (and tau) is the curve's.

The scheduler sees a signal y = rho x + sqrt(1 - rho^2) eta, eta ~ N(0, 1) (corr(x, y) = rho;
the noise-to-signal ratio is eps = sqrt(1 - rho^2) / rho), and the calibrated posterior
confidences

    a_k(y) = P(x < t_k | y) = Phi((t_k - rho y) / sqrt(1 - rho^2)),   c_k = a_k / a_{k-1},

so c_k = P(draft k accepted | drafts 1..k-1 accepted, y) and a = cumprod(c). Given y, the
accept length has survival a_k(y), so a round's commit is drawn as 1 + #{k <= l : u < a_k(y)},
u ~ U(0, 1), cut at the verify length l the scheduler chose from these c. E_y a_k(y) = S_k:
the marginal curve is the preset's for every rho. rho = 0 (eps -> infinity): a_k = S_k, the
previous model (each request's expected curve, no per-round information); rho = 1: an oracle
that knows each round's accept length.

`position_auc` gives the implied AUC of c_k for "draft k accepted" among rounds whose drafts
1..k-1 were accepted (the event c_k predicts), pooled over the given curves; `auc` is the
Mann-Whitney statistic with ties counted one half. Phi and Phi^-1 are numpy approximations
(relative error ~1e-7 and, after a Halley step, ~1e-9 against it).
"""

from __future__ import annotations

import numpy as np

from common.survival import conditional

_SQRT2 = np.sqrt(2.0)
_ERFC = (-1.26551223, 1.00002368, 0.37409196, 0.09678418, -0.18628806, 0.27886807,
         -1.13520398, 1.48851587, -0.82215223, 0.17087277)


def norm_cdf(z: np.ndarray) -> np.ndarray:
    """Phi(z) from the Chebyshev erfc (Numerical Recipes erfcc; fractional error < 1.2e-7)."""
    z = np.asarray(z, dtype=np.float64)
    x = np.abs(z) / _SQRT2
    t = 1.0 / (1.0 + 0.5 * x)
    poly = np.zeros_like(t)
    for coef in _ERFC[:0:-1]:
        poly = (poly + coef) * t
    with np.errstate(under="ignore"):
        tail = 0.5 * t * np.exp(-x * x + _ERFC[0] + poly)  # P(N > |z|)
    return np.where(z >= 0, 1.0 - tail, tail)


_A = (-3.969683028665376e01, 2.209460984245205e02, -2.759285104469687e02,
      1.383577518672690e02, -3.066479806614716e01, 2.506628277459239e00)
_B = (-5.447609879822406e01, 1.615858368580409e02, -1.556989798598866e02,
      6.680131188771972e01, -1.328068155288572e01, 1.0)
_C = (-7.784894002430293e-03, -3.223964580411365e-01, -2.400758277161838e00,
      -2.549732539343734e00, 4.374664141464968e00, 2.938163982698783e00)
_D = (7.784695709041462e-03, 3.224671290700398e-01, 2.445134137142996e00,
      3.754408661907416e00, 1.0)


def norm_ppf(p: np.ndarray) -> np.ndarray:
    """Phi^-1(p) (Acklam's rational approximation + one Halley step on `norm_cdf`);
    p is clipped to [1e-300, 1 - 1e-16]."""
    p = np.clip(np.asarray(p, dtype=np.float64), 1e-300, 1.0 - 1e-16)
    q = np.minimum(p, 1.0 - p)
    tail = np.sqrt(-2.0 * np.log(q))
    x_tail = np.polyval(_C, tail) / np.polyval(_D, tail)  # the lower tail (p < 0.02425)
    r = (p - 0.5) ** 2
    x_mid = (p - 0.5) * np.polyval(_A, r) / np.polyval(_B, r)
    x = np.where(q < 0.02425, np.where(p < 0.5, x_tail, -x_tail), x_mid)
    e = norm_cdf(x) - p
    with np.errstate(over="ignore", invalid="ignore"):
        u = e * np.sqrt(2.0 * np.pi) * np.exp(0.5 * x * x)
        step = u / (1.0 + 0.5 * x * u)
    return np.where(np.isfinite(step), x - step, x)


def thresholds(S: np.ndarray) -> np.ndarray:
    """t_k = Phi^-1(S_k): draft k is accepted iff the round's latent x < t_k."""
    return norm_ppf(S)


def posterior_survival(t: np.ndarray, y: np.ndarray, rho: float) -> np.ndarray:
    """a_k(y) = P(x < t_k | y), shape y.shape + (gamma,); t (n, gamma), y (..., n)."""
    s = max(np.sqrt(max(1.0 - rho * rho, 0.0)), 1e-12)
    return norm_cdf((t - rho * np.asarray(y)[..., None]) / s)


def draw_commits(a: np.ndarray, ell: np.ndarray, u: np.ndarray) -> np.ndarray:
    """1 + #{k <= l : u < a_k}: a (..., gamma), ell (...) verify lengths, u (...) uniforms."""
    k = np.arange(1, a.shape[-1] + 1)
    return 1 + ((u[..., None] < a) & (k <= ell[..., None])).sum(axis=-1)


def auc(scores: np.ndarray, labels: np.ndarray) -> float:
    """P(score of a positive > score of a negative) + P(tie) / 2 (rank formula, midranks)."""
    scores, labels = np.asarray(scores, dtype=np.float64).ravel(), np.asarray(labels).ravel()
    pos = labels.astype(bool)
    n1, n0 = int(pos.sum()), int((~pos).sum())
    if n1 == 0 or n0 == 0:
        return float("nan")
    order = np.argsort(scores, kind="mergesort")
    s = scores[order]
    ranks = np.empty(s.size)
    starts = np.flatnonzero(np.r_[True, s[1:] != s[:-1]])
    ends = np.r_[starts[1:], s.size]
    ranks[order] = np.repeat((starts + ends + 1) / 2.0, ends - starts)  # midranks, 1-based
    return float((ranks[pos].sum() - n1 * (n1 + 1) / 2.0) / (n1 * n0))


def position_auc(S: np.ndarray, rho: float, rounds: int, rng: np.random.Generator
                 ) -> np.ndarray:
    """Monte Carlo AUC of c_k for "draft k accepted" given drafts 1..k-1 accepted, k = 1..gamma,
    pooled over `rounds` rounds of each curve in S (m, gamma)."""
    t = thresholds(S)
    m, G = S.shape
    y = rng.standard_normal((rounds, m))
    x = rho * y + np.sqrt(max(1.0 - rho * rho, 0.0)) * rng.standard_normal((rounds, m))
    c = conditional(posterior_survival(t, y, rho))
    acc = x[..., None] < t  # (rounds, m, gamma)
    out = np.full(G, np.nan)
    for k in range(G):
        alive = acc[..., k - 1] if k else np.ones_like(x, dtype=bool)
        out[k] = auc(c[..., k][alive], acc[..., k][alive])
    return out
