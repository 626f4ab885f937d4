"""Predictions, errors and the written report of the published-fidelity experiment.

`predictions(pub, fits, runs)` simulates every baseline with its engine family's fitted
values (role `fit`) and takes every speculative cell from the protocol's anchored scheme
(experiments/published/protocol.py: role `anchor` for the cells its speculative terms are
fitted on, `prediction` for the held-out ones). `summary(rows)` scores the anchored
scheme's held-out predictions: median |error| <= 10%, none worse than 25%, and the Spec V2
gain at c = 32 (SGLang PR #23000's pair, the LMSYS post's +33%) within 5 points.
`write(...)` writes predictions.json, fit.json, protocol.json (experiments/published/
protocol_report.py), report.md and predicted_vs_published.png.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from experiments.published.cells import Published
from experiments.published.protocol import spec_cells
from experiments.published.scores import rows_for
from experiments.published.setup import FAMILY, conf, simulate

TARGET_MEDIAN, TARGET_WORST, TARGET_GAIN, GAIN_POINTS = 0.10, 0.25, 0.33, 0.05
COST_MODEL = "roofline"
PRIORS = (
    "matmul_efficiency",
    "host_plan_s",
    "host_plan_per_req_s",
    "host_process_s",
    "host_process_per_req_s",
)


def predictions(pub: Published, fits: dict[str, dict], runs: dict) -> list[dict]:
    """One row per cell (the keys of predictions.json), in the cells' order: a baseline as
    the fit simulates it (role `fit`); a speculative cell under the protocol's `anchored`
    scheme (role `anchor` for the anchors, `prediction` for the held-out cells), error
    against what it is scored on (protocol.py `targets`), and every scheme's tok/s; every
    row carries its provenance (cells.py: table, row, derived_from, rounding) and whether
    its |error| is within that rounding."""
    values = {k.split("@")[0]: v["values"] for k, v in fits.items()}
    base = iter(simulate(pub, [c for c in pub.cells if c.baseline], values))
    spec = iter(range(len(spec_cells(pub))))
    extra = rows_for(spec_cells(pub), runs)
    out = []
    for c in pub.cells:
        row = {
            "source": c.source, "model": c.model, "hardware": c.hardware, "engine": c.engine,
            "dataset": c.dataset, "method": c.method, "concurrency": c.concurrency,
            "published_tok_s": c.published_tok_s, "tau": c.tau, "derived": c.derived,
            "table": c.table, "row": c.row, "derived_from": c.derived_from,
            "rounding": round(c.rounding, 5),
        }
        if c.baseline:
            t = float(next(base))
            row.update(predicted_tok_s=round(t, 1), role="fit", anchor=False,
                       error=round(t / c.published_tok_s - 1.0, 4))
        else:
            i = next(spec)
            t, target = runs["anchored"]["tok_s"][i], runs["target_tok_s"][i]
            row.update(predicted_tok_s=round(float(t), 1), **extra[i],
                       role="anchor" if extra[i]["anchor"] else "prediction",
                       error=round(float(t) / target - 1.0, 4))
        row["within_rounding"] = abs(row["error"]) <= c.rounding
        out.append(row)
    return out


def spec_v2_gain(rows: list[dict], c: int = 32) -> dict:
    """Overlap / sync throughput of SGLang PR #23000's pair at concurrency c."""
    pair = {
        r["engine"]: r for r in rows if r["source"] == "sglang-pr23000" and r["concurrency"] == c
    }
    v1, v2 = pair["sglang_v1"], pair["sglang_v2"]
    return {
        "concurrency": c,
        "published": v2["published_tok_s"] / v1["published_tok_s"] - 1.0,
        "predicted": v2["predicted_tok_s"] / v1["predicted_tok_s"] - 1.0,
    }


def summary(rows: list[dict]) -> dict:
    """Median and worst |error| of the predictions, per source and overall; the gains."""
    pred = [r for r in rows if r["role"] == "prediction"]
    err = np.abs([r["error"] for r in pred])
    by = {}
    for src in sorted({r["source"] for r in pred}):
        e = np.abs([r["error"] for r in pred if r["source"] == src])
        by[src] = {
            "cells": len(e),
            "median_abs_error": float(np.median(e)),
            "worst_abs_error": float(e.max()),
        }
    gain = spec_v2_gain(rows)
    return {
        "cells": len(pred),
        "median_abs_error": float(np.median(err)),
        "worst_abs_error": float(err.max()),
        "within_10": int((err <= TARGET_MEDIAN).sum()),
        "within_25": int((err <= TARGET_WORST).sum()),
        "by_source": by,
        "spec_v2_gain_c32": gain,
        "spec_v2_gain_c1": spec_v2_gain(rows, 1),
        "targets_met": {
            "median": bool(np.median(err) <= TARGET_MEDIAN),
            "worst": bool(err.max() <= TARGET_WORST),
            "spec_v2_gain": bool(abs(gain["predicted"] - TARGET_GAIN) <= GAIN_POINTS),
        },
    }


def plot(rows: list[dict], path: Path, title: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 6))
    lo, hi = 100, 30000
    x = np.array([lo, hi])
    ax.plot(x, x, "k-", lw=0.8)
    for f, ls in ((0.10, "--"), (0.25, ":")):
        ax.plot(x, x * (1 + f), "k" + ls, lw=0.6)
        ax.plot(x, x * (1 - f), "k" + ls, lw=0.6, label=f"+-{round(100 * f)}%")
    for src in sorted({r["source"] for r in rows}):
        for role, marker in (("fit", "x"), ("anchor", "s"), ("prediction", "o")):
            sel = [r for r in rows if r["source"] == src and r["role"] == role]
            if sel:
                ax.scatter(
                    [r["published_tok_s"] for r in sel],
                    [r["predicted_tok_s"] for r in sel],
                    marker=marker,
                    s=22,
                    label=f"{src} ({'baseline, fitted' if role == 'fit' else role})",
                )
    ax.set(
        xscale="log",
        yscale="log",
        xlim=(lo, hi),
        ylim=(lo, hi),
        xlabel="published output tok/s",
        ylabel="simulated output tok/s",
        title=title,
    )
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def _pct(x: float) -> str:
    return f"{100 * x:+.1f}%"


def markdown(pub: Published, rows: list[dict], fits: dict, s: dict, command: str) -> str:
    """The report: targets, fitted values, priors, per-source and per-cell errors, gaps."""
    tm, g = s["targets_met"], s["spec_v2_gain_c32"]
    g1 = s["spec_v2_gain_c1"]
    out = [
        "# Simulator against published third-party serving results",
        "",
        f"Command: `{command}` (CPU, deterministic: seed 0). Cost model: {COST_MODEL} "
        "(datasheet peaks of conf/hardware/b200.yaml) with the engine profiles of "
        "conf/engine/ (sglang_v1, sglang_v2, vllm); their kernel factors fitted on the "
        "no-speculation columns only (fit.json), the rest priors. Findings and the reasons "
        "for the misses: findings.md. Cells and citations: cells.json.",
        "",
        "## Targets",
        "",
        "| target | value | met |",
        "| --- | --- | --- |",
        f"| median abs error over {s['cells']} speculative cells <= 10% | "
        f"{100 * s['median_abs_error']:.1f}% | {'yes' if tm['median'] else 'no'} |",
        f"| worst abs error <= 25% | {100 * s['worst_abs_error']:.1f}% "
        f"({s['within_25']} of {s['cells']} within 25%, {s['within_10']} within 10%) | "
        f"{'yes' if tm['worst'] else 'no'} |",
        f"| Spec V2 gain at c = 32 within 5 points of +33% | {_pct(g['predicted'])} "
        f"(published {_pct(g['published'])}; c = 1: {_pct(g1['predicted'])} vs "
        f"{_pct(g1['published'])}) | {'yes' if tm['spec_v2_gain'] else 'no'} |",
        "",
        "## Fitted kernel factors (baseline columns only)",
        "",
        "| engine family | free | values | baseline cells | rms log error | worst |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    for key, f in fits.items():
        vals = ", ".join(
            f"{k} {v:.4g}" if isinstance(v, float) else f"{k} {v}" for k, v in f["values"].items()
        )
        modes = f.get("modes_rms_log_error")
        note = (
            f" (rms by mode: {', '.join(f'{m} {v:.3f}' for m, v in modes.items())})"
            if modes
            else ""
        )
        out.append(
            f"| {key} | {', '.join(f['free'])} | {vals}{note} | {f['cells']} | "
            f"{f['rms_log_error']:.3f} | {100 * f['max_abs_error']:.1f}% |"
        )
    out += ["", "Priors (not fitted; conf/engine/<profile>.yaml says where each comes from):", ""]
    for profile in sorted({r["engine"] for r in rows}):
        e = conf("engine", profile)
        out.append(
            f"- {profile} ({FAMILY[profile]}): mode {e['mode']}, "
            + ", ".join(f"{k} {e[k]:g}" for k in PRIORS)
        )
    out += [
        "",
        "## Errors per source (speculative cells)",
        "",
        "| source | cells | median abs error | worst |",
        "| --- | --- | --- | --- |",
    ]
    for src, v in s["by_source"].items():
        out.append(
            f"| {src} | {v['cells']} | {100 * v['median_abs_error']:.1f}% | "
            f"{100 * v['worst_abs_error']:.1f}% |"
        )
    out += ["", "Sources:", ""] + [f"- {k}: {v}" for k, v in pub.sources.items()]
    out += [
        "",
        "## Every cell",
        "",
        "error = simulated / published - 1; role fit: a baseline the factors were fitted "
        "on; derived: published as a speedup (or a speedup's quotient), converted; "
        "rounding: the half-width of the printed value's last digit relative to the value "
        "(cells.py), marked * where |error| is within it.",
        "",
        "| source | model | dataset | method | engine | c | tau | published | simulated "
        "| error | rounding | role |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for r in rows:
        tau = "-" if r["tau"] is None else f"{r['tau']:g}"
        out.append(
            f"| {r['source']} | {r['model']} | {r['dataset']} | {r['method']} | "
            f"{r['engine']} | {r['concurrency']} | {tau} | "
            f"{r['published_tok_s']:,.0f}{'*' if r['derived'] else ''} | "
            f"{r['predicted_tok_s']:,.0f} | {_pct(r['error'])} | "
            f"+-{100 * r['rounding']:.2f}%{'*' if r['within_rounding'] else ''} | {r['role']} |"
        )
    out += ["", "## Cells outside the targets or not predicted", ""]
    bad = [r for r in rows if r["role"] == "prediction" and abs(r["error"]) > TARGET_WORST]
    out.append(f"{len(bad)} predictions are off by more than 25% (findings.md says why), "
               f"{sum(r['within_rounding'] for r in bad)} of them within their printed "
               "value's rounding:")
    out += [
        f"- {r['source']} {r['model']} {r['dataset']} {r['method']} {r['engine']} "
        f"c = {r['concurrency']}: {_pct(r['error'])}"
        for r in bad
    ]
    out += ["", "Not predicted:"]
    out += [
        f"- {c.source} {c.model} {c.dataset} {c.method} ({c.engine}) c = {c.concurrency}"
        f" ({c.published_tok_s:g} tok/s): {why}"
        for c, why in pub.missing
    ]
    return "\n".join(out) + "\n"


def write(out: Path, pub: Published, fits: dict, rows: list[dict], command: str,
          runs: dict) -> dict:
    """predictions.json, fit.json, protocol.json, report.md (the protocol's section first)
    and predicted_vs_published.png under `out`; returns the protocol's scores."""
    from experiments.published import protocol_report

    out.mkdir(parents=True, exist_ok=True)
    s = summary(rows)
    (out / "predictions.json").write_text(json.dumps(rows, indent=1) + "\n")
    (out / "fit.json").write_text(json.dumps({"fits": fits, "summary": s}, indent=1) + "\n")
    scores = protocol_report.write(out, pub, runs)
    text = markdown(pub, rows, fits, s, command).split("\n## ", 1)
    section = protocol_report.markdown(pub, runs, scores, command)
    (out / "report.md").write_text(f"{text[0]}\n{section}\n## {text[1]}")
    plot(
        rows,
        out / "predicted_vs_published.png",
        f"{COST_MODEL} costs, B200 datasheet peaks; engine profiles sglang_v1/v2, vllm\n"
        "kernel factors fitted on published no-speculation columns only",
    )
    return scores
