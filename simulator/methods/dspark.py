"""`DSpark`: DFlash's backbone + a Markov head, with per-request verify lengths.

A round (docs/methods.md 1.6) is one backbone forward of gamma
tokens per request (non-causal), the LM head over its gamma rows, gamma sequential Markov
steps (gather + [R, r] x [r, V] + softmax/sample), the target verify of the ragged total
sum(1 + l_r) padded up to a CUDA-graph token bucket, the LM head over the verified rows and
the draft-KV materialisation of the verified rows. Markov steps use the roofline's peaks.

In the simulator (`spec.method = dspark`, conf/spec/dspark.yaml; B = spec.block_size =
gamma + 1) `schedule` gives each request of a decode stretch its verify length 1 + l_r under
`spec.options.verify_policy` ("fixed" verifies all gamma drafts) from the scheduler of
common/dspark_schedule.py. The confidences are the calibrated per-position acceptance of each
request's curve (the acceptance model's survival S: c_j = S_j / S_{j-1}; ECE 0 assumed), so
they are constant over a stretch, whose rounds all verify the same lengths; a stretch stands
for a scheduler step, so "production" reads the confidences of the batch `lag` stretches
earlier. SPS is this batch's own table (`sps_table`, cached per batch size and 256-token
context bucket). Commits are drawn from the same curve cut at 1 + l_r, so tau per request is
1 + sum_{j <= l_r} S_j. With `spec.options.confidence_corr` rho > 0 every round draws a latent
difficulty per request and the scheduler runs on that round's calibrated posterior
confidences (per-round lengths, q of shape (rounds, n); production's lag then counts
rounds); commits come from the same posterior, cut at the chosen lengths
(simulator/dspark_confidence.py). rho = 0 is the model above.

The scheduler reads the per-position curve, so the acceptance must be `preset` or
`constant`; the drafter's `fc` is not counted in its weights (`fusion_params` is 0).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from common.buckets import bucket, token_buckets
from common.dspark_schedule import POLICIES, Scheduler
from common.dspark_schedule import SPSTable as SPS
from simulator import dspark_confidence as conf
from simulator.errors import ConfigError
from simulator.fields import param
from simulator.methods.base import Drafted, MethodOptions, register

if TYPE_CHECKING:
    from simulator.params import SimConfig, SpecParams

VERIFY_POLICIES = ("fixed", "lossless", "static", "production")


@dataclass(frozen=True)
class DSparkOptions(MethodOptions):
    """`spec.options` of `dspark`: the Markov head and the verify-length scheduler."""

    markov_rank: int = param(256, 1, 1 << 16, doc="rank r of the Markov head")
    verify_policy: str = param("production", choices=VERIFY_POLICIES,
                               doc="per-request verify lengths (see the module docstring)")
    confidence_threshold: float = param(0.5, 0.0, 1.0, doc="static policy: cut at c <")
    confidence_corr: float = param(0.0, 0.0, 1.0, doc="corr(signal, round latent); 0 = "
                                   "per-request curve only (simulator/dspark_confidence)")


@register
class DSpark(Drafted):
    """DSpark round cost; `verify_lens` comes from `schedule` (full gamma by default).

    Args:
        gamma: drafts per round (B = gamma + 1 verify width at most).
        markov_rank: r of the Markov head.
        buckets: CUDA-graph token sizes the ragged verify total is padded to.
    """

    name = "dspark"
    preset = "dspark"
    takes_verify_schedule = False  # its verify lengths come from `spec.options.verify_policy`
    options_class = DSparkOptions

    @classmethod
    def search_space(cls) -> dict[str, tuple]:
        return {**super().search_space(), "spec.options.verify_policy": VERIFY_POLICIES}

    @classmethod
    def validate(cls, spec: SpecParams) -> None:
        if spec.block_size < 2:
            raise ConfigError("spec.block_size = 1 is outside [2, 256] for dspark (gamma + 1)")
        if spec.acceptance not in ("preset", "constant"):
            raise ConfigError(f"spec.acceptance = {spec.acceptance} must be preset or constant "
                              "for dspark (its scheduler reads the per-position curve)")
        super().validate(spec)

    @classmethod
    def from_config(cls, cfg: SimConfig) -> DSpark:
        o = cls.options(cfg.spec)
        return cls(cfg.spec.block_size - 1, o.markov_rank, policy=o.verify_policy,
                   threshold=o.confidence_threshold, confidence_corr=o.confidence_corr)

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
        padded[0] += int(bucket(total, self.buckets, beyond=None)) - total
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
