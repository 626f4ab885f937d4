"""The `python -m workbench simulate` app: the main job, outputs, errors, multirun."""

from __future__ import annotations

import csv
import json
import subprocess
import sys
from pathlib import Path

import pytest

from workbench.config import SimulateConfig
from workbench.simulate import explicit_points, plan_runs

REPO = Path(__file__).resolve().parents[2]


def _simulate(*args: str, timeout: int = 120) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "workbench", "simulate", *args], cwd=REPO,
                          capture_output=True, text=True, timeout=timeout)


def test_plan_of_the_main_job():
    name, runs = plan_runs(SimulateConfig())
    assert name == "concurrency" and len(runs) == 14
    labels = {label for label, _, _ in runs}
    assert labels == {"dflash B=16", "none"}
    c64 = [cfg for label, point, cfg in runs if point == 64 and label == "none"][0]
    assert c64.workload.concurrency == 64 and c64.workload.num_requests == 512
    assert c64.spec.method == "none" and c64.spec.block_size == 1


def test_open_loop_sweeps_rates():
    app = SimulateConfig()
    app.workload.arrival = "poisson"
    app.sweep.rate_rps = [1.0, 2.0]
    app.sweep.baseline = False
    name, runs = plan_runs(app)
    assert name == "rate_rps" and [cfg.workload.rate_rps for _, _, cfg in runs] == [1.0, 2.0]


def test_main_job_prints_the_table_and_writes_results(tmp_path):
    out = tmp_path / "run"
    proc = _simulate(f"hydra.run.dir={out}")
    assert proc.returncode == 0, proc.stderr
    assert "dflash B=16" in proc.stdout and "pooled" in proc.stdout and "per-req" in proc.stdout
    summary = json.loads((out / "summary.json").read_text())
    assert summary["meta"]["git_sha"] and summary["meta"]["versions"]["simpy"]
    runs = summary["runs"]
    assert len(runs) == 14 and {r["concurrency"] for r in runs} == {1, 2, 4, 8, 16, 32, 64}
    dflash_c1 = next(r for r in runs if r["label"] == "dflash B=16" and r["concurrency"] == 1)
    none_c1 = next(r for r in runs if r["label"] == "none" and r["concurrency"] == 1)
    assert dflash_c1["throughput"]["output_tok_s"] > 3 * none_c1["throughput"]["output_tok_s"]
    for name in ("throughput.png", "latency.png", "commit_hist.png", "timeline.png",
                 "config_resolved.yaml", "requests.csv"):
        assert (out / name).stat().st_size > 0, name
    with (out / "requests.csv").open() as f:
        rows = list(csv.DictReader(f))
    assert len(rows) == sum(r["requests"]["total"] for r in runs)
    assert {"label", "concurrency", "ttft_s", "tpot_s", "e2e_s", "tau"} <= set(rows[0])


def test_bad_value_exits_before_running(tmp_path):
    proc = _simulate("engine.max_running_requests=0", f"hydra.run.dir={tmp_path}")
    assert proc.returncode == 2
    assert "engine.max_running_requests = 0 is outside [1, " in proc.stderr
    assert not (tmp_path / "summary.json").exists()


def test_an_explicit_concurrency_or_rate_is_the_only_point():
    app = SimulateConfig()  # as composed from these overrides: the values are in the config
    app.workload.concurrency = 4
    explicit_points(app, ["spec=dflash", "workload.concurrency=4"])
    _, runs = plan_runs(app)
    assert sorted({point for _, point, _ in runs}) == [4]
    assert {cfg.workload.concurrency for _, _, cfg in runs} == {4}
    app = SimulateConfig()
    app.workload.arrival = "poisson"
    app.workload.rate_rps = 2.5
    explicit_points(app, ["workload.rate_rps=2.5"])
    assert [cfg.workload.rate_rps for _, _, cfg in plan_runs(app)[1]] == [2.5, 2.5]


@pytest.mark.parametrize("args,message", [
    (("spec.tau=100",), "config error: spec.tau = 100.0 must lie in (1, 16) at B = 16"),
    (("workload.arrival=trace", "workload.trace_path=missing.csv"),
     "config error: no such file: missing.csv"),
    (("hardware.memory_gb=10",), "config error: model.qwen3-8b (+ drafter) does not fit: "
     "18.5 GB of weights vs 8.5 GB = hardware.memory_gb * engine.mem_fraction_static"),
    (("spec=nosuch",), "config error: In 'config': Could not find 'spec/nosuch' (options: "
     "dflash, dflash_tree, dspark, eagle, eagle_tree, isd, linearspec, none, prompt_lookup)"),
    (("spec.foo=1",), "config error: Could not override 'spec.foo'. To append to your config "
     "use +spec.foo=1: Key 'foo' not in 'SpecParams'"),
    (("+spec.options.foo=1",), "config error: spec.options.foo is not an option of "
     "spec.method = dflash (its options: target_features, tree_budget, tree_top_k, "
     "tree_policy, tree_budgets)"),
    (("spec=dspark", "spec.options.verify_policy=bogus"), "config error: "
     "spec.options.verify_policy = 'bogus' is not one of ['fixed', 'lossless', 'static', "
     "'production']"),
    (("workload.concurrency=abc",), "config error: Error merging override "
     "workload.concurrency=abc: Value 'abc' of type 'str' could not be converted to Integer"),
])
def test_config_errors_are_one_line_with_status_2(tmp_path, args, message):
    proc = _simulate(*args, f"hydra.run.dir={tmp_path}")
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines() == [message]
    assert not (tmp_path / "summary.json").exists()


def test_a_missing_launcher_plugin_names_its_install_command(tmp_path):
    """experiment=methods without the `sweep` extra: Hydra's plugin scan is made to skip
    the joblib launcher, as if hydra-joblib-launcher were not installed."""
    code = ("import pkgutil, sys\n"
            "walk = pkgutil.walk_packages\n"
            "pkgutil.walk_packages = lambda *a, **k: (m for m in walk(*a, **k)\n"
            "                                         if 'joblib' not in m.name)\n"
            "from workbench.__main__ import main\n"
            "raise SystemExit(main(['simulate', 'experiment=methods',"
            f" 'hydra.sweep.dir={tmp_path}']))\n")
    proc = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("config error: ")
    assert "Could not find 'hydra/launcher/joblib'" in lines[0]
    assert lines[0].endswith("the joblib launcher is not installed: "
                             "pip install 'dflash-workbench[sweep]'")


def test_multirun_with_the_joblib_launcher(tmp_path):
    pytest.importorskip("hydra_plugins.hydra_joblib_launcher")  # the `sweep` extra
    proc = _simulate("--multirun", "hydra/launcher=joblib", "experiment=smoke",
                     "spec.block_size=4,8", f"hydra.sweep.dir={tmp_path}")
    assert proc.returncode == 0, proc.stderr
    blocks = []
    for job in ("0", "1"):
        runs = json.loads((tmp_path / job / "summary.json").read_text())["runs"]
        blocks.append(runs[0]["block_size"])
    assert sorted(blocks) == [4, 8]
    assert "Joblib" in proc.stdout + proc.stderr


def test_the_readme_cost_model_lines_say_what_they_print():
    """README's how-to: the main job is already priced by the H200 tables (auto), so
    engine.cost_model=calibrated prints the same numbers; the roofline line does not."""
    from workbench.reproduce.sim import sweep

    small = ["workload.num_requests=8", "sweep.min_requests_per_client=0"]
    auto = sweep(small, [1, 16])
    assert sweep([*small, "engine.cost_model=calibrated"], [1, 16]) == auto
    roofline = sweep([*small, "engine.cost_model=roofline"], [1, 16])
    assert all(abs(roofline[k] / auto[k] - 1) > 0.1 for k in auto)
    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text()
    assert "simulate engine.cost_model=roofline 'sweep.concurrency=[1,16]'" in readme
    assert "`engine.cost_model=calibrated` prints the same numbers there" in readme
