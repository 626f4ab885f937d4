"""Acceptance models: how many tokens each request commits per round (commit_len in [1, B]).

- `CurveAcceptance`: per-position conditional acceptance alpha_j = P(draft j accepted | 1..j-1
  accepted), j = 1..B-1. Presets use logit(alpha_j) = a + sigma * z - d * (j - 1): z ~ N(0, 1)
  is the request's latent difficulty (acceptance is correlated within a request), d the decay
  along the block, and `a` is solved so that the mean commit length over requests equals the
  published tau at the block size it was measured at. `constant` uses alpha_j = alpha for all.
  A round draws one uniform u per request: commit_len = 1 + #{k : u < S_k}, with the survival
  S_k = prod_{j<=k} alpha_j = P(accept_len >= k), which is exactly the chained distribution.
- `ReplayAcceptance`: replays recorded per-round commit lengths (the reference's
  `accept_lengths`), request i using recording i mod n, cycling.
- `MeanAcceptance`: every request commits tau per round on average, deterministically
  (fractional carry), i.e. no variance: the mean-only model of other simulators.

State lives in per-slot arrays (struct of arrays); `sample(slots, rounds, q)` returns a
(rounds, n) block, `advance(slots, rounds)` consumes it (replay and mean models carry state).
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from common.survival import logistic_survival
from simulator.methods import METHODS
from simulator.params import ConfigError, SimConfig

_GH_NODES, _GH_WEIGHTS = np.polynomial.hermite_e.hermegauss(32)
_GH_WEIGHTS = _GH_WEIGHTS / _GH_WEIGHTS.sum()


def mean_commit(logit0: float, decay: float, sigma: float, block_size: int) -> float:
    """E[commit_len] over requests with z ~ N(0, 1) (Gauss-Hermite quadrature)."""
    s = logistic_survival(logit0 + sigma * _GH_NODES, decay, block_size)
    return float(1.0 + _GH_WEIGHTS @ s.sum(axis=-1))


def solve_logit0(tau: float, decay: float, sigma: float, block_size: int) -> float:
    """The curve offset `a` whose mean commit length at `block_size` is `tau` (bisection)."""
    if not 1.0 < tau < block_size:
        raise ConfigError(f"spec.tau = {tau} must lie in (1, {block_size}) at B = {block_size}")
    lo, hi = -30.0, 30.0
    for _ in range(80):
        mid = 0.5 * (lo + hi)
        lo, hi = (mid, hi) if mean_commit(mid, decay, sigma, block_size) < tau else (lo, mid)
    return 0.5 * (lo + hi)


class AcceptanceModel:
    """Base: per-slot state, sized for `n_slots` concurrent requests and block size B."""

    def __init__(self, n_slots: int, block_size: int):
        self.block_size = block_size
        self.expected = np.ones(n_slots)

    def admit(self, slots: np.ndarray, rids: np.ndarray) -> None:
        """Bind requests `rids` to `slots`."""

    def sample(self, slots: np.ndarray, rounds: int, q: np.ndarray) -> np.ndarray:
        """Commit lengths, shape (rounds, len(slots)), each in [1, q_i]."""
        raise NotImplementedError

    def advance(self, slots: np.ndarray, rounds: int) -> None:
        """Consume `rounds` rounds of the last sample for these slots."""


class CurveAcceptance(AcceptanceModel):
    """Per-position conditional acceptance curve, one per request, sampled with pre-drawn
    uniforms."""

    BLOCK = 4096

    def __init__(self, n_slots: int, block_size: int, logit0: np.ndarray | float,
                 decay: float, rng: np.random.Generator):
        """logit0: the first position's logit, one per request id (or one for all)."""
        super().__init__(n_slots, block_size)
        self.logit0 = np.asarray(logit0, dtype=np.float64)
        self.decay = decay
        self.rng = rng
        self.S = np.zeros((n_slots, max(block_size - 1, 0)))
        self._ones = np.ones(max(block_size - 1, 0))
        self._cache: dict[int, tuple[np.ndarray, np.ndarray]] = {}
        self._u = np.empty(0)
        self._pos = 0

    def _curves(self, block: int) -> tuple[np.ndarray, np.ndarray]:
        """Survival curves and expected commits of request ids in one block of ids."""
        if block not in self._cache:
            if len(self._cache) >= 8:
                self._cache.pop(next(iter(self._cache)))
            z = self.logit0[block * self.BLOCK:(block + 1) * self.BLOCK]
            s = logistic_survival(z, self.decay, self.block_size)
            self._cache[block] = (s, 1.0 + s.sum(axis=1))
        return self._cache[block]

    def admit(self, slots: np.ndarray, rids: np.ndarray) -> None:
        if self.block_size == 1:
            return
        if self.logit0.ndim == 0:
            row = logistic_survival(self.logit0, self.decay, self.block_size)
            self.S[slots] = row
            self.expected[slots] = 1.0 + row.sum()
            return
        for slot, rid in zip(np.atleast_1d(slots).tolist(), np.atleast_1d(rids).tolist(),
                             strict=True):
            s, e = self._curves(rid // self.BLOCK)
            self.S[slot] = s[rid % self.BLOCK]
            self.expected[slot] = e[rid % self.BLOCK]

    def _uniforms(self, count: int) -> np.ndarray:
        if self._pos + count > self._u.size:
            self._u = self.rng.random(max(1 << 16, count))
            self._pos = 0
        out = self._u[self._pos:self._pos + count]
        self._pos += count
        return out

    def sample(self, slots: np.ndarray, rounds: int, q: np.ndarray) -> np.ndarray:
        n = len(slots)
        if self.block_size == 1:
            return np.ones((rounds, n), dtype=np.int64)
        u = self._uniforms(rounds * n).reshape(rounds, n, 1)
        s = self.S[slots]
        if q.min() < self.block_size:
            s = s * (np.arange(self.block_size - 1) < (q[:, None] - 1))
        return 1 + ((u < s) @ self._ones).astype(np.int64)  # matmul: faster than sum


class ReplayAcceptance(AcceptanceModel):
    """Recorded per-round commit lengths, replayed per request (each in [1, B]: a recording
    made at another block size is a ConfigError, not clipped)."""

    def __init__(self, n_slots: int, block_size: int, recordings: list[np.ndarray]):
        super().__init__(n_slots, block_size)
        lens = np.array([len(r) for r in recordings])
        flat = np.concatenate(recordings)
        if flat.min() < 1 or flat.max() > block_size:
            raise ConfigError(
                f"spec.replay_path: recorded commit lengths span [{flat.min()}, {flat.max()}], "
                f"outside [1, spec.block_size = {block_size}] (recorded at another block "
                "size? set spec.block_size to the recording's)")
        self.flat = flat
        self.starts = np.concatenate([[0], np.cumsum(lens)[:-1]])
        self.lens = lens
        self.means = np.array([float(np.mean(r)) for r in recordings])
        self.trace = np.zeros(n_slots, dtype=np.int64)
        self.ptr = np.zeros(n_slots, dtype=np.int64)

    def admit(self, slots: np.ndarray, rids: np.ndarray) -> None:
        self.trace[slots] = rids % len(self.lens)
        self.ptr[slots] = 0
        self.expected[slots] = np.minimum(self.means[self.trace[slots]], self.block_size)

    def sample(self, slots: np.ndarray, rounds: int, q: np.ndarray) -> np.ndarray:
        t = self.trace[slots]
        k = (self.ptr[slots][None, :] + np.arange(rounds)[:, None]) % self.lens[t]
        return np.minimum(self.flat[self.starts[t] + k], q)

    def advance(self, slots: np.ndarray, rounds: int) -> None:
        self.ptr[slots] += rounds


class MeanAcceptance(AcceptanceModel):
    """Deterministic commits with mean tau (no per-round or per-request variance)."""

    def __init__(self, n_slots: int, block_size: int, tau: float):
        super().__init__(n_slots, block_size)
        self.tau = tau
        self.phase = np.zeros(n_slots)
        self.expected[:] = tau

    def admit(self, slots: np.ndarray, rids: np.ndarray) -> None:
        self.phase[slots] = 0.0

    def sample(self, slots: np.ndarray, rounds: int, q: np.ndarray) -> np.ndarray:
        k = np.arange(rounds + 1)[:, None] * self.tau + self.phase[slots][None, :]
        return np.minimum(np.diff(np.floor(k), axis=0).astype(np.int64), q)

    def advance(self, slots: np.ndarray, rounds: int) -> None:
        self.phase[slots] = (self.phase[slots] + rounds * self.tau) % 1.0


def load_recordings(path: str) -> list[np.ndarray]:
    """Per-request commit lengths from JSON (a list of lists, or {"accept_lengths": ...})
    or JSONL (one list, or one object with "accept_lengths", per line)."""
    text = Path(path).read_text()
    if path.endswith(".jsonl"):
        rows = [json.loads(line) for line in text.splitlines() if line.strip()]
    else:
        rows = json.loads(text)
        rows = rows["accept_lengths"] if isinstance(rows, dict) else rows
    rows = [r["accept_lengths"] if isinstance(r, dict) else r for r in rows]
    rows = [np.asarray(r, dtype=np.int64) for r in rows if len(r)]
    if not rows:
        raise ConfigError(f"spec.replay_path = {path!r} holds no commit lengths")
    return rows


def preset_tau(cfg: SimConfig) -> tuple[float, int]:
    """(tau, block size) of the preset curve: the method's published value (simulator/
    presets.py, `SpecMethod.published_tau`) unless spec.tau is set."""
    s = cfg.spec
    tau, block = METHODS[s.method].published_tau(cfg.model.name, cfg.workload.dataset,
                                                 s.temperature)
    return (s.tau if s.tau is not None else tau), (s.trained_block_size or block)


def make_acceptance(cfg: SimConfig, n_slots: int, difficulty: np.ndarray,
                    rng: np.random.Generator, shift: np.ndarray | None = None
                    ) -> AcceptanceModel:
    """The acceptance model named by `spec.acceptance`, for one replica; `difficulty` holds
    the latent z of every request id, `shift` (preset and constant curves only) a logit drop
    of every position per request id (context decay, simulator/context_decay.py)."""
    s = cfg.spec
    B = s.block_size
    if B == 1:  # nothing drafted (spec.method = none validates to B = 1)
        return CurveAcceptance(n_slots, 1, 0.0, 0.0, rng)
    drop = 0.0 if shift is None else shift
    if s.acceptance == "constant":
        alpha = min(max(s.alpha, 1e-12), 1 - 1e-12)
        return CurveAcceptance(n_slots, B, np.log(alpha / (1 - alpha)) - drop, 0.0, rng)
    if s.acceptance == "replay":
        return ReplayAcceptance(n_slots, B, load_recordings(s.replay_path))
    tau, trained = preset_tau(cfg)
    logit0 = solve_logit0(tau, s.decay_logit, s.difficulty_sigma, trained)
    if s.acceptance == "mean":
        return MeanAcceptance(n_slots, B, mean_commit(logit0, s.decay_logit,
                                                      s.difficulty_sigma, B))
    return CurveAcceptance(n_slots, B, logit0 + s.difficulty_sigma * difficulty - drop,
                           s.decay_logit, rng)
