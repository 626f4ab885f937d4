"""`python -m experiments.whatifs.tensor_parallel [--jobs 2]`: larger targets over several
GPUs with tensor parallelism, priced analytically.

Qwen3-32B and Qwen3-8B on 1, 2, 4 and 8 H200s (engine.tp_size; conf/experiment/
whatif_tensor_parallel.yaml): each GPU runs one rank's shard of every layer, weights and KV
split tp ways, and every layer adds two ring all-reduces over NVLink (0.45 TB/s each way,
10 us each: simulator/costs.py, labelled analytic, not measured). DFlash B = 16 with 5
target-shaped draft layers (Qwen3-8B's GSM8K tau 6.54 for both targets: no 32B drafter is
published) against no speculation, overlap engine, GSM8K lengths, closed loop at 1..64
clients (at most c running, 4c requests, at least 64). SGLang's first DFlash PR
(sgl-project/sglang#16818, Qwen3-8B, GSM8K, Spec V1) measured a speedup of 3.67x at TP 1 and
2.33x at TP 8, both at concurrency 1: the table in README.md sets the analytic model beside
it. Writes
results.json, tensor_parallel.png and README.md into experiments/whatif_tensor_parallel/.
"""

from __future__ import annotations

import argparse
from multiprocessing import Pool

from experiments.whatifs.base import (
    NONE,
    base_config,
    paragraph,
    point,
    pyplot,
    title,
    write,
)

EXPERIMENT = "whatif_tensor_parallel"
MODELS = ("qwen3-32b", "qwen3-8b")
TPS = (1, 2, 4, 8)
CONCURRENCY = (1, 4, 16, 64)
PUBLISHED = {1: 3.67, 8: 2.33}  # sglang#16818: Qwen3-8B DFlash speedup at c = 1 by TP


def _task(args) -> dict:
    model, tp, spec, c, per_client, min_requests = args
    cfg = base_config(EXPERIMENT, f"model={model}", f"engine.tp_size={tp}")
    changes = {"workload.concurrency": c, **({} if spec else NONE)}
    return {
        **point(cfg, changes, per_client=per_client, min_requests=min_requests),
        "model": model,
        "tp": tp,
        "method": "dflash" if spec else "none",
        "concurrency": c,
    }


def sweep(
    models=MODELS,
    tps=TPS,
    concurrency=CONCURRENCY,
    *,
    per_client: int = 4,
    min_requests: int = 64,
    jobs: int = 2,
) -> list[dict]:
    """One row per (model, tp, method, c); DFlash rows carry their speedup and TPOT ratio
    over no speculation at the same point."""
    tasks = [
        (m, tp, spec, c, per_client, min_requests)
        for m in models
        for tp in tps
        for spec in (True, False)
        for c in concurrency
    ]
    with Pool(jobs) as pool:
        rows = pool.map(_task, tasks)
    base = {(r["model"], r["tp"], r["concurrency"]): r for r in rows if r["method"] == "none"}
    for r in rows:
        b = base[r["model"], r["tp"], r["concurrency"]]
        r["speedup"] = r["output_tok_s"] / b["output_tok_s"]
        r["tpot_speedup"] = b["tpot_ms"] / r["tpot_ms"]
    return rows


def table(rows: list[dict]) -> str:
    """Markdown: per model and tp, TPOT at c = 1 (none, DFlash), the decode and throughput
    speedups there, throughput per GPU at the largest c, and the published speedups."""
    cmax = max(r["concurrency"] for r in rows)
    by = {(r["model"], r["tp"], r["method"], r["concurrency"]): r for r in rows}
    lines = [
        "| target | tp | TPOT none, c = 1 | TPOT DFlash, c = 1 | decode speedup, c = 1 "
        f"| tok/s speedup, c = 1 | tok/s per GPU, c = {cmax} (none / DFlash) "
        "| published speedup, c = 1 |",
        "| --- | --: | --: | --: | --: | --: | --: | --: |",
    ]
    for model in dict.fromkeys(r["model"] for r in rows):
        for tp in sorted({r["tp"] for r in rows if r["model"] == model}):
            n1, d1 = by[model, tp, "none", 1], by[model, tp, "dflash", 1]
            nm, dm = by[model, tp, "none", cmax], by[model, tp, "dflash", cmax]
            pub = PUBLISHED.get(tp) if model == "qwen3-8b" else None
            lines.append(
                f"| {model} | {tp} | {n1['tpot_ms']:.2f} ms | {d1['tpot_ms']:.2f} ms | "
                f"{d1['tpot_speedup']:.2f}x | {d1['speedup']:.2f}x | "
                f"{nm['output_tok_s_per_gpu']:,.0f} / "
                f"{dm['output_tok_s_per_gpu']:,.0f} | "
                f"{f'{pub:.2f}x' if pub else '-'} |"
            )
    return "\n".join(lines)


def plot(rows: list[dict]):
    plt = pyplot()
    models = list(dict.fromkeys(r["model"] for r in rows))
    fig, axes = plt.subplots(len(models), 3, figsize=(15, 3.9 * len(models) + 0.6), squeeze=False)
    for i, model in enumerate(models):
        for tp in sorted({r["tp"] for r in rows if r["model"] == model}):
            for method, style in (("dflash", "-"), ("none", ":")):
                pts = sorted(
                    (
                        r["concurrency"],
                        r["tpot_ms"],
                        r["output_tok_s_per_gpu"],
                        r.get("tpot_speedup"),
                    )
                    for r in rows
                    if r["model"] == model and r["tp"] == tp and r["method"] == method
                )
                c, tpot, per_gpu, sp = zip(*pts, strict=True)
                color = f"C{tp.bit_length() - 1}"
                axes[i, 0].plot(
                    c, tpot, style, marker="o", ms=3, color=color, label=f"tp {tp}, {method}"
                )
                axes[i, 1].plot(
                    c, per_gpu, style, marker="o", ms=3, color=color, label=f"tp {tp}, {method}"
                )
                if method == "dflash":
                    axes[i, 2].plot(c, sp, marker="o", ms=3, color=color, label=f"tp {tp}")
        axes[i, 0].set(ylabel="TPOT, ms (per-token latency)", yscale="log")
        axes[i, 1].set(ylabel="output tokens/s per GPU", yscale="log")
        axes[i, 2].set(ylabel="decode speedup (TPOT ratio)")
        for ax in axes[i]:
            ax.set(xscale="log", xlabel="concurrency", title=model)
            ax.legend(fontsize=6, ncol=2)
    fig.suptitle(
        title(
            base_config(EXPERIMENT),
            "Tensor parallelism with an analytic all-reduce (NVLink 0.45 TB/s, 10 us)",
        ).replace("qwen3-32b on h200 x2", "qwen3-32b / qwen3-8b on h200 x1-8"),
        fontsize=9,
    )
    fig.tight_layout()
    return fig


def readme(rows: list[dict], md: str) -> str:
    """README.md: the setting, the table and the reading."""
    by = {(r["model"], r["tp"], r["method"], r["concurrency"]): r for r in rows}
    cmax = max(r["concurrency"] for r in rows)
    tmax = max(r["tp"] for r in rows)

    def tpot(model, tp, method="none"):
        return by[model, tp, method, 1]["tpot_ms"]

    def sp(model, tp, c, key="speedup"):
        return by[model, tp, "dflash", c][key]

    def per_gpu(model, tp):
        return by[model, tp, "dflash", cmax]["output_tok_s_per_gpu"]

    reading = f"""Reading. Splitting Qwen3-32B over 2 H200s cuts its plain per-token latency
        from {tpot("qwen3-32b", 1):.1f} to {tpot("qwen3-32b", 2):.1f} ms
        ({tpot("qwen3-32b", 1) / tpot("qwen3-32b", 2):.2f}x, not 2x: every step adds 128
        all-reduces of 10 us plus their ring transfer) and over {tmax} to
        {tpot("qwen3-32b", tmax):.1f} ms. DFlash's speedup at c = 1 hardly moves with tp in
        this model ({sp("qwen3-32b", 1, 1, "tpot_speedup"):.2f}x to
        {sp("qwen3-32b", tmax, 1, "tpot_speedup"):.2f}x in TPOT for Qwen3-32B), since TP
        divides the target's and the drafter's weight reads alike and adds the same
        all-reduces to both. Measured speedups fall much faster: SGLang's first DFlash PR
        gave 3.67x at TP 1 and 2.33x at TP 8 for Qwen3-8B, where this model gives
        {sp("qwen3-8b", 1, 1):.2f}x and {sp("qwen3-8b", tmax, 1):.2f}x in tokens/s; what
        TP does not shrink (kernel launches and host work per round, small-GEMM efficiency
        on 1/{tmax} shards, none of which the roofline prices) carries that loss, and only
        timing tables measured under TP could price it. Per GPU, TP costs throughput
        (Qwen3-32B with DFlash at c = {cmax}: {per_gpu("qwen3-32b", 1):,.0f} tok/s per GPU
        at tp 1, {per_gpu("qwen3-32b", tmax):,.0f} at tp {tmax}), but it moves the compute
        ridge out: at c = {cmax} DFlash keeps {sp("qwen3-8b", tmax, cmax):.2f}x over plain
        decoding on {tmax} GPUs against {sp("qwen3-8b", 1, cmax):.2f}x on one (Qwen3-8B)."""
    return f"""# Tensor parallelism for larger targets (analytic all-reduce)

    python -m experiments.whatifs.tensor_parallel

Qwen3-32B and Qwen3-8B on 1-8 H200s (engine.tp_size), DFlash B = 16 against no
speculation, overlap engine, roofline costs with an analytic all-reduce (two per layer,
10 us + ring over NVLink at 0.45 TB/s each way; not measured), GSM8K lengths and tau,
closed loop (conf/experiment/whatif_tensor_parallel.yaml). tensor_parallel.png: TPOT,
tokens/s per GPU and DFlash's decode speedup against concurrency, one colour per tp.
"Published" is sgl-project/sglang#16818 (Qwen3-8B, GSM8K).

{md}

{paragraph(reading)}
"""


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--jobs", type=int, default=2)
    args = ap.parse_args()
    rows = sweep(jobs=args.jobs)
    md = table(rows)
    write(
        "tensor_parallel",
        {"rows": rows, "published_speedup_c1": PUBLISHED, "table": md},
        plot(rows),
        readme(rows, md),
    )
    print(md)


if __name__ == "__main__":
    main()
