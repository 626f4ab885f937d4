"""The report of a finished configuration search (`python -m workbench report` calls it).

A search is an Optuna multirun of `simulate` jobs (conf/experiment/config_search.yaml). Its
report ranks the distinct configurations the trials ran by their objective
(workbench/search/space.py), gives the best of each method, and the margin of the best over the
defaults: the configuration the trials' fixed overrides compose with every searched key at
its default (a trial's result when one trial ran it, else simulated here), written as
search.json and search.png beside the multirun's report.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import yaml
from hydra import compose, initialize_config_dir
from hydra.core.override_parser.overrides_parser import OverridesParser
from omegaconf import OmegaConf
from rich.table import Table

from common.paths import conf_dir
from simulator.params import SpecParams
from workbench.atomic import atomic_path
from workbench.config import load, register_configs
from workbench.search.space import conditional_keys, job_objective, summary_objective
from workbench.simulate import explicit_points, label_of, plan_runs, run_all


def _label(config: Mapping[str, Any]) -> str:
    return label_of(SpecParams(**config["spec"]))


def searched_keys(folder: Path, jobs: Sequence[Any]) -> set[str]:
    """Override keys the search chose per trial: the sweeper's params that are sweeps (from a
    job's .hydra/hydra.yaml), the dimensions workbench.search.space.conditional_space adds, and any
    key whose value differs between trials (a sweep given on the command line)."""
    hydra_cfg = yaml.safe_load((folder / jobs[0].name / ".hydra" / "hydra.yaml").read_text())
    params = hydra_cfg["hydra"]["sweeper"].get("params") or {}
    parser = OverridesParser.create()
    keys = {k for k, v in params.items() if parser.parse_override(f"{k}={v}").is_sweep_override()}
    values = [dict(o.lstrip("+~").partition("=")[::2] for o in j.overrides) for j in jobs]
    every = {k for v in values for k in v}
    varying = {k for k in every if len({v.get(k) for v in values}) > 1}
    return keys | varying | conditional_keys()


def default_result(fixed: Sequence[str], jobs: Sequence[Any]) -> dict[str, Any]:
    """Objective of the search's defaults: the config composed from the trials' `fixed`
    overrides alone (every searched key at its default); a job whose config equals it gives
    its result, else it is simulated here."""
    register_configs()
    with initialize_config_dir(config_dir=str(conf_dir()), version_base=None):
        cfg = compose("config", overrides=list(fixed))
    resolved = json.loads(json.dumps(OmegaConf.to_container(cfg, resolve=True)))
    for job in jobs:
        if job.summary["config"] == resolved:
            return {
                "overrides": list(fixed),
                "objective": summary_objective(job.summary),
                "source": f"job {job.name}",
            }
    app = load(cfg)
    explicit_points(app, list(fixed))
    results = run_all(plan_runs(app)[1], progress=False)
    runs = [r.summary for _, _, r in results]
    return {
        "overrides": list(fixed),
        "objective": job_objective(runs, app.spec.method),
        "source": "simulated by the report",
    }


def _configs(jobs: Sequence[Any], chosen: Sequence[list[str]]) -> list[dict[str, Any]]:
    """Distinct searched configurations (a sampler may repeat one), best first: their
    overrides, objective (req/s), method label and the jobs that ran them."""
    out: dict[tuple[str, ...], dict[str, Any]] = {}
    for job, over in zip(jobs, chosen):
        entry = out.setdefault(
            tuple(sorted(over)),
            {
                "searched": list(over),
                "objective": summary_objective(job.summary),
                "method": _label(job.summary["config"]),
                "jobs": [],
            },
        )
        entry["jobs"].append(job.name)
    return sorted(out.values(), key=lambda c: -c["objective"])


def search_report(folder: Path, jobs: Sequence[Any], top: int = 5) -> tuple[dict, Table]:
    """search.json's content and the table of the `top` best distinct configurations of an
    Optuna multirun, with the best of each method and the margin over the defaults.

    `jobs` are the folder's jobs (workbench.report.load_jobs: name, overrides, summary)."""
    if not jobs:
        raise ValueError(f"folder = {folder} holds no finished trial")
    optuna = yaml.safe_load((folder / "optimization_results.yaml").read_text())
    searched = searched_keys(folder, jobs)
    is_searched = [
        [o.lstrip("+~").partition("=")[0] in searched for o in j.overrides] for j in jobs
    ]
    chosen = [[o for o, s in zip(j.overrides, m) if s] for j, m in zip(jobs, is_searched)]
    fixed = [o for o, s in zip(jobs[0].overrides, is_searched[0]) if not s]
    configs = _configs(jobs, chosen)
    default = default_result(fixed, jobs)
    best = configs[0]["objective"]
    per_method: dict[str, dict] = {}
    for c in configs:
        per_method.setdefault(c["method"].split()[0], c)
    slo = jobs[0].summary["runs"][0]["goodput"]
    doc = {
        "objective": "slo_goodput_rps: requests/s within both SLOs when p99 TTFT and p99 "
        "TPOT meet them, else 0 (workbench/search/space.py)",
        "slo_ttft_s": slo["slo_ttft_s"],
        "slo_tpot_s": slo["slo_tpot_s"],
        "fixed_overrides": fixed,
        "trials": len(jobs),
        "distinct_configs": len(configs),
        "optuna_best_value": optuna.get("best_value"),
        "optuna_best_params": optuna.get("best_params"),
        "best": configs[:top],
        "best_per_method": per_method,
        "default": default,
        "margin_over_default": best / default["objective"] - 1
        if default["objective"] > 0
        else None,
    }
    t = Table(
        title=f"best of {len(configs)} configurations ({len(jobs)} trials): SLO goodput "
        f"(p99 TTFT <= {slo['slo_ttft_s']:g} s, p99 TPOT <= "
        f"{1e3 * slo['slo_tpot_s']:g} ms)"
    )
    for col in ("rank", "jobs", "searched overrides", "req/s", "vs default"):
        t.add_column(col, justify="left" if col == "searched overrides" else "right")
    for i, c in enumerate(configs[:top]):
        t.add_row(
            str(i + 1),
            ",".join(c["jobs"]),
            " ".join(c["searched"]),
            f"{c['objective']:.3f}",
            _ratio(c["objective"], default["objective"]),
        )
    t.add_row(
        "-",
        default["source"],
        "defaults",
        f"{default['objective']:.3f}",
        _ratio(default["objective"], default["objective"]),
    )
    return doc, t


def plot_search(jobs: Sequence[Any], default: float, path: Path) -> Path:
    """search.png: each trial's objective in trial order, coloured by method, the best so
    far as a step line and the defaults' objective as a dashed line."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    values = [summary_objective(j.summary) for j in jobs]
    methods = [_label(j.summary["config"]).split()[0] for j in jobs]
    fig, ax = plt.subplots(figsize=(7, 4))
    for m in dict.fromkeys(methods):
        idx = [i for i, n in enumerate(methods) if n == m]
        ax.plot(idx, [values[i] for i in idx], "o", label=m)
    ax.step(
        range(len(values)),
        np.maximum.accumulate(values),
        where="post",
        color="k",
        label="best so far",
    )
    ax.axhline(default, color="gray", ls="--", label="defaults")
    ax.set_xlabel("trial (job number)")
    ax.set_ylabel("SLO goodput (requests / s)")
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    with atomic_path(path) as tmp:
        fig.savefig(tmp, dpi=120)
    plt.close(fig)
    return path


def _ratio(value: float, ref: float) -> str:
    return f"{value / ref:.2f}x" if ref > 0 else "-"
