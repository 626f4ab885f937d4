"""Configuration search: the objective, the method-dependent dimensions, and a tiny Optuna
search end to end (4 trials of 48 requests at 16 clients) with its report."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from simulator.methods.base import BLOCK_SIZES
from simulator.methods.dspark import VERIFY_POLICIES
from workbench.search.space import conditional_keys, conditional_space, slo_goodput

REPO = Path(__file__).resolve().parents[2]
FIXED = ("experiment=config_search", "workload.num_requests=48", "sweep.concurrency=[16]")


def _run(ttft99, tpot99, rps=3.0, slo_ttft=1.0, slo_tpot=0.02) -> dict:
    return {
        "goodput": {"requests_s": rps, "slo_ttft_s": slo_ttft, "slo_tpot_s": slo_tpot},
        "ttft_s": {"p99": ttft99},
        "tpot_s": {"p99": tpot99},
        "label": "x",
    }


@pytest.mark.parametrize(
    "ttft99,tpot99,expected",
    [
        (0.5, 0.01, 3.0),
        (1.0, 0.02, 3.0),  # within, and exactly at, both SLOs
        (1.01, 0.01, 0.0),
        (0.5, 0.021, 0.0),
        (None, 0.01, 0.0),
        (0.5, None, 0.0),
    ],
)
def test_slo_goodput_counts_a_run_only_when_both_p99s_meet_the_slos(ttft99, tpot99, expected):
    assert slo_goodput(_run(ttft99, tpot99)) == expected


class _Trial:
    """The part of optuna.trial.Trial the hook uses: params and suggest_categorical."""

    def __init__(self, **params):
        self.params = dict(params)
        self.asked: dict[str, tuple] = {}

    def suggest_categorical(self, name, choices):
        self.asked[name] = tuple(choices)
        self.params[name] = choices[0]
        return choices[0]


class _Cfg:
    class spec:  # noqa: N801 (stands for the composed config's spec node)
        method = "dflash"


@pytest.mark.parametrize(
    "params,asked",
    [
        ({"spec": "none"}, {}),
        ({"spec": "dflash"}, {"spec.block_size": BLOCK_SIZES}),
        (
            {"spec": "dspark"},
            {"spec.block_size": BLOCK_SIZES, "spec.options.verify_policy": VERIFY_POLICIES},
        ),
        ({"spec": "dspark", "spec.block_size": 8},
         {"spec.options.verify_policy": VERIFY_POLICIES}),
        ({"spec": "eagle"}, {"spec.block_size": BLOCK_SIZES}),
        ({"spec": "dflash_tree"}, {"spec.block_size": BLOCK_SIZES}),  # a preset: dflash's
        ({}, {"spec.block_size": BLOCK_SIZES}),  # spec fixed outside the search: the config's
    ],
)
def test_conditional_space_adds_only_the_dimensions_a_method_has(params, asked):
    trial = _Trial(**params)
    conditional_space(_Cfg, trial)
    assert trial.asked == asked


def test_every_searched_verify_policy_builds_its_dspark():
    from simulator.methods import make_method
    from simulator.params import SimConfig

    assert conditional_keys() == {"spec.block_size", "spec.options.verify_policy"}
    for policy in VERIFY_POLICIES:
        cfg = SimConfig.coerce({"spec": {"method": "dspark", "block_size": 8,
                                         "options": {"verify_policy": policy}}})
        assert make_method(cfg).policy == ("full" if policy == "fixed" else policy)


def _workbench(*args: str, timeout: int = 300) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "workbench", *args],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def _objective(summary: dict) -> float:
    """The test's own reading: the trial's one run, p99s against the summary's SLOs, its
    goodput in the steady window (the whole run's when the run has none)."""
    (run,) = summary["runs"]
    g, steady = run["goodput"], run["throughput"]["steady"]
    ok = run["ttft_s"]["p99"] <= g["slo_ttft_s"] and run["tpot_s"]["p99"] <= g["slo_tpot_s"]
    rate = steady["goodput_requests_s"]
    return (g["requests_s"] if rate is None else rate) if ok else 0.0


def test_a_tiny_search_reports_its_best_and_margin_over_the_defaults(tmp_path):
    pytest.importorskip(
        "hydra_plugins.hydra_optuna_sweeper",
        reason="hydra-optuna-sweeper (the test extra) is not installed",
    )
    search, default_dir = tmp_path / "search", tmp_path / "default"
    proc = _workbench("simulate", *FIXED, "hydra.sweeper.n_trials=4", f"hydra.sweep.dir={search}")
    assert proc.returncode == 0, proc.stderr[-3000:]
    proc = _workbench("simulate", *FIXED, "hydra.mode=RUN", f"hydra.run.dir={default_dir}")
    assert proc.returncode == 0, proc.stderr[-3000:]
    default_summary = json.loads((default_dir / "summary.json").read_text())
    default = _objective(default_summary)

    trials, same, configs = {}, [], {}
    for job in sorted(p for p in search.iterdir() if p.name.isdigit()):
        over = yaml.safe_load((job / ".hydra" / "overrides.yaml").read_text())
        summary = json.loads((job / "summary.json").read_text())
        spec = summary["config"]["spec"]
        keys = {o.partition("=")[0] for o in over}
        assert ("spec.block_size" in keys) == (spec["method"] != "none")
        assert ("spec.options.verify_policy" in keys) == (spec["method"] == "dspark")
        trials[job.name] = _objective(summary)
        configs[tuple(sorted(set(over) - set(FIXED)))] = trials[job.name]
        same += [job.name] if summary["config"] == default_summary["config"] else []
    assert len(trials) == 4
    optuna = yaml.safe_load((search / "optimization_results.yaml").read_text())
    assert optuna["best_value"] == pytest.approx(max(trials.values()), rel=1e-12)

    proc = _workbench("report", str(search))
    assert proc.returncode == 0, proc.stderr[-3000:]
    doc = json.loads((search / "search.json").read_text())
    assert [c["objective"] for c in doc["best"]] == sorted(configs.values(), reverse=True)
    assert {tuple(sorted(c["searched"])) for c in doc["best"]} == set(configs)
    assert doc["best"][0]["objective"] == max(trials.values())
    assert doc["fixed_overrides"] == list(FIXED)
    assert doc["default"]["objective"] == pytest.approx(default, rel=1e-12) and default > 0
    assert doc["default"]["source"] == (f"job {same[0]}" if same else "simulated by the report")
    assert doc["margin_over_default"] == pytest.approx(max(trials.values()) / default - 1)
    assert "margin over the defaults" in proc.stdout and "(4 trials)" in proc.stdout

    # With the defaults' own run among the trials, the report uses it, and the best
    # configuration can only match or beat it.
    shutil.copytree(default_dir, search / "default")
    proc = _workbench("report", str(search))
    assert proc.returncode == 0, proc.stderr[-3000:]
    doc = json.loads((search / "search.json").read_text())
    assert doc["default"]["source"] == f"job {same[0] if same else 'default'}"
    assert doc["trials"] == 5 and (search / "search.png").stat().st_size > 10_000
    assert doc["best"][0]["objective"] >= doc["default"]["objective"] == default
