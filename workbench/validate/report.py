"""`python -m workbench validate report MEASURED.json`: simulator predictions vs engine runs.

For every cell of a `validate run` file (concurrency x method x B), the measured metrics of
each repeat are computed from its per-round wall times (TTFT = the batch prefill; a request
finishes at the end of its last round; TPOT = (finish - first token) / (tokens - 1);
throughput = tokens / last finish), and the simulator runs the same setup (sync engine, all
requests at t = 0, one prefill, the calibrated cost model) twice: replaying that repeat's
commit lengths (replay mode), and with the oracle's survival curve as the sampled acceptance
model (constant alpha, a different seed per repeat). Writes <out-dir>/<hardware>-<model>.md,
.csv and .png (predicted vs measured) with the real-vs-real spread of the repeats.
"""

from __future__ import annotations

import csv
import json
import tempfile
from pathlib import Path

import numpy as np

from common.methods import BASELINE
from common.paths import tree_output
from simulator.calibration import REPO_CONF, heldout_report, load_calibration
from simulator.metrics import weighted_stats
from workbench.atomic import atomic_open, atomic_path, write_text
from workbench.errors import OneLineParser
from workbench.validate import diag

METRICS = ("throughput", "tpot_mean", "tpot_p99", "ttft", "decode_tput")
LABELS = {"throughput": "throughput tok/s", "tpot_mean": "mean TPOT ms",
          "tpot_p99": "p99 TPOT ms", "ttft": "TTFT ms", "decode_tput": "decode tok/s"}
TARGETS = {"throughput": 5.0, "tpot_mean": 5.0, "tpot_p99": 10.0}  # median |error| %, replay
OUT_DIR = REPO_CONF.parent.parent / "experiments" / "validation"


def measured_metrics(run: dict) -> dict:
    """Throughput, mean/p99 TPOT and TTFT of one engine run (seconds, tok/s)."""
    wall = np.cumsum([r[1] for r in run["round_times"]])
    pre = run["prefill_s"]
    tokens = np.array(run["tokens_per_request"], dtype=np.float64)
    finish = np.array([pre + wall[len(a) - 1] for a in run["accept_lengths"]])
    tpot = np.where(tokens > 1, (finish - pre) / np.maximum(tokens - 1, 1), np.nan)
    st = weighted_stats(tpot)
    return {"throughput": tokens.sum() / finish.max(), "tpot_mean": st["mean"],
            "tpot_p99": st["p99"], "ttft": pre,
            "decode_tput": (tokens.sum() - len(tokens)) / (finish.max() - pre)}


def sim_config(model: dict, calib: str, setup: dict, c: int, method: str, block: int) -> dict:
    """The simulator's view of one validation cell (a dict for SimConfig.coerce)."""
    drafter = load_calibration(calib, _model_params(model))["drafter"]
    spec = (dict(method=BASELINE, block_size=1, draft_layers=0) if method == BASELINE else
            dict(method=method, block_size=block, draft_layers=drafter["num_layers"],
                 options={"target_features": len(drafter["target_layer_ids"])}))
    return {"model": model, "spec": spec,
            "engine": dict(mode="sync", kv_reserve_blocks=2, max_running_requests=c,
                           chunked_prefill_size=c * setup["prompt_tokens"],
                           cost_model="calibrated", calibration=calib),
            "workload": dict(arrival="closed_loop", concurrency=c, num_requests=c,
                             prompt_tokens_mean=setup["prompt_tokens"], prompt_tokens_cv=0.0,
                             output_tokens_mean=setup["new_tokens"], output_tokens_cv=0.0,
                             max_new_tokens=setup["new_tokens"])}


def simulated_metrics(cfg: dict) -> dict:
    import simulator

    s = simulator.run(cfg).summary
    tokens = s["throughput"]["output_tok_s"] * s["duration_s"]
    n = s["requests"]["finished"]  # one prefill at t = 0: every first token at the mean TTFT
    return {"throughput": s["throughput"]["output_tok_s"], "tpot_mean": s["tpot_s"]["mean"],
            "tpot_p99": s["tpot_s"]["p99"], "ttft": s["ttft_s"]["mean"],
            "decode_tput": (tokens - n) / (s["duration_s"] - s["ttft_s"]["mean"])}


def _model_params(model: dict):
    from simulator.params import ModelParams

    return ModelParams(**model)


def _model_yaml(name: str) -> dict:
    import yaml

    spec = yaml.safe_load((REPO_CONF.parent / "model" / f"{name}.yaml").read_text())
    spec.pop("defaults", None)
    return spec


def evaluate(doc: dict, calib: str, model: dict) -> list[dict]:
    """One row per cell: measured mean and spread, replay and sampled predictions, errors."""
    setup, rows = doc["setup"], []
    cells = sorted({(r["concurrency"], r["method"], r["block"]) for r in doc["runs"]})
    with tempfile.TemporaryDirectory() as tmp:
        for c, method, block in cells:
            runs = [r for r in doc["runs"] if (r["concurrency"], r["method"], r["block"])
                    == (c, method, block)]
            meas = [measured_metrics(r) for r in runs]
            replay, sampled = [], []
            for i, r in enumerate(runs):
                cfg = sim_config(model, calib, setup, c, method, block)
                if method != BASELINE:
                    path = Path(tmp) / f"trace-{c}-{block}-{i}.json"
                    write_text(path, json.dumps(r["accept_lengths"]))
                    cfg["spec"].update(acceptance="replay", replay_path=str(path))
                replay.append(simulated_metrics(cfg))
                if method != BASELINE:
                    cfg["spec"].update(acceptance="constant", alpha=setup["alpha"])
                cfg["seed"] = i
                sampled.append(simulated_metrics(cfg))
            row = {"concurrency": c, "method": method, "block": block, "repeats": len(runs)}
            for m in METRICS:
                values = np.array([x[m] for x in meas])
                mean = float(values.mean())
                row[f"{m}_meas"] = mean
                row[f"{m}_spread_pct"] = float((values.max() - values.min()) / mean * 100)
                for name, pred in (("replay", replay), ("sampled", sampled)):
                    p = float(np.mean([x[m] for x in pred]))
                    row[f"{m}_{name}"] = p
                    row[f"{m}_{name}_err_pct"] = (p - mean) / mean * 100
            rows.append(row)
    return rows


def summary(rows: list[dict]) -> dict:
    """Median and max |error| % per metric and mode, and the real-vs-real spread."""
    out = {}
    for m in METRICS:
        for mode in ("replay", "sampled"):
            e = np.abs([r[f"{m}_{mode}_err_pct"] for r in rows])
            out[f"{m}_{mode}"] = {"median": float(np.median(e)), "max": float(e.max())}
        out[f"{m}_spread"] = float(np.median([r[f"{m}_spread_pct"] for r in rows]))
    return out


def weakest(rows: list[dict]) -> str:
    """Where replay errs most: the worst cells, and median error by concurrency/method."""
    worst = sorted(((abs(r[f"{m}_replay_err_pct"]), m, r) for r in rows for m in METRICS),
                   key=lambda x: -x[0])[:3]
    cells = "; ".join(f"{LABELS[m]} at c={r['concurrency']} {_cell(r)} "
                      f"({r[f'{m}_replay_err_pct']:+.1f}%)" for _, m, r in worst)
    by = []
    for key in ("concurrency", "method"):
        for v in sorted({r[key] for r in rows}, key=str):
            e = [abs(r[f"{m}_replay_err_pct"]) for r in rows if r[key] == v for m in METRICS]
            by.append(f"{key} {v}: {np.median(e):.1f}%")
    return (f"Largest replay errors: {cells}. Median |error| over the four metrics by "
            f"{', '.join(by)}.")


def _cell(r: dict) -> str:
    return "AR" if r["method"] == BASELINE else f"DFlash B={r['block']}"


def write_csv(rows: list[dict], path: Path) -> None:
    with atomic_open(path, newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)


def write_plot(rows: list[dict], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(METRICS), figsize=(4 * len(METRICS), 4))
    for ax, m in zip(axes, METRICS, strict=True):
        scale = 1.0 if m.endswith("put") else 1e3
        meas = np.array([r[f"{m}_meas"] for r in rows]) * scale
        for mode, mark in (("replay", "o"), ("sampled", "x")):
            ax.scatter(meas, np.array([r[f"{m}_{mode}"] for r in rows]) * scale, marker=mark,
                       label=mode)
        lo, hi = meas.min() * 0.8, meas.max() * 1.25
        ax.plot([lo, hi], [lo, hi], "k--", lw=0.8)
        ax.set(xscale="log", yscale="log", xlabel=f"measured {LABELS[m]}",
               ylabel=f"predicted {LABELS[m]}")
    axes[0].legend()
    fig.tight_layout()
    with atomic_path(path) as tmp:
        fig.savefig(tmp, dpi=120)
    plt.close(fig)


def heldout(calib: dict) -> dict:
    """Held-out scores: each table's recomputed with the predictor the simulator reads
    (`built`: monotone envelope, gap fill), the whole round's as stored by the fit."""
    out = dict(calib.get("report", {}))
    for op, t in calib["built"].items():
        if calib.get("heldout", {}).get(op):
            out[op] = heldout_report(t, calib["heldout"][op])
    return out



def _shown(path: str) -> str:
    """A calibration table's path as a report shows it: from the repository root when inside
    it (a report names no machine's folders)."""
    root = REPO_CONF.parent.parent.resolve()
    try:
        return "./" + Path(path).resolve().relative_to(root).as_posix()
    except ValueError:
        return Path(path).name

def write_markdown(doc: dict, calib: dict, rows: list[dict], path: Path) -> None:
    s, setup = summary(rows), doc["setup"]
    run_gpu = doc.get("gpu", doc.get("device"))  # files before the common stamp: "device"
    table_gpu = calib.get("gpu", calib["hardware"].get("gpu"))  # before: under "hardware"
    lines = [
        f"# Simulator validation: {calib['hardware']['name']} {doc['model']}", "",
        f"Engine runs: {run_gpu}, torch {doc['versions']['torch']}, triton "
        f"{doc['versions']['triton']}, commit {doc.get('git_sha')}, {doc['date']}; "
        f"{setup['engine']}, compiled layers {doc['compile']}; random weights, prompt "
        f"{setup['prompt_tokens']}, {setup['new_tokens']} new tokens, oracle drafts with "
        f"s_j = {setup['alpha']}^j, {setup['repeats']} repeats per cell.",
        f"Calibration table: `{_shown(calib['path'])}` ({table_gpu}, driver "
        f"{calib['hardware'].get('driver')}, commit {calib.get('git_sha')}, {calib['date']}).",
        "", "## Held-out error of the calibration predictors", "",
        "| piece | points | median % | p90 % | max % |", "| --- | --: | --: | --: | --: |"]
    for op, r in heldout(calib).items():
        if r["points"]:
            lines.append(f"| {op} | {r['points']} | {r['median_pct']:.1f} | {r['p90_pct']:.1f}"
                         f" | {r['max_pct']:.1f} |")
    lines += ["", diag.envelope(calib)]
    lines += ["", "## Errors over the grid (|predicted - measured| / measured)", "",
              "| metric | replay median | replay max | sampled median | sampled max | "
              "real-vs-real spread (median) | target (replay median) |",
              "| --- | --: | --: | --: | --: | --: | --- |"]
    for m in METRICS:
        r, p = s[f"{m}_replay"], s[f"{m}_sampled"]
        target = f"<= {TARGETS[m]:.0f}%" if m in TARGETS else "-"
        met = "" if m not in TARGETS else (" met" if r["median"] <= TARGETS[m] else " missed")
        lines.append(f"| {LABELS[m]} | {r['median']:.1f}% | {r['max']:.1f}% | "
                     f"{p['median']:.1f}% | {p['max']:.1f}% | {s[f'{m}_spread']:.1f}% | "
                     f"{target}{met} |")
    worst = max(s[f"{m}_replay"]["max"] for m in METRICS)
    lines += ["", f"No cell worse than 15% (replay, all metrics): "
              f"{'met' if worst <= 15 else 'missed'} (worst {worst:.1f}%).", "",
              "## Every cell", "", "Measured value (spread of the repeats), then the replay "
              "and sampled errors.", "",
              "| c | method | " + " | ".join(LABELS[m] for m in METRICS) + " |",
              "| --: | --- |" + " --- |" * len(METRICS)]
    for r in rows:
        cells = []
        for m in METRICS:
            scale = 1.0 if m.endswith("put") else 1e3
            cells.append(f"{r[f'{m}_meas'] * scale:.1f} ({r[f'{m}_spread_pct']:.1f}%) "
                         f"{r[f'{m}_replay_err_pct']:+.1f}% / {r[f'{m}_sampled_err_pct']:+.1f}%")
        lines.append(f"| {r['concurrency']} | {_cell(r)} | " + " | ".join(cells) + " |")
    parts = diag.split(doc, calib, rows)
    lines += ["", "## Where the error comes from", "", "Per cell, medians over rounds: the "
              "engine's device time (CUDA events) and host time (wall - device) against the "
              "tables and the host line; round error = (table + host line) vs wall.", "",
              *diag.table(parts),
              "", "## Where the simulator is weakest", "", weakest(rows), "",
              diag.weakest(parts, calib), "",
              "## Reproduce", "", "```bash",
              f"python -m workbench validate run model={doc['model']} --out $OUT  # GPU",
              f"python -m workbench validate report $OUT/validation-{doc['model']}.json",
              "```", ""]
    write_text(path, "\n".join(lines))


def main(argv: list[str] | None = None) -> int:
    p = OneLineParser(prog="python -m workbench validate report")
    p.add_argument("measured", help="validation-<model>.json from `validate run`")
    p.add_argument("--calibration", default=None, help="table name or path "
                   "(default h200/<model>)")
    p.add_argument("--out-dir", default=None, help="default experiments/validation/ (an "
                   "installed copy: ./experiments/validation/)")
    args = p.parse_args(argv)
    if not Path(args.measured).is_file():
        p.error(f"measured = {args.measured}: no such file (validation-<model>.json)")
    doc = json.loads(Path(args.measured).read_text())
    calib_name = args.calibration or f"h200/{doc['model']}"
    if not (REPO_CONF.parent / "model" / f"{doc['model']}.yaml").is_file():
        known = sorted(f.stem for f in (REPO_CONF.parent / "model").glob("*.yaml"))
        p.error(f"{args.measured}: model {doc['model']} has no conf/model/{doc['model']}.yaml "
                f"for the simulator to price (one of {', '.join(known)}); the CPU smoke's "
                "tiny target has none, so its run checks the engine side only")
    model = _model_yaml(doc["model"])
    calib = load_calibration(calib_name, _model_params(model))
    rows = evaluate(doc, calib_name, model)
    out = Path(args.out_dir) if args.out_dir else tree_output(OUT_DIR, "--out-dir")
    stem = f"{calib['hardware']['name']}-{doc['model']}"
    write_csv(rows, out / f"{stem}.csv")
    write_plot(rows, out / f"{stem}.png")
    write_markdown(doc, calib, rows, out / f"{stem}.md")
    print((out / f"{stem}.md").read_text())
    return 0
