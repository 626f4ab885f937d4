"""Vectorized arithmetic of a stretch: consecutive decode rounds of one fixed batch.

Between two changes of a replica's batch (a request finishes, a new one is admitted, the KV
pool runs short) every round has the same rows, so the engine prices and samples up to K
rounds at once as (K, n) arrays and cuts the stretch where the batch changes:

- sync: after the round in which the first request reaches its output length;
- overlap: one round later, because the host learns a round's results only after it has
  launched the next round, so a finished request rides one more round as a wasted row
  (SGLang's Spec V2 skips those rows when it processes the results);
- before the first round whose KV reservation (host view of committed + R*B per request,
  never shrinking) no longer fits the pool.

`timeline_sync` and `timeline_overlap` place the rounds on the host and GPU timelines.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(slots=True)
class Commits:
    """Per-round, per-row outcome of a stretch of `length` rounds (arrays are (length, n))."""

    length: int
    c_raw: np.ndarray
    c_eff: np.ndarray
    live: np.ndarray
    fin_round: np.ndarray
    kv: np.ndarray
    seq_after: np.ndarray
    res0: np.ndarray
    host_seq0: np.ndarray
    reserve: int
    lag: int
    first_finish: int

    def cut(self, length: int) -> Commits:
        """The first `length` rounds."""
        s = slice(0, length)
        return Commits(length, self.c_raw[s], self.c_eff[s], self.live[s], self.fin_round,
                       self.kv[s], self.seq_after[s], self.res0, self.host_seq0,
                       self.reserve, self.lag, self.first_finish)

    def host_view(self, k: int) -> np.ndarray:
        """Committed lengths the host knows when it plans round k."""
        if self.lag == 0:
            return self.kv[k]
        return self.host_seq0 if k == 0 else self.kv[k - 1]

    @property
    def reserved_after(self) -> np.ndarray:
        """KV reservation per row once the last round is planned (it never shrinks)."""
        return np.maximum(self.res0, self.host_view(self.length - 1) + self.reserve)


def plan_commits(c_raw: np.ndarray, gen0: np.ndarray, out: np.ndarray, seq0: np.ndarray,
                 host_seq0: np.ndarray, res0: np.ndarray, kv_free: int, reserve: int,
                 lag: int) -> Commits:
    """Cut K sampled rounds (c_raw, shape (K, n)) to the stretch that keeps the batch fixed.

    Args:
        gen0, out: tokens generated so far (GPU view) and each request's output length.
        seq0, host_seq0: committed KV length (GPU view) and the host's lagging view of it.
        res0: KV slots reserved per row (at least seq0); kv_free: free slots of the pool.
        reserve: R*B, slots kept ahead of the host's view; lag: 0 (sync) or 1 (overlap).
    """
    K, n = c_raw.shape
    cum = c_raw.cumsum(axis=0)
    rem = out - gen0
    reached = cum >= rem  # monotone in k, so its last row says whether it ever happens
    fin_round = np.where(reached[-1], reached.argmax(axis=0), K)
    first_finish = int(fin_round.min())  # round of the first finish, K if none
    if rem.min() <= 0:  # finished in a round whose results the host has not processed yet
        fin_round[rem <= 0] = -1
        first = -1
    else:
        first = first_finish
    length = K if first >= K else min(K, first + 1 + lag)
    seq_after = seq0 + cum
    kv = seq_after - c_raw
    # a row's reservation grows by at most k * B + reserve <= (k + 1) * reserve by round k
    if kv_free < n * (length + 1) * reserve:
        host = kv if lag == 0 else np.vstack([host_seq0[None, :], kv[:-1]])
        grow = np.maximum(host + reserve - res0, 0).sum(axis=1)
        over = np.flatnonzero(grow > kv_free)
        if over.size:
            length = min(length, int(over[0]))
    c, cum = c_raw[:length], cum[:length]
    before = cum - c
    c_eff = np.minimum(cum, rem) - np.minimum(before, rem)
    return Commits(length, c, c_eff, before < rem, fin_round, kv[:length],
                   seq_after[:length], res0, host_seq0, reserve, lag, first_finish)


def timeline_sync(now: float, plan_s: float, gpu_s: np.ndarray, copy_s: float,
                  proc_s: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Host plan, GPU round, copy, host processing, in sequence.

    Returns (H, start, end): H[k] is when the host starts planning round k (H[L] is when
    the stretch is over and round L-1's results have been processed); start/end of the GPU.
    """
    step = plan_s + gpu_s + copy_s + proc_s
    H = now + np.concatenate([[0.0], np.cumsum(step)])
    start = H[:-1] + plan_s
    return H, start, start + gpu_s


def timeline_overlap(now: float, plan_s: float, gpu_s: np.ndarray, copy_s: float,
                     proc_s: float, gpu_free: float, pending_proc_s: float | None,
                     launch_s: float = 0.0) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Spec V2: iteration k plans round k, launches it when the GPU is free, then processes
    round k-1 once its results are copied (iteration 0 processes the pending round, if any).

    launch_s (one round only: a prefill step): the host's launch after planning; the GPU
    starts on the first kernels, cannot end before the last is launched, and the host
    processes the pending round after launching.
    Returns (H, start, end) as `timeline_sync`; round k's results are processed by H[k+2].
    """
    L = len(gpu_s)
    a0 = now + plan_s
    s0 = max(a0, gpu_free)
    launched = a0 + launch_s
    h1 = launched if pending_proc_s is None else max(launched, gpu_free + copy_s) + pending_proc_s
    if L == 1:
        return np.array([now, h1]), np.array([s0]), np.array([max(s0 + float(gpu_s[0]),
                                                                   launched)])
    if launch_s:
        raise ValueError("launch_s is for a one-round step")
    end = s0 + np.cumsum(gpu_s)
    start = end - gpu_s
    H = np.empty(L + 1)
    H[0], H[1] = now, h1
    # GPU-bound: the host is ready before the GPU frees, rounds run back to back
    H[2:] = end[:-1] + (copy_s + proc_s)
    if (H[1:-1] + plan_s <= end[:-1]).all():
        return H, start, end
    h, prev_end = h1, float(end[0])
    for k, g in enumerate(gpu_s[1:].tolist(), start=1):
        a = h + plan_s
        s = a if a > prev_end else prev_end
        start[k], end[k] = s, s + g
        H[k] = h
        h = max(a, prev_end + copy_s) + proc_s
        prev_end = s + g
    H[L] = h
    return H, start, end
