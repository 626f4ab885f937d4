"""The simulator configuration of a published cell: its model, hardware and engine profile
from conf/, its drafter and tau, its dataset's lengths, a closed loop at its concurrency (the
dataset's sample count of requests, at least 8 per client: the tables' harnesses do not say
how many they sent, and a simulated tail of draining clients must not dominate a c = 32
cell).

A profile's kernel factors are fitted per engine family and hardware (`FAMILY`: SGLang's
Spec V1 and V2 profiles are one engine whose speculative rounds are scheduled differently,
so they share one fit); `values` overrides the profile file's fitted fields (and, where the
fit chose it, the scheduling mode) with a fit's.
"""

from __future__ import annotations

import copy
import functools

import yaml

from experiments.published.cells import Cell, Published
from experiments.spec_v2 import REPO

FAMILY = {"sglang_v1": "sglang", "sglang_v2": "sglang", "vllm": "vllm"}
SEED = 0
MIN_REQUESTS_PER_CLIENT = 8  # a short tail of draining clients, as the main job's sweep


@functools.cache
def _conf(group: str, name: str) -> dict:
    cfg = yaml.safe_load((REPO / "conf" / group / f"{name}.yaml").read_text())
    cfg.pop("defaults", None)
    return cfg


def conf(group: str, name: str) -> dict:
    """conf/<group>/<name>.yaml without its Hydra defaults list (a fresh copy)."""
    return copy.deepcopy(_conf(group, name))


def spec_config(pub: Published, cell: Cell) -> dict:
    """The cell's method: plain decoding, or its drafter with the table's tau."""
    if cell.baseline:
        return {"method": "none", "block_size": 1, "draft_layers": 0}
    spec = dict(pub.specs[cell.spec])
    return {
        **spec,
        "acceptance": "preset",
        "tau": cell.tau,
        "trained_block_size": spec["block_size"],
    }


def sim_config(pub: Published, cell: Cell, values: dict[str, float]) -> dict:
    """The `simulator.run` config of `cell` under its engine profile with `values` set."""
    d = pub.datasets[cell.dataset]
    engine = {**conf("engine", cell.engine), **values}
    workload = {
        "dataset": d["workload"],
        "arrival": "closed_loop",
        "concurrency": cell.concurrency,
        "num_requests": max(d["num_requests"], MIN_REQUESTS_PER_CLIENT * cell.concurrency),
        "prompt_tokens_mean": d["prompt_tokens_mean"],
        "output_tokens_mean": d["output_tokens_mean"],
        "max_new_tokens": 2048,
    }
    return {
        "model": conf("model", cell.model),
        "hardware": conf("hardware", cell.hardware),
        "engine": engine,
        "spec": spec_config(pub, cell),
        "workload": workload,
        "seed": SEED,
    }


def simulate(pub: Published, cells: list[Cell], values: dict[str, dict]) -> list[float]:
    """Simulated output tokens/s of every cell; `values[family]` holds its fitted fields."""
    import simulator

    return [
        simulator.run(sim_config(pub, c, values[FAMILY[c.engine]])).summary["throughput"][
            "output_tok_s"
        ]
        for c in cells
    ]
