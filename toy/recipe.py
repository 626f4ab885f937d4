"""The toy world's whole recipe from one command, in stages that resume.

    python -m toy.recipe --out artifacts/toy [--size small] [--stage NAME] [--micro]

Stages, in order: tokenizer -> target -> data -> dflash-b16 -> dflash-b8 -> eval. Each
writes its outputs and a `stage.json` (its key: a hash of its parameters and of the keys of
the stages before it; the command, seed, metrics and wall time) into out/<stage>/. A stage
whose stage.json holds the current key and whose outputs exist is skipped, so rerunning the
command resumes after the last finished stage, and changing a parameter reruns that stage
and everything after it. `--stage NAME` runs one stage (the stages it needs must be done:
a drafter needs the data, not the other drafter); `--budget-minutes M` starts only the
stages that fit in M minutes (rerun to continue); `--parallel` trains the drafters at the
same time, one process each (a small model leaves most of an H200 idle).
On an H200 the target, the data generation and the drafters run on wall-time budgets (4, 3.5
and 8 minutes; their metrics say how many steps or sequences fitted), about 13 minutes in
all, the drafters in a call of their own (`--stage` or `--budget-minutes`). The drafters
train at 128 sequences a step: a step costs its kernel count, not its batch
(toy/step_cost.py), so a larger batch buys acceptance at little time.
`--size base` (29.4M target) trains its target at dropout 0.3 unless `--target-dropout P`
says otherwise (TARGET_DROPOUT: without dropout the base target memorizes the train split).
`--target-max-repetition R` trains the target on the train files whose token 4-gram
repetition is at most R (toy/train_target.py `drop_repetitive`), a target that loops less;
the tokenizer stage is unchanged, so a copied tokenizer stays done.
Each stage's timings, losses and held-out tau are in its stage.json; the H200 runs'
READMEs under benchmarks/ collect them.
`--micro` is the CPU scale the tests run.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import subprocess
import sys
import time
from dataclasses import asdict, dataclass, replace
from pathlib import Path

import torch

from toy.train_dflash import DFlashTrainConfig, TrainRun, add_run_arguments, run_from_args

STAGES = ("tokenizer", "target", "data", "dflash-b16", "dflash-b8", "eval")
OUTPUTS = {"tokenizer": ("tokenizer.json",), "target": ("config.json", "model.safetensors"),
           "data": ("train.safetensors",), "dflash": ("config.json", "model.safetensors"),
           "eval": ("metrics.json",)}


@dataclass(frozen=True)
class Recipe:
    """Every parameter of the recipe; `drafters` are trained in order, one stage each."""

    size: str = "small"
    vocab: int = 4096
    max_files: int | None = None
    target_steps: int | None = None
    target_minutes: float | None = 4.0
    target_dropout: float | None = None  # None: no dropout, and no key change
    target_max_repetition: float | None = None  # None: every train file, and no key change
    num_prompts: int = 60000
    prompt_len: tuple[int, int] = (64, 256)
    max_new: int = 256
    gen_batch: int = 256
    data_minutes: float | None = 3.5
    drafters: tuple[DFlashTrainConfig, ...] = (
        DFlashTrainConfig(block_size=16, batch=128, steps=6000, max_minutes=8.0),
        DFlashTrainConfig(block_size=8, batch=128, steps=6000, max_minutes=8.0),
    )
    eval_prompts: int = 64
    eval_max_new: int = 256
    seed: int = 0

    def __post_init__(self) -> None:
        blocks = [d.block_size for d in self.drafters]
        if blocks != [16, 8]:
            raise ValueError(f"drafters must be B = 16 then 8 (stages dflash-b16, dflash-b8), "
                             f"got {blocks}")

    def drafter(self, stage: str) -> DFlashTrainConfig:
        return self.drafters[STAGES.index(stage) - STAGES.index("dflash-b16")]


TARGET_DROPOUT = {"base": 0.3}  # by size: the lowest validation loss of a 0-0.3 sweep

MICRO = Recipe(size="micro", vocab=512, max_files=40, target_steps=30, target_minutes=None,
               num_prompts=12, prompt_len=(8, 24), max_new=40, gen_batch=6, data_minutes=None,
               drafters=(DFlashTrainConfig(block_size=16, num_layers=1, num_anchors=8, batch=6,
                                           steps=25, lr=3e-3),
                         DFlashTrainConfig(block_size=8, num_layers=1, num_anchors=8, batch=6,
                                           steps=25, lr=3e-3)),
               eval_prompts=4, eval_max_new=24)


def recipe_for(size: str, micro: bool = False, target_dropout: float | None = None) -> Recipe:
    """The recipe of a size (`micro`: the CPU-test scale, MICRO); the target's dropout is
    TARGET_DROPOUT's for the size unless `target_dropout` is given."""
    recipe = MICRO if micro else replace(Recipe(), size=size)
    if target_dropout is None and not micro:
        target_dropout = TARGET_DROPOUT.get(size)
    return replace(recipe, target_dropout=target_dropout)


def _device() -> tuple[str, torch.dtype]:
    cuda = torch.cuda.is_available()
    return ("cuda", torch.bfloat16) if cuda else ("cpu", torch.float32)


def _params(recipe: Recipe, stage: str) -> dict:
    r = asdict(recipe)
    if stage == "tokenizer":
        return {k: r[k] for k in ("vocab", "max_files")}
    if stage == "target":  # the optional fields only when set: earlier stage keys stay valid
        keys = ("size", "target_steps", "target_minutes", "max_files", "seed")
        optional = tuple(k for k in ("target_dropout", "target_max_repetition")
                         if r[k] is not None)
        return {k: r[k] for k in keys + optional}
    if stage == "data":
        return {k: r[k] for k in ("num_prompts", "prompt_len", "max_new", "max_files", "seed",
                                  "data_minutes")}
    if stage == "eval":
        return {k: r[k] for k in ("eval_prompts", "eval_max_new", "seed")}
    return asdict(recipe.drafter(stage))


def stage_key(recipe: Recipe, stage: str) -> str:
    """sha256 of the stage's parameters and of the keys of every earlier stage."""
    upstream = [stage_key(recipe, s) for s in requires(stage)]
    blob = json.dumps({"stage": stage, "params": _params(recipe, stage), "upstream": upstream},
                      sort_keys=True)
    return hashlib.sha256(blob.encode()).hexdigest()


def requires(stage: str) -> tuple[str, ...]:
    """The stages `stage` reads: everything before it, except that a drafter does not read
    the other drafter (so the drafters can train at the same time)."""
    earlier = STAGES[: STAGES.index(stage)]
    if stage.startswith("dflash"):
        return tuple(s for s in earlier if not s.startswith("dflash"))
    return earlier


def is_done(out: Path, recipe: Recipe, stage: str) -> bool:
    record = out / stage / "stage.json"
    files = OUTPUTS["dflash" if stage.startswith("dflash") else stage]
    if not record.is_file() or not all((out / stage / f).is_file() for f in files):
        return False
    return json.loads(record.read_text()).get("key") == stage_key(recipe, stage)


def _run_stage(out: Path, recipe: Recipe, stage: str, run: TrainRun | None) -> dict:
    from reference.loaders import load_target
    from toy import stages

    device, dtype = _device()
    if stage == "tokenizer":
        return stages.tokenizer(out / stage, recipe.vocab, recipe.max_files)
    tok_path = out / "tokenizer" / "tokenizer.json"
    if stage == "target":
        return stages.target(out / stage, recipe, tok_path, device)
    target = load_target(out / "target", device=device, dtype=dtype)
    if stage == "data":
        return stages.data(out / stage, target, tok_path, recipe)
    if stage == "eval":
        return stages.evaluate(out, target, tok_path, recipe,
                               [s for s in STAGES if s.startswith("dflash")])
    return stages.drafter(out / stage, target, tok_path, out / "data" / "train.safetensors",
                          recipe.drafter(stage), run)


def planned_minutes(recipe: Recipe, stage: str) -> float:
    """A stage's H200 minutes at most: its time budget plus half a minute of loading and
    saving (tokenizer and eval: estimates)."""
    budgets = {"target": recipe.target_minutes, "data": recipe.data_minutes}
    if stage.startswith("dflash"):
        budgets[stage] = recipe.drafter(stage).max_minutes
    if stage in budgets:
        return (budgets[stage] or 6.0) + 0.5
    return {"tokenizer": 0.5, "eval": 1.5}[stage]


def run_parallel(out: Path, stages: list[str], argv: list[str]) -> None:
    """Run `stages` at the same time, one `--stage` process each (same recipe arguments)."""
    procs = [subprocess.Popen([sys.executable, "-m", "toy.recipe", "--out", str(out),
                               "--stage", s, *argv]) for s in stages]
    failed = [s for s, p in zip(stages, procs) if p.wait() != 0]
    if failed:
        raise RuntimeError(f"stages {failed} failed (see their output above)")


def run_recipe(out: Path, recipe: Recipe, only: str | None = None, force: bool = False,
               command: str = "", budget_minutes: float | None = None,
               parallel_argv: list[str] | None = None, run: TrainRun | None = None
               ) -> dict[str, dict]:
    """Run every stage not done (or just `only`), the drafters executed as `run` says;
    returns each run stage's record.

    With budget_minutes, a stage starts only if its `planned_minutes` fit in what is left,
    so one command stays under a machine's time limit; rerunning continues. With
    parallel_argv (the recipe arguments to repeat), the drafter stages not done run at the
    same time in subprocesses, which write their own records.
    """
    records, start, run = {}, time.time(), run or TrainRun()
    for stage in STAGES if only is None else (only,):
        drafters = [s for s in STAGES if s.startswith("dflash") and not is_done(out, recipe, s)]
        if parallel_argv is not None and only is None and stage in drafters[:1]:
            left = budget_minutes and budget_minutes - (time.time() - start) / 60
            if budget_minutes and max(planned_minutes(recipe, s) for s in drafters) > left:
                print(f"recipe: the drafters do not fit in the {left:.1f} min left; rerun",
                      flush=True)
                break
            print(f"recipe: {drafters} in parallel ...", flush=True)
            t0 = time.time()
            run_parallel(out, drafters, [*parallel_argv, *run.argv()])
            print(f"recipe: {drafters} done in {time.time() - t0:.1f}s", flush=True)
        todo = [s for s in requires(stage) if not is_done(out, recipe, s)]
        if todo:
            raise RuntimeError(f"stage {stage!r} needs {todo} first")
        if is_done(out, recipe, stage) and not force:
            print(f"recipe: {stage} is done, skipped", flush=True)
            continue
        left = budget_minutes and budget_minutes - (time.time() - start) / 60
        if budget_minutes and planned_minutes(recipe, stage) > left:
            print(f"recipe: {stage} (~{planned_minutes(recipe, stage):.0f} min) does not fit "
                  f"in the {left:.1f} min left; rerun to continue", flush=True)
            break
        print(f"recipe: {stage} ...", flush=True)
        t0 = time.time()
        (out / stage).mkdir(parents=True, exist_ok=True)
        metrics = _run_stage(out, recipe, stage, run)
        records[stage] = {"stage": stage, "key": stage_key(recipe, stage),
                          "params": _params(recipe, stage), "command": command,
                          "seed": recipe.seed, "wall_s": time.time() - t0,
                          "metrics": metrics}
        (out / stage / "stage.json").write_text(json.dumps(records[stage], indent=2))
        print(f"recipe: {stage} done in {time.time() - t0:.1f}s", flush=True)
    return records


def parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--size", choices=("micro", "small", "base"), default="small")
    ap.add_argument("--micro", action="store_true", help="the CPU-test scale")
    ap.add_argument("--stage", choices=STAGES, default=None, help="run only this stage")
    ap.add_argument("--force", action="store_true", help="rerun stages that are done")
    ap.add_argument("--zoo", type=Path, default=None, help="export the results here")
    ap.add_argument("--budget-minutes", type=float, default=None,
                    help="start only stages that fit (e.g. 9 under a 10-minute limit)")
    ap.add_argument("--parallel", action="store_true", help="train the drafters at once")
    ap.add_argument("--target-dropout", type=float, default=None,
                    help=f"the target's residual and attention dropout (default by size: "
                         f"{TARGET_DROPOUT}, else none)")
    ap.add_argument("--target-max-repetition", type=float, default=None,
                    help="train the target on the train files whose token 4-gram repetition "
                         "is at most this")
    add_run_arguments(ap)
    return ap


def recipe_from_args(args: argparse.Namespace) -> tuple[Recipe, list[str]]:
    """The recipe the command line asks for, and the arguments that ask for it again (the
    `--stage` subprocesses of `--parallel`)."""
    recipe = replace(recipe_for(args.size, args.micro, args.target_dropout),
                     target_max_repetition=args.target_max_repetition)
    shared = ["--micro"] if args.micro else ["--size", args.size]
    if recipe.target_dropout is not None:
        shared += ["--target-dropout", str(recipe.target_dropout)]
    if recipe.target_max_repetition is not None:
        shared += ["--target-max-repetition", str(recipe.target_max_repetition)]
    return recipe, shared


def main() -> None:
    args = parser().parse_args()
    recipe, shared = recipe_from_args(args)
    command = " ".join(["python -m toy.recipe", *sys.argv[1:]])
    run_recipe(args.out, recipe, args.stage, args.force, command, args.budget_minutes,
               shared if args.parallel else None, run_from_args(args))
    if args.zoo is not None:
        from toy.zoo import export_zoo

        print(json.dumps(export_zoo(args.out, args.zoo)["total_bytes"]))


if __name__ == "__main__":
    main()
