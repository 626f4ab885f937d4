"""`python -m experiments.spec_v2_host --measured serve_bench.json`: overlap gain vs host time.

Spec V2's overlap hides the host's per-round work (planning, launches, result processing)
behind the GPU's round, so its gain over the synchronous loop grows with the host time per
round. The reference engine's host is lean (a few ms per round against rounds of tens of
ms), so it measured +13.5% at concurrency 32 where SGLang reports +33% on a B200
(docs/sglang.md section 5). This sweeps the simulator's host time per
round (`engine.host_plan_s`, fully exposed in the simulator's sync loop; the rest of the
setup taken from one measured serve-bench run via experiments/spec_v2.py's `sim_config`)
and reports the overlap / sync throughput ratio at each. The measured point is placed at
the sync loop's measured GPU gap per step (the host time the GPU actually waited for, which
is what overlap can hide; launches partly run under the GPU's work). The host time at which
a gain of +25% or +33% would appear is read off the curve. Use a cost model that takes the
engine's host times (`roofline`; the calibrated one carries its own host fit).

Writes host_sweep.csv, host_sweep.md and host_sweep.png under --out (default
experiments/spec_v2/).
"""

from __future__ import annotations

import argparse
import csv
import json
from pathlib import Path

from experiments.spec_v2 import REPO, hardware, sim_config

HOST_MS = (0.25, 0.5, 1.0, 2.0, 3.0, 4.0, 6.0, 8.0, 12.0, 16.0)
TARGETS = (1.25, 1.33)


def sweep(doc: dict, setup: str, method: str, concurrency: int, hw: dict, cost_model: str,
          calibration: str | None) -> tuple[list[dict], dict]:
    """Overlap/sync throughput per host time, and the measured row pair it starts from."""
    import simulator

    pair = {r["mode"]: r for r in doc["rows"] if r["setup"] == setup
            and r["method"] == method and r["concurrency"] == concurrency}
    if set(pair) != {"sync", "overlap"}:
        raise SystemExit(f"no sync/overlap pair for {setup} {method} c={concurrency}")
    rows = []
    for host_ms in HOST_MS:
        tok_s = {}
        for mode, row in pair.items():
            cfg = sim_config(doc["setups"][setup], row, hw, cost_model, calibration=calibration)
            cfg["engine"]["host_plan_s"] = host_ms / 1e3
            tok_s[mode] = simulator.run(cfg).summary["throughput"]["output_tok_s"]
        rows.append({"host_ms": host_ms, "sync_tok_s": tok_s["sync"],
                     "overlap_tok_s": tok_s["overlap"],
                     "gain": tok_s["overlap"] / tok_s["sync"]})
    measured = {"host_ms": pair["sync"]["gap_ms_per_step"],
                "gain": pair["overlap"]["throughput_tok_s"] / pair["sync"]["throughput_tok_s"]}
    return rows, measured


def crossing(rows: list[dict], gain: float) -> float | None:
    """Host ms where the simulated gain first reaches `gain` (linear interpolation)."""
    for a, b in zip(rows, rows[1:]):
        if a["gain"] < gain <= b["gain"]:
            return a["host_ms"] + (gain - a["gain"]) * (b["host_ms"] - a["host_ms"]) / (
                b["gain"] - a["gain"])
    return None


def plot(rows: list[dict], measured: dict, path: Path, title: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 4))
    ax.plot([r["host_ms"] for r in rows], [r["gain"] for r in rows], "o-", label="simulated")
    ax.plot([measured["host_ms"]], [measured["gain"]], "r*", ms=12, label="measured (H200)")
    for g in TARGETS:
        ax.axhline(g, ls="--", lw=0.8, color="gray")
        ax.text(rows[0]["host_ms"], g, f" +{round(100 * (g - 1))}%", va="bottom", fontsize=8)
    ax.set(xscale="log", xlabel="host time per round (ms)", ylabel="overlap / sync throughput",
           title=title)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--measured", type=Path, required=True, help="serve-bench JSON")
    ap.add_argument("--setup", default="qwen3-8b")
    ap.add_argument("--method", default="oracle")
    ap.add_argument("--concurrency", type=int, default=32)
    ap.add_argument("--hardware", default="h200")
    ap.add_argument("--cost-model", default="roofline")
    ap.add_argument("--calibration", default=None)
    ap.add_argument("--out", type=Path, default=REPO / "experiments" / "spec_v2")
    args = ap.parse_args(argv)
    doc = json.loads(args.measured.read_text())
    rows, measured = sweep(doc, args.setup, args.method, args.concurrency,
                           hardware(args.hardware), args.cost_model, args.calibration)
    args.out.mkdir(parents=True, exist_ok=True)
    with open(args.out / "host_sweep.csv", "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    title = f"{args.setup} {args.method} c={args.concurrency}, {args.cost_model} costs"
    lines = [f"# Overlap gain vs host time per round ({title})", "",
             f"`python -m experiments.spec_v2_host --measured {args.measured}"
             f" --cost-model {args.cost_model}`", "",
             f"Measured on the H200: the sync loop's GPU gap {measured['host_ms']:.2f} ms per step "
             f"(exposed host time), overlap / sync {measured['gain']:.3f} (which also hides "
             "eager prefill launches: benchmarks/serve/README.md).", "",
             "| host ms / round | sync tok/s | overlap tok/s | overlap / sync |",
             "| ---: | ---: | ---: | ---: |"]
    lines += [f"| {r['host_ms']:g} | {r['sync_tok_s']:,.0f} | {r['overlap_tok_s']:,.0f} | "
              f"{r['gain']:.3f} |" for r in rows]
    lines.append("")
    for g in TARGETS:
        x = crossing(rows, g)
        where = f"{x:.1f} ms" if x is not None else f"beyond {HOST_MS[-1]:g} ms"
        lines.append(f"- a gain of +{round(100 * (g - 1))}% needs about {where} of host time "
                     "per round.")
    (args.out / "host_sweep.md").write_text("\n".join(lines) + "\n")
    plot(rows, measured, args.out / "host_sweep.png", title)
    print("\n".join(lines))


if __name__ == "__main__":
    main()
