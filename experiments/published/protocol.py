"""The cross-validated protocol: the speculative path's two terms fitted on declared anchor
cells, every other cell held out, scored three ways.

Terms (simulator/engine_profiles.py `SPEC_TERMS`): `spec_round_s`, GPU seconds per
speculative round, and `spec_request_s`, host seconds per request per speculative round
(exposed under sync, hidden under overlap while the GPU round is longer), one pair per
engine release (`RELEASE`: the DFlash paper's SGLang (Tables 3 and 5), SGLang PR #23000,
the DFlash paper's vLLM (Table 12)). The kernel factors stay those fitted on the baselines
(fit.py).

Anchors (`ANCHOR_C`): at most one concurrency per source, every speculative cell of that
source at that concurrency; they are marked `"anchor": true` in predictions.json. Schemes:

- `anchored`: each release's terms fitted on its own anchors (what conf/engine/ carries);
  its anchors are fitted, all other cells held out;
- `leave-one-table-out` (headline): the cells of source S predicted with the terms fitted
  on the anchors of every other source, pooled;
- `leave-one-table-out, same engine`: the same with only the other sources of S's engine
  family (`loto_sources`: SGLang's Table 3, Table 5 and PR #23000 stand in for each other;
  Table 12, the only vLLM source, takes every SGLang anchor); in both the Spec V2 gain
  scored on PR #23000 is predicted from the paper's tables;
- `leave-one-concurrency-out`: the cells at concurrency c predicted with each release's
  terms fitted on all of that release's speculative cells at other concurrencies;
- `baseline-only`: both terms zero (the baseline fit transferred as is).

Fitting (`fit_terms`): bounded least squares (scipy, trust region reflective) of log
(predicted / published) over the fit cells, the terms in log space between 1 ns and 0.1 s
(a term no fit cell responds to, as a host term under overlap while the GPU round is
longer, is not identified: 0, and so marked). Each fit cell's throughput at given
terms is read off its zero-term simulation (`Linear`): its decode round lengthens by
spec_round_s + spec_request_s * n under sync, and to max(GPU round + spec_round_s, host
round + spec_request_s * n) under overlap; every scored cell is then simulated at the fitted
terms (its error is the simulator's, not this linearisation's).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from experiments.published.cells import Cell, Published
from experiments.published.setup import FAMILY, conf, sim_config

RELEASE = {
    "dflash-table3": "sglang-paper",
    "dflash-table5": "sglang-paper",
    "sglang-pr23000": "sglang-pr23000",
    "dflash-table12": "vllm-paper",
}
ANCHOR_C = {"dflash-table3": 8, "dflash-table5": 8, "dflash-table12": 8, "sglang-pr23000": 1}
TERMS = ("spec_round_s", "spec_request_s")
LO, HI = 1e-9, 0.1


def regime(c: Cell) -> str:
    """Dense SGLang V2, Spec V1, EAGLE trees, MoE or vLLM (the report's groups)."""
    if c.engine == "vllm":
        return "vLLM"
    if c.method.startswith("eagle"):
        return "EAGLE trees"
    if conf("model", c.model).get("num_experts"):
        return "MoE"
    return "Spec V1" if c.engine == "sglang_v1" else "dense SGLang V2"


def is_anchor(c: Cell) -> bool:
    return not c.baseline and ANCHOR_C.get(c.source) == c.concurrency


def run_cell(pub: Published, c: Cell, family_values: dict, terms: dict) -> dict:
    """The cell's simulated summary with its family's kernel factors and `terms`."""
    import simulator

    return simulator.run(sim_config(pub, c, {**family_values, **terms})).summary


@dataclass(frozen=True)
class Linear:
    """A cell's zero-term operating point: throughput tok_s at decode rounds of T0 seconds
    (running * tau / tok_s), host seconds per round H, n running, mode."""

    tok_s: float
    round_s: float
    host_s: float
    n: float
    sync: bool

    @classmethod
    def of(cls, summary: dict, engine: dict) -> Linear:
        n = max(summary["running"]["mean"], 1e-9)
        tok = summary["throughput"]["output_tok_s"]
        t0 = n * summary["speculation"]["tau"] / tok
        host = (engine["host_plan_s"] + engine["host_process_s"]
                + (engine["host_plan_per_req_s"] + engine["host_process_per_req_s"]) * n)
        return cls(tok, t0, host, n, engine["mode"] == "sync")

    def tok_at(self, a: float, b: float) -> float:
        if self.sync:
            longer = self.round_s + a + b * self.n
        else:
            longer = max(self.round_s + a, self.host_s + b * self.n, self.round_s)
        return self.tok_s * self.round_s / longer


def fit_terms(points: list[tuple[Linear, float]]) -> dict:
    """Both terms fitted on (operating point, published tok/s) pairs; values, 1-sigma
    relative uncertainties (from the Jacobian in log space), rms log residual."""
    from scipy.optimize import least_squares

    pub = np.log([p for _, p in points])

    def resid(x: np.ndarray) -> np.ndarray:
        a, b = np.exp(x)
        return np.log([lin.tok_at(a, b) for lin, _ in points]) - pub

    x0 = np.log([1e-3, 1e-6])
    res = least_squares(resid, x0, bounds=(np.log([LO, LO]), np.log([HI, HI])), x_scale=1.0)
    dof = max(len(points) - 2, 1)
    s2 = float(res.fun @ res.fun) / dof
    jtj = res.jac.T @ res.jac
    sig = [float("inf")] * 2
    if np.linalg.matrix_rank(jtj) == 2:
        cov = np.linalg.inv(jtj) * s2
        sig = [float(np.sqrt(cov[i, i])) for i in range(2)]
    seen = np.abs(res.jac).max(axis=0) > 1e-9
    values = {t: float(np.exp(x)) if ok else 0.0
              for t, x, ok in zip(TERMS, res.x, seen, strict=True)}
    return {"values": values, "log_sigma": dict(zip(TERMS, sig, strict=True)),
            "identified": dict(zip(TERMS, map(bool, seen), strict=True)),
            "cells": len(points), "rms_log_error": float(np.sqrt(np.mean(res.fun ** 2)))}


Runner = Callable[[Cell, dict], dict]


def schemes(pub: Published, fits: dict[str, dict], runner: Runner | None = None) -> dict:
    """Per scheme: the fitted terms per fold and every speculative cell's simulated tok/s
    ({"terms": {fold: fit}, "tok_s": [per cell of `spec_cells(pub)`]}); "target_tok_s":
    what each cell is scored against (`targets`)."""
    values = {k.split("@")[0]: v["values"] for k, v in fits.items()}

    def run(c: Cell, terms: dict) -> dict:
        if runner is not None:
            return runner(c, terms)
        return run_cell(pub, c, values[FAMILY[c.engine]], terms)

    cells = spec_cells(pub)
    zero = {t: 0.0 for t in TERMS}
    lin = []
    for c in cells:
        engine = {**conf("engine", c.engine), **values[FAMILY[c.engine]]}
        lin.append(Linear.of(run(c, zero), engine))
    target = targets(pub, cells, lambda b: run(b, zero)["throughput"]["output_tok_s"])
    point = {c: (lin[i], target[i]) for i, c in enumerate(cells)}

    def predict(pick: Callable[[Cell], dict]) -> list[float]:
        return [run(c, pick(c))["throughput"]["output_tok_s"] for c in cells]

    out: dict[str, dict] = {"target_tok_s": target,
                            "baseline-only": {"terms": {}, "tok_s": [p.tok_s for p in lin]}}
    anchored = {r: fit_terms([point[c] for c in cells if is_anchor(c) and RELEASE[c.source] == r])
                for r in sorted(set(RELEASE.values()))}
    out["anchored"] = {"terms": anchored,
                       "tok_s": predict(lambda c: anchored[RELEASE[c.source]]["values"])}
    sources = sorted({c.source for c in cells})
    for scheme, others in (("leave-one-table-out", {s: set(sources) - {s} for s in sources}),
                           ("leave-one-table-out, same engine", loto_sources(cells))):
        terms = {s: fit_terms([point[c] for c in cells if is_anchor(c) and c.source in o])
                 for s, o in others.items()}
        out[scheme] = {"terms": terms,
                       "tok_s": predict(lambda c, t=terms: t[c.source]["values"])}
    loco = {}
    for conc in sorted({c.concurrency for c in cells}):
        for r in sorted(set(RELEASE.values())):
            pts = [point[c] for c in cells if RELEASE[c.source] == r and c.concurrency != conc]
            loco[f"{r}@c!={conc}"] = fit_terms(pts)
    out["leave-one-concurrency-out"] = {
        "terms": loco,
        "tok_s": predict(lambda c: loco[f"{RELEASE[c.source]}@c!={c.concurrency}"]["values"])}
    return out


def targets(pub: Published, cells: list[Cell], baseline_tok_s: Callable[[Cell], float]
            ) -> list[float]:
    """The tok/s each cell is scored against: its published tok/s, or for a cell scored on
    its speedup (`Cell.scored_on`) the published speedup times its simulated baseline."""
    base = {(b.source, b.model, b.dataset, b.concurrency): b for b in pub.cells if b.baseline}
    out = []
    for c in cells:
        if c.scored_on == "speedup":
            b = base[(c.source, c.model, c.dataset, c.concurrency)]
            out.append(c.published_tok_s / b.published_tok_s * baseline_tok_s(b))
        else:
            out.append(c.published_tok_s)
    return out


def loto_sources(cells: list[Cell]) -> dict[str, set[str]]:
    """Per held-out source: the sources whose anchors fit its terms in leave-one-table-out,
    the other sources of its engine family, or every other source when it has none."""
    fam = {c.source: FAMILY[c.engine] for c in cells}
    out = {}
    for s in sorted(fam):
        same = {o for o in fam if o != s and fam[o] == fam[s]}
        out[s] = same or {o for o in fam if o != s}
    return out


def spec_cells(pub: Published) -> list[Cell]:
    """The speculative cells the protocol scores, in the cells' order."""
    return [c for c in pub.cells if not c.baseline]
