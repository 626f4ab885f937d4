"""Outputs of experiments/tree_whatif.py: results.json (settings, every run, per-point means),
table.md (throughput and goodput per budget and concurrency, the best fixed budget, the
load-aware policy's margin over it) and tree_budget.png (per cost model: throughput over the
chain's, goodput, and the budget that wins against the load-aware policy's mean choice)."""

from __future__ import annotations

import json
from pathlib import Path

METRICS = {
    "throughput_tok_s": ("throughput, output tokens/s", "{:,.0f}"),
    "goodput_req_s": ("goodput, requests/s meeting TTFT <= 2 s and TPOT <= 5 ms", "{:.2f}"),
}


def _budget(method: str) -> int:
    """Verify tokens per request of a fixed method (the chain's B = 16)."""
    return 16 if method == "chain" else int(method.split("=")[1])


def markdown(summary: list[dict], meta: dict) -> str:
    methods, fixed = meta["methods"], meta["fixed"]
    lines = [
        "# DFlash tree budget under load: what-if (Qwen3-8B, H200, HumanEval, T = 0)",
        "",
        f"`{meta['command']}`; means over seeds {meta['seeds']} (paired: the same "
        "workload and acceptance draws for every method).",
        "",
    ]
    for cost in dict.fromkeys(p["cost"] for p in summary):
        pts = [p for p in summary if p["cost"] == cost]
        for metric, (title, fmt) in METRICS.items():
            lines += [
                f"## {title} ({cost})",
                "",
                "| c | " + " | ".join(methods) + " | best fixed | load-aware vs best "
                "(± sd) | load-aware verify tokens |",
                "|---" * (len(methods) + 4) + "|",
            ]
            for p in pts:
                cells = " | ".join(fmt.format(p[metric][m]) for m in methods)
                mean, sd = p[f"load_aware_vs_best_{metric}"]
                lines.append(
                    f"| {p['concurrency']} | {cells} | {p[f'best_{metric}']} | "
                    f"{100 * mean:+.1f}% ± {100 * sd:.1f} | "
                    f"{p['load_aware_verify']:.1f} |"
                )
            lines.append("")
        lines += [
            f"## load-aware throughput over each fixed budget ({cost})",
            "",
            "| c | " + " | ".join(fixed) + " |",
            "|---" * (len(fixed) + 1) + "|",
        ]
        for p in pts:
            v = p["load_aware_vs_throughput_tok_s"]
            lines.append(
                f"| {p['concurrency']} | " + " | ".join(f"{100 * v[m]:+.1f}%" for m in fixed) + " |"
            )
        lines.append("")
    return "\n".join(lines)


def plot(path: Path, summary: list[dict], budgets: list[int]) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    costs = list(dict.fromkeys(p["cost"] for p in summary))
    fig, axes = plt.subplots(len(costs), 3, figsize=(16, 4.6 * len(costs)), squeeze=False)
    styles = {"none": ("0.6", ":"), "chain": ("k", "--"), "load-aware": ("m", "-")}
    for i, n in enumerate(budgets):
        styles[f"N={n}"] = (f"C{i}", "-")
    for row, cost in zip(axes, costs, strict=True):
        pts = [p for p in summary if p["cost"] == cost]
        c = [p["concurrency"] for p in pts]
        for m, (color, ls) in styles.items():
            lw, alpha = (3.2, 0.55) if m == "load-aware" else (1.4, 1.0)
            rel = [p["throughput_tok_s"][m] / p["throughput_tok_s"]["chain"] for p in pts]
            kw = {"color": color, "ls": ls, "lw": lw, "alpha": alpha, "marker": "o", "ms": 3}
            row[0].plot(c, rel, label=m, **kw)
            row[1].plot(c, [p["goodput_req_s"][m] for p in pts], label=m, **kw)
        row[2].plot(
            c,
            [p["load_aware_verify"] for p in pts],
            "m-o",
            lw=2.6,
            label="load-aware: mean verify tokens per request",
        )
        row[2].plot(
            c,
            [_budget(p["best_throughput_tok_s"]) for p in pts],
            "ks",
            ms=9,
            mfc="none",
            label="best fixed budget, throughput",
        )
        row[2].plot(
            c,
            [_budget(p["best_goodput_req_s"]) for p in pts],
            "kx",
            ms=7,
            label="best fixed budget, goodput",
        )
        row[0].set_ylabel(f"{cost}\nthroughput / chain's")
        row[1].set_ylabel("goodput, requests/s (TTFT <= 2 s, TPOT <= 5 ms)")
        row[2].set_ylabel("tree nodes N per request")
        row[2].set_yscale("log", base=2)
        row[2].set_yticks(budgets, [str(b) for b in budgets])
        for ax in row:
            ax.set_xscale("log", base=2)
            ax.set_xticks(c, [str(x) for x in c])
            ax.set_xlabel("concurrency c (closed loop)")
            ax.grid(alpha=0.3)
        row[0].legend(fontsize=8)
        row[2].legend(fontsize=8)
    fig.suptitle(
        "DFlash tree budget under load (simulator): Qwen3-8B, H200, HumanEval, T = 0, "
        "chain tau 6.50, tree tau = r(N) x chain's; cost models: " + "; ".join(costs),
        fontsize=11,
    )
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def write(out: Path, rows: list[dict], summary: list[dict], meta: dict) -> None:
    out.mkdir(parents=True, exist_ok=True)
    (out / "results.json").write_text(
        json.dumps({**meta, "summary": summary, "runs": rows}, indent=1)
    )
    (out / "table.md").write_text(markdown(summary, meta))
    plot(out / "tree_budget.png", summary, meta["budgets"])
