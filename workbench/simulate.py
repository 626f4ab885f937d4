"""`python -m workbench simulate [overrides]`: the serving simulator's command (a Hydra app).

With no overrides it runs the main job: Qwen3-8B on one H200, DFlash B = 16 against no
speculation, HumanEval, closed loop at concurrency 1, 2, 4, ..., 64, on the workbench's own
engine profile priced by its measured calibration tables (`engine.cost_model = auto`: the
tables where conf/calibration/<hardware>/<model>.json measures the method, the roofline
otherwise, decided once for the whole job so the baseline is priced like the method). It
prints a table whose title names the model, hardware, engine profile and cost model, and
whose caption says where the costs come from, and writes, under the Hydra run folder
(outputs/simulate/<date>/<time>/, a fresh one per run: workbench/rundir.py): summary.json
(`status`, `runs_planned`, `cost_model`, `engine_profile`, `cost_source`, then every run's
summary, stamped with the package version and commit), requests.csv (one row per request),
the PNG plots and config_resolved.yaml (.hydra/ holds Hydra's own copies). The files are
written atomically after every finished run (status "interrupted" until the last), so
Ctrl-C keeps the finished runs and prints, in one line, the override that runs the rest.
`--help` lists the groups' options and every config field with its value (overrides
applied), accepted range and description (workbench/help.py).

Examples:
    python -m workbench simulate spec=eagle engine=sync
    python -m workbench simulate hardware=b200 engine=sglang_v2   # a fitted engine profile
    python -m workbench simulate workload.concurrency=4     # that point only, not the sweep
    python -m workbench simulate workload=poisson 'sweep.rate_rps=[5,10,20]'
    python -m workbench simulate experiment=cluster_hour
    python -m workbench simulate --multirun hydra/launcher=joblib spec.block_size=4,8,16

A multirun runs one job per combination (in parallel with the joblib launcher; on a cluster
with hydra-submitit-launcher or hydra-ray-launcher, see conf/README.md). The job returns its
objective for Hydra's sweepers, the SLO goodput of its method (workbench/search/space.py;
conf/experiment/config_search.yaml searches configurations with the Optuna sweeper).
"""

from __future__ import annotations

import copy
import dataclasses
import os
import sys
from collections.abc import Callable
from pathlib import Path

import hydra
from hydra.core.hydra_config import HydraConfig
from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.errors import HydraException
from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException
from rich.console import Console
from rich.progress import Progress
from rich.table import Table

import simulator
from common.methods import BASELINE
from common.paths import conf_dir
from simulator.engine_profiles import auto_table, cost_model_name
from simulator.methods import METHODS
from simulator.params import ConfigError, SimConfig, SpecParams
from simulator.steady import throughput_for
from workbench.atomic import write_text
from workbench.config import SimulateConfig, error_line, load, register_configs
from workbench.help import simulate_fields  # noqa: F401  (registers --help's resolver)
from workbench.results import setup_title, write_json, write_requests_csv
from workbench.rundir import unique_dir  # noqa: F401  (registers conf/config.yaml's resolver)
from workbench.search.space import job_objective

Runs = list[tuple[str, float | None, simulator.SimResult]]


def label_of(spec: SpecParams) -> str:
    """The run's name: its method's label ("dflash B=16", "none")."""
    return METHODS[spec.method].label(spec)


def resolve_costs(base: SimConfig) -> SimConfig:
    """`engine.cost_model = auto` decided once for the job, from its method: every run,
    the baseline included, is then priced by the same cost model."""
    e = base.engine
    if e.cost_model != "auto":
        return base
    name = cost_model_name(base)
    table = auto_table(base) if name == "calibrated" else e.calibration
    return dataclasses.replace(base, engine=dataclasses.replace(e, cost_model=name,
                                                                calibration=table))


def plan_runs(app: SimulateConfig) -> tuple[str, list[tuple[str, float | None, SimConfig]]]:
    """The (label, point, config) of every simulation of the job, and the point's name."""
    base = resolve_costs(SimConfig(**{f.name: copy.deepcopy(getattr(app, f.name))
                                      for f in dataclasses.fields(SimConfig)}))
    specs = [base.spec]
    if app.sweep.baseline and base.spec.method != BASELINE:
        specs.append(SpecParams(method=BASELINE, block_size=1, draft_layers=0))
    closed = base.workload.arrival == "closed_loop"
    values = app.sweep.concurrency if closed else app.sweep.rate_rps
    name = "concurrency" if closed else "rate_rps"
    points = list(values) if values else [None]
    runs = []
    for spec in specs:
        for point in points:
            cfg = dataclasses.replace(base, spec=spec, workload=copy.deepcopy(base.workload))
            if point is not None and closed:
                cfg.workload.concurrency = int(point)
                cfg.workload.num_requests = max(cfg.workload.num_requests,
                                                app.sweep.min_requests_per_client * int(point))
            elif point is not None:
                cfg.workload.rate_rps = float(point)
            runs.append((label_of(spec), point, cfg))
    return name, runs


def explicit_points(app: SimulateConfig, overrides: list[str]) -> None:
    """A command-line `workload.concurrency=C` (or `workload.rate_rps=R`) is the one point
    to simulate: it replaces the sweep's list, which would otherwise override it. The keys
    come from Hydra's own override parser, the values from the composed config."""
    keys = {o.key_or_group for o in OverridesParser.create().parse_overrides(overrides)}
    if "workload.concurrency" in keys:
        app.sweep.concurrency = [app.workload.concurrency]
    if "workload.rate_rps" in keys:
        app.sweep.rate_rps = [app.workload.rate_rps]


def run_all(runs: list[tuple[str, float | None, SimConfig]], progress: bool,
            save: Callable[[Runs], object] | None = None) -> Runs:
    """Simulate every planned run, with a rich progress bar on stderr (when a terminal),
    calling `save(finished runs)` after each; returns the finished runs (after Ctrl-C, which
    ends the loop at the run in progress, fewer than planned)."""
    out, console = [], Console(stderr=True)
    with Progress(console=console, transient=True,
                  disable=not (progress and console.is_terminal)) as bar:
        task = bar.add_task("simulating", total=len(runs))
        for label, point, cfg in runs:
            bar.update(task, description=f"{label} @ {point}")
            try:
                out.append((label, point, simulator.run(cfg)))
                if save is not None:
                    save(out)
            except KeyboardInterrupt:
                return out
            bar.advance(task)
    return out


def _ms(x: float | None) -> str:
    return "-" if x is None else f"{1e3 * x:.1f}"


def cost_keys(results: Runs) -> dict[str, str]:
    """`cost_model`, `engine_profile` and `cost_source` of the job's runs (joined with " | "
    where runs differ)."""
    keys = ("cost_model", "engine_profile", "cost_source")
    return {k: " | ".join(dict.fromkeys(str(r.summary[k]) for _, _, r in results))
            for k in keys}


def table(results: Runs, point_name: str) -> Table:
    """The terminal summary: one row per run, tok/s as the benchmark figure and in steady
    state (simulator/steady.py; "-" for a run too short for a window), the speedup against
    the baseline at that point on steady state (the benchmark figure where a run has no
    window); tau twice, each labelled: pooled per round (the glossary's tau: committed tokens over
    decode rounds, all requests together) and the per-request mean (each request's tau,
    averaged; the acceptance preset's target, so it reads as the published value). The
    title names the model, hardware, engine profile and cost model; the caption where the
    costs come from."""
    base = {p: r for _, p, r in results if r.summary["method"] == BASELINE}
    keys = cost_keys(results)
    t = Table(title=f"simulated serving: {setup_title(results[0][2].summary)}",
              caption=f"cost source: {keys['cost_source']}; tau pooled: per round over all "
                      "requests (SGLang's and vLLM's acceptance length); tau per-req: "
                      "per-request mean; total tok/s: prompt + output")
    for col in ("c" if point_name == "concurrency" else "req/s", "method", "tok/s",
                "steady\ntok/s", "vs\nnone", "total\ntok/s", "tau\npooled\n(acc len)",
                "tau\nper-req", "TTFT50\nms", "TPOT50\nms",
                "ITL99\nms", "E2E99\ns", "good-\nput", "GPU", "pre-\nempt"):
        t.add_column(col, justify="right", no_wrap=True)
    for label, point, r in results:
        s = r.summary
        tok = s["throughput"]["output_tok_s"]
        steady, basis = throughput_for(s)
        ref = base.get(point)
        speed = f"{steady / throughput_for(ref.summary)[0]:.2f}x" if ref else "-"
        e2e = s["e2e_s"]["p99"]
        tau = s["speculation"]
        t.add_row("-" if point is None else f"{point:g}", label, f"{tok:,.0f}",
                  f"{steady:,.0f}" if basis == "steady" else "-", speed,
                  f"{s['throughput']['total_tok_s']:,.0f}", f"{tau['tau'] or 1:.2f}",
                  f"{tau['tau_per_request'] or 1:.2f}",
                  _ms(s["ttft_s"]["p50"]),
                  _ms(s["tpot_s"]["p50"]), _ms(s["itl_s"]["p99"]),
                  "-" if e2e is None else f"{e2e:.2f}",
                  f"{100 * s['goodput']['fraction']:.0f}%",
                  f"{100 * s['engine']['gpu_busy_frac']:.0f}%", str(s["preemptions"]))
    return t


def write_outputs(app: SimulateConfig, cfg: DictConfig, results: Runs, point_name: str,
                  out: Path, planned: int | None = None, plots: bool = True) -> list[Path]:
    """summary.json, requests.csv, config_resolved.yaml and (with `plots`) the plots, under
    `out`, each written atomically. summary.json's `status` is "complete" when `results`
    holds all `planned` runs (all, when None), else "interrupted", with `runs_planned`."""
    out.mkdir(parents=True, exist_ok=True)
    resolved = OmegaConf.to_container(cfg, resolve=True)
    write_text(out / "config_resolved.yaml", OmegaConf.to_yaml(resolved))
    runs = [{"label": label, point_name: point, **r.summary} for label, point, r in results]
    planned = len(results) if planned is None else planned
    status = "complete" if len(results) == planned else "interrupted"
    paths = [write_json(out / "summary.json",
                        {"status": status, "runs_planned": planned, **cost_keys(results),
                         "config": resolved, "runs": runs})]
    if app.output.requests_csv:
        rows = [({"label": label, point_name: point}, r.requests) for label, point, r in results]
        paths.append(write_requests_csv(out / "requests.csv", rows))
    if app.output.plots and plots:
        from workbench.plots import plot_runs

        paths += plot_runs(results, out, point_name)
    return paths


def remaining(runs: list[tuple[str, float | None, SimConfig]], done: Runs,
              point_name: str) -> str:
    """The override that runs the points not finished (every method at each); "" when the
    job has no sweep list (then the same command reruns it)."""
    left = sorted({p for _, p, _ in runs[len(done):] if p is not None})
    if not left:
        return ""
    key = "sweep.concurrency" if point_name == "concurrency" else "sweep.rate_rps"
    return f"'{key}=[{','.join(f'{p:g}' for p in left)}]'"


@hydra.main(version_base=None, config_path=str(conf_dir()), config_name="config")
def _app(cfg: DictConfig) -> float:
    out = Path(HydraConfig.get().runtime.output_dir)
    try:
        app = load(cfg)
        explicit_points(app, list(HydraConfig.get().overrides.task))
        point_name, runs = plan_runs(app)
        bound_requests(runs, app)

        def save(done: Runs) -> None:
            write_outputs(app, cfg, done, point_name, out, len(runs), plots=False)

        results = run_all(runs, app.output.progress, save)
    except ConfigError as e:
        print(f"config error: {e}", file=sys.stderr)
        raise SystemExit(2) from None
    except FileNotFoundError as e:
        print(f"config error: no such file: {e.filename}", file=sys.stderr)
        raise SystemExit(2) from None
    if len(results) < len(runs):
        save(results)  # the run finished as Ctrl-C came, when it cut its save short
        rerun = " ".join([_prog(), "simulate", *HydraConfig.get().overrides.task,
                          remaining(runs, results, point_name)]).rstrip()
        print(f"interrupted: kept {len(results)} of {len(runs)} runs in {out} "
              f"(summary.json status = interrupted); to run the rest: {rerun}",
              file=sys.stderr)
        raise SystemExit(130)
    console = Console()
    if not console.is_terminal:
        console = Console(width=max(console.width, 132))
    console.print(table(results, point_name))
    kv = results[0][2].summary["kv"]
    console.print(f"KV pool: {kv['capacity_tokens']:,} tokens per replica "
                  f"({kv['usable_gb']:.1f} GB usable, weights {kv['target_weights_gb']:.1f} + "
                  f"{kv['draft_weights_gb']:.1f} GB); max running by KV: "
                  f"{kv['max_running_by_kv']}")
    write_outputs(app, cfg, results, point_name, out)
    console.print(f"results: {out}")
    return job_objective([r.summary for _, _, r in results], app.spec.method)


def _prog() -> str:
    return sys.argv[0].removesuffix(" simulate") if sys.argv else "workbench"


MAX_REQUESTS = 200_000  # per simulated run: a second or so of simulation per thousand


def bound_requests(runs: list[tuple[str, float | None, SimConfig]],
                   app: SimulateConfig) -> None:
    """ConfigError when a run would simulate more than MAX_REQUESTS requests (a closed loop
    sends at least sweep.min_requests_per_client per client)."""
    for _, point, cfg in runs:
        n = cfg.workload.num_requests
        if n > MAX_REQUESTS:
            raise ConfigError(
                f"the run at {point} would simulate {n:,} requests (workload.num_requests = "
                f"{app.workload.num_requests}, at least sweep.min_requests_per_client = "
                f"{app.sweep.min_requests_per_client} per client at concurrency "
                f"{cfg.workload.concurrency}), above {MAX_REQUESTS:,}: lower the "
                "concurrency or sweep.min_requests_per_client")


def main() -> int:
    """Entry point used by `python -m workbench simulate` (sys.argv holds the overrides).

    A config that Hydra cannot compose (unknown group option or key, wrong type, missing
    launcher plugin) ends as one line on stderr and exit status 2, like the range checks;
    HYDRA_FULL_ERROR=1 in the environment keeps Hydra's full report instead."""
    register_configs()
    previous = os.environ.get("HYDRA_FULL_ERROR")
    os.environ["HYDRA_FULL_ERROR"] = "1"  # Hydra raises compose errors instead of printing
    try:
        _app()
    except KeyboardInterrupt:
        print("interrupted before any run finished: nothing was written", file=sys.stderr)
        return 130
    except (HydraException, OmegaConfBaseException) as e:
        if previous == "1":
            raise
        print(f"config error: {error_line(e)}", file=sys.stderr)
        return 2
    finally:
        os.environ.pop("HYDRA_FULL_ERROR")
        if previous is not None:
            os.environ["HYDRA_FULL_ERROR"] = previous
    return 0
