"""Outputs of experiments/dspark_whatif.py: results.csv (every run), auc.csv (the implied AUC
per confidence level), results.md (AUC table, margin of the load-aware budget over the best
fixed verify length per AUC level with its spread over seeds) and throughput.png
(throughput, TPOT and the margin vs concurrency, means over seeds)."""

from __future__ import annotations

import csv
from pathlib import Path

import numpy as np

PLOT_FIXED = ("dflash B=4", "dflash B=8", "dspark gamma=3", "dspark gamma=7")


def _csv(path: Path, rows: list[dict]) -> None:
    with open(path, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)


def _pct(v: list[float]) -> str:
    v = 100 * np.asarray(v)
    return f"{v.mean():+.1f} ± {v.std(ddof=1) if v.size > 1 else 0.0:.1f}"


def _levels(marg: list[dict]) -> list[str]:
    return list(dict.fromkeys(m["level"] for m in marg))


def markdown(marg: list[dict], aucs: list[dict], cost_model: str, seeds: list[int]) -> str:
    ds_list = list(dict.fromkeys(m["dataset"] for m in marg))
    levels = _levels(marg)
    lines = [
        f"# DSpark load-aware verify budget: what-if (Qwen3-8B, H200, {cost_model} cost model)",
        "",
        "simpy simulator (`simulator.run`), closed loop, overlap engine, T = 1, acceptance from",
        "the DSpark paper's Table 1; per-round latent difficulty with calibrated confidences",
        "(simulator/dspark_confidence.py, experiments/dspark_whatif.py docstring).",
        f"Seeds {seeds}: every margin compares runs of the same seed (same workload).",
        "",
        "## Confidence levels: implied AUC of c_k for 'draft k accepted | 1..k-1 accepted'",
        "",
        "pooled: over requests (z ~ N(0, 1)) and rounds, gamma = 7 (the paper's AUC is pooled);",
        "within: one request (z = 0), i.e. the per-round information alone.",
        "",
        "| dataset | level | rho | " + " | ".join(f"k={k}" for k in range(1, 8))
        + " | pooled mean | within mean |",
        "|---|---|---|" + "---|" * 7 + "---|---|",
    ]
    for a in aucs:
        ks = " | ".join(f"{a[f'pooled_k{k}']:.3f}" for k in range(1, 8))
        lines.append(f"| {a['dataset']} | {a['level']} | {a['rho']:.3f} | {ks} | "
                     f"{a['pooled_mean']:.3f} | {a['within_mean']:.3f} |")
    lines += [
        "",
        "## Margin of the load-aware budget over the best fixed verify length, c >= 32",
        "",
        "Per seed: best budget run over gamma in (1, 2, 3, 5, 7, 11, 15) vs the best fixed run",
        "(any DFlash B or DSpark gamma) at that concurrency; mean ± sd over seeds, then the",
        "range over seeds and concurrencies 32..256.",
        "",
        "| dataset | level | c=32 | c=64 | c=128 | c=256 | min..max over c >= 32, seeds |",
        "|---|---|---|---|---|---|---|",
    ]
    for ds in ds_list:
        for lvl in levels:
            cells, pool = [], []
            for c in (32, 64, 128, 256):
                v = [m["vs_best_fixed"] for m in marg
                     if (m["dataset"], m["level"], m["concurrency"]) == (ds, lvl, c)]
                cells.append(_pct(v))
                pool += v
            lines.append(f"| {ds} | {lvl} | " + " | ".join(cells)
                         + f" | {100 * min(pool):+.1f}..{100 * max(pool):+.1f} |")
    lines += [
        "",
        "## All concurrencies (mean ± sd over seeds)",
        "",
        "| dataset | c | level | budget run (seed 0) | verify tok/req | best fixed (seed 0) | "
        "vs best fixed | vs same gamma fixed | TPOT vs best fixed |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for ds in ds_list:
        for c in sorted({m["concurrency"] for m in marg}):
            for lvl in levels:
                sel = [m for m in marg
                       if (m["dataset"], m["level"], m["concurrency"]) == (ds, lvl, c)]
                first = min(sel, key=lambda m: m["seed"])
                lines.append(
                    f"| {ds} | {c} | {lvl} | {first['budget']} | "
                    f"{np.mean([m['verify_tokens_per_req'] for m in sel]):.2f} | "
                    f"{first['best_fixed']} | {_pct([m['vs_best_fixed'] for m in sel])}% | "
                    f"{_pct([m['vs_same_gamma'] for m in sel])}% | "
                    f"{_pct([m['tpot_vs_best_fixed'] for m in sel])}% |")
    return "\n".join(lines) + "\n"


def _mean_by_c(rows: list[dict], pred, field: str, best: bool = False) -> tuple[list, list]:
    """Per concurrency, the seed mean of `field` (best: of the run with the best throughput
    among the selected ones, per seed)."""
    xs, ys = [], []
    for c in sorted({r["concurrency"] for r in rows}):
        per_seed = []
        for s in sorted({r["seed"] for r in rows}):
            sel = [r for r in rows if r["concurrency"] == c and r["seed"] == s and pred(r)]
            if sel:
                pick = max(sel, key=lambda r: r["throughput_tok_s"]) if best else sel[0]
                per_seed.append(pick[field])
        if per_seed:
            xs.append(c)
            ys.append(float(np.mean(per_seed)))
    return xs, ys


def plot(path: Path, rows: list[dict], marg: list[dict]) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    ds_list = list(dict.fromkeys(r["dataset"] for r in rows))
    fig, axes = plt.subplots(3, len(ds_list), figsize=(6 * len(ds_list), 12), squeeze=False)
    for col, ds in enumerate(ds_list):
        sub = [r for r in rows if r["dataset"] == ds]
        curves = [(lbl, "--", lambda r, lbl=lbl: r["level"] == "fixed" and r["method"] == lbl,
                   False) for lbl in PLOT_FIXED]
        curves.append(("best fixed (any B / gamma)", "k-", lambda r: r["level"] == "fixed",
                       True))
        curves += [(f"best budget, {lvl}", "-", lambda r, lvl=lvl: r["level"] == lvl, True)
                   for lvl in _levels(marg)]
        for label, style, pred, best in curves:
            for row, field in ((0, "throughput_tok_s"), (1, "tpot_ms")):
                x, y = _mean_by_c(sub, pred, field, best)
                axes[row, col].plot(x, y, style, marker=".", label=label)
        for lvl in _levels(marg):
            cs = sorted({m["concurrency"] for m in marg})
            v = [[100 * m["vs_best_fixed"] for m in marg
                  if (m["dataset"], m["level"], m["concurrency"]) == (ds, lvl, c)] for c in cs]
            axes[2, col].errorbar(cs, [np.mean(x) for x in v], [np.std(x) for x in v],
                                  marker=".", capsize=3, label=lvl)
        axes[0, col].set(xscale="log", yscale="log", title=ds, ylabel="throughput (tok/s)")
        axes[1, col].set(xscale="log", yscale="log", ylabel="TPOT (ms)")
        axes[2, col].set(xscale="log", xlabel="concurrency",
                         ylabel="best budget vs best fixed (%)")
        axes[2, col].axhline(0, color="gray", lw=0.5)
    axes[0, 0].legend(fontsize=7)
    axes[2, 0].legend(fontsize=7)
    fig.savefig(path, dpi=110, bbox_inches="tight")
    plt.close(fig)


def write(out: Path, rows: list[dict], marg: list[dict], aucs: list[dict],
          cost_model: str) -> None:
    out.mkdir(parents=True, exist_ok=True)
    _csv(out / "results.csv", rows)
    _csv(out / "margins.csv", marg)
    _csv(out / "auc.csv", aucs)
    seeds = sorted({r["seed"] for r in rows})
    (out / "results.md").write_text(markdown(marg, aucs, cost_model, seeds))
    plot(out / "throughput.png", rows, marg)
