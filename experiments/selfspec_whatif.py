"""`python -m experiments.selfspec_whatif [--out DIR] [--toy-metrics M]`: self-spec what-if.

Self-speculation (I-DLM ISD, Nemotron LinearSpec; simulator/methods/) against a separate
DFlash drafter (B = 16) and no speculation, in the discrete-event simulator (`simulator.run`,
roofline costs) on Qwen3-8B / one H200, closed loop at concurrency 1..256 (max running =
concurrency, 4c requests, at least 64), MATH-500 lengths, temperature 0. Acceptance, from the
papers' reported figures (docs/methods.md 2.7, 3.7, and presets):

- DFlash: tau 8.01 at B = 16 (paper Table 3, Qwen3-8B MATH-500), per-position preset curve;
- ISD: per-token p = 0.905, from I-DLM-8B's TPF 2.96 at N = 4 (MATH-500, T = 1) through
  (2 + p + .. + p^{N-2}) / (2 - p^{N-1}); N = 8 assumes the same p (a third-party TPF 4.01 at
  N = 8 implies p ~ 0.88);
- LinearSpec: per-position a = 0.853, from a mean acceptance length 6.82 at B = 32 (with the
  draft LoRA, a third-party figure) through (1 - a^B) / (1 - a); tiered B (16 up to 4
  running, 8 up to 32, then 4) and a fixed B = 4.

`--toy-metrics` adds the same sweep with the acceptance measured on the toy world
(toy/train_selfspec.py's metrics.json: ISD N=4 and LinearSpec B=8 acceptance).
Writes results.csv, results.md and throughput.png into --out (default
experiments/selfspec_whatif/).
"""

from __future__ import annotations

import argparse
import csv
import json
from pathlib import Path

import simulator
from common.methods import BASELINE
from simulator.params import SimConfig
from simulator.steady import throughput_for

CONCURRENCY = (1, 2, 4, 8, 16, 32, 64, 128, 256)
P_ISD, A_LINEARSPEC = 0.905, 0.853


def methods(p_isd: float, a_ls: float, tag: str) -> dict[str, dict]:
    """label -> spec overrides."""
    isd = dict(method="isd", draft_layers=0, acceptance="constant", alpha=p_isd)
    ls = dict(method="linearspec", draft_layers=0, acceptance="constant", alpha=a_ls)
    return {f"isd N=4{tag}": {**isd, "block_size": 4}, f"isd N=8{tag}": {**isd, "block_size": 8},
            f"linearspec tiered{tag}": {**ls, "block_size": 16},
            f"linearspec B=4{tag}": {**ls, "block_size": 4}}


def run(label: str, spec: dict, c: int) -> dict:
    cfg = SimConfig.coerce({"spec": spec, "engine": {"max_running_requests": c},
                            "workload": {"dataset": "math500", "concurrency": c,
                                         "num_requests": max(64, 4 * c)}})
    s = simulator.run(cfg).summary
    return {"method": label, "concurrency": c,
            "tok_s": throughput_for(s)[0],
            "tok_s_per_user": 1.0 / s["tpot_s"]["mean"],
            "tpot_ms_p50": 1e3 * s["tpot_s"]["p50"],
            "tau": s["speculation"]["tau"],
            "gpu_busy": s["engine"]["gpu_busy_frac"]}


def plot(rows: list[dict], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(12, 4.5))
    base = {r["concurrency"]: r["tok_s"] for r in rows if r["method"] == BASELINE}
    for label in dict.fromkeys(r["method"] for r in rows):
        pts = [r for r in rows if r["method"] == label]
        style = "--" if "toy" in label else "-"
        axes[0].plot([r["concurrency"] for r in pts], [r["tok_s"] for r in pts], style,
                     marker="o", ms=3, label=label)
        axes[1].plot([r["concurrency"] for r in pts],
                     [r["tok_s"] / base[r["concurrency"]] for r in pts], style, marker="o",
                     ms=3, label=label)
    for ax, name in zip(axes, ("output tokens/s", "speedup over no speculation")):
        ax.set(xscale="log", xlabel="concurrency", ylabel=name)
        ax.set_xticks(CONCURRENCY, [str(c) for c in CONCURRENCY])
    axes[0].set_yscale("log")
    axes[1].legend(fontsize=7)
    fig.suptitle("Qwen3-8B / H200, MATH-500, T = 0 (simulated, roofline costs)")
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=Path("experiments/selfspec_whatif"))
    ap.add_argument("--toy-metrics", type=Path, default=None)
    args = ap.parse_args()
    grid = {"none": dict(method="none", block_size=1, draft_layers=0),
            "dflash B=16": dict(method="dflash", block_size=16),
            **methods(P_ISD, A_LINEARSPEC, "")}
    if args.toy_metrics is not None:
        after = json.loads(args.toy_metrics.read_text())["tpf_after"]
        acc = {(r["mode"], r["size"]): r["acceptance"] for r in after}
        grid.update(methods(acc["isd", 4], acc["linearspec", 8], " (toy acceptance)"))
    rows = [run(label, spec, c) for label, spec in grid.items() for c in CONCURRENCY]
    args.out.mkdir(parents=True, exist_ok=True)
    with open(args.out / "results.csv", "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)
    by = {(r["method"], r["concurrency"]): r for r in rows}
    md = ["| method | " + " | ".join(f"c={c}" for c in CONCURRENCY) + " |",
          "| --- |" + " ---: |" * len(CONCURRENCY)]
    for label in grid:
        tok = [by[label, c]["tok_s"] for c in CONCURRENCY]
        cells = [f"{t:,.0f} ({t / by['none', c]['tok_s']:.2f}x)" for t, c in zip(tok, CONCURRENCY)]
        md.append(f"| {label} | " + " | ".join(cells) + " |")
    (args.out / "results.md").write_text(
        "Output tokens/s (speedup over no speculation), Qwen3-8B / H200 / MATH-500, "
        "simulated.\n\n" + "\n".join(md) + "\n")
    plot(rows, args.out / "throughput.png")
    print("\n".join(md))


if __name__ == "__main__":
    main()
