"""Scores of the protocol's schemes (experiments/published/protocol.py): per held-out cell
error = simulated / published - 1; per group the median |error|, the worst, the signed
bias (median error) and a cluster-bootstrap 95% interval of the median |error| and of the
bias, a cluster being one published row (source, model, dataset, method, engine: its cells
at the row's concurrencies share a tau and a transcription); coverage = cells predicted /
cells published; within rounding = held-out cells whose |error| is at most their printed
value's rounding (`Cell.rounding`). A cell scored on its speedup (`Cell.scored_on`) is
compared with its published speedup times its simulated baseline (protocol.py `targets`).
"""

from __future__ import annotations

import numpy as np

from experiments.published.cells import Cell, Published
from experiments.published.protocol import RELEASE, is_anchor, regime

BOOTSTRAP = 2000
REGIMES = ("dense SGLang V2", "Spec V1", "EAGLE trees", "MoE", "vLLM")
DENSE_SOURCES = ("dflash-table3", "dflash-table5", "sglang-pr23000")


def held_out(scheme: str, c: Cell) -> bool:
    """Whether `c` is held out of the fit its `scheme` prediction comes from."""
    return not (scheme == "anchored" and is_anchor(c))


def cluster(c: Cell) -> tuple:
    return (c.source, c.model, c.dataset, c.method, c.engine)


def stats(errors: list[float], clusters: list[tuple], seed: int = 0) -> dict:
    """Median |error|, worst, bias and cluster-bootstrap 95% intervals of both medians."""
    e = np.asarray(errors, dtype=np.float64)
    if not e.size:
        return {"cells": 0}
    keys = sorted(set(clusters))
    idx = [np.flatnonzero([k == cl for cl in clusters]) for k in keys]
    rng = np.random.default_rng(seed)
    med, bias = [], []
    for _ in range(BOOTSTRAP):
        pick = np.concatenate([idx[i] for i in rng.integers(0, len(keys), len(keys))])
        med.append(np.median(np.abs(e[pick])))
        bias.append(np.median(e[pick]))
    return {
        "cells": int(e.size), "clusters": len(keys),
        "median_abs_error": float(np.median(np.abs(e))),
        "worst_abs_error": float(np.abs(e).max()),
        "bias": float(np.median(e)),
        "median_abs_ci95": [float(np.percentile(med, 2.5)), float(np.percentile(med, 97.5))],
        "bias_ci95": [float(np.percentile(bias, 2.5)), float(np.percentile(bias, 97.5))],
    }


def score(pub: Published, cells: list[Cell], runs: dict) -> dict:
    """Per scheme: overall, by regime, dense SGLang DFlash, and the Spec V2 gain at c = 32
    and 1 (SGLang PR #23000's pair), from held-out cells only."""
    out = {}
    published = len(pub.cells) - sum(c.baseline for c in pub.cells) + sum(
        not c.baseline for c, _ in pub.missing)
    target = runs["target_tok_s"]
    for scheme, run in runs.items():
        if scheme == "target_tok_s":
            continue
        rows = [(c, t / target[i] - 1) for i, (c, t) in enumerate(zip(cells, run["tok_s"],
                                                                        strict=True))
                if held_out(scheme, c)]

        def group(sel, rows=rows) -> dict:
            pick = [(c, e) for c, e in rows if sel(c)]
            return stats([e for _, e in pick], [cluster(c) for c, _ in pick])

        tok = {(c.source, c.engine, c.concurrency): t
               for c, t in zip(cells, run["tok_s"], strict=True)}
        out[scheme] = {
            "all": group(lambda c: True),
            "by_regime": {r: group(lambda c, r=r: regime(c) == r) for r in REGIMES},
            "dense_sglang_dflash": group(
                lambda c: c.source in DENSE_SOURCES and c.method == "dflash"
                and regime(c) != "MoE"),
            "coverage": f"{len(rows)} of {published}",
            "within_rounding": sum(abs(e) <= c.rounding for c, e in rows),
            "spec_v2_gain": {str(k): gain(tok, cells, k) for k in (1, 32)},
        }
    return out


def gain(tok: dict, cells: list[Cell], c: int) -> dict:
    """Predicted and published Spec V2 / Spec V1 - 1 of SGLang PR #23000 at concurrency c."""
    pub = {(x.engine): x.published_tok_s for x in cells
           if x.source == "sglang-pr23000" and x.concurrency == c}
    key = ("sglang-pr23000", "sglang_v2", c), ("sglang-pr23000", "sglang_v1", c)
    return {"predicted": tok[key[0]] / tok[key[1]] - 1,
            "published": pub["sglang_v2"] / pub["sglang_v1"] - 1}


def rows_for(cells: list[Cell], runs: dict) -> dict:
    """Per speculative cell (key: its order in `cells`): anchor flag, release, regime and
    each scheme's simulated tok/s."""
    return {
        i: {"anchor": is_anchor(c), "release": RELEASE[c.source], "regime": regime(c),
            "scored_on": c.scored_on, "target_tok_s": round(float(runs["target_tok_s"][i]), 1),
            **{f"{s}_tok_s": round(float(run["tok_s"][i]), 1) for s, run in runs.items()
               if s != "target_tok_s"}}
        for i, c in enumerate(cells)
    }
