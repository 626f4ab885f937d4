"""Configuration search: its objective and its method-dependent dimensions.

The search is a Hydra multirun under the Optuna sweeper (conf/experiment/config_search.yaml):
every trial is one `simulate` job, and the job's return value is its objective.

- `slo_goodput(run)`: finished requests per second that met both SLOs in the run's steady
  window (`throughput.steady.goodput_requests_s`, simulator/steady.py; the whole run's
  `goodput.requests_s` when the run is too short for a window; a request counts when its
  TTFT <= `metrics.slo_ttft_s` and its TPOT <= `metrics.slo_tpot_s`), counted only when
  the run's p99 TTFT and p99 TPOT meet the same SLOs; 0 otherwise. A run that keeps its
  p99 under the SLOs serves >= 98% of its requests within both, so the objective is then
  close to its request throughput.
- `job_objective(runs, method)`: the highest `slo_goodput` of the job's own method (the added
  `spec=none` baseline does not count), over the job's load points.
- `conditional_space(cfg, trial)`: the sweeper's `custom_search_space` hook; it adds the
  dimensions that exist for some methods only, as the trial's method declares them
  (`SpecMethod.search_space`: the block size B for every method but `none`, whose B is 1,
  and DSpark's `spec.options.verify_policy`).

workbench/search/report.py reads a finished search: its best configurations and their margin
over the defaults.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import yaml

from common.paths import conf_dir
from simulator.methods import METHODS
from simulator.steady import steady_goodput


def slo_goodput(run: Mapping[str, Any]) -> float:
    """Requests/s within both SLOs when p99 TTFT and p99 TPOT meet them, else 0 (req/s)."""
    g, ttft, tpot = run["goodput"], run["ttft_s"]["p99"], run["tpot_s"]["p99"]
    if ttft is None or tpot is None or ttft > g["slo_ttft_s"] or tpot > g["slo_tpot_s"]:
        return 0.0
    return steady_goodput(run)


def job_objective(runs: Sequence[Mapping[str, Any]], method: str) -> float:
    """The best `slo_goodput` among the runs (summaries) of spec method `method` (req/s)."""
    values = [slo_goodput(r) for r in runs if r["method"] == method]
    if not values:
        raise ValueError(f"method = {method!r} names none of the job's runs")
    return max(values)


def spec_option_method(option: str) -> str:
    """The `method` that the conf/spec/<option>.yaml option sets."""
    return yaml.safe_load((conf_dir() / "spec" / f"{option}.yaml").read_text())["method"]


def conditional_keys() -> set[str]:
    """Every key `conditional_space` may add: the registered methods' search spaces."""
    return {key for cls in METHODS.values() for key in cls.search_space()}


def conditional_space(cfg: Any, trial: Any) -> None:
    """Suggest the dimensions of the trial's method (`SpecMethod.search_space`) for an
    Optuna trial whose `spec` option is already chosen; a dimension the sweep's own params
    already set is left alone."""
    option = trial.params.get("spec")
    method = cfg.spec.method if option is None else spec_option_method(option)
    for key, values in METHODS[method].search_space().items():
        if key not in trial.params:
            trial.suggest_categorical(key, values)


def summary_objective(summary: Mapping[str, Any]) -> float:
    """`job_objective` of a job's summary.json document (its configured method's runs)."""
    return job_objective(summary["runs"], summary["config"]["spec"]["method"])
