"""`workbench calibrate-engine FILES... --name NAME`: an engine profile fitted on that
engine's own benchmark output.

Reads result files of `sglang.bench_serving` (JSONL) and `vllm bench serve --save-result`
(JSON; workbench/calibrate/engine_results.py names the fields read), replays every run in the
simulator as a closed loop at its concurrency with its request count and mean lengths (a
speculative run with its measured tau), and fits, on top of a base profile
(`--base`, conf/engine/<base>.yaml):

- on the plain runs: `layer_overhead_s` (GPU s per decoder layer per forward), and with
  runs at two or more concurrencies `request_layer_overhead_s` (GPU s per request per
  layer);
- on the speculative runs: `spec_round_s` (GPU s per speculative round), and with runs at
  two or more concurrencies `spec_request_s` (host s per request per speculative round).

The fit is bounded least squares (scipy, trust region reflective) of log(simulated /
measured) output tok/s, each parameter searched as its log between 1 ns and 0.1 s. It
prints each run's residual and each parameter's 1-sigma relative uncertainty (from the
Jacobian: cov = s^2 (J^T J)^-1 in log space, s^2 the residual variance; none when the runs
leave no degree of freedom; a parameter no run responds to, as a host term hidden under
overlap, is not identified and written as 0), and writes conf/engine/<NAME>.yaml (`--out`:
another folder) with the files it came from. The throughput compared is the benchmark
definition (output tokens over the run's duration) at the run's own request count.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np
import yaml

from common.paths import conf_dir
from workbench.calibrate.engine_results import BenchRun, ResultError, read

LO, HI = 1e-9, 0.1
START = {"layer_overhead_s": 30e-6, "request_layer_overhead_s": 0.1e-6,
         "spec_round_s": 1e-3, "spec_request_s": 10e-6}


def _conf(group: str, name: str) -> dict:
    path = conf_dir() / group / f"{name}.yaml"
    if not path.is_file():
        raise ResultError(f"{path}: no such {group} config")
    doc = yaml.safe_load(path.read_text())
    doc.pop("defaults", None)
    return doc


def free_parameters(runs: list[BenchRun]) -> list[str]:
    """The parameters the runs identify (module docstring)."""
    plain = {r.concurrency for r in runs if not r.speculative}
    spec = {r.concurrency for r in runs if r.speculative}
    if not plain:
        raise ResultError("no plain-decoding run (a run without accept_length / "
                          "spec_decode_acceptance_length): the kernel factors need one")
    names = ["layer_overhead_s"] + (["request_layer_overhead_s"] if len(plain) > 1 else [])
    if spec:
        names += ["spec_round_s"] + (["spec_request_s"] if len(spec) > 1 else [])
    return names


def sim_config(run: BenchRun, model: dict, hardware: dict, engine: dict, spec: dict,
               dataset: str) -> dict:
    """The closed-loop replay of `run` (a `simulator.run` config)."""
    if run.speculative:
        spec = {**spec, "acceptance": "preset", "tau": run.tau,
                "trained_block_size": spec["block_size"]}
    else:
        spec = {"method": "none", "block_size": 1, "draft_layers": 0}
    return {
        "model": model, "hardware": hardware,
        "engine": {**engine, "max_running_requests": max(engine.get("max_running_requests",
                                                                    64), run.concurrency)},
        "spec": spec,
        "workload": {"dataset": dataset, "arrival": "closed_loop",
                     "concurrency": run.concurrency, "num_requests": run.requests,
                     "prompt_tokens_mean": run.prompt_tokens,
                     "output_tokens_mean": run.output_tokens},
        "seed": 0,
    }


def fit(runs: list[BenchRun], model: dict, hardware: dict, base: dict, spec: dict,
        dataset: str) -> dict:
    """Fitted values, 1-sigma relative uncertainties (None without residual degrees of
    freedom), per-run residuals (simulated / measured - 1) and the final engine fields."""
    from scipy.optimize import least_squares

    import simulator

    names = free_parameters(runs)
    measured = np.log([r.output_tok_s for r in runs])

    def engine(x: np.ndarray) -> dict:
        return {**base, **dict(zip(names, map(float, np.exp(x)), strict=True))}

    def resid(x: np.ndarray) -> np.ndarray:
        e = engine(x)
        tok = [simulator.run(sim_config(r, model, hardware, e, spec, dataset))
               .summary["throughput"]["output_tok_s"] for r in runs]
        return np.log(tok) - measured

    x0 = np.log([START[n] for n in names])
    res = least_squares(resid, x0, bounds=(np.log(LO), np.log(HI)), diff_step=0.05,
                        max_nfev=60)
    dof = len(runs) - len(names)
    sigma: dict[str, float | None] = dict.fromkeys(names)
    jtj = res.jac.T @ res.jac
    if dof > 0 and np.linalg.matrix_rank(jtj) == len(names):
        cov = np.linalg.inv(jtj) * float(res.fun @ res.fun) / dof
        sigma = {n: float(np.sqrt(cov[i, i])) for i, n in enumerate(names)}
    seen = np.abs(res.jac).max(axis=0) > 1e-6
    values = {n: float(v) if ok else 0.0
              for n, v, ok in zip(names, np.exp(res.x), seen, strict=True)}
    return {"values": values, "log_sigma": sigma,
            "identified": dict(zip(names, map(bool, seen), strict=True)),
            "residuals": [float(v) for v in np.expm1(res.fun)],
            "engine": {**base, **values}}


def profile_yaml(name: str, base_name: str, files: list[str], result: dict) -> str:
    """conf/engine/<name>.yaml: the base profile's fields with the fitted ones, and where
    they come from."""
    fitted = ", ".join(result["values"])
    header = [
        f"# Engine profile fitted by `workbench calibrate-engine` on {len(files)} result "
        f"file(s) of the engine's own benchmark, on top of conf/engine/{base_name}.yaml.",
        f"# Fitted: {fitted}; the other fields are {base_name}'s.",
        *[f"# source: {Path(f).name}" for f in files],
    ]
    body = {"profile": name,
            "source": f"fitted on {', '.join(Path(f).name for f in files)} "
                      f"(workbench calibrate-engine, base {base_name})",
            **{k: v for k, v in result["engine"].items() if k not in ("profile", "source")}}
    dump = yaml.safe_dump({"defaults": ["base_engine", "_self_"], **body}, sort_keys=False)
    return "\n".join(header) + "\n" + dump


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("files", nargs="+", help="sglang.bench_serving JSONL / vllm bench JSON")
    ap.add_argument("--name", required=True, help="the profile to write: conf/engine/NAME")
    ap.add_argument("--base", default="sglang_v2", help="engine profile to start from")
    ap.add_argument("--model", default="qwen3-8b", help="conf/model/<name>")
    ap.add_argument("--hardware", default="h200", help="conf/hardware/<name>")
    ap.add_argument("--spec", default="dflash", help="conf/spec/<name>: the drafter")
    ap.add_argument("--dataset", default="humaneval", help="acceptance preset's dataset")
    ap.add_argument("--out", type=Path, default=None, help="folder (default conf/engine)")
    args = ap.parse_args(argv)
    try:
        runs = [r for f in args.files for r in read(f)]
        result = fit(runs, _conf("model", args.model), _conf("hardware", args.hardware),
                     _conf("engine", args.base), _conf("spec", args.spec), args.dataset)
    except ResultError as e:
        print(f"calibrate-engine: {e}", file=sys.stderr)
        return 2
    for r, e in zip(runs, result["residuals"], strict=True):
        kind = f"tau {r.tau:g}" if r.speculative else "plain"
        print(f"{Path(r.path).name}: c = {r.concurrency}, {kind}, measured "
              f"{r.output_tok_s:,.0f} tok/s, residual {100 * e:+.1f}%")
    for n, v in result["values"].items():
        s = result["log_sigma"][n]
        unc = "no residual degrees of freedom" if s is None else f"+-{100 * s:.0f}% (1 sigma)"
        if result["identified"][n] and not LO * 1.01 < v < HI * 0.99:
            unc = "at its bound: the runs ask for a value outside 1 ns..0.1 s"
        if not result["identified"][n]:
            unc = "not identified (no run responds to it, e.g. host time hidden by overlap): 0"
        print(f"{n} = {v:.4g} s  {unc}")
    out = (args.out or conf_dir() / "engine") / f"{args.name}.yaml"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(profile_yaml(args.name, args.base, args.files, result))
    print(out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
