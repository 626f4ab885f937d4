"""`python -m workbench calibrate model=<name>[,<name>...] hardware=h200 [--out DIR]`.

Times the reference engine's pieces on random weights of each model (workbench/calibrate/gpu.py)
over a grid (requests x tokens per request x context, memory-aware: points whose KV does not
fit are left to the gap regression), plus held-out points off the grid, then builds the
interpolating tables (simulator/calibration.py), fits the host time per round, scores every
predictor on its held-out points (workbench/calibrate/fit.py), and writes `<out>/<model>.json`
(default out: conf/calibration/<hardware>/) with the metadata the simulator checks; an
explicit `--out DIR` that already holds one of those files is refused in one line before
anything is measured (the default folder's tables are replaced: re-calibration). Each
model stops measuring at `--budget-s` (the rest is filled by regression and counted in
`skipped`; the untimed warm-up of every shape counts against it).
`model=all` is toy, qwen3-4b, qwen3-8b, llama-3.1-8b. `--quick` is a tiny grid (CPU tests).
Needs torch only (no hydra, no simpy). `--prefill-into FILE` measures only the prefill table
into FILE's calibration of the model (one whose budget ran out before it). `python -m
workbench calibrate install FILE... [--out DIR]` (CPU) re-checks tables made elsewhere
against conf/model/ and copies them into conf/calibration/ (an installed copy: into
./conf/calibration/ of the current folder; the installed package is never written).
Without a CUDA device, one line names the CPU smoke run instead.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

from common.buckets import BATCH_BUCKETS
from common.engine_options import add_arguments, from_args
from common.paths import tree_output
from common.stamps import stamp
from simulator.calibration import FORMAT, REPO_CONF
from workbench.atomic import write_text
from workbench.calibrate.fit import borrow, fit, print_report
from workbench.errors import OneLineParser, UserError, fresh_output, need_cuda, ranged

ALL = ("toy", "qwen3-4b", "qwen3-8b", "llama-3.1-8b")
FULL = dict(
    n=[1, 4, 16, 64], q=[1, 2, 4, 8, 16], kv=[128, 512, 2048, 8192, 32768],
    target_out=[(2, 1, 1024), (8, 4, 4096), (32, 16, 512), (2, 16, 256), (8, 1, 16384),
                (32, 1, 2048), (32, 8, 8192), (8, 12, 1024), (2, 3, 4096)],
    blocks=[4, 8, 16], draft_kv=[128, 2048, 8192, 32768],
    draft_out=[(2, 8, 1024), (8, 16, 4096), (32, 4, 512), (32, 16, 2048)],
    rows=[1, 4, 16, 64, 256, 1024], rows_out=[2, 8, 32, 128, 512, 768],
    tokens=[1, 4, 16, 64, 256, 1024, 4096, 32768], tokens_out=[8, 128, 512, 2048],
    prefill_q=[128, 512, 2048], prefill_out=[(2, 512), (8, 256)], prefill_max=32768,
    host_n=[1, 4, 16, 64], host_out=[2, 32], eager_n=[1, 16], prompt=256, new=48, reps=3)
QUICK = dict(
    n=[1, 2], q=[1, 4], kv=[8, 32], target_out=[(1, 2, 16)], blocks=[4], draft_kv=[8, 32],
    draft_out=[(1, 4, 16)], rows=[1, 4, 16], rows_out=[8], tokens=[1, 8, 32], tokens_out=[4],
    prefill_q=[8, 16], prefill_out=[(1, 12)], prefill_max=64, host_n=[1, 2], host_out=[],
    eager_n=[1], prompt=8, new=6, reps=2)


def _grid3(bench, name, axes, measure, held, warm=True) -> tuple[dict, list]:
    """A 3-axis table (axes[0] = requests, a row needs axes[1] + axes[2] slots) and its
    held-out points; a point whose KV does not fit, or comes after the budget, is NaN.
    warm: every (requests, axes[1]) shape run once untimed first (`Bench.warm_shapes`)."""
    a0, a1, a2 = axes.values()
    if warm:
        bench.warm_shapes(axes, measure)
    seconds = np.full((len(a0), len(a1), len(a2)), np.nan)
    for i, n in enumerate(a0):
        length = min(max(a1) + max(a2), bench.max_length(n))
        with bench.rows(n, length) as rows:
            for j, x in enumerate(a1):
                for k, y in enumerate(a2):
                    if rows is not None and x + y <= length and not bench.out_of_time(name):
                        seconds[i, j, k] = measure(rows, x, y)
    out = []
    for n, x, y in held:
        with bench.rows(n, x + y) as rows:
            if rows is not None and not bench.out_of_time(name):
                out.append({"at": [n, x, y], "s": measure(rows, x, y)})
    return {"axes": axes, "seconds": _nested(seconds)}, [p for p in out if np.isfinite(p["s"])]


def _grid1(bench, name, axis, values, measure, held) -> tuple[dict, list]:
    seconds = [measure(v) if not bench.out_of_time(name) else float("nan") for v in values]
    out = [{"at": [v], "s": measure(v)} for v in held if not bench.out_of_time(name)]
    return ({"axes": {axis: values}, "seconds": _nested(np.array(seconds))},
            [p for p in out if np.isfinite(p["s"])])


def _nested(a: np.ndarray) -> list:
    return np.where(np.isfinite(a), a, None).tolist()


def _contexts(g: dict, max_pos: int) -> tuple[list[int], list[int]]:
    """The grid's target and draft contexts that fit below the model's max position."""
    return ([v for v in g["kv"] if v + max(g["q"]) + 16 <= max_pos],
            [v for v in g["draft_kv"] if v + max(g["blocks"]) + 16 <= max_pos])


def _bench(name: str, g: dict, args):
    """(Bench, max position) of one model: its weights, drafters and KV pool."""
    from reference.loaders import preset_config
    from workbench.calibrate.gpu import Bench

    max_pos = preset_config(name).max_position
    kv, dkv = _contexts(g, max_pos)
    ctx = max(kv + dkv + [g["prompt"] + g["new"]]) + 64
    return Bench(name, device=args.device, blocks=g["blocks"], context_len=ctx,
                 max_requests=max(g["n"] + g["host_n"]), reps=g["reps"],
                 budget_s=args.budget_s, compile_layers=not args.no_compile,
                 options=args.engine_options), max_pos


def _prefill(bench, g: dict, max_pos: int) -> tuple[dict, list]:
    """The prefill table and its held-out points (eager, no compiled shapes: each point runs
    once before its timing)."""
    pq = [v for v in g["prefill_q"] if v < max_pos]
    return _grid3(
        bench, "prefill", {"n": g["n"], "q": pq, "kv": [0]},
        lambda rows, x, y: bench.prefill(rows, x, y) if len(rows) * x <= g["prefill_max"]
        else float("nan"), [(n, x, 0) for n, x in g["prefill_out"]], warm=False)


def prefill_into(base: dict, g: dict, args) -> dict:
    """`base` (a calibration of the same model whose budget ran out before its prefill) with
    the prefill table and held-out points measured now; the prefill's own stamp is kept
    under `prefill_stamp`."""
    name = base["model"]["name"]
    bench, max_pos = _bench(name, g, args)
    table, held = _prefill(bench, g, max_pos)
    print(f"  {name} prefill: {bench.elapsed_s:.1f} s", flush=True)
    doc = {**base, "tables": {**base["tables"], "prefill": table},
           "heldout": {**base["heldout"], "prefill": held},
           "skipped": {k: v for k, v in base["skipped"].items() if k != "prefill"}
           | ({"prefill": bench.skipped["prefill"]} if "prefill" in bench.skipped else {}),
           "prefill_stamp": stamp(engine_options=bench.target.options.asdict())}
    bench.close()
    return doc


def measure_model(name: str, g: dict, args) -> dict:
    """Every table, held-out point and host run of one model."""
    bench, max_pos = _bench(name, g, args)
    kv, dkv = _contexts(g, max_pos)
    q = sorted({*g["q"], bench.own_block})
    blocks = sorted(bench.drafters)
    tables, held = {}, {}

    def done(what: str) -> None:  # progress, and the graphs' memory back
        print(f"  {name} {what}: {bench.elapsed_s:.1f} s", flush=True)
        _free_device()

    done("weights, drafters and KV pool")
    tables["target"], held["target"] = _grid3(
        bench, "target", {"n": g["n"], "q": q, "kv": kv}, bench.target_forward,
        [p for p in g["target_out"] if p[2] + p[1] + 16 <= max_pos])
    done("target forward")
    tables["lm_head"], held["lm_head"] = _grid1(bench, "lm_head", "rows", g["rows"],
                                                bench.lm_head, g["rows_out"])
    tables["inject"], held["inject"] = _grid1(bench, "inject", "tokens", g["tokens"],
                                              bench.inject, g["tokens_out"])
    done("lm head, injection")
    tables["draft"], held["draft"] = _grid3(
        bench, "draft", {"n": g["n"], "block": blocks, "kv": dkv},
        lambda rows, b, y: bench.draft_block(rows, b, y),
        [p for p in g["draft_out"] if p[2] + p[1] + 16 <= max_pos])
    done("draft block")
    host = {"graph": [], "eager": []}
    for n in g["host_n"] + g["host_out"]:
        if not bench.out_of_time("host"):
            host["graph"].append(bench.host_runs(n, g["prompt"], g["new"], eager=False))
    done("host runs (CUDA graphs)")
    tables["prefill"], held["prefill"] = _prefill(bench, g, max_pos)
    done("prefill")
    kernels = []
    for n in g["n"]:
        with bench.rows(n, 128) as rows:
            for b in blocks:
                if rows is not None and not bench.out_of_time("kernels"):
                    kernels.append({"n": n, "block": b, **bench.kernels(rows, b)})
    for n in g["eager_n"]:
        if not bench.out_of_time("host_eager"):
            host["eager"].append(bench.host_runs(n, g["prompt"], g["new"] // 3, eager=True))
    done("kernels, host runs (eager)")
    cfg = bench.target.config
    dcfg = bench.drafters[bench.own_block].drafter.config
    doc = {
        "format": FORMAT,
        "model": {"name": name, "hidden_size": cfg.hidden_size, "num_layers": cfg.num_layers,
                  "num_heads": cfg.num_heads, "num_kv_heads": cfg.num_kv_heads,
                  "head_dim": cfg.head_dim, "intermediate_size": cfg.intermediate_size,
                  "vocab_size": cfg.vocab_size, "tie_embeddings": cfg.tie_word_embeddings,
                  "dtype_bytes": bench.target.dtype.itemsize, "preset": f"random:{name}",
                  **({"num_experts": cfg.num_experts, "experts_per_token":
                      cfg.num_experts_per_tok, "moe_intermediate_size":
                      cfg.moe_intermediate_size} if cfg.num_experts else {})},
        "drafter": {"num_layers": dcfg.model.num_layers, "block_size": bench.own_block,
                    "target_layer_ids": list(bench.layer_ids), "block_sizes": blocks},
        "hardware": {"name": args.hardware, "driver": _driver(args.device)},
        "engine": {"cuda_graphs": True, "compile": not args.no_compile,
                   "buckets": list(BATCH_BUCKETS), "reps": g["reps"]},
        **stamp(engine_options=bench.target.options.asdict()), "quick": args.quick,
        "grid": {k: v for k, v in g.items()}, "tables": tables, "heldout": held,
        "host_runs": host, "kernels": kernels, "skipped": bench.skipped,
        "measure_wall_s": bench.elapsed_s,
    }
    bench.close()
    return doc


def _driver(device: str) -> str | None:
    """The NVIDIA driver version (nvidia-smi), or None on the CPU or without it."""
    if device != "cuda":
        return None
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=20).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        out = None
    return out or None


def install(files: list[str], hardware: str, out: Path | None = None) -> int:
    """Re-fit, check against conf/model/<name>.yaml and copy into `out` (default the
    checkout's conf/calibration/<hardware>/; ./conf/calibration/<hardware>/ when installed)."""
    import yaml

    from simulator.calibration import check_model
    from simulator.params import ConfigError, ModelParams

    missing = [f for f in files if not Path(f).is_file()]
    if not files or missing:
        raise UserError(f"calibrate install: no such table {missing[0]}" if missing else
                        "calibrate install needs the table files: install FILE... "
                        "[hardware=h200] [--out DIR]")
    dest_dir = out or tree_output(REPO_CONF / hardware, "--out")
    docs = [fit(json.loads(Path(f).read_text())) for f in files]
    borrow(docs)
    for f, doc in zip(files, docs, strict=True):
        name = doc["model"]["name"]
        spec = yaml.safe_load((REPO_CONF.parent / "model" / f"{name}.yaml").read_text())
        spec.pop("defaults", None)
        try:
            check_model(doc, ModelParams(**spec), f)
        except ConfigError as e:  # e.g. a CPU smoke table (fp32) against the bf16 model
            raise UserError(str(e)) from None
        dest = write_text(dest_dir / f"{name}.json", json.dumps(doc, indent=1))
        print_report(doc)
        print(f"  -> {dest}")
    return 0


SMOKE = "python -m workbench calibrate model=toy --quick --device cpu --out calib-smoke"


def _keys(p: argparse.ArgumentParser, argv: list[str]) -> tuple[str, list[str]]:
    """(hardware, model names) of the key=value arguments, each checked against conf/."""
    keys = dict(a.split("=", 1) for a in argv if "=" in a and not a.startswith("-"))
    hardware = keys.pop("hardware", "h200")
    models = keys.pop("model", "qwen3-8b")
    if keys:
        p.error(f"unknown keys {sorted(keys)} (model=..., hardware=...)")
    known = sorted(f.stem for f in (REPO_CONF.parent / "hardware").glob("*.yaml")
                   if not f.stem.startswith("base"))
    if hardware not in known:
        p.error(f"hardware={hardware} is not one of {', '.join(known)}")
    from reference.loaders import PRESETS

    names = list(ALL) if models == "all" else models.split(",")
    bad = [n for n in names if n not in PRESETS]
    if bad:
        p.error(f"model={models}: {', '.join(bad)} is not one of all, "
                f"{', '.join(sorted(PRESETS))}")
    return hardware, names


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0] == "install":
        p = OneLineParser(prog="python -m workbench calibrate install")
        p.add_argument("files", nargs="*")
        p.add_argument("--out", type=Path, default=None, help="default conf/calibration/<hw>/")
        a = p.parse_args([x for x in argv[1:] if not x.startswith("hardware=")])
        hw = next((x.split("=", 1)[1] for x in argv if x.startswith("hardware=")), "h200")
        return install(a.files, hw, a.out)
    p = OneLineParser(prog="python -m workbench calibrate", description=__doc__,
                      formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", default=None, help="default conf/calibration/<hardware>/; a folder "
                   "that holds <model>.json already is refused")
    p.add_argument("--device", default="cuda")
    p.add_argument("--budget-s", type=ranged(float, 0, None, open_lo=True), default=75.0,
                   help="measuring time per model (> 0)")
    p.add_argument("--quick", action="store_true", help="tiny grid (CPU tests)")
    p.add_argument("--no-compile", action="store_true", help="eager layers inside graphs")
    p.add_argument("--prefill-into", default=None, metavar="FILE",
                   help="measure only the prefill, into FILE's calibration of the model")
    add_arguments(p)
    args = p.parse_args([a for a in argv if a.startswith("-") or "=" not in a])
    args.engine_options = from_args(args)
    args.hardware, names = _keys(p, argv)
    if args.prefill_into and not Path(args.prefill_into).is_file():
        p.error(f"--prefill-into {args.prefill_into}: no such file")
    if args.out:
        fresh_output(args.out, [f"{name}.json" for name in names])
    args.device = need_cuda(args.device, "calibrate", SMOKE)
    out = Path(args.out) if args.out else tree_output(REPO_CONF / args.hardware, "--out")
    t0 = time.perf_counter()
    grid = QUICK if args.quick else FULL
    for name in names:
        if args.prefill_into:
            base = json.loads(Path(args.prefill_into).read_text())
            if base["model"]["name"] != name:
                p.error(f"--prefill-into holds {base['model']['name']}, not model={name}")
            doc = fit(prefill_into(base, grid, args))
        else:
            doc = fit(measure_model(name, grid, args))
        write_text(out / f"{name}.json", json.dumps(doc, indent=1))
        print_report(doc)
        _free_device()
    print(f"calibrated {', '.join(names)} in {time.perf_counter() - t0:.1f} s -> {out}")
    return 0


def _free_device() -> None:
    import gc

    import torch

    gc.collect()
    if torch.cuda.is_available():
        torch.cuda.empty_cache()


if __name__ == "__main__":
    raise SystemExit(main())
