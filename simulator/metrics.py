"""What a run reports: `SimResult` (summary dict, per-request records, time series).

Definitions: TTFT = first token - arrival; E2E = finish - arrival; TPOT = (finish - first
token) / (output tokens - 1); ITL = gaps between successive token-emitting rounds of a
request (with speculation a round emits several tokens at once), weighted per gap; goodput =
finished requests meeting both the TTFT and TPOT SLOs. tau = mean commit length over request
rounds (bonus included; what an engine's log reports); tau_per_request = mean over requests of
their own mean (the papers' benchmark definition, which the presets match); rejected per
committed = (verified - committed) / committed tokens.
Throughput: `output_tok_s` is the benchmark figure, over [first arrival, last finish] (what
`sglang.bench_serving` and `vllm bench serve` print; it depends on the request count);
`throughput.steady` is the rate with warm-up and drain cut (simulator/steady.py gives the
rule); what-ifs, break-evens and the config search read the steady figure.
As SGLang and vLLM name them, acceptance_length = tau (tokens per verify step, bonus included), and
acceptance_rate_per_position[i] = the fraction of request rounds whose draft token i + 1 was
accepted (commit length >= i + 2); total tokens/s counts the finished requests' prompt and
output tokens (vLLM's "total token throughput"). Little's law
compares the sampled mean number in the system with arrival rate times mean E2E (only when
every request finished).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np

from simulator.steady import steady_summary

if TYPE_CHECKING:
    from simulator.cluster import Cluster

QUANTILES = (50, 90, 99)


@dataclass
class SimResult:
    """Outcome of `simulator.run`."""

    summary: dict
    requests: dict[str, np.ndarray]
    timeseries: dict[str, np.ndarray] = field(default_factory=dict)


def weighted_stats(x: np.ndarray, w: np.ndarray | None = None) -> dict:
    """Mean and p50/p90/p99 (weights: each x[i] counts w[i] times); NaNs ignored."""
    x = np.asarray(x, dtype=np.float64)
    w = np.ones_like(x) if w is None else np.asarray(w, dtype=np.float64)
    keep = np.isfinite(x) & (w > 0)
    x, w = x[keep], w[keep]
    if not x.size:
        return {"mean": None, **{f"p{q}": None for q in QUANTILES}}
    order = np.argsort(x)
    x, cw = x[order], np.cumsum(w[order])
    out = {"mean": float(np.average(x, weights=w[order]))}
    for q in QUANTILES:
        out[f"p{q}"] = float(x[min(np.searchsorted(cw, q / 100 * cw[-1]), len(x) - 1)])
    return out


def _request_records(req, reps) -> dict[str, np.ndarray]:
    ttft = req.first_token_s - req.arrival_s
    e2e = req.finish_s - req.arrival_s
    with np.errstate(invalid="ignore", divide="ignore"):
        tpot = (req.finish_s - req.first_token_s) / (req.output_tokens - 1)
        tau = req.committed_tokens / req.decode_rounds
    tpot[req.output_tokens <= 1] = np.nan
    return {
        "request_id": np.arange(len(req)), "replica": req.replica,
        "arrival_s": req.arrival_s, "prompt_tokens": req.prompt_tokens,
        "output_tokens": req.output_tokens, "difficulty": req.difficulty,
        "first_token_s": req.first_token_s, "finish_s": req.finish_s, "ttft_s": ttft,
        "tpot_s": tpot, "e2e_s": e2e, "decode_rounds": req.decode_rounds, "tau": tau,
        "preemptions": req.preemptions,
    }


def _nanmean(x: np.ndarray) -> float | None:
    x = x[np.isfinite(x)]
    return float(x.mean()) if x.size else None


def _littles_law(req, finished, samples: np.ndarray, t0: float, t1: float) -> dict:
    if not finished.all() or t1 <= t0 or not len(samples):
        return {"L_sampled": None, "lambda_W": None, "rel_err": None, "samples": len(samples)}
    inside = samples[(samples[:, 0] > t0) & (samples[:, 0] <= t1)]
    L = float(inside[:, 1].mean()) if len(inside) else 0.0
    lam_w = len(req) / (t1 - t0) * float(np.mean(req.finish_s - req.arrival_s))
    return {"L_sampled": L, "lambda_W": lam_w, "rel_err": abs(L - lam_w) / max(lam_w, 1e-12),
            "samples": len(inside)}


def _steady_k(cfg, samples: np.ndarray) -> int:
    """k of the steady window: a closed loop's concurrency, else the most requests the
    sampler saw running (simulator/steady.py)."""
    if cfg.workload.arrival == "closed_loop":
        return int(cfg.workload.concurrency)
    return int(samples[:, 3].max()) if len(samples) else 1


def position_rates(hist: np.ndarray) -> list[float]:
    """Per draft position i = 1..K, the fraction of rounds that accepted it, from the commit
    length histogram `hist` (hist[k] = rounds committing k tokens, bonus included; shape
    (K + 2,)): rounds with k >= i + 1 over all rounds. [] without a draft position."""
    hist = np.asarray(hist, dtype=np.float64)
    rounds = hist.sum()
    if rounds == 0 or len(hist) < 3:
        return []
    at_least = np.cumsum(hist[::-1])[::-1]  # at_least[k] = rounds committing >= k tokens
    return [float(at_least[i + 1] / rounds) for i in range(1, len(hist) - 1)]


def summarize(cluster: Cluster, wall_s: float) -> SimResult:
    """Summary, records and time series of a finished `Cluster` run."""
    cfg, req, reps = cluster.cfg, cluster.req, cluster.replicas
    rec = _request_records(req, reps)
    finished = np.isfinite(req.finish_s)
    arrived = req.arrival_s <= cluster.env.now  # NaN (closed loop, not issued) is False
    t0 = float(np.nanmin(req.arrival_s)) if arrived.any() else 0.0
    t1 = float(np.nanmax(req.finish_s)) if finished.any() else cluster.env.now
    span = max(t1 - t0, 1e-12)
    out_tokens = int(req.output_tokens[finished].sum())
    n_gpu = len(reps)
    samples = np.array(cluster.samples, dtype=np.float64).reshape(-1, 5)
    cap = cluster.budget.capacity_tokens
    kv_frac = samples[:, 2] / (cap * n_gpu) if len(samples) else np.zeros(0)
    ok = (np.nan_to_num(rec["ttft_s"], nan=np.inf) <= cfg.metrics.slo_ttft_s) & (
        np.nan_to_num(rec["tpot_s"], nan=0.0) <= cfg.metrics.slo_tpot_s) & finished
    hist = sum(r.commit_hist for r in reps)
    verified = sum(r.verified_tokens for r in reps)
    committed = sum(r.committed_tokens for r in reps)
    req_rounds = sum(r.request_rounds for r in reps)
    gaps = [g for r in reps for g in r.itl_gaps]
    itl_v = np.concatenate([*gaps, *(v for r in reps for v in r.itl_values)])
    itl_w = np.concatenate([np.ones(sum(map(len, gaps))),
                            *(w for r in reps for w in r.itl_weights)])
    horizon = max([cluster.env.now, *(r.gpu_free for r in reps)])  # GPU may run past the end
    wall_span = max(horizon, 1e-12) * n_gpu
    reserve = reps[0].reserve_tokens if reps else 0  # R * the KV positions a round writes
    per_req = float(np.mean(req.prompt_tokens + req.output_tokens)) + reserve if len(req) else 1
    summary = {
        "method": cfg.spec.method, "block_size": cfg.spec.block_size, "model": cfg.model.name,
        "hardware": cfg.hardware.name, "engine_mode": cfg.engine.mode, "replicas": n_gpu,
        "tp_size": cfg.engine.tp_size,
        "cost_model": getattr(cluster.cost, "label", cfg.engine.cost_model),
        "engine_profile": cfg.engine.profile,
        "cost_source": getattr(cluster.cost, "cost_source", "a cost model passed in"),
        "arrival": cfg.workload.arrival, "dataset": cfg.workload.dataset,
        "concurrency": cfg.workload.concurrency if cfg.workload.arrival == "closed_loop"
        else None,
        "rate_rps": cfg.workload.rate_rps if cfg.workload.arrival in ("poisson", "gamma")
        else None,
        "requests": {"total": len(req), "arrived": int(arrived.sum()),
                     "finished": int(finished.sum()),
                     "in_flight": int(arrived.sum() - finished.sum()),
                     "not_arrived": int(len(req) - arrived.sum())},
        "duration_s": span,
        "throughput": {"output_tok_s": out_tokens / span,
                       "total_tok_s": (out_tokens + int(req.prompt_tokens[finished].sum()))
                       / span,
                       "output_tok_s_per_gpu": out_tokens / span
                       / (n_gpu * cfg.engine.tp_size),
                       "requests_s": int(finished.sum()) / span,
                       "steady": steady_summary(req, ok, _steady_k(cfg, samples), n_gpu,
                                                cfg.engine.tp_size)},
        "ttft_s": weighted_stats(rec["ttft_s"]), "tpot_s": weighted_stats(rec["tpot_s"]),
        "itl_s": weighted_stats(itl_v, itl_w), "e2e_s": weighted_stats(rec["e2e_s"]),
        "goodput": {"slo_ttft_s": cfg.metrics.slo_ttft_s, "slo_tpot_s": cfg.metrics.slo_tpot_s,
                    "fraction": float(ok.sum() / max(finished.sum(), 1)),
                    "requests_s": float(ok.sum() / span)},
        "speculation": {
            "tau": float((hist * np.arange(len(hist))).sum() / max(req_rounds, 1)),
            "acceptance_length": float((hist * np.arange(len(hist))).sum()
                                       / max(req_rounds, 1)),
            "acceptance_rate_per_position": position_rates(hist),
            "tau_per_request": _nanmean(rec["tau"]),
            "commit_hist": hist.tolist(),
            "rejected_per_committed": (verified - committed) / max(committed, 1),
            "verified_tokens": int(verified), "committed_tokens": int(committed),
            "wasted_rows": int(sum(r.wasted_rows for r in reps)),
        },
        "kv": {**cluster.budget.as_dict(),
               "peak_used_frac": float(kv_frac.max()) if kv_frac.size else 0.0,
               "mean_used_frac": float(kv_frac.mean()) if kv_frac.size else 0.0,
               "max_running_by_kv": int(cap // per_req),
               "max_running": min(int(cap // per_req), cfg.engine.max_running_requests)},
        "running": {"mean": float(samples[:, 3].mean() / n_gpu) if len(samples) else 0.0,
                    "max": int(samples[:, 3].max()) if len(samples) else 0},
        "engine": {"gpu_busy_frac": sum(r.gpu_busy_s for r in reps) / wall_span,
                   "host_busy_frac": sum(r.host_busy_s for r in reps) / wall_span,
                   "bubble_s": max(0.0, float(sum(r.bubble_s for r in reps))),
                   "decode_rounds": int(sum(r.decode_rounds for r in reps)),
                   "prefill_rounds": int(sum(r.prefill_rounds for r in reps))},
        "preemptions": int(sum(r.preemptions for r in reps)),
        "littles_law": _littles_law(req, finished, samples, t0, t1),
        "wall_s": wall_s,
        "sim_requests_per_wall_s": int(finished.sum()) / max(wall_s, 1e-12),
    }
    ts = {"t_s": samples[:, 0], "in_system": samples[:, 1], "kv_used_frac": kv_frac,
          "running": samples[:, 3], "waiting": samples[:, 4]}
    return SimResult(summary, rec, ts)
