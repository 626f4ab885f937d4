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
(experiments/whatifs/drafter_memory_report.py) into experiments/whatif_drafter_memory/.
"""

from __future__ import annotations

import argparse
from multiprocessing import Pool

from experiments.whatifs.base import NONE, base_config, point, vary, write
from experiments.whatifs.drafter_memory_report import plot, readme
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
        "tau_set": tau_of(dataset, layers) if layers else 1.0,
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
        plot(rows, base_config(EXPERIMENT), TTFT_SLO_S),
        readme(rows, budget, cross, queue, TTFT_SLO_S),
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
