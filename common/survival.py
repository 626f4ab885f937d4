"""Survival curves of speculative rounds and the identities between them.

For drafts 1..B-1 of a round, the survival S_k = P(accept_len >= k) (k = 1..B-1) is the
product of the conditional acceptances alpha_j = P(draft j accepted | 1..j-1 accepted):
S_k = prod_{j <= k} alpha_j, so alpha_k = S_k / S_{k-1} (S_0 = 1), and the mean commit length
per round is tau = E[commit_len] = 1 + sum_k S_k. The last axis of every array is k.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np


def geometric_curve(alpha: float, block_size: int) -> list[float]:
    """S_k = alpha^k, k = 1..B-1 (constant conditional acceptance alpha)."""
    return [alpha**k for k in range(1, block_size)]


def geometric_survival(tau: float, block_size: int) -> list[float]:
    """The geometric curve alpha^k (k = 1..B-1) whose mean commit length is tau.

    Solves 1 + sum_{k=1}^{B-1} alpha^k = tau for alpha in [0, 1] by bisection; tau must lie
    in [1, B].
    """
    if not 1.0 <= tau <= block_size:
        raise ValueError(f"tau={tau} must lie in [1, B={block_size}]")
    lo, hi = 0.0, 1.0
    for _ in range(100):
        alpha = (lo + hi) / 2
        if 1 + sum(geometric_curve(alpha, block_size)) < tau:
            lo = alpha
        else:
            hi = alpha
    return geometric_curve(lo, block_size)


def commit_pmf(survival: Sequence[float]) -> np.ndarray:
    """(B,) P(commit_len = k), k = 1..B, of a survival curve s_1..s_{B-1}:
    S_{k-1} - S_k with S_0 = 1 and S_B = 0."""
    s = np.concatenate([[1.0], np.asarray(survival, dtype=np.float64), [0.0]])
    return s[:-1] - s[1:]


def plan_rounds(survival: Sequence[float], tokens: int, seed) -> list[int]:
    """Commit lengths of the R rounds of a request that commits `tokens` tokens, at the mean
    tau = 1 + sum(survival) of the curve, drawn so that the realized mean is tau:

    R = ceil(tokens / tau) rounds that commit S = max(tokens, round(R * tau)) tokens in all
    (|S / R - tau| <= 0.5 / R, or tokens / R for a curve near B), their lengths the R
    stratified quantiles F^-1((i + u) / R) of the curve's commit-length law (`commit_pmf`;
    its shape kept), moved by ones on seeded rounds (never outside 1..B) until they sum to
    S, in a seeded order whose last round is one that crosses `tokens` (the rounds before it
    commit fewer than `tokens`). `seed`: anything numpy's default_rng takes, e.g. (seed,
    request id), so each request's plan is reproducible.
    """
    if tokens < 1:
        raise ValueError(f"tokens must be >= 1, got {tokens}")
    block = len(survival) + 1
    tau = 1.0 + float(np.sum(survival))
    rng = np.random.default_rng(seed)
    rounds = int(np.ceil(tokens / tau - 1e-9))
    total = max(tokens, int(np.floor(rounds * tau + 0.5)))
    cdf = np.cumsum(commit_pmf(survival))
    u = (np.arange(rounds) + rng.random()) / rounds
    lengths = np.minimum(np.searchsorted(cdf, u, side="right") + 1, block)
    while (gap := total - int(lengths.sum())) != 0:
        movable = np.flatnonzero(lengths < block if gap > 0 else lengths > 1)
        lengths[rng.choice(movable)] += 1 if gap > 0 else -1
    crossing = np.flatnonzero(lengths > total - tokens)
    last = rng.choice(crossing) if crossing.size else int(np.argmax(lengths))
    rest = rng.permutation(np.delete(lengths, last))
    return [int(x) for x in rest] + [int(lengths[last])]


def logistic_survival(logit0, decay: float, block_size: int) -> np.ndarray:
    """S (..., B-1) for logit(alpha_j) = logit0 - decay * (j - 1), j = 1..B-1.

    Args:
        logit0: the first position's logit, a float or an array (...) of them.
        decay: logit drop per position along the block.
        block_size: B; the curve has B - 1 entries.
    """
    j = np.arange(block_size - 1)
    alpha = 1.0 / (1.0 + np.exp(-(np.asarray(logit0)[..., None] - decay * j)))
    return np.cumprod(alpha, axis=-1)


def conditional(survival) -> np.ndarray:
    """alpha_k = S_k / S_{k-1} with S_0 = 1, and 0 where S_{k-1} = 0: (..., K) -> (..., K)."""
    s = np.asarray(survival, dtype=np.float64)
    prev = np.concatenate([np.ones_like(s[..., :1]), s[..., :-1]], axis=-1)
    return np.where(prev > 0, s / np.maximum(prev, 1e-300), 0.0)


def survival_labels(lengths: Sequence[int] | np.ndarray, n: int) -> np.ndarray:
    """(N, n) float 1[lengths_i >= k], k = 1..n, of N observed lengths."""
    return (np.asarray(lengths)[:, None] >= np.arange(1, n + 1)).astype(np.float64)


def empirical_survival(lengths: Sequence[int] | np.ndarray, n: int) -> np.ndarray:
    """(n,) P(length >= k), k = 1..n, over observed lengths (all 0 when there are none).

    Pass accept lengths with n = gamma for S_k = P(accept_len >= k), or commit lengths with
    n = B for P(commit_len >= k).
    """
    lengths = np.asarray(lengths, dtype=np.int64).ravel()
    return survival_labels(lengths, n).sum(axis=0) / max(lengths.size, 1)
