"""Statistics of acceptance runs: tau as a ratio estimator over requests, its standard
error, the paired difference of two runs on the same prompts, the commit-length curves
(histogram, survival S(k), conditional alpha_k), the repetition rate of outputs, and the
loop-aware headline: tau on the low-repetition stratum and by output position.
Used by experiments/acceptance.py and experiments/acceptance_compare.py.

tau everywhere is the mean commit length per round, pooled over rounds: the tokens
committed by the requests counted over their rounds (not a mean of per-request means).
"""

from __future__ import annotations

import math
from itertools import accumulate

from common.repetition import repetition_rate
from common.survival import conditional, empirical_survival

LOW_REPETITION = 0.3  # an output is in the low-repetition stratum below this repetition
POSITION_WINDOWS = ((0, 64), (64, 256))  # output positions of a round's first token


def tau_residuals(requests: list[tuple[int, int]]) -> tuple[float, list[float]]:
    """tau = sum_i x_i / sum_i n_i over requests (x_i tokens committed in n_i rounds by
    request i) and each request's linearized residual e_i = (x_i - tau n_i) / sum_j n_j:
    tau is a ratio estimator, and sum_i e_i^2 * m / (m - 1) estimates its variance."""
    rounds = sum(n for _, n in requests)
    tau = sum(x for x, _ in requests) / max(rounds, 1)
    return tau, [(x - tau * n) / max(rounds, 1) for x, n in requests]


def tau_standard_error(accept_lengths: list[list[int]]) -> float:
    """Standard error of tau with the request as the unit (rounds of one request are not
    independent). 0 with fewer than two requests. Prompts cut from the same file correlate
    too, so this is a lower bound on the noise."""
    _, e = tau_residuals([(sum(a), len(a)) for a in accept_lengths if a])
    m = len(e)
    return math.sqrt(m / (m - 1) * sum(r * r for r in e)) if m > 1 else 0.0


def acceptance_curves(accept_lengths: list[list[int]], block_size: int) -> dict:
    """tau (with its standard error over requests), histogram (k = 1..B), survival S(k)
    and conditional alpha_k of commit lengths."""
    commits = [c for per_request in accept_lengths for c in per_request]
    n = max(len(commits), 1)
    hist = [sum(c == k for c in commits) / n for k in range(1, block_size + 1)]
    survival = empirical_survival(commits, block_size)
    alpha = conditional(survival)[1:]  # S(k+1) / S(k), k = 1..B-1
    return {"tau": sum(commits) / n, "tau_se": tau_standard_error(accept_lengths),
            "rounds": len(commits), "hist": hist,
            "survival": survival.tolist(), "alpha": alpha.tolist()}


def paired_difference(a: list[tuple[int, int]], b: list[tuple[int, int]]
                      ) -> tuple[float, float, float]:
    """(tau_A, tau_B, standard error of tau_A - tau_B) of the same m requests, given as
    (tokens committed, rounds) per request in each run."""
    if len(a) != len(b):
        raise ValueError(f"runs differ in requests: {len(a)} vs {len(b)}")
    tau_a, ea = tau_residuals(a)
    tau_b, eb = tau_residuals(b)
    m = len(a)
    se = math.sqrt(m / (m - 1) * sum((x - y) ** 2 for x, y in zip(ea, eb))) if m > 1 else 0.0
    return tau_a, tau_b, se


def pooled_tau(accept_lengths: list[list[int]]) -> float:
    """Tokens committed over rounds, all requests' rounds pooled (nan with no round)."""
    rounds = sum(map(len, accept_lengths))
    return sum(map(sum, accept_lengths)) / rounds if rounds else math.nan


def low_repetition_tau(accept_lengths: list[list[int]], outputs: list[list[int]],
                       threshold: float = LOW_REPETITION, n: int = 4) -> dict:
    """tau, its standard error and the request count over the requests whose output's
    `repetition_rate` (n-grams) is below `threshold`: loops are easy to draft, so this
    stratum is the tau that drafting quality earns, not looping."""
    keep = [a for a, t in zip(accept_lengths, outputs) if repetition_rate([t], n) < threshold]
    return {"tau": pooled_tau(keep), "tau_se": tau_standard_error(keep),
            "requests": len(keep)}


def rounds_in_window(commits: list[int], lo: int, hi: int) -> list[int]:
    """One request's commit lengths of the rounds whose first token lands at output
    position lo <= pos < hi. Output position 0 is the prefill's token, so round r (from 0)
    starts at 1 + commits[0] + ... + commits[r-1]."""
    starts = accumulate(commits[:-1], initial=1)
    return [c for c, pos in zip(commits, starts) if lo <= pos < hi]


def position_tau(accept_lengths: list[list[int]], windows=POSITION_WINDOWS) -> list[dict]:
    """Per window (lo, hi) of output positions: tau over the rounds starting in it, its
    standard error over requests, and the rounds and requests counted (length effects:
    a loop, once entered, is drafted whole, so late rounds commit more)."""
    out = []
    for lo, hi in windows:
        sub = [rounds_in_window(a, lo, hi) for a in accept_lengths]
        out.append({"window": (lo, hi), "tau": pooled_tau(sub),
                    "tau_se": tau_standard_error(sub), "rounds": sum(map(len, sub)),
                    "requests": sum(1 for r in sub if r)})
    return out
