"""Steady-state throughput: the rate of a run while its closed loop is full, warm-up and drain
cut.

The benchmark figure (`throughput.output_tok_s`: output tokens over [first arrival, last
finish], what `sglang.bench_serving` and `vllm bench serve` print) depends on the request
count: a closed loop of c clients starts with c requests arriving at once (warm-up: the first
round is all prefill) and ends with fewer than c running (drain), and both ends weigh 1 / N.

Rule (`steady_window`): with k = the concurrency of a closed loop (open loops: the largest
number of requests the sampler saw running), the window runs from the k-th to the
(N - k)-th finish (finishes sorted, 1-based). Before the k-th finish some of the first wave
are still in their first (prefill-heavy) rounds; after the (N - k)-th finish the clients
have no request left to send and the batch shrinks. Inside the window every client has a
request in the system.

Tokens in the window: each finished request's first token at `first_token_s`, its other
output_tokens - 1 spread evenly over (first_token_s, finish_s]; the window's share of each
is summed (a request's rounds are regular enough for the uniform spread; a round emits
tau tokens at once, which the spread averages). Requests/s in the window: the finishes
strictly after the k-th up to the (N - k)-th, over the window's length; goodput the same
count restricted to requests that met both SLOs.

When N <= 2k + 1 there is no window: `steady` is None and the run says why; callers that
need a rate read `throughput_for` below, which then falls back to the benchmark figure and
names that fallback in `basis`.
"""

from __future__ import annotations

import numpy as np


def steady_window(finish_s: np.ndarray, k: int) -> tuple[float, float] | None:
    """(start, end) of the steady window: the k-th and (N - k)-th of the sorted finite finish
    times (seconds); None when N <= 2k + 1 (no finish strictly inside)."""
    f = np.sort(finish_s[np.isfinite(finish_s)])
    n = len(f)
    k = max(int(k), 1)
    if n - k <= k:
        return None
    return float(f[k - 1]), float(f[n - k - 1])


def tokens_in(first_s: np.ndarray, finish_s: np.ndarray, out_tokens: np.ndarray,
              t0: float, t1: float) -> float:
    """Output tokens emitted in [t0, t1] by requests with first token at `first_s` and the
    rest spread evenly over (first_s, finish_s] (arrays of the finished requests, shape [n])."""
    first = ((first_s >= t0) & (first_s <= t1)).astype(np.float64)
    span = np.maximum(finish_s - first_s, 1e-15)
    overlap = np.clip(np.minimum(finish_s, t1) - np.maximum(first_s, t0), 0.0, None) / span
    rest = np.where(out_tokens > 1, (out_tokens - 1) * overlap, 0.0)
    return float(first.sum() + rest.sum())


def steady_summary(req, ok: np.ndarray, k: int, n_gpu: int, tp: int) -> dict:
    """The `throughput.steady` block: window, k, tok/s (total and per GPU), requests/s and
    goodput requests/s; `None` rates with a reason when the run is too short."""
    done = np.isfinite(req.finish_s)
    win = steady_window(req.finish_s, k)
    if win is None:
        return {"k": int(k), "window_s": None, "output_tok_s": None,
                "output_tok_s_per_gpu": None, "requests_s": None, "goodput_requests_s": None,
                "reason": f"{int(done.sum())} finished requests <= 2k + 1 = {2 * k + 1}"}
    t0, t1 = win
    length = max(t1 - t0, 1e-12)
    tok = tokens_in(req.first_token_s[done], req.finish_s[done],
                    req.output_tokens[done].astype(np.float64), t0, t1)
    inside = done & (req.finish_s > t0) & (req.finish_s <= t1)
    return {"k": int(k), "window_s": [t0, t1], "output_tok_s": tok / length,
            "output_tok_s_per_gpu": tok / length / (n_gpu * tp),
            "requests_s": float(inside.sum()) / length,
            "goodput_requests_s": float((inside & ok).sum()) / length, "reason": None}


def throughput_for(summary: dict, key: str = "output_tok_s") -> tuple[float, str]:
    """(rate, basis) a what-if, break-even or search reads: the steady-state `key` when the
    run has a window, else the benchmark figure; basis is "steady" or "benchmark"."""
    steady = summary["throughput"].get("steady") or {}
    if steady.get(key) is not None:
        return float(steady[key]), "steady"
    return float(summary["throughput"][key]), "benchmark"


def steady_goodput(summary: dict) -> float:
    """Requests/s within both SLOs in the steady window, else over the whole run (req/s)."""
    steady = summary.get("throughput", {}).get("steady") or {}
    if steady.get("goodput_requests_s") is not None:
        return float(steady["goodput_requests_s"])
    return float(summary["goodput"]["requests_s"])
