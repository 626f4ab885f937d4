"""The fit of a calibration document (pure numpy, CPU or GPU machine): the host time per
round from the `generate` runs, the held-out scores of every predictor, the borrowed host
line of a model whose host runs were skipped, and the printed summary.

The predictors are the ones the simulator reads (`build_tables`: monotone envelope, gap
fill), so the held-out scores are those of the tables as used.
"""

from __future__ import annotations

import numpy as np

from simulator.calibration import build_tables, heldout_report, round_gpu_s

HOST_FIT_EXCESS = 0.05  # measured / tables' device time this far above the median: left out


def fit(doc: dict) -> dict:
    """Host time per round (a + b * requests, per method) from the graph-path generate runs,
    and the held-out report of every table and of the whole round; returns doc.

    The line is fitted to wall - tables' device time, so it also carries the device work the
    tables miss (a few percent, alike in every run). A run whose measured / tables' device
    time exceeds the median of that ratio over the method's fitted runs by more than
    HOST_FIT_EXCESS is left out of the fit (listed in `excluded_n`): it ran in a slower
    device state than the (monotone) tables describe, and that excess is device time, not
    host."""
    built = build_tables(doc)
    buckets = doc["engine"]["buckets"]
    fit_n = set(doc["grid"]["host_n"])
    host, report = {}, {k: heldout_report(built[k], doc["heldout"].get(k, []))
                        for k in built}
    for method in ("none", "dflash"):
        runs = [r[method] for r in doc["host_runs"]["graph"]]
        for r in runs:
            r["gpu_pred_s"] = round_gpu_s(built, buckets, r["n"], r["block"], r["kv"])
        train = [r for r in runs if r["n"] in fit_n]
        ratio = {r["n"]: r["device_s"] / r["gpu_pred_s"] for r in train
                 if r.get("device_s") and r["gpu_pred_s"] > 0}
        limit = float(np.median(list(ratio.values()))) + HOST_FIT_EXCESS if ratio else np.inf
        excluded = sorted(n for n, x in ratio.items() if x > limit)
        train = [r for r in train if r["n"] not in excluded]
        if not train:  # host runs skipped: no fit (install may borrow another model's)
            continue
        if len(train) >= 2:
            b, a = np.polyfit([r["n"] for r in train],
                              [r["wall_s"] - r["gpu_pred_s"] for r in train], 1)
        else:
            a, b = train[0]["wall_s"] - train[0]["gpu_pred_s"], 0.0
        host[method] = {"a_s": max(float(a), 0.0), "b_s": float(b), "points": len(train),
                        "excluded_n": excluded}
        test = [r for r in runs if r["n"] not in fit_n]
        err = [abs(r["gpu_pred_s"] + host[method]["a_s"] + host[method]["b_s"] * r["n"]
                   - r["wall_s"]) / r["wall_s"] * 100 for r in test]
        report[f"round_{method}"] = {
            "points": len(err), "median_pct": float(np.median(err)) if err else None,
            "p90_pct": float(np.percentile(err, 90)) if err else None,
            "max_pct": float(max(err)) if err else None}
    doc["host"] = host
    doc["report"] = report
    return doc


def print_report(doc: dict) -> None:
    m = doc["model"]["name"]
    print(f"{m}: measured in {doc['measure_wall_s']:.1f} s, skipped {doc['skipped'] or 'none'}")
    for op, r in doc["report"].items():
        if r["points"]:
            print(f"  {op:<12} held-out {r['points']:>2} pts: median {r['median_pct']:.1f}% "
                  f"p90 {r['p90_pct']:.1f}% max {r['max_pct']:.1f}%")
    lowered = {k: t.lowered for k, t in build_tables(doc).items() if t.lowered}
    if lowered:
        print("  monotone envelope lowered " + ", ".join(f"{k} {v}" for k, v in lowered.items())
              + " measured points")
    for method, h in doc["host"].items():
        print(f"  host {method}: {1e6 * h['a_s']:.0f} us + {1e6 * h['b_s']:.1f} us/request"
              + (f" (borrowed from {h['source']})" if "source" in h else "")
              + (f" (runs at n = {h['excluded_n']} left out)" if h.get("excluded_n") else ""))


def borrow(docs: list[dict]) -> None:
    """Give a table whose host runs were all skipped the host fit of the table, among
    `docs` (same GPU and engine), with the most host runs: the host time per round is the
    engine's Python and launches (CUDA graphs: one replay per piece), not the model's math.
    The borrowed fit is marked with its `source` model."""
    for method in ("none", "dflash"):
        donors = [d for d in docs if method in d["host"] and "source" not in d["host"][method]]
        if not donors:
            continue
        donor = max(donors, key=lambda d: d["host"][method]["points"])
        for d in docs:
            if method not in d["host"]:
                d["host"][method] = {**donor["host"][method], "source": donor["model"]["name"]}
