"""DSpark in the simulator: the verify-length scheduler (numpy) and the method's round cost.

The scheduler is the vectorised twin of reference/dspark_schedule.py (plain Python; the
simulator never imports reference/ or torch): a tests/simulator check runs both on the same
confidences. Candidates (r, j) are sorted by (-a[r, j], j, r), a = cumprod(c); admitting the
first n of them gives B_n = R + n verify tokens and tau_n = R + sum of their a, and
Theta_n = tau_n * SPS(B_n). "lossless" stops at the first n that does not improve Theta
(Alg. 1), "global" takes the argmax (biased), "production" admits the top-K by current a with
K from the global argmax over the confidences of `lag` rounds earlier, "static" cuts at the
first c < threshold, "full" verifies all gamma drafts.

`DSpark` prices a round (shared/research/dspark-idlm-nemotron.md 1.6): one backbone forward of
gamma tokens per request (non-causal), the LM head over its gamma rows, gamma sequential
Markov steps (gather + [R, r] x [r, V] + softmax/sample), the target verify of the ragged
total sum(1 + l_r) padded up to a CUDA-graph token bucket, the LM head over the verified rows
and the draft-KV materialisation of the verified rows. Markov steps use the roofline's peaks.

In the simulator (`spec.method = dspark`, conf/spec/dspark.yaml; B = spec.block_size =
gamma + 1) `schedule` gives each request of a decode stretch its verify length 1 + l_r under
`spec.verify_policy` ("fixed" verifies all gamma drafts). The confidences are the calibrated
per-position acceptance of each request's curve (the acceptance model's survival S:
c_j = S_j / S_{j-1}; ECE 0 assumed), so they are constant over a stretch, whose rounds all
verify the same lengths; a stretch stands for a scheduler step, so "production" reads the
confidences of the batch `lag` stretches earlier. SPS is this batch's own table
(`sps_table`, cached per batch size and 256-token context bucket). Commits are drawn from
the same curve cut at 1 + l_r, so tau per request is 1 + sum_{j <= l_r} S_j.
With `spec.confidence_corr` rho > 0 every round draws a latent difficulty per request and
the scheduler runs on that round's calibrated posterior confidences (per-round lengths, q of
shape (rounds, n); production's lag then counts rounds); commits come from the same
posterior, cut at the chosen lengths (simulator/dspark_confidence.py). rho = 0 is the model
above.
"""

from __future__ import annotations

from collections import deque

import numpy as np

from common.buckets import bucket, token_buckets
from simulator import dspark_confidence as conf
from simulator.methods import SpecMethod

POLICIES = ("full", "static", "lossless", "global", "production")


def pad_to_bucket(total: np.ndarray | int, buckets: np.ndarray) -> np.ndarray | int:
    """Smallest bucket >= total (totals past the grid are left as they are)."""
    return bucket(total, buckets, beyond=None)


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


class DSpark(SpecMethod):
    """DSpark round cost; `verify_lens` comes from `schedule` (full gamma by default).

    Args:
        gamma: drafts per round (B = gamma + 1 verify width at most).
        markov_rank: r of the Markov head.
        buckets: CUDA-graph token sizes the ragged verify total is padded to.
    """

    name = "dspark"

    def __init__(self, gamma: int, markov_rank: int = 256, buckets: np.ndarray | None = None,
                 policy: str = "fixed", threshold: float = 0.5, confidence_corr: float = 0.0):
        super().__init__(gamma + 1)
        self.rho = confidence_corr  # 0: per-request curves only (per-stretch schedule)
        self.gamma, self.rank = gamma, markov_rank
        self.buckets = token_buckets(gamma + 1) if buckets is None else buckets
        self.policy, self.threshold = ("full" if policy == "fixed" else policy), threshold
        if self.policy not in POLICIES:
            raise ValueError(f"policy must be fixed or one of {POLICIES}, got {policy!r}")
        self._sps: dict[tuple[int, int], SPS] = {}
        self._schedulers: dict[int, Scheduler] = {}  # one per replica (its acceptance model)

    def _scheduler(self, cost, acceptance, kv: np.ndarray) -> Scheduler:
        """The replica's scheduler with this batch's SPS table (per size, 256-token bucket)."""
        n = len(kv)
        ctx = int(np.mean(kv)) // 256 * 256 + 128
        if (n, ctx) not in self._sps:
            self._sps[n, ctx] = self.sps_table(cost, n, np.full(n, ctx))
        sched = self._schedulers.get(id(acceptance))
        if sched is None:
            sched = Scheduler(self.policy, self._sps[n, ctx], self.threshold)
            self._schedulers[id(acceptance)] = sched
        sched.sps = self._sps[n, ctx]
        return sched

    def schedule(self, cost, acceptance, slots: np.ndarray, kv: np.ndarray) -> np.ndarray:
        """Verify lengths 1 + l_r (n,) of the slots' next stretch under the policy."""
        n = len(slots)
        if self.policy == "full":
            return np.full(n, self.block_size, dtype=np.int64)
        S = acceptance.S[slots]
        c = S / np.concatenate([np.ones((n, 1)), S[:, :-1]], axis=1).clip(1e-300)
        return 1 + self._scheduler(cost, acceptance, kv)(c)

    def plan_rounds(self, cost, acceptance, slots: np.ndarray, kv: np.ndarray,
                    rounds: int) -> tuple[np.ndarray, np.ndarray]:
        """rho > 0: per round, a latent difficulty per request, the scheduler on that round's
        calibrated confidences, commits drawn from the same posterior and cut at its verify
        lengths (simulator/dspark_confidence.py); q is then (rounds, n)."""
        if self.rho <= 0.0:
            return super().plan_rounds(cost, acceptance, slots, kv, rounds)
        n, rng = len(slots), acceptance.rng
        a = conf.posterior_survival(conf.thresholds(acceptance.S[slots]),
                                    rng.standard_normal((rounds, n)), self.rho)
        if self.policy == "full":
            ell = np.full((rounds, n), self.gamma, dtype=np.int64)
        else:
            sched, c = self._scheduler(cost, acceptance, kv), conf.conditional(a)
            ell = np.stack([sched(c[t]) for t in range(rounds)])
        return 1 + ell, conf.draw_commits(a, ell, rng.random((rounds, n)))

    def markov_s(self, cost, n: int) -> float:
        """gamma sequential steps for n requests: W2 read once per step, fp32 logits."""
        flops = 2.0 * n * self.rank * cost.vocab
        nbytes = self.rank * cost.vocab * cost.dtype + n * cost.vocab * 8
        return self.gamma * (max(flops / cost.flops, nbytes / cost.bw) + cost.launch)

    def draft_s(self, cost, n: int, kv: np.ndarray) -> np.ndarray | float:
        """Everything before the verify: backbone, its LM head, the Markov loop (kv (n,) or
        (rounds, n): a float or (rounds,), as the cost model's forwards)."""
        q = np.full(n, self.gamma, dtype=np.int64)
        return (
            cost.draft_forward_s(q, kv, causal=False)
            + cost.lm_head_s(n * self.gamma)
            + self.markov_s(cost, n)
        )

    def verify_s(self, cost, q: np.ndarray, kv: np.ndarray) -> np.ndarray | float:
        """Target verify of q (n,) tokens per request, padded to a bucket, + head + inject."""
        total = int(q.sum())
        padded = q.copy()
        padded[0] += int(pad_to_bucket(total, self.buckets)) - total
        rows = float(padded.sum())
        return (
            cost.target_forward_s(padded, kv)
            + cost.lm_head_s(rows)
            + cost.kv_materialize_s(float(total))
        )

    def decode_gpu_s(self, cost, q: np.ndarray, kv: np.ndarray) -> np.ndarray | float:
        """q (n,), or (rounds, n) with kv (rounds, n): a verify per round."""
        if q.ndim == 1:
            return self.draft_s(cost, len(q), kv) + self.verify_s(cost, q, kv)
        verify = [float(self.verify_s(cost, qt, kt)) for qt, kt in zip(q, kv, strict=True)]
        return self.draft_s(cost, q.shape[1], kv) + np.array(verify)

    def sps_table(self, cost, n: int, kv: np.ndarray) -> SPS:
        """Rounds/s vs total verify tokens n..n(gamma+1) for this batch (draft included):
        Theta = tau * SPS is then the batch's token throughput."""
        draft = self.draft_s(cost, n, kv)
        totals = np.arange(n, n * (self.gamma + 1) + 1)
        per = totals // n
        rates = []
        for t, base in zip(totals, per):
            q = np.full(n, base, dtype=np.int64)
            q[: t - base * n] += 1
            rates.append(1.0 / float(draft + self.verify_s(cost, q, kv)))
        return SPS(totals, rates)
