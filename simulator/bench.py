"""Speed of the simulator: `python -m simulator.bench [--out FILE] [--repeat N]`.

Scenarios, each with its target:

- `closed_c64`: one replica (Qwen3-8B, H200, DFlash B = 16, overlap), closed loop at
  concurrency 64, 256 output tokens per request, 20,000 requests. Target: >= 10,000
  simulated requests per wall-clock second.
- `cluster_hour`: one simulated hour of Poisson arrivals (30 req/s, ~108,000 requests) on
  8 replicas behind a least-outstanding router (conf/experiment/cluster_hour.yaml).
  Target: under 60 s.
- `main_job`: the 14 simulations of `python -m workbench simulate` (simulator time only).

Prints a table, then one JSON line (also written to --out) with the git SHA, versions and
CPU count and the 1-minute load average; a progress bar (rich, on stderr, in a terminal)
counts the simulations, about 4 minutes in all at the defaults. Wall times are the best of
--repeat runs (the cluster hour runs once); other processes on the machine show in them,
less so in CPU time.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

from rich.console import Console
from rich.progress import Progress

from common.stamps import stamp
from simulator.cluster import run
from simulator.params import SimConfig, SpecParams


def closed_c64() -> SimConfig:
    cfg = SimConfig()
    w = cfg.workload
    w.concurrency, w.num_requests = 64, 20_000
    w.output_tokens_mean, w.output_tokens_cv = 256, 0.0
    return cfg


def cluster_hour(rate_rps: float = 30.0) -> SimConfig:
    cfg = SimConfig()
    cfg.workload.arrival, cfg.workload.rate_rps, cfg.workload.duration_s = "poisson", rate_rps, 3600
    cfg.cluster.replicas, cfg.cluster.router = 8, "least_outstanding"
    cfg.metrics.sample_period_s = 1.0
    return cfg


def main_job() -> list[SimConfig]:
    out = []
    for spec in (SpecParams(), SpecParams(method="none", block_size=1, draft_layers=0)):
        for c in (1, 2, 4, 8, 16, 32, 64):
            cfg = SimConfig(spec=spec)
            cfg.workload.concurrency, cfg.workload.num_requests = c, max(256, 8 * c)
            out.append(cfg)
    return out


def _time(cfgs: list[SimConfig], repeat: int, done=lambda: None) -> dict:
    """Best wall time of `repeat` runs of every config; `done()` is called after each."""
    best = None
    for _ in range(repeat):
        wall, cpu = time.perf_counter(), time.process_time()
        results = []
        for c in cfgs:
            results.append(run(c))
            done()
        wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
        if best is None or wall < best["wall_s"]:
            s = [r.summary for r in results]
            best = {"wall_s": wall, "cpu_s": cpu,
                    "requests": sum(x["requests"]["finished"] for x in s),
                    "decode_rounds": sum(x["engine"]["decode_rounds"] for x in s),
                    "simulated_s": sum(x["duration_s"] for x in s),
                    "mean_running_per_replica": s[-1]["running"]["mean"]}
    best["requests_per_s"] = best["requests"] / best["wall_s"]
    best["decode_rounds_per_s"] = best["decode_rounds"] / best["wall_s"]
    return best


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=3, help="runs per scenario (best kept)")
    ap.add_argument("--rate", type=float, default=30.0, help="cluster_hour arrivals, req/s")
    ap.add_argument("--out", type=Path, help="also write the JSON here")
    argv = sys.argv[1:] if argv is None else argv
    args = ap.parse_args(argv)
    scenarios = {"closed_c64": [closed_c64()], "cluster_hour": [cluster_hour(args.rate)],
                 "main_job": main_job()}
    repeats = {name: 1 if name == "cluster_hour" else args.repeat for name in scenarios}
    results = {}
    print(f"{'scenario':14s} {'wall s':>8s} {'cpu s':>8s} {'requests':>9s} {'req/s':>8s} "
          f"{'rounds/s':>9s}")
    console = Console(stderr=True)
    # the bar lives on stderr; rows go to stdout, through the bar's console only on a terminal
    with Progress(console=console, transient=True, disable=not console.is_terminal,
                  redirect_stdout=sys.stdout.isatty()) as bar:
        task = bar.add_task("simulations", total=sum(len(c) * repeats[n]
                                                     for n, c in scenarios.items()))
        for name, cfgs in scenarios.items():
            bar.update(task, description=name)
            r = results[name] = _time(cfgs, repeats[name], lambda: bar.advance(task))
            print(f"{name:14s} {r['wall_s']:8.2f} {r['cpu_s']:8.2f} {r['requests']:9d} "
                  f"{r['requests_per_s']:8.0f} {r['decode_rounds_per_s']:9.0f}", flush=True)
    doc = {"command": " ".join(["python -m simulator.bench", *argv]),
           "stamp": stamp(cpus=len(os.sched_getaffinity(0)), load_avg_1m=os.getloadavg()[0]),
           "results": results}
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(doc, indent=2) + "\n")
    print(json.dumps(doc))
    return doc


if __name__ == "__main__":
    main()
