"""`DFlashTree`: DFlash with tree verification, N tree nodes verified per request per round.

A round (reference/methods/dflash_tree.py): one DFlash draft forward over [anchor, MASK * (B-1)]
and the LM head on its B-1 rows (their top-k per depth feed the best-first tree), one
target forward over the tree's N nodes per request (anchor included) with an ancestor mask,
the LM head on those N rows, and the injection of the accepted path's B positions into the
draft pool. The verify is priced by the cost model's target forward of N tokens per request
(b * N tokens at batch b; inside the tree the causal triangle's N(N+1)/2 pairs, which cover
the ancestor mask's). Building the tree (top-k of B-1 rows, best-first over at most N
frontier entries) is not priced: one small fused kernel (SGLang's expand + top-k).

KV: the engine reserves committed + R * max(N, B) slots per request (its proposer's
block_size, the KV positions a round writes); the load-aware policy reserves for its largest
budget.

Acceptance: the tree's mean commit length is tau_tree(N) = r(N) * tau_chain with
r(N) = R_INF - GAIN * (N / B)^-BETA (N >= B, top-4 candidates per depth), fitted by
`fit_ratio` to the zoo pair's measurements (experiments/tree_budget/results.json, B = 16,
N = 16..128: ratios 1.220, 1.285, 1.337, 1.374; the fit's residuals are at most 0.0011 in
r, 0.004 in tau, against 2 SE of 0.27-0.32). Beyond N = 128 and at B != 16 it is an
extrapolation. Per depth, the tree raises every logit of the chain's per-request curve
(simulator/acceptance.py) by delta(N): logit alpha_j^tree = logit alpha_j + delta(N), delta
solved so that the mean over requests equals tau_tree(N); tau_chain is the published
DFlash tau (`spec.tau` overrides it) or the `constant` curve's mean. tree_top_k = 1 is the
chain (N = B): exactly the DFlash chain.

`spec.options.tree_policy = load_aware` picks, per stretch (a fixed batch of n requests,
mean context in 256-token buckets), the budget from `spec.options.tree_budgets` that
maximises n * tau_tree(N) / (the round's GPU seconds at N): trees shrink as the batch grows.

The `dflash` method (simulator/methods/dflash.py) builds it when `spec.options.tree_budget`
is set or the policy is load-aware, and calls its config rules (`check`); this class
registers nothing.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from common.survival import logistic_survival
from simulator.errors import ConfigError
from simulator.methods.base import Drafted

if TYPE_CHECKING:
    from simulator.acceptance import AcceptanceModel
    from simulator.costs import CostModel
    from simulator.methods.dflash import DFlashOptions
    from simulator.params import SimConfig, SpecParams

# r(N) = R_INF - GAIN * (N / B)^-BETA, `fit_ratio` of experiments/tree_budget/results.json
R_INF, GAIN, BETA = 1.4916, 0.2716, 0.4024


def tree_ratio(budget: float | np.ndarray, block_size: int) -> float | np.ndarray:
    """r(N) = tau_tree(N) / tau_chain for a top-4 tree of N >= B nodes (anchor included)."""
    return R_INF - GAIN * (np.asarray(budget, dtype=np.float64) / block_size) ** -BETA


def fit_ratio(budgets, ratios, block_size: int) -> tuple[float, float, float]:
    """Least-squares (R_INF, GAIN, BETA) of r(N) = R_INF - GAIN * (N / B)^-BETA.

    For a fixed BETA the model is linear in (R_INF, GAIN); BETA comes from a grid on
    [0.005, 4] refined by golden section around the grid's best point.
    """
    x = np.asarray(budgets, dtype=np.float64) / block_size
    r = np.asarray(ratios, dtype=np.float64)

    def solve(beta: float) -> tuple[float, np.ndarray]:
        X = np.stack([np.ones_like(x), -(x**-beta)], axis=1)
        coef = np.linalg.lstsq(X, r, rcond=None)[0]
        return float(((X @ coef - r) ** 2).sum()), coef

    grid = np.linspace(0.005, 4.0, 800)
    i = int(np.argmin([solve(b)[0] for b in grid]))
    lo, hi = grid[max(i - 1, 0)], grid[min(i + 1, len(grid) - 1)]
    g = (np.sqrt(5.0) - 1.0) / 2.0
    for _ in range(60):
        a, b = hi - g * (hi - lo), lo + g * (hi - lo)
        lo, hi = (lo, b) if solve(a)[0] < solve(b)[0] else (a, hi)
    beta = 0.5 * (lo + hi)
    coef = solve(beta)[1]
    return float(coef[0]), float(coef[1]), float(beta)


class DFlashTree(Drafted):
    """DFlash drafting verified as a tree of N nodes; see the module docstring.

    Args:
        block_size: B of the drafter (depths 1..B-1).
        budgets: N of the fixed policy (one value), or the load-aware policy's candidates.
        top_k: candidates per depth: 4 (the fitted tree) or 1 (the chain, budgets = (B,)).
        policy: "fixed" or "load_aware".
    """

    name = "dflash"

    @staticmethod
    def check(spec: SpecParams, o: DFlashOptions) -> None:
        """The tree's config rules (`ConfigError`); `dflash`'s validate calls them."""
        B = spec.block_size
        if B < 2:
            raise ConfigError("spec.block_size = 1 is outside [2, 256] for a dflash tree")
        if spec.acceptance not in ("preset", "constant"):
            raise ConfigError(
                f"spec.acceptance = {spec.acceptance} must be preset or constant "
                "for a dflash tree (the tree raises the per-depth curve)"
            )
        if spec.verify_schedule is not None:
            raise ConfigError("spec.verify_schedule (the chain's drafts by batch size) does "
                              "not apply to a tree (spec.options.tree_budget)")
        if o.tree_top_k == 1 and (o.tree_budget != B or o.tree_policy != "fixed"):
            raise ConfigError(
                f"spec.options.tree_budget = {o.tree_budget} must equal spec.block_size"
                f" = {B} with a fixed policy when spec.options.tree_top_k = 1 (the chain)"
            )
        aware = o.tree_policy == "load_aware"
        key, value = (
            ("spec.options.tree_budgets", o.tree_budgets)
            if aware
            else ("spec.options.tree_budget", o.tree_budget)
        )
        if min(o.tree_budgets if aware else [o.tree_budget], default=0) < B:
            raise ConfigError(
                f"{key} = {value} must be >= spec.block_size = {B} (the "
                "measured range of the tree's acceptance model)"
            )

    @classmethod
    def of(cls, cfg: SimConfig, budget: int | None, top_k: int, policy: str,
           budgets: list[int]) -> DFlashTree:
        """The tree of `cfg` (N = budget, or the load-aware policy's budgets), its
        acceptance fitted to the chain's population."""
        m = cls(cfg.spec.block_size, tuple(budgets if policy == "load_aware" else [budget]),
                top_k, policy)
        if top_k > 1:
            m.fit_acceptance(*cls.chain_population(cfg))
        return m

    @staticmethod
    def chain_population(cfg: SimConfig) -> tuple[float, float, float]:
        """(logit0, decay, sigma) of the chain's curves, as simulator/acceptance.py's
        `make_acceptance` builds them for `preset` and `constant`."""
        # imported here: simulator.acceptance imports the registry this module joins
        from simulator.acceptance import preset_tau, solve_logit0

        s = cfg.spec
        if s.acceptance == "constant":
            a = min(max(s.alpha, 1e-12), 1 - 1e-12)
            return float(np.log(a / (1 - a))), 0.0, 0.0
        tau, trained = preset_tau(cfg)
        logit0 = solve_logit0(tau, s.decay_logit, s.difficulty_sigma, trained)
        return logit0, s.decay_logit, s.difficulty_sigma

    def __init__(
        self,
        block_size: int,
        budgets: tuple[int, ...] = (32,),
        top_k: int = 4,
        policy: str = "fixed",
    ):
        if policy not in ("fixed", "load_aware"):
            raise ValueError(f"policy must be fixed or load_aware, got {policy!r}")
        if top_k == 1 and tuple(budgets) != (block_size,):
            raise ValueError(f"budgets must be ({block_size},) when top_k = 1, got {budgets}")
        super().__init__(max(block_size, *budgets))  # KV positions a round writes
        self.B, self.top_k, self.policy = block_size, top_k, policy
        self.budgets = tuple(sorted(set(budgets)))
        self.tau: dict[int, float] = {}
        self.delta: dict[int, float] = {}
        self._picks: dict[tuple[int, int], int] = {}

    def fit_acceptance(self, logit0: float, decay: float, sigma: float) -> None:
        """delta(N) of every budget for the chain population (logit0 + sigma z, decay)."""
        from simulator.acceptance import mean_commit

        chain = mean_commit(logit0, decay, sigma, self.B)
        for n in self.budgets:
            tau = float(tree_ratio(n, self.B)) * chain
            if not tau < self.B - 1e-6:
                raise ConfigError(
                    f"the tree's tau {tau:.2f} (r(N = {n}) = "
                    f"{tree_ratio(n, self.B):.3f} times the chain's {chain:.2f})"
                    f" must lie below spec.block_size = {self.B}"
                )
            lo, hi = -30.0, 60.0
            for _ in range(80):
                mid = 0.5 * (lo + hi)
                below = mean_commit(logit0 + mid, decay, sigma, self.B) < tau
                lo, hi = (mid, hi) if below else (lo, mid)
            self.tau[n], self.delta[n] = tau, 0.5 * (lo + hi)

    def verify_lens(self, n: int) -> np.ndarray:
        return np.full(n, self.budgets[-1], dtype=np.int64)

    def schedule(
        self, cost: CostModel, acceptance: AcceptanceModel, slots: np.ndarray, kv: np.ndarray
    ) -> np.ndarray:
        if self.policy == "fixed":
            return self.verify_lens(len(slots))
        return np.full(len(slots), self.pick(cost, len(slots), kv), dtype=np.int64)

    def pick(self, cost: CostModel, n: int, kv: np.ndarray) -> int:
        """The load-aware budget of a batch of n requests with context lengths kv (n,)."""
        ctx = int(np.mean(kv)) // 256 * 256 + 128
        if (n, ctx) not in self._picks:
            ctx_lens = np.full(n, ctx, dtype=np.int64)
            rate = [
                n
                * self.tau[N]
                / float(self.decode_gpu_s(cost, np.full(n, N, dtype=np.int64), ctx_lens))
                for N in self.budgets
            ]
            self._picks[n, ctx] = self.budgets[int(np.argmax(rate))]
        return self._picks[n, ctx]

    def commit_lens(
        self, acceptance: AcceptanceModel, slots: np.ndarray, rounds: int, q: np.ndarray
    ) -> np.ndarray:
        """The chain's draws at top_k = 1; else each request's curve with its logits raised
        by delta(N) (recovered from S_1 = alpha_1), one uniform per request and round."""
        if self.top_k == 1:
            return super().commit_lens(acceptance, slots, rounds, q)
        s1 = np.clip(acceptance.S[slots, 0], 1e-15, 1.0 - 1e-15)
        logit0 = np.log(s1 / (1.0 - s1)) + self.delta[int(q[0])]
        S = logistic_survival(logit0, acceptance.decay, self.B)  # (n, B-1)
        u = acceptance.rng.random((rounds, len(slots), 1))
        return 1 + (u < S).sum(axis=-1)

    def decode_gpu_s(self, cost: CostModel, q: np.ndarray, kv: np.ndarray) -> np.ndarray | float:
        """Draft forward of B per request, verify of q (n,) = N per request, the two LM
        heads (B-1 and N rows per request), injection of B rows per request."""
        n = len(q)
        rows, block = float(q.sum()), float(n * self.B)
        heads = cost.lm_head_s(block - n) + cost.lm_head_s(rows) + cost.kv_materialize_s(block)
        draft = cost.draft_forward_s(np.full(n, self.B, dtype=np.int64), kv, causal=False)
        return draft + cost.target_forward_s(q, kv) + heads

    def prefill_gpu_s(self, cost: CostModel, q: np.ndarray, kv: np.ndarray) -> float:
        """The target's prefill and the injection of the prompt into the draft pool."""
        return super().prefill_gpu_s(cost, q, kv) + float(cost.kv_materialize_s(q.sum()))
