"""Cost of one drafter training step: aten ops and CPU time per variant at micro shapes, and
a profile of real steps inside a training run.

    python -m toy.step_cost [--dtype bfloat16] [--depths 1,2,3,15] [--reps 20]
    python -m toy.step_cost --choose EAGER_RUN COMPILED_RUN --minutes 8

`StepProfile` (on when given a folder: the trainers' --profile DIR) profiles steps 10-14 of
every `train_dflash.fit` and writes the run's top ops by device (or CPU) time, the wall
time per step and the device time per step into that folder: whether a step waits on the
host, the device or other processes sharing it. `--choose` reads two short probe runs of
`train_dflash` (--no-compile and --compile) and prints 1 when the compiled one
would fit more steps into --minutes (its compile time included), else 0.

A random micro target (toy/train_target.py SIZES["micro"], vocab 512) and one
batch like the micro recipe's (6 sequences of up to 64 tokens, 8 anchors, B = 16); each row
is a fresh drafter's forward and backward (`train_dflash.step_loss`'s path, without the
data loader and optimizer). ops counts the aten calls below autograd that are not views or
reshapes, the kernels a GPU would launch; on a GPU shared by the parallel ablations the step
time follows it (toy/ablations.py). Run with OMP_NUM_THREADS=1 for steady times.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import torch

from reference.loaders import load_target
from reference.model import Target
from reference.op_count import OpCount
from toy.dense_blocks import dense_block_hidden
from toy.draft_model import TrainableDrafter, drafter_config_dict, target_features
from toy.eagle import dense_eagle_hidden
from toy.objective import (
    block_loss,
    block_targets,
    build_target_layer_ids,
    default_gamma,
    position_weights,
    random_anchors,
)
from toy.train_target import SIZES, qwen3_config

VOCAB, BATCH, SEQ, ANCHORS, BLOCK = 512, 6, 64, 8, 16


class StepProfile:
    """Profiles steps [first, first + count) of a training loop into folder/<name>.txt: call
    `step(i)` before step i runs, `close()` after the loop (writes nothing if the window was
    not reached, or folder is None)."""

    def __init__(self, name: str, folder: str | Path | None = None, first: int = 10,
                 count: int = 5):
        safe = re.sub(r"[^\w.-]+", "_", name).strip("_")
        self.path = Path(folder) / f"{safe}.txt" if folder else None
        self.first, self.count = first, count
        self.prof, self.t0 = None, 0.0

    def step(self, i: int) -> None:
        if self.path is None or i not in (self.first, self.first + self.count):
            return
        cuda = torch.cuda.is_available()
        if cuda:
            torch.cuda.synchronize()
        if i == self.first:
            acts = [torch.profiler.ProfilerActivity.CPU]
            acts += [torch.profiler.ProfilerActivity.CUDA] if cuda else []
            self.prof = torch.profiler.profile(activities=acts)
            self.prof.__enter__()
            self.t0 = time.perf_counter()
            return
        wall = (time.perf_counter() - self.t0) / self.count
        self.prof.__exit__(None, None, None)
        events = self.prof.key_averages()
        key = "self_device_time_total" if cuda else "self_cpu_time_total"
        device_us = sum(getattr(e, key) for e in events) / self.count
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.path.write_text(
            f"{self.path.stem}: steps {self.first}-{i - 1}, wall {1e3 * wall:.1f} ms per step "
            f"(profiled), {'device' if cuda else 'CPU'} self time {device_us / 1e3:.1f} ms per "
            f"step, {sum(e.count for e in events) // self.count} profiled calls per step\n\n"
            + events.table(sort_by=key, row_limit=30))
        self.prof = None

    def close(self) -> None:
        if self.prof is not None:
            self.prof.__exit__(None, None, None)
            self.prof = None


def micro_batch(dtype: torch.dtype) -> tuple[Target, dict]:
    """The random micro target and one batch: ids, lens (bs, S), anchors, labels, weights."""
    from transformers import Qwen3ForCausalLM

    torch.manual_seed(0)
    path = Path(tempfile.mkdtemp())
    Qwen3ForCausalLM(qwen3_config(SIZES["micro"], VOCAB, 1)).save_pretrained(path)
    target = load_target(path, dtype=dtype)
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(2, VOCAB - 1, (BATCH, SEQ), generator=g)
    lens = torch.randint(SEQ // 2, SEQ + 1, (BATCH,), generator=g)
    w = torch.arange(SEQ)
    loss_mask = (w >= 10)[None] & (w[None] < lens[:, None])
    anchors, valid = random_anchors(loss_mask, lens, BLOCK, ANCHORS, g)
    labels, weights = block_targets(ids, loss_mask, anchors, valid,
                                    position_weights(BLOCK, default_gamma(BLOCK)))
    n = target.config.num_layers
    layer_ids = build_target_layer_ids(n, min(5, max(1, n - 3)))
    return target, {"ids": ids, "lens": lens, "anchors": anchors, "labels": labels,
                    "weights": weights, "layer_ids": layer_ids}


def step_fn(target: Target, b: dict, variant: str, depth: int | None = None) -> Callable:
    """One fresh drafter's training step (forward and backward) as a callable."""
    raw = drafter_config_dict(target.config, num_layers=1 if variant == "eagle" else 2,
                              block_size=BLOCK, mask_token_id=VOCAB - 1,
                              target_layer_ids=[0] if variant == "no_features"
                              else b["layer_ids"], variant=variant)
    model = TrainableDrafter(raw, target, seed=0)
    ids, lens, anchors = b["ids"], b["lens"], b["anchors"]
    feats = (target.embed[ids] if variant == "no_features"
             else target_features(target, ids, lens, b["layer_ids"]))

    def run():
        model.zero_grad(set_to_none=True)
        drafter = model.drafter(target)
        if variant == "eagle":
            h = dense_eagle_hidden(drafter, model.in_proj(target), target, ids, feats,
                                   anchors, BLOCK, depth)
        else:
            h = dense_block_hidden(drafter, target, feats, ids, lens, anchors, BLOCK,
                                   VOCAB - 1, variant)
        cols = h.shape[2] + 1
        loss, _ = block_loss(h, target.logits, b["labels"][:, :, :cols],
                             b["weights"][:, :, :cols])
        loss.backward()

    return run


def measure(run: Callable, reps: int) -> tuple[int, float]:
    """(ops of one step, mean ms per step over reps after a warm-up step)."""
    run()
    with OpCount() as count:
        run()
    t0 = time.perf_counter()
    for _ in range(reps):
        run()
    return count.ops, 1000 * (time.perf_counter() - t0) / reps


def steps_in(run: Path, minutes: float) -> float:
    """Steps a run's rate would fit into `minutes`: its logged rate after step 0 times the
    time left after step 0 (which holds the start-up and any compilation)."""
    history = json.loads((run / "metrics.json").read_text())["history"]
    first, last = history[0], history[-1]
    if last["step"] == first["step"]:
        return 0.0
    rate = (last["step"] - first["step"]) / (last["wall_s"] - first["wall_s"])
    return rate * max(0.0, 60 * minutes - first["wall_s"])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--choose", nargs=2, type=Path, metavar=("EAGER", "COMPILED"))
    ap.add_argument("--minutes", type=float, default=8.0)
    ap.add_argument("--dtype", choices=("float32", "bfloat16"), default="float32")
    ap.add_argument("--depths", default="1,2,3,15", help="eagle chain depths")
    ap.add_argument("--reps", type=int, default=20)
    args = ap.parse_args()
    if args.choose:
        eager, compiled = (steps_in(run, args.minutes) for run in args.choose)
        print(f"in {args.minutes} min: eager {eager:.0f} steps, compiled {compiled:.0f}",
              file=sys.stderr)
        print(int(compiled > eager))
        return
    target, batch = micro_batch(getattr(torch, args.dtype))
    rows = [(v, None) for v in ("dflash", "no_features", "fusion", "ar")]
    rows += [("eagle", int(d)) for d in args.depths.split(",")]
    base = None
    for variant, depth in rows:
        ops, ms = measure(step_fn(target, batch, variant, depth), args.reps)
        base = base or (ops, ms)
        name = variant if depth is None else f"eagle depth {depth}"
        print(f"{name:16s} {ops:5d} ops ({ops / base[0]:.2f}x)  {ms:7.1f} ms "
              f"({ms / base[1]:.2f}x)", flush=True)


if __name__ == "__main__":
    main()
