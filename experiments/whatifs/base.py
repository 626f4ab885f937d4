"""Shared pieces of the what-if experiments: the composed base config, one simulated point,
plot titles that name the setting, and the output folder (results.json, plot, README.md).
"""

from __future__ import annotations

import copy
import dataclasses
import functools
import textwrap
from pathlib import Path
from typing import Any

import simulator
from simulator.params import SimConfig
from simulator.steady import throughput_for
from workbench.results import write_json

CONF = Path(__file__).resolve().parents[2] / "conf"
OUT = Path(__file__).resolve().parents[1]
NONE = {
    "spec.method": "none",
    "spec.block_size": 1,
    "spec.draft_layers": 0,
    "spec.verify_schedule": None,
    "spec.context_decay": 0.0,
}


@functools.cache
def base_config(experiment: str, *overrides: str) -> SimConfig:
    """conf/config.yaml composed with `experiment=<experiment>` and `overrides` (cached: the
    callers copy it through `vary`, never change it)."""
    from hydra import compose, initialize_config_dir

    from workbench.config import load, register_configs

    register_configs()
    with initialize_config_dir(config_dir=str(CONF), version_base=None):
        app = load(compose("config", overrides=[f"experiment={experiment}", *overrides]))
    return SimConfig(**{f.name: getattr(app, f.name) for f in dataclasses.fields(SimConfig)})


def vary(cfg: SimConfig, changes: dict[str, Any]) -> SimConfig:
    """A validated copy of `cfg` with {"section.field": value} changes applied; a method's
    option is "spec.options.<name>", and a change of `spec.method` starts from the new
    method's default options."""
    out = copy.deepcopy(cfg)
    if changes.get("spec.method", out.spec.method) != out.spec.method:
        out.spec.options = {}
    for key, value in changes.items():
        section, _, name = key.partition(".")
        if section == "spec" and name.startswith("options."):
            out.spec.options = {**out.spec.options, name.removeprefix("options."): value}
            continue
        if not hasattr(getattr(out, section), name):
            raise ValueError(f"changes: no config key {key!r}")
        setattr(getattr(out, section), name, value)
    return SimConfig.coerce(out)


def point(
    cfg: SimConfig, changes: dict[str, Any], *, per_client: int = 4, min_requests: int = 64
) -> dict[str, Any]:
    """Simulate `cfg` with `changes` (closed loop: max(min_requests, per_client * c)
    requests, at most c running) and keep the numbers the what-ifs read: throughput is the
    steady-state figure (simulator/steady.py; `throughput_basis` says when a run too short
    for a window fell back), the benchmark figure beside it."""
    c = changes.get("workload.concurrency", cfg.workload.concurrency)
    run = vary(
        cfg,
        {
            "workload.num_requests": max(min_requests, per_client * c),
            "engine.max_running_requests": c,
            **changes,
        },
    )
    s = simulator.run(run).summary
    tok_s, basis = throughput_for(s)
    return {
        "output_tok_s": tok_s,
        "output_tok_s_per_gpu": throughput_for(s, "output_tok_s_per_gpu")[0],
        "throughput_basis": basis,
        "benchmark_output_tok_s": s["throughput"]["output_tok_s"],
        "tpot_ms": 1e3 * s["tpot_s"]["mean"],
        "ttft_s": s["ttft_s"]["mean"],
        "tau": s["speculation"]["tau"],
        "verify_per_round": s["speculation"]["verified_tokens"]
        / max(sum(s["speculation"]["commit_hist"]), 1),
        "running_mean": s["running"]["mean"],
        "preemptions": s["preemptions"],
        "kv_capacity_tokens": s["kv"]["capacity_tokens"],
        "max_running_by_kv": s["kv"]["max_running_by_kv"],
        "cost_model": s["cost_model"],
    }


def title(cfg: SimConfig, what: str, cost_model: str | None = None) -> str:
    """Plot title: the question, then model, hardware, engine and cost model."""
    gpus = f" x{cfg.engine.tp_size}" if cfg.engine.tp_size > 1 else ""
    costs = cost_model or cfg.engine.cost_model
    return (
        f"{what}\n{cfg.model.name} on {cfg.hardware.name}{gpus}, {cfg.engine.mode} "
        f"engine, {costs} costs, {cfg.workload.dataset} (simulated)"
    )


def write(name: str, results: dict[str, Any], fig, readme: str, out: Path | None = None) -> Path:
    """results.json (stamped), <name>.png and README.md into `out` (default
    experiments/whatif_<name>/); returns the folder."""
    folder = out or OUT / f"whatif_{name}"
    folder.mkdir(parents=True, exist_ok=True)
    write_json(folder / "results.json", results)
    fig.savefig(folder / f"{name}.png", dpi=120)
    (folder / "README.md").write_text(readme)
    return folder


def paragraph(text: str, width: int = 92) -> str:
    """`text` with its whitespace collapsed, filled to `width` columns (README prose built
    from formatted numbers)."""
    return textwrap.fill(" ".join(text.split()), width)


def pyplot():
    """matplotlib's pyplot on the Agg backend (no display)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt
