"""`python -m experiments.whatifs.context_decay [--jobs 2]`: acceptance that decays with
context length, and what it does to DFlash's speedup from 1K to 32K tokens of prompt.

Fits (simulator/context_decay.py, in logit space, per-position curve of B = 16, decay 0.1,
sigma 0.5) logit(alpha_j(ctx)) = a_dataset - beta * max(0, log2(ctx / c0)) to

- the DFlash paper's Table 4: tau of the Qwen3.5-27B drafter on LongBench (hotpotqa,
  qasper, gov_report) at 1K-32K tokens of context, the base drafter (trained at 4K) and the
  one fine-tuned on long samples; B = 16 is assumed (the paper's default);
- the toy world's tau by context bucket (toy_context.json, measured on the CPU by
  `python -m experiments.whatifs.toy_context`), when that file is present.

Then simulates Qwen3-8B / one H200 (conf/experiment/whatif_context_decay.yaml: DFlash
B = 16 with its HumanEval preset tau 6.50 as the short-context limit, fixed prompts of 1K-32K
tokens, 256-token outputs, overlap engine, roofline costs, closed loop at 1 and 8 clients)
under no decay, the base drafter's fitted decay and the long-finetuned one's (beta and c0
carried over from the 27B drafter, in logits), each against no speculation at the same
prompt length. Writes results.json, context_decay.png and README.md into
experiments/whatif_context_decay/.
"""

from __future__ import annotations

import argparse
import json
from multiprocessing import Pool
from pathlib import Path

import numpy as np

from experiments.whatifs.base import (
    NONE,
    OUT,
    base_config,
    paragraph,
    point,
    pyplot,
    title,
    write,
)
from simulator.context_decay import DecayFit, fit_context_decay, tau_at

EXPERIMENT = "whatif_context_decay"
CURVE = {"decay": 0.1, "sigma": 0.5, "block_size": 16}
# DFlash paper Table 4 (tau; Qwen3.5-27B drafter, LongBench; 32K only for gov_report)
TABLE4 = {
    "base": {
        "hotpotqa": {1024: 4.91, 2048: 4.97, 4096: 4.91, 8192: 4.46, 16384: 3.61},
        "qasper": {1024: 5.27, 2048: 5.50, 4096: 5.17, 8192: 4.17, 16384: 3.57},
        "gov_report": {1024: 4.53, 2048: 4.35, 4096: 3.93, 8192: 3.32, 16384: 2.67, 32768: 2.09},
    },
    "long": {
        "hotpotqa": {1024: 4.99, 2048: 5.06, 4096: 5.41, 8192: 5.76, 16384: 6.05},
        "qasper": {1024: 5.38, 2048: 5.67, 4096: 5.80, 8192: 5.62, 16384: 6.00},
        "gov_report": {1024: 4.53, 2048: 4.38, 4096: 4.25, 8192: 4.04, 16384: 3.81, 32768: 3.56},
    },
}
PROMPTS = (1024, 2048, 4096, 8192, 16384, 32768)
TOY = OUT / "whatif_context_decay" / "toy_context.json"


def fits(toy_path: Path | None = TOY) -> dict[str, DecayFit]:
    """The base and long fits of Table 4, and the toy world's when its file exists."""
    out = {name: fit_context_decay(pts, **CURVE) for name, pts in TABLE4.items()}
    if toy_path is not None and toy_path.exists():
        buckets = json.loads(toy_path.read_text())["buckets"]
        out["toy"] = fit_context_decay(
            {"toy": {b["context_tokens"]: b["tau"] for b in buckets}}, **CURVE
        )
    return out


def _task(args) -> dict:
    decay_name, beta, knee, prompt, c, per_client, min_requests = args
    changes = {
        "workload.prompt_tokens_mean": float(prompt),
        "workload.concurrency": c,
        **(
            {"spec.context_decay": beta, "spec.context_knee_tokens": knee}
            if decay_name != "none"
            else NONE
        ),
    }
    return {
        **point(base_config(EXPERIMENT), changes, per_client=per_client, min_requests=min_requests),
        "decay": decay_name,
        "prompt_tokens": prompt,
        "concurrency": c,
    }


def sweep(
    decays: dict[str, tuple[float, float]],
    prompts=PROMPTS,
    concurrency=(1, 8),
    *,
    per_client: int = 4,
    min_requests: int = 32,
    jobs: int = 2,
) -> list[dict]:
    """Rows per (decay, prompt, c), decays {name: (beta, c0)} plus "none" (no speculation,
    the baseline of each row's speedup: output tokens/s, prefill included, and TPOT)."""
    grid = {**decays, "none": (0.0, 1.0)}
    tasks = [
        (name, b, k, p, c, per_client, min_requests)
        for name, (b, k) in grid.items()
        for p in prompts
        for c in concurrency
    ]
    with Pool(jobs) as pool:
        rows = pool.map(_task, tasks)
    base = {(r["prompt_tokens"], r["concurrency"]): r for r in rows if r["decay"] == "none"}
    for r in rows:
        b = base[r["prompt_tokens"], r["concurrency"]]
        r["speedup"] = r["output_tok_s"] / b["output_tok_s"]
        r["tpot_speedup"] = b["tpot_ms"] / r["tpot_ms"]
    return [r for r in rows if r["decay"] != "none"]


def plot(fitted: dict[str, DecayFit], rows: list[dict], toy: list[dict] | None):
    plt = pyplot()
    fig, (ax0, ax1, ax2) = plt.subplots(1, 3, figsize=(17, 4.8))
    ctx = np.geomspace(64, 32768, 60)
    for name, style in (("base", "-"), ("long", "--")):
        f = fitted[name]
        for i, (ds, pts) in enumerate(sorted(TABLE4[name].items())):
            color = f"C{i}"
            ax0.plot(
                list(pts),
                list(pts.values()),
                "o" if name == "base" else "s",
                color=color,
                mfc="none" if name == "long" else color,
                ms=4,
            )
            ax0.plot(
                ctx,
                tau_at(ctx, f.logit0[ds], f.beta, f.knee_tokens, **CURVE),
                style,
                color=color,
                lw=1,
                label=f"{ds} ({name})",
            )
    if toy:
        x = [b["context_tokens"] for b in toy]
        ax0.errorbar(
            x,
            [b["tau"] for b in toy],
            [b["tau_2se"] for b in toy],
            fmt="D",
            color="k",
            ms=4,
            label="toy world (2 SE)",
        )
        if "toy" in fitted:
            f = fitted["toy"]
            ax0.plot(
                ctx,
                tau_at(ctx, f.logit0["toy"], f.beta, f.knee_tokens, **CURVE),
                ":",
                color="k",
                lw=1,
            )
    ax0.set(
        xscale="log",
        xlabel="context tokens",
        ylabel="tau (B = 16)",
        title="Table 4 (filled: base drafter, open: long-finetuned) and fits",
    )
    ax0.set_xscale("log", base=2)
    ax0.legend(fontsize=6, ncol=2)
    keys = sorted({(r["decay"], r["concurrency"]) for r in rows})
    for ax, metric, name in (
        (ax1, "tpot_speedup", "decode speedup (TPOT ratio)"),
        (ax2, "speedup", "output tokens/s ratio (prefill included)"),
    ):
        for i, (decay, c) in enumerate(keys):
            pts = sorted(
                (r["prompt_tokens"], r[metric])
                for r in rows
                if r["decay"] == decay and r["concurrency"] == c
            )
            ax.plot(
                *zip(*pts, strict=True),
                "-" if c == 1 else "--",
                marker="os^v"[i // 2],
                color=f"C{i // 2}",
                ms=4,
                label=f"{decay}, c = {c}",
            )
        ax.axhline(1.0, color="grey", lw=0.8)
        ax.set(
            xlabel="prompt tokens",
            ylabel=f"{name} over no speculation",
            title="DFlash B = 16 on Qwen3-8B under each decay",
        )
        ax.set_xscale("log", base=2)
        ax.legend(fontsize=7)
    fig.suptitle(
        title(base_config(EXPERIMENT), "Acceptance decaying with context length"), fontsize=9
    )
    fig.tight_layout()
    return fig


def readme(summary: dict, rows: list[dict], toy: dict | None) -> str:
    """README.md: the setting, the fits, the speedups and the reading."""
    by = {(r["decay"], r["prompt_tokens"], r["concurrency"]): r for r in rows}
    lo, hi = min(PROMPTS), max(PROMPTS)

    def at(decay, prompt, c=1, key="tpot_speedup"):
        return by[decay, prompt, c][key]

    fits_md = "\n".join(
        f"| {name} | {f['beta']:.2f} | {f['knee_tokens']:,.0f} | {f['rms_tau']:.2f} | "
        + ", ".join(f"{ds} {t:.2f}" for ds, t in sorted(f["short_tau"].items()))
        + " |"
        for name, f in summary.items()
    )
    speed_md = "\n".join(
        f"| {d} | {c} | "
        + " | ".join(f"{at(d, p, c):.2f} ({at(d, p, c, 'tau'):.1f})" for p in PROMPTS)
        + " |"
        for d in dict.fromkeys(r["decay"] for r in rows)
        for c in sorted({r["concurrency"] for r in rows})
    )
    b, g = summary["base"], summary["long"]
    top = 2.0**17  # the largest knee fit_context_decay searches by default
    edge = "; its c0 sits at the searched grid's edge" if g["knee_tokens"] >= top else ""
    toy_text = ""
    if toy:
        t0, t1 = toy["buckets"][0], toy["buckets"][-1]
        toy_text = f"""The toy world (zoo pair, B = 16, CPU, toy_context.json) reads tau
            {t0["tau"]:.2f} at {t0["context_tokens"]} tokens of context and {t1["tau"]:.2f}
            at {t1["context_tokens"]} ({t1["diff_vs_shortest"]:+.2f} +-
            {t1["diff_2se"]:.2f}, 2 SE, same continuations), past its target's 512-token
            training windows; its fit gives beta = {summary["toy"]["beta"]:.2f} per doubling
            past c0 = {summary["toy"]["knee_tokens"]:,.0f} (measured by `{toy["command"]}`,
            {toy["wall_s"] / 60:.0f} min on 2 shared CPU cores, Python {toy["python"]},
            torch {toy["torch"]})."""
    reading = f"""Reading. The base drafter (trained at 4K) loses acceptance with context: the
        fit gives beta = {b["beta"]:.2f} logits per doubling of the context past c0 =
        {b["knee_tokens"]:,.0f} tokens (rms {b["rms_tau"]:.2f} in tau over Table 4's 16 points),
        the long-finetuned one {g["beta"]:.2f} (rms {g["rms_tau"]:.2f}: its hotpotqa and
        qasper rise with context, which one shared decay cannot follow{edge}). Carried onto
        Qwen3-8B's HumanEval curve, the base decay takes the simulated tau from
        {at("base fit", lo, 1, "tau"):.1f} at {lo // 1024}K to {at("base fit", hi, 1, "tau"):.1f}
        at {hi // 1024}K and DFlash's decode speedup at c = 1 from
        {at("base fit", lo):.2f}x to {at("base fit", hi):.2f}x; without decay it stays at
        {at("no decay", lo):.2f}x to {at("no decay", hi):.2f}x, with the long-finetuned
        decay {at("long fit", lo):.2f}x to {at("long fit", hi):.2f}x. End to end the prefill
        weighs more than the decay: without any decay output tokens/s gains
        {at("no decay", lo, 1, "speedup"):.2f}x at {lo // 1024}K and only
        {at("no decay", hi, 1, "speedup"):.2f}x at {hi // 1024}K, and at c = 8 the
        prefills of the other requests stall every decode, so the decode speedup falls to
        {at("no decay", hi, 8):.2f}x at {hi // 1024}K before any decay
        ({at("base fit", hi, 8):.2f}x with it). {toy_text}"""
    return f"""# Acceptance decaying with context length

    python -m experiments.whatifs.context_decay

Per-position acceptance logit(alpha_j(ctx)) = a - beta * max(0, log2(ctx / c0)) - 0.1 (j - 1)
(+ 0.5 z per request; simulator/context_decay.py) fitted in logit space to the DFlash
paper's Table 4 (Qwen3.5-27B drafter on LongBench, B = 16 assumed) and, when present, to
the toy world's buckets (`python -m experiments.whatifs.toy_context`); then Qwen3-8B on one
H200 with DFlash B = 16 (HumanEval preset tau 6.50 as the short-context limit), fixed prompts
of 1K-32K tokens, 256-token outputs, overlap engine, roofline costs, closed loop at 1 and 8
clients (conf/experiment/whatif_context_decay.yaml). context_decay.png: Table 4 and the
fits; decode speedup (TPOT ratio); output tokens/s ratio, prefill included.

| fit | beta | c0, tokens | rms tau | tau below c0 |
| --- | --: | --: | --: | --- |
{fits_md}

Decode speedup over no speculation (simulated tau):

| decay | c | {" | ".join(f"{p // 1024}K" for p in PROMPTS)} |
| --- | --: |{" --: |" * len(PROMPTS)}
{speed_md}

{paragraph(reading)}
"""


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--jobs", type=int, default=2)
    args = ap.parse_args()
    fitted = fits()
    rows = sweep(
        {
            "no decay": (0.0, 1.0),
            **{f"{n} fit": (fitted[n].beta, fitted[n].knee_tokens) for n in ("base", "long")},
        },
        jobs=args.jobs,
    )
    toy = json.loads(TOY.read_text()) if TOY.exists() else None
    summary = {
        name: {
            "beta": f.beta,
            "knee_tokens": f.knee_tokens,
            "rms_tau": f.rms_tau,
            "logit0": f.logit0,
            "short_tau": {ds: f.short_tau(ds, **CURVE) for ds in f.logit0},
        }
        for name, f in fitted.items()
    }
    write(
        "context_decay",
        {"curve": CURVE, "table4": TABLE4, "fits": summary, "rows": rows},
        plot(fitted, rows, toy["buckets"] if toy else None),
        readme(summary, rows, toy),
    )
    print(json.dumps(summary, indent=1))
    for r in rows:
        print(
            r["decay"],
            r["concurrency"],
            r["prompt_tokens"],
            round(r["speedup"], 2),
            round(r["tpot_speedup"], 2),
            round(r["tau"], 2),
        )


if __name__ == "__main__":
    main()
