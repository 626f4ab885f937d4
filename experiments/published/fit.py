"""Fitting an engine family's free kernel factors on published no-speculation throughput.

`fit(pub)` reads the baseline cells only (`Cell.baseline`): for each engine family on each
hardware it minimises the sum of squared log errors log(simulated / published) over that
family's baseline cells by damped Gauss-Newton (Levenberg-Marquardt) with forward-difference
Jacobians, each evaluation a full simulation of every cell. Parameters are searched in
unbounded coordinates (logit of an efficiency, log of a time), so they stay in range. A
speculative cell's value enters only through a baseline derived from it (Table 12's: its
DFlash row's tok/s over its speedup), and such a cell is scored on its speedup
(`Cell.scored_on`); perturbing any other speculative value leaves the fit unchanged
(tests/experiments/test_published.py).

Free parameters (`FREE`): SGLang's four (`simulator.engine_profiles.FITTED`: bandwidth
efficiency, GPU time per layer, per MoE layer, per request and layer), identifiable because
its baselines span three dense models of two depths and an MoE model. vLLM's published
baselines cover one model, where the bandwidth and the per-layer floor trade off exactly at
c = 1, so its bandwidth efficiency is SGLang's on the same hardware (`SHARED`: the weight
streaming of both engines runs the same GEMV class of kernels [INF]) and its MoE term is not
fitted (no MoE baseline). vLLM's scheduling is not stated by its source (async scheduling is
opt-in), so both modes are fitted and the one with the smaller baseline error is kept
(`MODES`; a mode changes how much host time the baseline exposes); SGLang's plain decoding
runs its overlap scheduler by default.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from experiments.published.cells import Cell, Published
from experiments.published.setup import FAMILY, simulate

FREE = {
    "sglang": (
        "bandwidth_efficiency",
        "layer_overhead_s",
        "moe_layer_overhead_s",
        "request_layer_overhead_s",
    ),
    "vllm": ("layer_overhead_s", "request_layer_overhead_s"),
}
SHARED = {"vllm": {"bandwidth_efficiency": "sglang"}}
START = {
    "bandwidth_efficiency": 0.8,
    "layer_overhead_s": 30e-6,
    "moe_layer_overhead_s": 10e-6,
    "request_layer_overhead_s": 1e-6,
}
ORDER = ("sglang", "vllm")  # SHARED values come from families fitted before
MODES = {
    "vllm": ({"mode": "sync", "kv_reserve_blocks": 1}, {"mode": "overlap", "kv_reserve_blocks": 2})
}

Evaluate = Callable[[Published, list[Cell], dict[str, dict]], list[float]]


def to_theta(name: str, value: float) -> float:
    return float(np.log(value / (1 - value)) if name.endswith("efficiency") else np.log(value))


def from_theta(name: str, theta: float) -> float:
    return float(1 / (1 + np.exp(-theta)) if name.endswith("efficiency") else np.exp(theta))


def levenberg_marquardt(
    residuals: Callable[[np.ndarray], np.ndarray],
    theta: np.ndarray,
    max_iter: int = 40,
    step: float = 0.02,
) -> tuple[np.ndarray, int]:
    """theta minimising |residuals(theta)|^2, and the evaluations spent."""
    r = residuals(theta)
    evals, lam = 1, 1e-2
    for _ in range(max_iter):
        J = np.empty((len(r), len(theta)))
        for i in range(len(theta)):
            t = theta.copy()
            t[i] += step
            J[:, i] = (residuals(t) - r) / step
        evals += len(theta)
        g, A = J.T @ r, J.T @ J
        improved = False
        while lam < 1e8:
            delta = np.linalg.solve(A + lam * np.diag(np.diag(A) + 1e-12), -g)
            r_new = residuals(theta + delta)
            evals += 1
            if r_new @ r_new < r @ r:
                gain = (r @ r - r_new @ r_new) / max(r @ r, 1e-300)
                theta, r, lam, improved = theta + delta, r_new, lam / 3, True
                break
            lam *= 4
        if not improved or gain < 1e-6 or np.abs(delta).max() < 1e-4:
            break
    return theta, evals


def fit_family(
    pub: Published, cells: list[Cell], family: str, fixed: dict, evaluate: Evaluate, max_iter: int
) -> dict:
    """Fit FREE[family] on `cells` with the `fixed` engine fields held."""
    names = FREE[family]
    published = np.log([c.published_tok_s for c in cells])

    def values(theta: np.ndarray) -> dict:
        return {**fixed, **{n: from_theta(n, t) for n, t in zip(names, theta, strict=True)}}

    def residuals(theta: np.ndarray) -> np.ndarray:
        return np.log(evaluate(pub, cells, {family: values(theta)})) - published

    theta0 = np.array([to_theta(n, START[n]) for n in names])
    theta, evals = levenberg_marquardt(residuals, theta0, max_iter)
    r = residuals(theta)
    return {
        "values": values(theta),
        "free": list(names),
        "cells": len(cells),
        "evaluations": evals + 1,
        "rms_log_error": float(np.sqrt(np.mean(r**2))),
        "max_abs_error": float(np.max(np.abs(np.expm1(r)))),
    }


def fit(pub: Published, evaluate: Evaluate = simulate, max_iter: int = 40) -> dict[str, dict]:
    """Fitted engine fields per `family@hardware` ({"values", "free", "cells",
    "rms_log_error", "max_abs_error", ...}), from the baseline cells alone."""
    out: dict[str, dict] = {}
    base = [c for c in pub.cells if c.baseline]
    for family in ORDER:
        for hw in sorted({c.hardware for c in base if FAMILY[c.engine] == family}):
            cells = [c for c in base if FAMILY[c.engine] == family and c.hardware == hw]
            shared = {
                k: out[f"{src}@{hw}"]["values"][k] for k, src in SHARED.get(family, {}).items()
            }
            tries = [
                fit_family(pub, cells, family, {**shared, **mode}, evaluate, max_iter)
                for mode in MODES.get(family, ({},))
            ]
            best = min(tries, key=lambda t: t["rms_log_error"])
            best["shared"] = dict(SHARED.get(family, {}))
            if len(tries) > 1:
                best["modes_rms_log_error"] = {
                    t["values"]["mode"]: t["rms_log_error"] for t in tries
                }
            out[f"{family}@{hw}"] = best
    return out
