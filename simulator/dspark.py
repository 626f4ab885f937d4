"""DSpark in the simulator: the verify-length scheduler (numpy).

The scheduler is the vectorised twin of reference/dspark_schedule.py (plain Python; the
simulator never imports reference/ or torch): a tests/simulator check runs both on the same
confidences. Candidates (r, j) are sorted by (-a[r, j], j, r), a = cumprod(c); admitting the
first n of them gives B_n = R + n verify tokens and tau_n = R + sum of their a, and
Theta_n = tau_n * SPS(B_n). "lossless" stops at the first n that does not improve Theta
(Alg. 1), "global" takes the argmax (biased), "production" admits the top-K by current a with
K from the global argmax over the confidences of `lag` rounds earlier, "static" cuts at the
first c < threshold, "full" verifies all gamma drafts.

The method that uses it, `DSpark` (its round cost, and how a stretch's confidences come from
the acceptance model), is simulator/methods/dspark.py.
"""

from __future__ import annotations

from collections import deque

import numpy as np

BATCH_BUCKETS = (1, 2, 4, 8, 16, 24, 32, 48, 64, 96, 128, 192, 256)
POLICIES = ("full", "static", "lossless", "global", "production")


def token_buckets(block_size: int, max_tokens: int = 1 << 14) -> np.ndarray:
    """CUDA-graph token sizes: capture_bs x B (SGLang compact mode) plus multiples of 8 up to
    256 and of 64 beyond (the optional extra buckets; our choice [I])."""
    grid = {b * block_size for b in BATCH_BUCKETS}
    grid |= set(range(8, 257, 8)) | set(range(320, max_tokens + 1, 64))
    return np.array(sorted(g for g in grid if g <= max_tokens), dtype=np.int64)


def pad_to_bucket(total: np.ndarray | int, buckets: np.ndarray) -> np.ndarray:
    """Smallest bucket >= total (totals past the grid are left as they are)."""
    total = np.asarray(total, dtype=np.int64)
    i = np.searchsorted(buckets, total, side="left")
    return np.where(i < buckets.size, buckets[np.minimum(i, buckets.size - 1)], total)


class SPS:
    """Step-wise steps/s vs total verify tokens; the same lookup as reference's SPSTable."""

    def __init__(self, tokens, sps):
        order = np.argsort(tokens)
        self.tokens = np.asarray(tokens, dtype=np.int64)[order]
        self.sps = np.asarray(sps, dtype=np.float64)[order]

    def __call__(self, total: np.ndarray | int) -> np.ndarray:
        total = np.asarray(total, dtype=np.int64)
        i = np.searchsorted(self.tokens, total, side="left")
        inside = self.sps[np.minimum(i, self.tokens.size - 1)]
        beyond = self.sps[-1] * self.tokens[-1] / np.maximum(total, 1)
        return np.where(i < self.tokens.size, inside, beyond)


def _sorted_candidates(c: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(a, j, r) of the candidates with a > 0, sorted by (-a, j, r); j is 1-based."""
    a = np.cumprod(np.asarray(c, dtype=np.float64), axis=1)
    r, j = np.nonzero(a > 0)
    p = a[r, j]
    order = np.lexsort((r, j, -p))
    return p[order], j[order] + 1, r[order]


def _lengths(R: int, j: np.ndarray, r: np.ndarray, n: int) -> np.ndarray:
    """l (R,) after admitting the first n sorted candidates (prefixes are contiguous)."""
    ell = np.zeros(R, dtype=np.int64)
    np.maximum.at(ell, r[:n], j[:n])
    return ell


def walk(c: np.ndarray, sps: SPS, lossless: bool = True) -> np.ndarray:
    """Verify lengths l (R,) of the greedy walk over c (R, gamma)."""
    R = c.shape[0]
    p, j, r = _sorted_candidates(c)
    theta = np.empty(p.size + 1)
    theta[0] = R * float(sps(R))
    theta[1:] = (R + np.cumsum(p)) * sps(R + np.arange(1, p.size + 1))
    if lossless:
        worse = np.flatnonzero(theta[1:] <= theta[:-1])
        n = int(worse[0]) if worse.size else p.size
    else:
        n = int(np.argmax(theta))
    return _lengths(R, j, r, n)


def top_k(c: np.ndarray, budget: int) -> np.ndarray:
    _, j, r = _sorted_candidates(c)
    return _lengths(c.shape[0], j, r, max(int(budget), 0))


class Scheduler:
    """Per-round verify lengths under a policy (the reference `Scheduler`'s twin)."""

    def __init__(
        self, policy: str = "lossless", sps: SPS | None = None, threshold: float = 0.5, lag: int = 2
    ):
        if policy not in POLICIES:
            raise ValueError(f"policy must be one of {POLICIES}, got {policy!r}")
        if policy in ("lossless", "global", "production") and sps is None:
            raise ValueError(f"policy {policy!r} needs an SPS table")
        self.policy, self.sps, self.threshold, self.lag = policy, sps, threshold, lag
        self.history: deque[np.ndarray] = deque(maxlen=lag)

    def __call__(self, c: np.ndarray) -> np.ndarray:
        c = np.asarray(c, dtype=np.float64)
        R, G = c.shape
        if self.policy == "full":
            return np.full(R, G, dtype=np.int64)
        if self.policy == "static":
            return np.cumprod(c >= self.threshold, axis=1).sum(axis=1).astype(np.int64)
        if self.policy != "production":
            return walk(c, self.sps, lossless=self.policy == "lossless")
        old = self.history[0] if len(self.history) == self.lag else None
        self.history.append(c)
        if old is None:
            return np.full(R, G, dtype=np.int64)
        budget = int(walk(old, self.sps, lossless=False).sum())
        return top_k(c, round(budget * R / max(old.shape[0], 1)))
