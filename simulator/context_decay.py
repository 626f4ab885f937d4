"""Acceptance that decays with context length: a logit shift of the per-position curve.

The preset curve (simulator/acceptance.py) is logit(alpha_j) = a + sigma * z - d * (j - 1).
With context decay, a request whose context holds `ctx` tokens gets

    logit(alpha_j(ctx)) = a + sigma * z - d * (j - 1) - beta * max(0, log2(ctx / c0)),

i.e. acceptance is flat up to the knee c0 (a drafter's training length, say) and every
position loses beta logits per doubling of the context past it. beta = `spec.context_decay`,
c0 = `spec.context_knee_tokens`; beta = 0 is the curve without decay, and below the knee the
published tau holds unchanged. A request's context is its prompt length, read once at
admission: outputs are short next to the long prompts this models, and the curve is not
updated while the request decodes.

`fit_context_decay` fits (a per dataset, beta, c0) to measured tau by context length (the
DFlash paper's Table 4, LongBench; the toy world's buckets): each tau is turned into the
offset whose mean commit length it is (`solve_logit0`), and the offsets are fitted in logit
space, where the model is linear in (a, beta) for a fixed c0 (least squares), c0 by a search
over a log grid.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from simulator.acceptance import mean_commit, solve_logit0


def context_shift(ctx, beta: float, knee_tokens: float):
    """beta * max(0, log2(ctx / c0)): the logit drop of every position at context `ctx`
    (tokens; a float or an array)."""
    if knee_tokens <= 0:
        raise ValueError(f"knee_tokens must be > 0, got {knee_tokens}")
    ratio = np.maximum(np.asarray(ctx, dtype=np.float64) / knee_tokens, 1.0)
    return beta * np.log2(ratio)


def tau_at(
    ctx, logit0: float, beta: float, knee_tokens: float, decay: float, sigma: float, block_size: int
) -> np.ndarray:
    """Mean commit length over requests (z ~ N(0, 1)) at each context length of `ctx`."""
    shift = np.atleast_1d(context_shift(ctx, beta, knee_tokens))
    return np.array([mean_commit(logit0 - s, decay, sigma, block_size) for s in shift])


@dataclass(frozen=True)
class DecayFit:
    """A fitted decay: offsets a per dataset, beta, c0, and the fit's residuals.

    rms_tau: root mean square of (fitted - measured) tau over all points.
    """

    logit0: dict[str, float]
    beta: float
    knee_tokens: float
    rms_tau: float

    def short_tau(self, dataset: str, decay: float, sigma: float, block_size: int) -> float:
        """tau of `dataset` below the knee (no decay)."""
        return mean_commit(self.logit0[dataset], decay, sigma, block_size)


def fit_context_decay(
    points: dict[str, dict[int, float]],
    *,
    decay: float,
    sigma: float,
    block_size: int,
    knees: np.ndarray | None = None,
) -> DecayFit:
    """Least-squares fit in logit space of tau measured by context length.

    Args:
        points: {dataset: {context tokens: tau}}; every tau in (1, block_size).
        decay, sigma: the curve's d and sigma (held fixed).
        block_size: B the taus were measured at.
        knees: candidate c0 values (tokens); default 2^6 .. 2^17 in quarter octaves.
    """
    if not points or any(not v for v in points.values()):
        raise ValueError("points must hold at least one (context, tau) per dataset")
    knees = 2.0 ** np.arange(6, 17.01, 0.25) if knees is None else np.asarray(knees, float)
    names = sorted(points)
    rows = [
        (names.index(ds), ctx, solve_logit0(tau, decay, sigma, block_size))
        for ds in names
        for ctx, tau in sorted(points[ds].items())
    ]
    idx = np.array([r[0] for r in rows])
    ctx = np.array([r[1] for r in rows], dtype=np.float64)
    y = np.array([r[2] for r in rows])
    best = None
    for c0 in knees:
        X = np.zeros((len(rows), len(names) + 1))
        X[np.arange(len(rows)), idx] = 1.0
        X[:, -1] = -context_shift(ctx, 1.0, c0)
        coef, *_ = np.linalg.lstsq(X, y, rcond=None)
        sse = float(((X @ coef - y) ** 2).sum())
        if best is None or sse < best[0] - 1e-12:
            best = (sse, float(c0), coef)
    _, c0, coef = best
    a = {ds: float(coef[i]) for i, ds in enumerate(names)}
    fitted = [
        tau_at(c, a[ds], coef[-1], c0, decay, sigma, block_size)[0]
        for ds in names
        for c in sorted(points[ds])
    ]
    measured = [points[ds][c] for ds in names for c in sorted(points[ds])]
    rms = float(np.sqrt(np.mean((np.array(fitted) - np.array(measured)) ** 2)))
    return DecayFit(a, float(coef[-1]), c0, rms)
