"""`python -m experiments.whatifs.losses [--jobs 2]`: where speculation loses.

Speedup of DFlash (B = 16, 5 draft layers) over no speculation on one H200, overlap engine,
roofline costs, HumanEval lengths, closed loop, over concurrency 1..256 (at most c running,
4c requests, at least 64), tau 1.5..7 (the preset per-position curve solved so that its mean
commit length at B = 16 is tau) and four dense targets (Qwen3-4B, Qwen3-8B, LLaMA-3.1-8B,
Qwen3-32B). Base setting: conf/experiment/whatif_losses.yaml. The question comes from
vllm-project/vllm#42505 (DFlash slower than plain decoding above concurrency 8). Writes
results.json, losses.png (one heat map per model, speedup < 1 hatched) and README.md into
experiments/whatif_losses/.
"""

from __future__ import annotations

import argparse
from multiprocessing import Pool

import numpy as np

from experiments.whatifs.base import NONE, base_config, paragraph, point, pyplot, title, write

MODELS = ("qwen3-4b", "qwen3-8b", "llama-3.1-8b", "qwen3-32b")
TAUS = (1.5, 2.0, 2.5, 3.0, 4.0, 5.0, 6.0, 7.0)
CONCURRENCY = (1, 2, 4, 8, 16, 32, 64, 128, 256)
EXPERIMENT = "whatif_losses"


def _task(args) -> dict:
    model, tau, c, per_client, min_requests = args
    cfg = base_config(EXPERIMENT, f"model={model}")
    changes = {"workload.concurrency": c, **({"spec.tau": tau} if tau else NONE)}
    return {
        **point(cfg, changes, per_client=per_client, min_requests=min_requests),
        "model": model,
        "tau_preset": tau,
        "concurrency": c,
    }


def sweep(
    models=MODELS,
    taus=TAUS,
    concurrency=CONCURRENCY,
    *,
    per_client: int = 4,
    min_requests: int = 64,
    jobs: int = 2,
) -> list[dict]:
    """One row per (model, tau, c) with its speedup over no speculation at that point
    (tau_preset: the curve's mean commit length; `tau` the simulated one)."""
    tasks = [
        (m, t, c, per_client, min_requests)
        for m in models
        for t in (None, *taus)
        for c in concurrency
    ]
    with Pool(jobs) as pool:
        rows = pool.map(_task, tasks)
    base = {
        (r["model"], r["concurrency"]): r["output_tok_s"] for r in rows if r["tau_preset"] is None
    }
    for r in rows:
        r["speedup"] = r["output_tok_s"] / base[r["model"], r["concurrency"]]
    return [r for r in rows if r["tau_preset"] is not None]


def crossings(rows: list[dict]) -> list[dict]:
    """Per (model, tau): the smallest simulated concurrency with speedup < 1 (None: never)."""
    out = []
    for model in dict.fromkeys(r["model"] for r in rows):
        for tau in sorted({r["tau_preset"] for r in rows if r["model"] == model}):
            pts = sorted(
                (r["concurrency"], r["speedup"])
                for r in rows
                if r["model"] == model and r["tau_preset"] == tau
            )
            lose = [c for c, s in pts if s < 1]
            out.append(
                {
                    "model": model,
                    "tau": tau,
                    "loses_from_c": lose[0] if lose else None,
                    "speedup_c1": pts[0][1],
                    "speedup_cmax": pts[-1][1],
                }
            )
    return out


def plot(rows: list[dict]):
    plt = pyplot()
    models = list(dict.fromkeys(r["model"] for r in rows))
    taus = sorted({r["tau_preset"] for r in rows})
    cs = sorted({r["concurrency"] for r in rows})
    ncol = min(len(models), 2)
    nrow = -(-len(models) // ncol)
    fig, axes = plt.subplots(nrow, ncol, figsize=(5.6 * ncol, 4.6 * nrow + 0.8), squeeze=False)
    for ax, model in zip(axes.flat, models, strict=False):
        grid = np.array(
            [
                [
                    next(
                        r["speedup"]
                        for r in rows
                        if r["model"] == model and r["tau_preset"] == t and r["concurrency"] == c
                    )
                    for c in cs
                ]
                for t in taus
            ]
        )
        x, y = np.arange(len(cs)), np.arange(len(taus))
        im = ax.pcolormesh(x, y, np.log2(grid), cmap="RdBu", vmin=-2, vmax=2, shading="nearest")
        ax.contourf(x, y, grid, levels=[0, 1], colors="none", hatches=["//"])
        ax.contour(x, y, grid, levels=[1.0], colors="k", linewidths=1.5)
        for i, j in np.ndindex(grid.shape):
            ax.text(j, i, f"{grid[i, j]:.1f}", ha="center", va="center", fontsize=6)
        ax.set(title=model, xlabel="concurrency", ylabel="tau (B = 16)")
        ax.set_xticks(x, [str(c) for c in cs], fontsize=7)
        ax.set_yticks(y, [f"{t:g}" for t in taus])
    cfg = base_config(EXPERIMENT)
    fig.suptitle(
        title(cfg, "Where speculation loses: DFlash B = 16 speedup, hatched below 1x").replace(
            cfg.model.name, "each target"
        ),
        fontsize=9,
    )
    fig.tight_layout(rect=(0, 0, 0.9, 0.97))
    fig.colorbar(
        im, ax=axes.ravel().tolist(), label="log2 speedup over no speculation", fraction=0.03
    )
    return fig


def readme(rows: list[dict], cross: list[dict], command: str) -> str:
    """README.md: the setting, the table of crossings and the reading."""

    def first(model, tau):
        c = next(x["loses_from_c"] for x in cross if x["model"] == model and x["tau"] == tau)
        return "never (to 256)" if c is None else f"c >= {c}"

    def sp(model, tau, c):
        return next(
            r["speedup"]
            for r in rows
            if r["model"] == model and r["tau_preset"] == tau and r["concurrency"] == c
        )

    models = list(dict.fromkeys(x["model"] for x in cross))
    taus = sorted({x["tau"] for x in cross})
    cmax = max(r["concurrency"] for r in rows)
    table = "\n".join(f"| {m} | " + " | ".join(first(m, t) for t in taus) + " |" for m in models)
    reading = f"""Reading. Speculation loses where the verify turns compute-bound: with 16
        tokens per request the batch passes the H200's ridge (about 184 tokens per weight read
        at 790 TFLOP/s over 4.30 TB/s) at 12 requests, and from there every rejected draft
        costs compute that plain decoding would have spent on accepted tokens. On Qwen3-8B
        DFlash falls below 1x from {first("qwen3-8b", 2.0)} at tau 2 and from
        {first("qwen3-8b", 7.0)} at tau 7; at c = {cmax} even tau 7 gives
        {sp("qwen3-8b", 7.0, cmax):.2f}x, and at c = 1 tau 2 still gives
        {sp("qwen3-8b", 2.0, 1):.2f}x. The four dense targets hardly differ, because the ridge
        is a ratio of FLOPs to weight bytes that every dense layer shares; the 32B does a
        little better at low concurrency ({sp("qwen3-32b", 7.0, 1):.1f}x vs
        {sp("qwen3-8b", 7.0, 1):.1f}x at tau 7, c = 1), its 5 draft layers being a smaller
        share of 64 than of 36. The loss beyond c = 8 reported in vllm-project/vllm#42505 was
        on an MoE target (Qwen3.5-35B-A3B), which this dense model does not cover; for dense
        targets a smaller block, or a verify budget that shrinks with load
        (experiments/whatif_verify_schedule), is what moves the crossing out."""
    return f"""# Where speculation loses: speedup over (concurrency, tau, model)

    {command}

DFlash B = 16 (5 draft layers) against no speculation, simulated: roofline costs, one H200,
overlap engine, HumanEval lengths, closed loop (conf/experiment/whatif_losses.yaml); tau is
set through the preset per-position curve. losses.png: one heat map per target, the speedup
in each cell, the region below 1x hatched and outlined. Smallest concurrency at which DFlash
is slower than plain decoding:

| target | {" | ".join(f"tau {t:g}" for t in taus)} |
| --- |{" --- |" * len(taus)}
{table}

{paragraph(reading)}
"""


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--jobs", type=int, default=2)
    args = ap.parse_args()
    rows = sweep(jobs=args.jobs)
    cross = crossings(rows)
    command = "python -m experiments.whatifs.losses"
    folder = write(
        "losses", {"rows": rows, "crossings": cross}, plot(rows), readme(rows, cross, command)
    )
    print((folder / "README.md").read_text())


if __name__ == "__main__":
    main()
