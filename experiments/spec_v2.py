"""`python -m experiments.spec_v2 --measured serve_bench.json`: Spec V2 measured vs simulated.

For every run of a `python -m workbench serve-bench` result (setup, concurrency, method,
mode) the simulator (`simulator.run`, CPU) runs the same setup: the measured model's shapes
(serve_bench.json "setups"), its DFlash drafter (layers, captured features, B), the same
closed loop (concurrency, request count, prompt and output lengths, chunked-prefill budget),
the engine mode (`sync`: KV reserved to committed + B; `overlap`: + 2B, host one round
behind), the measured host time per step as the simulator's host overheads (plan + launch ->
`host_plan_s`, the decode rounds' launch when the run reports it; process ->
`host_process_s`, no per-request term; the prefill launch -> `prefill_launch_s`, which a
prefill step's GPU work cannot outrun, unless a calibration table measured the prefill
itself, launch included), and acceptance from the
oracle's geometric survival curve (`constant` alpha = s_1; for a trained drafter, alpha
solved from the run's measured tau). The GPU side comes from --hardware (conf/hardware/) and
the cost model named by --cost-model (simulator/cost_models.py COST_MODELS: `roofline`, or
`calibrated` with its table named by --calibration, whose device times it reads while the
host times stay the measured ones: engine.host_from_calibration=false). Methods map as
ar -> none, oracle and dflash -> dflash.

Writes under --out (default experiments/spec_v2/): comparison.csv (one row per run:
measured and predicted throughput, TPOT and GPU idle, relative error), comparison.md (that
table, the overlap / sync gains measured vs predicted, mean absolute error per mode) and
throughput.png (measured vs predicted tokens/s per concurrency, one panel per setup and
method). Runs on the CPU in seconds.
"""

from __future__ import annotations

import argparse
import csv
import json
import math
from pathlib import Path

import numpy as np
import yaml

from common.methods import BASELINE
from common.paths import conf_dir

REPO = Path(__file__).resolve().parent.parent
FIELDS = ("setup", "method", "concurrency", "mode", "requests", "measured_tok_s",
          "predicted_tok_s", "error", "measured_tpot_ms", "predicted_tpot_ms",
          "measured_idle", "predicted_idle", "host_plan_ms", "host_process_ms", "tau")


def geometric_alpha(tau: float, block_size: int) -> float:
    """alpha with 1 + sum_{j=1}^{B-1} alpha^j = tau (bisection)."""
    lo, hi = 0.0, 1.0
    for _ in range(100):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if 1 + sum(mid**j for j in range(1, block_size)) < tau else (lo, mid)
    return lo


def hardware(name: str) -> dict:
    """conf/hardware/<name>.yaml without its Hydra defaults list."""
    cfg = yaml.safe_load((conf_dir() / "hardware" / f"{name}.yaml").read_text())
    cfg.pop("defaults", None)
    return cfg


def host_plan_ms(row: dict) -> float:
    """The host's plan + launch per step: with the decode launch alone when the row has it
    (serve-bench rows with decode_launch_ms), because the simulator's host term is per round
    and a prefill's (eager, host-bound) launch is not host time it can hide: it is the
    prefill step's own launch instead (engine.prefill_launch_s, from prefill_launch_ms)."""
    return row["plan_ms_per_step"] + row.get("decode_launch_ms", row["launch_ms_per_step"])


def measured_prefill(table: str | None) -> bool:
    """Whether calibration table `table` holds measured prefill points: its prefill fit then
    holds the engine's own (eager) launch, which the serving loop's is not added to."""
    if table is None:
        return False
    from simulator.calibration import table_path

    doc = json.loads(table_path(table).read_text())
    return bool(np.isfinite(np.array(doc["tables"]["prefill"]["seconds"], float)).any())


def sim_config(setup: dict, row: dict, hw: dict, cost_model: str, seed: int = 0,
               calibration: str | None = None) -> dict:
    """The simulator config of one measured run (a dict for `simulator.run`). The run's
    prefill launch bounds its prefill steps unless the calibration measured prefill."""
    drafter, conc, overlap = setup["drafter"], row["concurrency"], row["mode"] == "overlap"
    if row["method"] in (BASELINE, "ar"):  # "ar": older serve-bench results
        spec = {"method": BASELINE, "block_size": 1, "draft_layers": 0}
    else:
        block = drafter["block_size"]
        curve = setup.get("oracle_survival")
        alpha = curve[0] if row["method"] == "oracle" and curve else geometric_alpha(
            min(max(row["tau"], 1.0), block - 1e-9), block)
        spec = {"method": "dflash", "block_size": block, "draft_layers": drafter["layers"],
                "options": {"target_features": drafter["target_features"]},
                "acceptance": "constant",
                "alpha": alpha, "temperature": 0.0}
    engine = {"mode": row["mode"], "kv_reserve_blocks": 2 if overlap else 1,
              "max_running_requests": conc, "chunked_prefill_size": setup["prefill_budget"],
              "host_plan_s": host_plan_ms(row) / 1e3,
              "host_plan_per_req_s": 0.0, "host_process_s": row["process_ms_per_step"] / 1e3,
              "host_process_per_req_s": 0.0, "cost_model": cost_model,
              "prefill_launch_s": 0.0 if cost_model == "calibrated" and measured_prefill(
                  calibration) else row.get("prefill_launch_ms", 0.0) / 1e3}
    if calibration is not None:
        engine["calibration"] = calibration
    if cost_model == "calibrated":  # the serving loop's measured host, not generate's line
        engine["host_from_calibration"] = False
    workload = {"arrival": "closed_loop", "concurrency": conc, "num_requests": row["requests"],
                "prompt_tokens_mean": setup["prompt_tokens_mean"],
                "prompt_tokens_cv": setup.get("prompt_tokens_cv", 0.0),
                "output_tokens_mean": setup["output_tokens_mean"], "output_tokens_cv": 0.0,
                "max_new_tokens": setup["output_tokens_max"], "think_time_s": 0.0}
    return {"model": setup["model"], "hardware": hw, "spec": spec, "engine": engine,
            "workload": workload, "seed": seed}


def calibrations(spec: str | None) -> dict[str | None, str]:
    """--calibration 'TABLE' (every setup) or 'SETUP=TABLE,...' (a bare TABLE among them is
    the default): {setup or None: table}."""
    out: dict[str | None, str] = {}
    for item in filter(None, (spec or "").split(",")):
        setup, _, table = item.rpartition("=")
        out[setup or None] = table
    return out


def compare(doc: dict, hw: dict, cost_model: str, calibration: str | None = None
            ) -> list[dict]:
    """One comparison row per measured run (setups without a calibration table, under a
    calibrated cost model, are skipped)."""
    import simulator

    tables, out = calibrations(calibration), []
    for row in doc["rows"]:
        setup = doc["setups"][row["setup"]]
        table = tables.get(row["setup"], tables.get(None))
        if cost_model == "calibrated" and calibration and table is None:
            continue
        s = simulator.run(sim_config(setup, row, hw, cost_model, calibration=table)).summary
        pred = s["throughput"]["output_tok_s"]
        out.append({
            "setup": row["setup"], "method": row["method"], "concurrency": row["concurrency"],
            "mode": row["mode"], "requests": row["requests"],
            "measured_tok_s": row["throughput_tok_s"], "predicted_tok_s": pred,
            "error": pred / row["throughput_tok_s"] - 1 if row["throughput_tok_s"] else math.nan,
            "measured_tpot_ms": row["tpot_ms"], "predicted_tpot_ms": 1e3 * s["tpot_s"]["mean"],
            "measured_idle": row["gpu_idle_fraction"],
            "predicted_idle": 1.0 - s["engine"]["gpu_busy_frac"],
            "host_plan_ms": host_plan_ms(row),
            "host_process_ms": row["process_ms_per_step"], "tau": row["tau"]})
    return out


def gains(rows: list[dict]) -> list[dict]:
    """Overlap over sync throughput, measured and predicted, per (setup, method, C)."""
    by = {(r["setup"], r["method"], r["concurrency"], r["mode"]): r for r in rows}
    out = []
    for (setup, method, conc, mode), r in by.items():
        sync = by.get((setup, method, conc, "sync"))
        if mode == "overlap" and sync is not None:
            out.append({"setup": setup, "method": method, "concurrency": conc,
                        "measured": r["measured_tok_s"] / sync["measured_tok_s"],
                        "predicted": r["predicted_tok_s"] / sync["predicted_tok_s"]})
    return out


def markdown(rows: list[dict], doc: dict, cost_model: str, hw_name: str) -> str:
    meta = doc.get("meta", {})
    gpu = meta.get("gpu") or doc.get("env", {}).get("gpu", "?")  # older runs: under "env"
    lines = [f"# Spec V2: measured ({gpu}, git "
             f"{meta.get('git_sha', '?')}) vs simulated ({hw_name}, cost model "
             f"`{cost_model}`)", "",
             "| setup | method | C | mode | measured tok/s | predicted tok/s | error | "
             "TPOT ms meas / pred | GPU idle meas / pred | host plan+launch / process ms |",
             "| --- | --- | --: | --- | --: | --: | --: | --: | --: | --: |"]
    for r in rows:
        lines.append(f"| {r['setup']} | {r['method']} | {r['concurrency']} | {r['mode']} | "
                     f"{r['measured_tok_s']:.1f} | {r['predicted_tok_s']:.1f} | "
                     f"{r['error']:+.1%} | {r['measured_tpot_ms']:.2f} / "
                     f"{r['predicted_tpot_ms']:.2f} | {r['measured_idle']:.1%} / "
                     f"{r['predicted_idle']:.1%} | {r['host_plan_ms']:.2f} / "
                     f"{r['host_process_ms']:.2f} |")
    lines += ["", "| setup | method | C | overlap / sync measured | predicted |",
              "| --- | --- | --: | --: | --: |"]
    lines += [f"| {g['setup']} | {g['method']} | {g['concurrency']} | {g['measured']:.3f} | "
              f"{g['predicted']:.3f} |" for g in gains(rows)]
    lines += ["", "| mode | runs | mean absolute throughput error |", "| --- | --: | --: |"]
    for mode in sorted({r["mode"] for r in rows}):
        errs = [abs(r["error"]) for r in rows if r["mode"] == mode and math.isfinite(r["error"])]
        lines.append(f"| {mode} | {len(errs)} | {sum(errs) / max(len(errs), 1):.1%} |")
    return "\n".join(lines) + "\n"


def plot(rows: list[dict], path: Path) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    panels = sorted({(r["setup"], r["method"]) for r in rows})
    fig, axes = plt.subplots(1, len(panels), figsize=(4.2 * len(panels), 3.6), squeeze=False)
    for ax, (setup, method) in zip(axes[0], panels):
        for mode, color in (("sync", "tab:blue"), ("overlap", "tab:orange")):
            pts = sorted((r["concurrency"], r["measured_tok_s"], r["predicted_tok_s"])
                         for r in rows if (r["setup"], r["method"], r["mode"]) ==
                         (setup, method, mode))
            if not pts:
                continue
            c, meas, pred = zip(*pts)
            ax.plot(c, meas, "o-", color=color, label=f"{mode} measured")
            ax.plot(c, pred, "x--", color=color, label=f"{mode} simulated")
        ax.set(xscale="log", xlabel="concurrency", ylabel="output tok/s",
               title=f"{setup}, {method}")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


def main(argv=None) -> list[dict]:
    from simulator.cost_models import COST_MODELS

    p = argparse.ArgumentParser(prog="python -m experiments.spec_v2",
                                description=__doc__.splitlines()[0])
    p.add_argument("--measured", required=True, help="serve_bench.json of serve-bench --out")
    p.add_argument("--hardware", default="h200", help="conf/hardware/<name>.yaml")
    p.add_argument("--cost-model", default="roofline", choices=sorted(COST_MODELS))
    p.add_argument("--calibration", default=None,
                   help="engine.calibration of a calibrated cost model: a table name or path "
                        "for every setup, or SETUP=TABLE,... per setup")
    p.add_argument("--out", default=str(REPO / "experiments" / "spec_v2"))
    args = p.parse_args(argv)
    doc = json.loads(Path(args.measured).read_text())
    rows = compare(doc, hardware(args.hardware), args.cost_model, args.calibration)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    with (out / "comparison.csv").open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=FIELDS)
        writer.writeheader()
        writer.writerows(rows)
    table = markdown(rows, doc, args.cost_model, args.hardware)
    (out / "comparison.md").write_text(table)
    plot(rows, out / "throughput.png")
    print(table)
    return rows


if __name__ == "__main__":
    main()
