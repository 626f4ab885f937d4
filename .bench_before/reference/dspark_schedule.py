"""DSpark's verify-length scheduler, plain Python (shared/research/dspark-idlm-nemotron.md 1.4).

Given calibrated confidences c[r, k] = P(draft k of request r survives | drafts 1..k-1 did),
choose l_r in 0..gamma per request to maximise Theta = tau * SPS(B), with B = sum_r (1 + l_r)
verify tokens and tau = sum_r (1 + sum_{j <= l_r} a[r, j]), a = cumprod(c) (prefix survival).
The marginal gain of extending request r to j is a[r, j], so a greedy walk down the global
list sorted by (-a, j) passes through the optimum for every B.

Policies (`Scheduler.policy`):
- "full": l_r = gamma (plain block verification).
- "static": cut before the first position with c < threshold (the DeepSpec evaluator).
- "lossless": the walk stops at the first step that does not improve Theta (paper Alg. 1),
  so whether x_j is verified never depends on c[r, j+1] (a function of the sampled x_j).
- "global": the walk without the break, on current confidences. Biased (appendix A); kept
  only to reproduce the counterexample.
- "production": the budget K comes from the unconstrained walk over the confidences of two
  rounds earlier; the current round admits the top-K candidates by current a (paper 5.2).

simulator/dspark.py holds the vectorised numpy twin; tests check that both agree.
This module is torch-free on purpose (numpy only).
"""

from __future__ import annotations

import json
from collections import deque
from collections.abc import Callable
from pathlib import Path

import numpy as np

POLICIES = ("full", "static", "lossless", "global", "production")


class SPSTable:
    """Steps per second of the target verify vs total verify tokens, step-wise.

    sps(B) is the value at the smallest tabulated token count >= B (a CUDA-graph bucket);
    beyond the table it scales as last_sps * last_tokens / B.
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

    def __call__(self, total_tokens: int) -> float:
        i = int(np.searchsorted(self.tokens, total_tokens, side="left"))
        if i == self.tokens.size:
            return float(self.sps[-1] * self.tokens[-1] / total_tokens)
        return float(self.sps[i])


def walk(c: np.ndarray, sps: Callable[[int], float], lossless: bool = True) -> list[int]:
    """The greedy walk over candidates sorted by (-a, j, r); c: (R, gamma) -> l: R ints."""
    a = np.cumprod(np.asarray(c, dtype=np.float64), axis=1)
    R, G = a.shape
    cand = sorted(
        ((float(a[r, j]), j + 1, r) for r in range(R) for j in range(G) if a[r, j] > 0),
        key=lambda t: (-t[0], t[1], t[2]),
    )
    ell, total, tau = [0] * R, R, float(R)
    best, best_ell = tau * sps(total), list(ell)
    for p, j, r in cand:
        ell[r], total, tau = j, total + 1, tau + p
        theta = tau * sps(total)
        if theta > best:
            best, best_ell = theta, list(ell)
        elif lossless:
            break
    return best_ell


def static_threshold(c: np.ndarray, threshold: float) -> list[int]:
    """l_r = number of leading positions with c >= threshold."""
    keep = np.cumprod(np.asarray(c) >= threshold, axis=1)
    return keep.sum(axis=1).astype(int).tolist()


def top_k(c: np.ndarray, budget: int) -> list[int]:
    """Admit the `budget` best candidates by (-a, j, r); prefixes stay contiguous."""
    a = np.cumprod(np.asarray(c, dtype=np.float64), axis=1)
    R, G = a.shape
    cand = sorted(
        ((float(a[r, j]), j + 1, r) for r in range(R) for j in range(G) if a[r, j] > 0),
        key=lambda t: (-t[0], t[1], t[2]),
    )
    ell = [0] * R
    for _, j, r in cand[: max(budget, 0)]:
        ell[r] = j
    return ell


class Scheduler:
    """Per-round verify lengths for one decode batch under a policy.

    Args:
        policy: one of POLICIES.
        sps: steps/s vs verify tokens (an SPSTable or any callable); unused by full/static.
        threshold: the static policy's confidence cut.
        lag: rounds between the confidences that set the production budget and their use.
    """

    def __init__(
        self,
        policy: str = "lossless",
        sps: Callable[[int], float] | None = None,
        threshold: float = 0.5,
        lag: int = 2,
    ):
        if policy not in POLICIES:
            raise ValueError(f"policy must be one of {POLICIES}, got {policy!r}")
        if policy in ("lossless", "global", "production") and sps is None:
            raise ValueError(f"policy {policy!r} needs an SPS table")
        self.policy, self.sps, self.threshold, self.lag = policy, sps, threshold, lag
        self.history: deque[np.ndarray] = deque(maxlen=lag)

    def __call__(self, c: np.ndarray) -> list[int]:
        """c: (R, gamma) calibrated confidences of this round -> l (R,) in 0..gamma."""
        c = np.asarray(c, dtype=np.float64)
        R, G = c.shape
        if self.policy == "full":
            return [G] * R
        if self.policy == "static":
            return static_threshold(c, self.threshold)
        if self.policy != "production":
            return walk(c, self.sps, lossless=self.policy == "lossless")
        old = self.history[0] if len(self.history) == self.lag else None
        self.history.append(c)
        if old is None:  # warm-up: no budget yet, verify the whole block
            return [G] * R
        budget = sum(walk(old, self.sps, lossless=False))
        return top_k(c, round(budget * R / max(old.shape[0], 1)))
