"""`python -m experiments.whatifs.verify_schedule [--jobs 2]`: verify lengths by batch size
(vLLM's dynamic speculation) against DSpark's load-aware budget.

On Qwen3-8B / one H200 (overlap engine, roofline costs, HumanEval lengths, T = 1, closed
loop with at most c running), every series drafts on the same per-position curve (DSpark's
preset: tau 5.52 at B = 8, decay 0.05; conf/experiment/whatif_verify_schedule.yaml):

- "schedule": a DFlash-style drafter under the vLLM-style table [[1, 8, 7], [9, 32, 3],
  [33, 1024, 0]] (K drafts for a decode batch in each range; at K = 0 no draft runs, the
  draft KV is still materialized and the KV reservation stays 2B: vllm#49548's H4);
- "fixed B = 8": the same drafter without the table;
- "DSpark fixed": DSpark's backbone and Markov head verifying all 7 drafts;
- "DSpark budget": its production policy (budget from the confidences of 2 rounds earlier,
  top-K admission by the current ones), with uninformative confidences (each request's
  expected curve) and with per-round confidences of pooled AUC 0.80 (rho 0.74,
  conf/spec/dspark.yaml);
- "none": plain decoding.

Not modelled: the CUDA-graph mode vLLM drops to when the table is on (the issue's 14%
single-stream cost) and the count of prefills in the batch size (the issue's threshold
thrash); the simulator's decode batch counts decoding requests only.
Writes results.json, verify_schedule.png and README.md into experiments/whatif_verify_schedule/.
"""

from __future__ import annotations

import argparse
from multiprocessing import Pool

from common.batch_schedule import drafts_for, parse_schedule
from experiments.whatifs.base import (
    NONE,
    base_config,
    paragraph,
    point,
    pyplot,
    title,
    write,
)

EXPERIMENT = "whatif_verify_schedule"
CONCURRENCY = (1, 2, 4, 6, 8, 9, 10, 12, 16, 24, 32, 33, 34, 40, 48, 64, 96, 128)
DSPARK = {"spec.method": "dspark", "spec.verify_schedule": None,
          "spec.options.markov_rank": 256}
SERIES = {
    "schedule": {},
    "fixed B = 8": {"spec.verify_schedule": None},
    "DSpark fixed": {**DSPARK, "spec.options.verify_policy": "fixed"},
    "DSpark budget, uninformative": {**DSPARK, "spec.options.verify_policy": "production"},
    "DSpark budget, AUC 0.80": {
        **DSPARK,
        "spec.options.verify_policy": "production",
        "spec.options.confidence_corr": 0.74,
    },
    "none": NONE,
}


def _task(args) -> dict:
    label, c, per_client, min_requests = args
    cfg = base_config(EXPERIMENT)
    changes = {**SERIES[label], "workload.concurrency": c}
    return {
        **point(cfg, changes, per_client=per_client, min_requests=min_requests),
        "series": label,
        "concurrency": c,
    }


def sweep(
    concurrency=CONCURRENCY,
    series=tuple(SERIES),
    *,
    per_client: int = 4,
    min_requests: int = 64,
    jobs: int = 2,
) -> list[dict]:
    """One row per (series, c); speedup against "none" when it is among `series`."""
    tasks = [(s, c, per_client, min_requests) for s in series for c in concurrency]
    with Pool(jobs) as pool:
        rows = pool.map(_task, tasks)
    base = {r["concurrency"]: r["output_tok_s"] for r in rows if r["series"] == "none"}
    for r in rows:
        r["speedup"] = r["output_tok_s"] / base[r["concurrency"]] if base else None
    return rows


def cliffs(rows: list[dict], schedule) -> list[dict]:
    """Throughput of "schedule" just below and just above each threshold of its table
    (adjacent simulated concurrencies), and DSpark's budget at the same points."""
    by = {(r["series"], r["concurrency"]): r["output_tok_s"] for r in rows}
    out = []
    for lo, _, k in schedule[1:]:
        below, above = lo - 1, lo
        if ("schedule", below) in by and ("schedule", above) in by:
            out.append(
                {
                    "threshold": lo,
                    "K_below": drafts_for(schedule, below),
                    "K_above": k,
                    "tok_s_below": by["schedule", below],
                    "tok_s_above": by["schedule", above],
                    "drop": 1 - by["schedule", above] / by["schedule", below],
                    "dspark_budget_above": by.get(("DSpark budget, AUC 0.80", above)),
                }
            )
    return out


def plot(rows: list[dict], schedule):
    plt = pyplot()
    fig, axes = plt.subplots(1, 2, figsize=(12, 4.6))
    for label in dict.fromkeys(r["series"] for r in rows):
        pts = sorted(
            (r["concurrency"], r["output_tok_s"], r["verify_per_round"])
            for r in rows
            if r["series"] == label
        )
        c, tok, ver = zip(*pts, strict=True)
        style = {"lw": 2.2, "color": "k"} if label == "schedule" else {"lw": 1.2}
        axes[0].plot(c, tok, marker="o", ms=3, label=label, **style)
        axes[1].plot(c, ver, marker="o", ms=3, label=label, **style)
    for ax in axes:
        for lo, _, _ in schedule[1:]:
            ax.axvline(lo - 0.5, color="grey", ls=":", lw=1)
        ax.set(xscale="log", xlabel="concurrency (closed-loop clients)")
    axes[0].set(ylabel="output tokens/s")
    axes[1].set(ylabel="verified tokens per request per round")
    axes[0].legend(fontsize=7)
    cfg = base_config(EXPERIMENT)
    fig.suptitle(
        title(
            cfg,
            f"Verify length by batch size {[list(r) for r in schedule]} "
            "vs DSpark's load-aware budget (dotted: thresholds)",
        ),
        fontsize=9,
    )
    fig.tight_layout()
    return fig


def readme(rows: list[dict], cl: list[dict], schedule) -> str:
    """README.md: the setting, the cliffs and the reading."""
    tok = {(r["series"], r["concurrency"]): r["output_tok_s"] for r in rows}
    ver = {(r["series"], r["concurrency"]): r["verify_per_round"] for r in rows}
    cmax = max(r["concurrency"] for r in rows)
    first, last = cl[0], cl[-1]
    budget = "DSpark budget, AUC 0.80"
    above = sorted(c for s, c in tok if s == "schedule" and c >= first["threshold"])
    fixed_wins = all(tok["fixed B = 8", c] > tok["schedule", c] for c in above)
    cells = "\n".join(
        f"| {x['threshold'] - 1} -> {x['threshold']} | {x['K_below']} -> {x['K_above']} | "
        f"{x['tok_s_below']:,.0f} -> {x['tok_s_above']:,.0f} ({-100 * x['drop']:.0f}%) | "
        f"{tok[budget, x['threshold'] - 1]:,.0f} -> {tok[budget, x['threshold']]:,.0f} |"
        for x in cl
    )
    reading = f"""Reading. Each threshold of the table is a cliff in aggregate throughput: one
        more client past batch {first["threshold"] - 1} cuts K from {first["K_below"]} to
        {first["K_above"]} and throughput by {100 * first["drop"]:.0f}%, one past
        {last["threshold"] - 1} turns drafting off and costs {100 * last["drop"]:.0f}%. A
        round hardly gets cheaper when K falls, so tokens per round fall with the verify
        length. DSpark's budget, which reads the batch's steps-per-second table and the
        requests' confidences, has no cliff: its verified tokens per request slide from 8 to
        {ver[budget, cmax]:.1f} at c = {cmax}, and at c = {last["threshold"]} it serves
        {tok[budget, last["threshold"]]:,.0f} tok/s,
        {tok[budget, last["threshold"]] / tok["schedule", last["threshold"]]:.1f}x the
        schedule. {
        "A fixed B = 8 beats the schedule at every concurrency past its first "
        "threshold: in this model verifying 8 tokens per request still pays up to "
        "the largest batch here, so the table turns speculation down where it "
        "pays."
        if fixed_wins
        else ""
    } Not modelled: the piecewise CUDA graphs
        vLLM falls back to with the table on (the issue's 14% single-stream cost), and its
        count of prefills in the batch size, which flips K step to step around a threshold
        (the issue's collapse, much deeper than this cliff)."""
    return f"""# Verify lengths by batch size vs DSpark's load-aware budget

    python -m experiments.whatifs.verify_schedule

Qwen3-8B on one H200, overlap engine, roofline costs, HumanEval lengths, T = 1, closed loop
(conf/experiment/whatif_verify_schedule.yaml). Every series drafts on DSpark's per-position
curve (tau 5.52 at B = 8): a DFlash-style drafter under the vLLM-style table
{[list(r) for r in schedule]} (K drafts per request by decode batch size), the same
drafter at a fixed B = 8, DSpark verifying all 7 drafts, DSpark's load-aware budget with
uninformative and AUC 0.80 confidences, and plain decoding. verify_schedule.png: output
tokens/s and verified tokens per request per round against concurrency, thresholds dotted.

| clients | K | schedule, tok/s | DSpark budget (AUC 0.80), tok/s |
| --- | --- | --: | --: |
{cells}

{paragraph(reading)}
"""


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--jobs", type=int, default=2)
    args = ap.parse_args()
    schedule = parse_schedule(base_config(EXPERIMENT).spec.verify_schedule)
    rows = sweep(jobs=args.jobs)
    cl = cliffs(rows, schedule)
    write(
        "verify_schedule",
        {"schedule": schedule, "rows": rows, "cliffs": cl},
        plot(rows, schedule),
        readme(rows, cl, schedule),
    )
    for x in cl:
        print(x)


if __name__ == "__main__":
    main()
