"""DSpark's verify-length scheduler (docs/methods.md 1.4), numpy.

Given calibrated confidences c[r, k] = P(draft k of request r survives | drafts 1..k-1 did),
choose l_r in 0..gamma per request to maximise Theta = tau * SPS(B), with B = sum_r (1 + l_r)
verify tokens and tau = sum_r (1 + sum_{j <= l_r} a[r, j]), a = cumprod(c) (prefix survival).
The marginal gain of extending request r to j is a[r, j], so a walk down the candidates (r, j)
sorted by (-a, j, r) passes through the optimum for every B: admitting the first n of them
gives B_n = R + n and tau_n = R + the sum of their a.

Policies (`Scheduler.policy`):
- "full": l_r = gamma (plain block verification).
- "static": cut before the first position with c < threshold (the DeepSpec evaluator).
- "lossless": the walk stops at the first n that does not improve Theta (paper Alg. 1),
  so whether x_j is verified never depends on c[r, j+1] (a function of the sampled x_j).
- "global": the argmax of Theta over the whole walk, on current confidences. Biased
  (appendix A); kept only to reproduce the counterexample.
- "production": the budget K comes from the global walk over the confidences of `lag`
  rounds earlier; the current round admits the top-K candidates by current a (paper 5.2).

The reference engine calls it on host copies of the confidences once per round; the
simulator on each stretch's calibrated curves.
"""

from __future__ import annotations

import json
from collections import deque
from collections.abc import Callable
from pathlib import Path

import numpy as np

POLICIES = ("full", "static", "lossless", "global", "production")
Sps = Callable[[np.ndarray], np.ndarray]  # steps/s of an int array of verify totals


class SPSTable:
    """Steps per second of the target verify vs total verify tokens, step-wise.

    sps(B) is the value at the smallest tabulated token count >= B (a CUDA-graph bucket);
    beyond the table it scales as last_sps * last_tokens / B. Called with an int it gives a
    float, with an integer array an array of the same shape.
    """

    def __init__(self, tokens, sps):
        order = np.argsort(tokens)
        self.tokens = np.asarray(tokens, dtype=np.int64)[order]
        self.sps = np.asarray(sps, dtype=np.float64)[order]
        if self.tokens.size == 0 or (self.sps <= 0).any():
            raise ValueError("an SPS table needs at least one row and positive values")

    @classmethod
    def from_json(cls, path: str | Path) -> SPSTable:
        """{"tokens": [...], "sps": [...]} (a measured or simulator-priced table)."""
        raw = json.loads(Path(path).read_text())
        return cls(raw["tokens"], raw["sps"])

    def to_json(self, path: str | Path) -> None:
        Path(path).write_text(
            json.dumps({"tokens": self.tokens.tolist(), "sps": self.sps.tolist()})
        )

    def __call__(self, total_tokens):
        total = np.asarray(total_tokens, dtype=np.int64)
        i = np.searchsorted(self.tokens, total, side="left")
        inside = self.sps[np.minimum(i, self.tokens.size - 1)]
        beyond = self.sps[-1] * self.tokens[-1] / np.maximum(total, 1)
        out = np.where(i < self.tokens.size, inside, beyond)
        return float(out) if out.ndim == 0 else out


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


def walk(c: np.ndarray, sps: Sps, lossless: bool = True) -> np.ndarray:
    """Verify lengths l (R,) int64 of the greedy walk over confidences c (R, gamma).

    `sps` maps an int array of verify totals to steps/s (an SPSTable, or any vectorised
    callable).
    """
    c = np.asarray(c, dtype=np.float64)
    R = c.shape[0]
    p, j, r = _sorted_candidates(c)
    theta = np.empty(p.size + 1)
    theta[0] = R * float(sps(np.int64(R)))
    theta[1:] = (R + np.cumsum(p)) * sps(R + np.arange(1, p.size + 1))
    if lossless:
        worse = np.flatnonzero(theta[1:] <= theta[:-1])
        n = int(worse[0]) if worse.size else p.size
    else:
        n = int(np.argmax(theta))
    return _lengths(R, j, r, n)


def static_threshold(c: np.ndarray, threshold: float) -> np.ndarray:
    """l (R,) int64 = number of leading positions with c >= threshold; c (R, gamma)."""
    return np.cumprod(np.asarray(c) >= threshold, axis=1).sum(axis=1).astype(np.int64)


def top_k(c: np.ndarray, budget: int) -> np.ndarray:
    """l (R,) int64 admitting the `budget` best candidates by (-a, j, r); c (R, gamma)."""
    _, j, r = _sorted_candidates(c)
    return _lengths(np.shape(c)[0], j, r, max(int(budget), 0))


class Scheduler:
    """Per-round verify lengths for one decode batch under a policy.

    Args:
        policy: one of POLICIES.
        sps: steps/s vs verify tokens (an SPSTable or a vectorised callable); unused by
            full/static.
        threshold: the static policy's confidence cut.
        lag: rounds between the confidences that set the production budget and their use.
    """

    def __init__(self, policy: str = "lossless", sps: Sps | None = None,
                 threshold: float = 0.5, lag: int = 2):
        if policy not in POLICIES:
            raise ValueError(f"policy must be one of {POLICIES}, got {policy!r}")
        if policy in ("lossless", "global", "production") and sps is None:
            raise ValueError(f"policy {policy!r} needs an SPS table")
        self.policy, self.sps, self.threshold, self.lag = policy, sps, threshold, lag
        self.history: deque[np.ndarray] = deque(maxlen=lag)

    def __call__(self, c: np.ndarray) -> np.ndarray:
        """c: (R, gamma) calibrated confidences of this round -> l (R,) int64 in 0..gamma."""
        c = np.asarray(c, dtype=np.float64)
        R, G = c.shape
        if self.policy == "full":
            return np.full(R, G, dtype=np.int64)
        if self.policy == "static":
            return static_threshold(c, self.threshold)
        if self.policy != "production":
            return walk(c, self.sps, lossless=self.policy == "lossless")
        old = self.history[0] if len(self.history) == self.lag else None
        self.history.append(c)
        if old is None:  # warm-up: no budget yet, verify the whole block
            return np.full(R, G, dtype=np.int64)
        budget = int(walk(old, self.sps, lossless=False).sum())
        return top_k(c, round(budget * R / max(old.shape[0], 1)))
