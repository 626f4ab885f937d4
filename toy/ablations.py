"""The ablation drafters, trained on the recipe's data at equal steps, as resumable stages.

    python -m toy.ablations --out artifacts/toy [--budget-minutes 9] [--only NAME]
        [--parallel]

Needs a finished recipe (toy/recipe.py) up to its data stage. Each ablation is a
B = 16 drafter differing from `full` in one respect: no loss decay, uniform blocks instead of
random anchors (table 13), no target features (table 10), input fusion or DFlash-AR
(table 9), or the EAGLE-style chain baseline (one layer). Each writes out/ablations/<name>/
with a stage.json keyed on its config and the data stage's key; done ones are skipped. A run
starts an ablation only if its max_minutes still fits in --budget-minutes, so one command
stays under a machine's time limit; rerun it to continue. `--parallel` trains every
ablation at the same time, one process each (small drafters leave an H200 mostly idle).
600 steps planned, 3 minutes each, 128 sequences a step (the recipe's drafters' batch: a
step's time hardly depends on it). Sharing the GPU, a run's step time follows its kernel
count (`python -m toy.step_cost`: aten ops of one forward and backward, the same at any
shape). The full EAGLE chain (B-1 = 15 sequential layer passes) has several times a block
drafter's ops and would fit only a fraction of its steps, so the eagle run trains a 2-step
chain (chain_depth 2: the context pass's step 0 and one step on its own feature, about a
DFlash step's ops) and drafts the full block: equal steps, a shorter training-time test.
Its metrics' acc covers the trained positions 1..2 only. Each stage.json records
steps_done to confirm the steps. Three minutes separate the ablations only weakly (the main
B = 16 drafter needs thousands of steps to reach its tau); `--minutes 8 --only full --only
no-features --only fusion --only uniform` trains the four that decide tables 9, 10 and 13
longer (their own stage keys). `--layers N` trains at another depth into
ablations/<name>-l<N> (the paper's 5), `--block B` at another block size (-b<B>; the
paper's table 9 is at B = 8).
Evaluate them with `python -m experiments.acceptance study=ablations`.
"""

from __future__ import annotations

import argparse
import dataclasses
import hashlib
import json
import subprocess
import sys
import time
from pathlib import Path

from toy.recipe import Recipe, is_done, stage_key
from toy.train_dflash import DFlashTrainConfig, TrainRun, add_run_arguments, run_from_args

BASE = DFlashTrainConfig(block_size=16, batch=128, steps=600, max_minutes=3.0)
LONG_STEPS = 6000  # the step cap of a --minutes run (the recipe's drafters')
ABLATIONS = {
    "full": {},
    "no-decay": {"no_decay": True},
    "uniform": {"uniform": True},
    "no-features": {"variant": "no_features"},
    "fusion": {"variant": "fusion"},
    "ar": {"variant": "ar"},
    "eagle": {"variant": "eagle", "num_layers": 1, "chain_depth": 2},
}


def ablation_config(name: str, base: DFlashTrainConfig = BASE) -> DFlashTrainConfig:
    return dataclasses.replace(base, **ABLATIONS[name])


def ablation_key(recipe: Recipe, cfg: DFlashTrainConfig) -> str:
    blob = json.dumps({"data": stage_key(recipe, "data"), "config": dataclasses.asdict(cfg)},
                      sort_keys=True)
    return hashlib.sha256(blob.encode()).hexdigest()


def ablation_done(out: Path, key: str) -> bool:
    record = out / "stage.json"
    return (record.is_file() and (out / "model.safetensors").is_file()
            and json.loads(record.read_text()).get("key") == key)


def run_ablations(out: Path, recipe: Recipe, names=tuple(ABLATIONS), base=BASE,
                  budget_minutes: float | None = None, command: str = "", suffix: str = "",
                  run: TrainRun | None = None) -> dict[str, dict]:
    """Train every ablation of `names` not done yet, within the time budget, each into
    out/ablations/<name><suffix>, executed as `run` says."""
    import torch

    from reference.loaders import load_target
    from toy import stages

    if not is_done(out, recipe, "data"):
        raise RuntimeError(f"{out}: run the recipe up to its data stage first")
    cuda = torch.cuda.is_available()
    target = None
    t0, records = time.time(), {}
    for name in names:
        cfg = ablation_config(name, base)
        folder, key = out / "ablations" / f"{name}{suffix}", ablation_key(recipe, cfg)
        if ablation_done(folder, key):
            print(f"ablations: {name} is done, skipped", flush=True)
            continue
        spent = (time.time() - t0) / 60
        if budget_minutes and cfg.max_minutes and spent + cfg.max_minutes > budget_minutes:
            print(f"ablations: {name} would pass the budget; rerun to continue", flush=True)
            break
        if target is None:
            target = load_target(out / "target", device="cuda" if cuda else "cpu",
                                 dtype=torch.bfloat16 if cuda else torch.float32)
        folder.mkdir(parents=True, exist_ok=True)
        start = time.time()
        metrics = stages.drafter(folder, target, out / "tokenizer" / "tokenizer.json",
                                 out / "data" / "train.safetensors", cfg, run)
        records[name] = {"stage": f"ablations/{folder.name}", "key": key, "command": command,
                         "seed": cfg.seed, "wall_s": time.time() - start, "metrics": metrics}
        (folder / "stage.json").write_text(json.dumps(records[name], indent=2))
    return records


def main() -> None:
    from toy.recipe import MICRO

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, required=True, help="the recipe's output folder")
    ap.add_argument("--size", choices=("micro", "small", "base"), default="small")
    ap.add_argument("--micro", action="store_true", help="the recipe was run with --micro")
    ap.add_argument("--only", choices=sorted(ABLATIONS), action="append", default=None)
    ap.add_argument("--budget-minutes", type=float, default=9.0)
    ap.add_argument("--parallel", action="store_true", help="one process per ablation")
    ap.add_argument("--minutes", type=float, default=None,
                    help=f"train each for this long (at most {LONG_STEPS} steps) instead of "
                         f"{BASE.steps} steps in {BASE.max_minutes} minutes")
    ap.add_argument("--layers", type=int, default=None,
                    help=f"draft depth of every ablation but eagle (one layer; default "
                         f"{BASE.num_layers}), into ablations/<name>-l<layers>")
    ap.add_argument("--block", type=int, default=None,
                    help=f"block size B (default {BASE.block_size}), into "
                         "ablations/<name>[-l<layers>]-b<block>")
    add_run_arguments(ap)
    args = ap.parse_args()
    run = run_from_args(args)
    if args.parallel:
        shared = ["--out", str(args.out), "--budget-minutes", str(args.budget_minutes),
                  *(["--micro"] if args.micro else ["--size", args.size]),
                  *(["--minutes", str(args.minutes)] if args.minutes else []),
                  *(["--layers", str(args.layers)] if args.layers else []),
                  *(["--block", str(args.block)] if args.block else []), *run.argv()]
        names = args.only or sorted(ABLATIONS)
        procs = [subprocess.Popen([sys.executable, "-m", "toy.ablations", *shared,
                                   "--only", name]) for name in names]
        failed = [n for n, proc in zip(names, procs) if proc.wait() != 0]
        if failed:
            raise SystemExit(f"ablations {failed} failed (see their output above)")
        return
    recipe = MICRO if args.micro else dataclasses.replace(Recipe(), size=args.size)
    base = dataclasses.replace(MICRO.drafters[0], steps=10) if args.micro else BASE
    if args.minutes:
        base = dataclasses.replace(base, max_minutes=args.minutes,
                                   steps=base.steps if args.micro else LONG_STEPS)
    suffix = ""
    if args.layers:
        base, suffix = dataclasses.replace(base, num_layers=args.layers), f"-l{args.layers}"
    if args.block:
        base, suffix = dataclasses.replace(base, block_size=args.block), f"{suffix}-b{args.block}"
    command = " ".join(["python -m toy.ablations", *sys.argv[1:]])
    run_ablations(args.out, recipe, tuple(args.only or ABLATIONS), base, args.budget_minutes,
                  command, suffix, run)


if __name__ == "__main__":
    main()
