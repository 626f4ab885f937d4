"""`python -m experiments.whatifs.drafter_memory [--jobs 2]`: drafter memory against the KV
pool, and the concurrency where a deeper drafter stops paying (z-lab/dflash#11).

A DFlash drafter of L target-shaped layers costs L layers of weights and a draft KV pool of
L layers per token, both charged against the replica's KV budget (simulator/shapes.py), and
L layers of compute per round; it buys acceptance. tau(L) for L = 3, 5, 8 is Qwen3-8B's
preset at 5 layers (HumanEval 6.50, MT-Bench 4.24) scaled by the DFlash paper's Table 6
ratios (B = 16; HumanEval 4.61 / 4.94 / 5.29, MT-Bench 3.18 / 3.37 / 3.50 at 3 / 5 / 8
layers). Qwen3-8B on one H200 (141 GB) and one H100 (80 GB), overlap engine, roofline costs,
1K-token prompts and 2K-token outputs (conf/experiment/whatif_drafter_memory.yaml), closed
loop at 8..512 clients (at most c running, 2c requests, at least 64). The 8-layer drafter
also runs with its memory made free (hardware.memory_gb raised by the drafter's weights and
its draft KV at the no-drafter pool size, over mem_fraction_static), which splits what
depth costs into memory and compute. Writes results.json, drafter_memory.png and README.md
into experiments/whatif_drafter_memory/.
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
    vary,
    write,
)
from simulator.shapes import kv_budget

EXPERIMENT = "whatif_drafter_memory"
TABLE6 = {"humaneval": {3: 4.61, 5: 4.94, 8: 5.29}, "mtbench": {3: 3.18, 5: 3.37, 8: 3.50}}
PRESET_5 = {"humaneval": 6.50, "mtbench": 4.24}  # Qwen3-8B, 5 layers (simulator/presets.py)
DEPTHS = (3, 5, 8)
CONCURRENCY = (8, 16, 32, 64, 128, 256, 512)
HARDWARE = ("h200", "h100")
TTFT_SLO_S = 1.0  # mean TTFT past this: requests queue for KV room


def tau_of(dataset: str, layers: int) -> float:
    """Qwen3-8B's tau on `dataset` with a drafter of `layers` layers (Table 6 ratios)."""
    return PRESET_5[dataset] * TABLE6[dataset][layers] / TABLE6[dataset][5]


def changes_of(dataset: str, layers: int, free: bool = False, hardware: str = "h200") -> dict:
    """Config changes of one series: no speculation (layers 0), or a drafter of `layers`
    layers, its memory free when `free`."""
    if layers == 0:
        return dict(NONE)
    out = {
        "spec.draft_layers": layers,
        "spec.tau": tau_of(dataset, layers),
        "workload.dataset": dataset,
    }
    if free:
        cfg = base_config(EXPERIMENT, f"hardware={hardware}")
        b0 = kv_budget(vary(cfg, NONE))
        b = kv_budget(vary(cfg, out))
        extra = b.draft_weight_bytes + b0.capacity_tokens * b.draft_kv_bytes_per_token
        out["hardware.memory_gb"] = (
            cfg.hardware.memory_gb + extra / cfg.engine.mem_fraction_static / 1e9
        )
    return out


def budgets() -> dict[str, dict[int, dict]]:
    """The KV budget (simulator/shapes.py) of each hardware and drafter depth (0: none)."""
    out = {}
    for hw in HARDWARE:
        cfg = base_config(EXPERIMENT, f"hardware={hw}")
        out[hw] = {
            L: kv_budget(vary(cfg, changes_of("humaneval", L))).as_dict() for L in (0, *DEPTHS)
        }
    return out


def _task(args) -> dict:
    hw, dataset, layers, free, c, per_client, min_requests = args
    cfg = base_config(EXPERIMENT, f"hardware={hw}")
    changes = {**changes_of(dataset, layers, free, hw), "workload.concurrency": c}
    return {
        **point(cfg, changes, per_client=per_client, min_requests=min_requests),
        "hardware": hw,
        "dataset": dataset,
        "draft_layers": layers,
        "memory_free": free,
        "concurrency": c,
    }


def sweep(
    hardware=HARDWARE,
    datasets=tuple(TABLE6),
    depths=DEPTHS,
    concurrency=CONCURRENCY,
    *,
    free_depth: int | None = 8,
    per_client: int = 2,
    min_requests: int = 64,
    jobs: int = 2,
) -> list[dict]:
    """Rows per (hardware, dataset, depth, memory free, c); depth 0 (no speculation, run
    once per hardware under the first dataset) is every row's speedup baseline."""
    series = [(hw, ds, L, False) for hw in hardware for ds in datasets for L in depths]
    series += [
        (hw, ds, free_depth, True) for hw in hardware for ds in datasets if free_depth is not None
    ]
    series += [(hw, datasets[0], 0, False) for hw in hardware]
    tasks = [(*s, c, per_client, min_requests) for s in series for c in concurrency]
    with Pool(jobs) as pool:
        rows = pool.map(_task, tasks)
    base = {
        (r["hardware"], r["concurrency"]): r["output_tok_s"] for r in rows if r["draft_layers"] == 0
    }
    for r in rows:
        r["speedup"] = r["output_tok_s"] / base[r["hardware"], r["concurrency"]]
    return rows


def crossovers(rows: list[dict]) -> list[dict]:
    """Per hardware, dataset and pair (shallow, deep) of charged drafters: the first
    concurrency from which the deeper one's throughput stays below the shallower one's (None:
    it never does), and what its memory costs it there (free / charged - 1)."""
    tok = {
        (r["hardware"], r["dataset"], r["draft_layers"], r["memory_free"], r["concurrency"]): r[
            "output_tok_s"
        ]
        for r in rows
    }
    cs = sorted({r["concurrency"] for r in rows})
    out = []
    for hw, ds in dict.fromkeys((r["hardware"], r["dataset"]) for r in rows if r["draft_layers"]):
        depths = sorted(
            {
                r["draft_layers"]
                for r in rows
                if r["hardware"] == hw and r["dataset"] == ds and r["draft_layers"]
            }
        )
        for i, shallow in enumerate(depths):
            for deep in depths[i + 1 :]:
                ratio = [tok[hw, ds, deep, False, c] / tok[hw, ds, shallow, False, c] for c in cs]
                start = next((k for k in range(len(cs)) if max(ratio[k:]) < 1), None)
                free = [tok.get((hw, ds, deep, True, c)) for c in cs]
                out.append(
                    {
                        "hardware": hw,
                        "dataset": ds,
                        "shallow": shallow,
                        "deep": deep,
                        "deep_loses_from_c": cs[start] if start is not None else None,
                        "ratio": dict(zip(cs, ratio, strict=True)),
                        "memory_cost": {
                            c: f / tok[hw, ds, deep, False, c] - 1
                            for c, f in zip(cs, free, strict=True)
                            if f
                        },
                    }
                )
    return out


def queueing(rows: list[dict], ttft_s: float = TTFT_SLO_S) -> list[dict]:
    """Per series (hardware, dataset, depth, memory free): the first concurrency whose mean
    TTFT passes `ttft_s` (requests wait for KV room; None: never), and its mean running
    batch at the largest concurrency (the KV pool's cap)."""
    out = []
    for key in dict.fromkeys(
        (r["hardware"], r["dataset"], r["draft_layers"], r["memory_free"]) for r in rows
    ):
        pts = sorted(
            (r["concurrency"], r["ttft_s"], r["running_mean"])
            for r in rows
            if (r["hardware"], r["dataset"], r["draft_layers"], r["memory_free"]) == key
        )
        late = [c for c, t, _ in pts if t > ttft_s]
        out.append(
            dict(zip(("hardware", "dataset", "draft_layers", "memory_free"), key, strict=True))
            | {"queues_from_c": late[0] if late else None, "running_at_cmax": pts[-1][2]}
        )
    return out


def _color(layers: int, free: bool) -> str:
    """One colour per series in every panel."""
    return "C4" if free else {0: "C0", 3: "C1", 5: "C2", 8: "C3"}[layers]


def plot(rows: list[dict]):
    plt = pyplot()
    hws = list(dict.fromkeys(r["hardware"] for r in rows))
    dss = list(dict.fromkeys(r["dataset"] for r in rows if r["draft_layers"]))
    fig, axes = plt.subplots(
        len(hws), len(dss) + 2, figsize=(4.6 * (len(dss) + 2), 3.9 * len(hws) + 0.6), squeeze=False
    )
    tok = {
        (r["hardware"], r["dataset"], r["draft_layers"], r["memory_free"], r["concurrency"]): r
        for r in rows
    }
    cs = sorted({r["concurrency"] for r in rows})
    for i, hw in enumerate(hws):
        for j, ds in enumerate(dss):
            ax = axes[i, j]
            series = sorted(
                {
                    (r["draft_layers"], r["memory_free"])
                    for r in rows
                    if r["hardware"] == hw and r["dataset"] == ds and r["draft_layers"]
                }
            )
            shallow = series[0][0]
            for L, free in series:
                ratio = [
                    tok[hw, ds, L, free, c]["output_tok_s"]
                    / tok[hw, ds, shallow, False, c]["output_tok_s"]
                    for c in cs
                ]
                label = f"{L} layers (tau {tau_of(ds, L):.2f})" + (", memory free" if free else "")
                ax.plot(
                    cs,
                    ratio,
                    "--" if free else "-",
                    marker="o",
                    ms=3,
                    label=label,
                    color=_color(L, free),
                )
            ax.axhline(1.0, color="grey", lw=0.8)
            ax.set(
                xscale="log",
                xlabel="concurrency",
                title=f"{hw}, {ds}",
                ylabel=f"tokens/s over the {shallow}-layer drafter's",
            )
            ax.legend(fontsize=7)
        series = sorted(
            {
                (r["draft_layers"], r["memory_free"])
                for r in rows
                if r["hardware"] == hw and r["dataset"] == dss[0]
            }
        )
        for col, metric, name in (
            (-2, "running_mean", "mean running requests"),
            (-1, "ttft_s", "mean TTFT, s"),
        ):
            ax = axes[i, col]
            for L, free in series:
                y = [tok[hw, dss[0], L, free, c][metric] for c in cs]  # no speculation: dss[0]
                ax.plot(
                    cs,
                    y,
                    "--" if free else "-",
                    marker="o",
                    ms=3,
                    color=_color(L, free),
                    label="no speculation"
                    if L == 0
                    else f"{L} layers" + (", memory free" if free else ""),
                )
            ax.set(
                xscale="log",
                yscale="log",
                xlabel="concurrency",
                ylabel=name,
                title=f"{hw}, {dss[0]}: KV pool and queueing",
            )
            ax.legend(fontsize=7)
        axes[i, -1].axhline(TTFT_SLO_S, color="grey", lw=0.8)
    fig.suptitle(
        title(base_config(EXPERIMENT), "Drafter depth against the KV pool: DFlash B = 16")
        .replace("h200", "h200 / h100")
        .replace(", humaneval", ", HumanEval and MT-Bench tau"),
        fontsize=9,
    )
    fig.tight_layout()
    return fig


def readme(rows: list[dict], budget: dict, cross: list[dict], queue: list[dict]) -> str:
    """README.md: the setting, the KV pool per depth and the reading."""
    cmax = max(r["concurrency"] for r in rows)
    q = {(x["hardware"], x["dataset"], x["draft_layers"], x["memory_free"]): x for x in queue}
    pair = {(x["hardware"], x["dataset"]): x for x in cross if (x["shallow"], x["deep"]) == (3, 8)}
    cost = [abs(v) for x in cross for v in x["memory_cost"].values()]

    def ratios(ds):
        vals = [v for (hw, d), x in pair.items() if d == ds for v in x["ratio"].values()]
        return f"{100 * (min(vals) - 1):+.0f}..{100 * (max(vals) - 1):+.0f}%"

    def onset(hw, L, free=False):
        c = q[hw, "humaneval", L, free]["queues_from_c"]
        return f"c = {c}" if c else f"beyond c = {cmax}"

    def run(hw, L, free=False):
        return q[hw, "humaneval", L, free]["running_at_cmax"]

    pool = "\n".join(
        f"| {hw} | "
        + " / ".join(f"{budget[hw][L]['capacity_tokens']:,}" for L in (0, *DEPTHS))
        + f" | {run(hw, 0):.0f} / {run(hw, 3):.0f} / {run(hw, 8):.0f} / {run(hw, 8, True):.0f} |"
        for hw in budget
    )
    b8 = budget["h200"][8]
    reading = f"""Reading. An 8-layer drafter of Qwen3-8B's shape holds
        {b8["draft_weights_gb"]:.1f} GB of weights and {b8["draft_kv_bytes_per_token"] / 1e3:.1f}
        KB of draft KV per token (the target holds {b8["target_kv_bytes_per_token"] / 1e3:.1f}
        KB), so it shrinks the KV pool by
        {100 * (1 - b8["capacity_tokens"] / budget["h200"][0]["capacity_tokens"]):.0f}% on an
        H200 and {
        100
        * (
            1 - budget["h100"][8]["capacity_tokens"] / budget["h100"][0]["capacity_tokens"]
        ):.0f}% on an H100, and the
        running batch the pool admits falls with it. That is where a deeper drafter stops
        paying: requests start waiting for KV room (mean TTFT past {TTFT_SLO_S:g} s) from
        {onset("h100", 8)} on the H100 with 8 layers, against {onset("h100", 3)} with 3
        layers and {onset("h100", 8, True)} with the drafter's memory free (H200:
        {onset("h200", 8)}, {onset("h200", 3)}, {onset("h200", 8, True)}). Throughput does not
        show it: at these batches the B = 16 verify is compute-bound, so fewer running
        requests finish as many tokens per second, and the drafter's memory moves throughput
        by at most {100 * max(cost):.1f}%. What depth does to throughput is acceptance
        against compute: on HumanEval the 8-layer drafter's tau gain over 3 layers (Table 6:
        {100 * (TABLE6["humaneval"][8] / TABLE6["humaneval"][3] - 1):.0f}%) beats its extra
        compute ({ratios("humaneval")} tokens/s over all concurrencies), on MT-Bench
        ({100 * (TABLE6["mtbench"][8] / TABLE6["mtbench"][3] - 1):.0f}%) it does not
        ({ratios("mtbench")})."""
    return f"""# Drafter memory: where a deeper drafter stops paying

    python -m experiments.whatifs.drafter_memory

DFlash B = 16 drafters of 3, 5 and 8 Qwen3-8B-shaped layers (tau from the DFlash paper's
Table 6 ratios), 1K-token prompts and 2K-token outputs, overlap engine, roofline costs,
closed loop (conf/experiment/whatif_drafter_memory.yaml), on an H200 and an H100. The
8-layer drafter also runs with its memory made free (hardware.memory_gb raised by its
weights and draft KV). drafter_memory.png: tokens/s over the 3-layer drafter's (HumanEval,
MT-Bench), mean running requests and mean TTFT against concurrency.

| GPU | KV pool, tokens: none / 3 / 5 / 8 layers | running at c = {cmax}: none / 3 / 8 / 8 free |
| --- | --- | --- |
{pool}

{paragraph(reading)}
"""


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--jobs", type=int, default=2)
    args = ap.parse_args()
    budget = budgets()
    rows = sweep(jobs=args.jobs)
    cross, queue = crossovers(rows), queueing(rows)
    write(
        "drafter_memory",
        {
            "tau": {ds: {L: tau_of(ds, L) for L in DEPTHS} for ds in TABLE6},
            "kv_budget": budget,
            "rows": rows,
            "crossovers": cross,
            "queueing": queue,
        },
        plot(rows),
        readme(rows, budget, cross, queue),
    )
    for q in queue:
        print(q)
    for hw, b in budget.items():
        print(hw, {L: x["capacity_tokens"] for L, x in b.items()})
    for x in cross:
        print(
            x["hardware"],
            x["dataset"],
            x["shallow"],
            x["deep"],
            x["deep_loses_from_c"],
            {c: round(v, 3) for c, v in x["ratio"].items()},
            {c: round(v, 3) for c, v in x["memory_cost"].items()},
        )


if __name__ == "__main__":
    main()
