"""Configuration search: its objective and its method-dependent dimensions.

The search is a Hydra multirun under the Optuna sweeper (conf/experiment/config_search.yaml):
every trial is one `simulate` job, and the job's return value is its objective.

- `slo_goodput(run)`: finished requests per second that met both SLOs (`goodput.requests_s`
  of simulator/metrics.py, a request counts when its TTFT <= `metrics.slo_ttft_s` and its
  TPOT <= `metrics.slo_tpot_s`), counted only when the run's p99 TTFT and p99 TPOT meet the
  same SLOs; 0 otherwise. A run that keeps its p99 under the SLOs serves >= 98% of its
  requests within both, so the objective is then close to its request throughput.
- `job_objective(runs, method)`: the highest `slo_goodput` of the job's own method (the added
  `spec=none` baseline does not count), over the job's load points.
- `conditional_space(cfg, trial)`: the sweeper's `custom_search_space` hook; it adds the
  dimensions that exist for some methods only: the block size B (every method but `none`,
  whose B is 1) and DSpark's verify policy.

workbench/search_report.py reads a finished search: its best configurations and their margin
over the defaults.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

BLOCK_SIZES = (4, 8, 16)  # B searched for every method that drafts
VERIFY_POLICIES = ("fixed", "lossless", "static", "production")  # SpecParams.verify_policy
CONDITIONAL_KEYS = ("spec.block_size", "spec.verify_policy")  # what conditional_space adds


def slo_goodput(run: Mapping[str, Any]) -> float:
    """Requests/s within both SLOs when p99 TTFT and p99 TPOT meet them, else 0 (req/s)."""
    g, ttft, tpot = run["goodput"], run["ttft_s"]["p99"], run["tpot_s"]["p99"]
    if ttft is None or tpot is None or ttft > g["slo_ttft_s"] or tpot > g["slo_tpot_s"]:
        return 0.0
    return float(g["requests_s"])


def job_objective(runs: Sequence[Mapping[str, Any]], method: str) -> float:
    """The best `slo_goodput` among the runs (summaries) of spec method `method` (req/s)."""
    values = [slo_goodput(r) for r in runs if r["method"] == method]
    if not values:
        raise ValueError(f"method = {method!r} names none of the job's runs")
    return max(values)


def conditional_space(cfg: Any, trial: Any) -> None:
    """Suggest `spec.block_size` (methods other than none) and `spec.verify_policy` (dspark)
    for an Optuna trial whose `spec` option is already chosen; a dimension the sweep's own
    params already set is left alone."""
    method = trial.params.get("spec", cfg.spec.method)
    block, policy = CONDITIONAL_KEYS
    if method != "none" and block not in trial.params:
        trial.suggest_categorical(block, BLOCK_SIZES)
    if method == "dspark" and policy not in trial.params:
        trial.suggest_categorical(policy, VERIFY_POLICIES)


def summary_objective(summary: Mapping[str, Any]) -> float:
    """`job_objective` of a job's summary.json document (its configured method's runs)."""
    return job_objective(summary["runs"], summary["config"]["spec"]["method"])
