"""Train a DFlash drafter on the target's own continuations (docs/dflash.md 2).

    python -m toy.train_dflash --target artifacts/toy/target \
        --data artifacts/toy/data/train.safetensors --out artifacts/toy/dflash-b16 --block 16

Frozen shared embedding and head (the target's); K target features captured online under
no_grad; random anchors inside the loss mask; every block sees the context strictly before
its anchor and itself, all blocks of a sequence in one masked attention call
(toy/dense_blocks.py; the EAGLE chain: toy/eagle.py), which the tests
check against the engine's own paged draft forward (toy/draft_model.py
`block_logits`, the oracle: a block per request, as the engine drafts); same-position
labels and the loss on block positions 1..B-1 weighted exp(-(k-1)/gamma)
(toy/objective.py); AdamW 6e-4, warmup 4% then cosine, clip 1.0; fp32 master
weights, cast to the target's dtype (bf16 on the GPU) in the forward. No autocast: it would
also lower the fp32 norm and RoPE math the inference code runs, and training would drift.
Ablation flags: --block, --gamma / --no-decay, --uniform (back-to-back blocks instead of
random anchors), --layers, --features, --variant no_features / fusion / ar (tables 9-10)
or eagle (the autoregressive baseline, with --layers 1; --chain-depth D trains only its
first D chain steps).
Saves the z-lab format (`load_dflash`; variants: `variants.load_variant`) and metrics.json.
A step never waits for the device (batches copied asynchronously, no data-dependent
shapes); on CUDA the drafter's forward and loss run through torch.compile (--no-compile:
eager; --compile: on the CPU too); --profile DIR profiles steps 10-14 (toy/step_cost.py).
Both are a `TrainRun`: how the run executes, not what it trains (no stage key).
"""

from __future__ import annotations

import argparse
import functools
import json
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path

import torch

from reference.model import Target
from toy.dense_blocks import dense_block_hidden
from toy.draft_model import (
    TrainableDrafter,
    drafter_config_dict,
    target_features,
)
from toy.eagle import dense_eagle_hidden
from toy.gen_data import ToyDataset
from toy.objective import (
    block_loss,
    block_targets,
    build_target_layer_ids,
    default_gamma,
    position_weights,
    random_anchors,
    uniform_anchors,
)
from toy.step_cost import StepProfile
from toy.tokenizer import MASK
from toy.train_target import lr_at
from toy.variants import VARIANTS, context_features


@dataclass(frozen=True)
class TrainRun:
    """How a drafter training run executes, not what it trains (so not part of a stage's
    key); the trainers' --compile/--no-compile and --profile flags.

    compile: the drafter's forward and loss through torch.compile (fewer launches and no
    Python per op: a step is bound by them, toy/step_cost.py); None: on CUDA only.
    profile_dir: a folder for `StepProfile`'s profile of steps 10-14 (None: no profile).
    """

    compile: bool | None = None
    profile_dir: str | None = None

    def compiling(self, device: torch.device) -> bool:
        """Whether the steps on `device` go through torch.compile."""
        return self.compile if self.compile is not None else device.type == "cuda"

    def argv(self) -> list[str]:
        """The flags that give this run to a child process (`run_from_args`)."""
        out = [] if self.compile is None else ["--compile" if self.compile else "--no-compile"]
        return out + ([] if self.profile_dir is None else ["--profile", str(self.profile_dir)])


def add_run_arguments(ap: argparse.ArgumentParser, compile_flag: bool = True) -> None:
    """--compile/--no-compile (unless compile_flag is False) and --profile DIR."""
    if compile_flag:
        ap.add_argument("--compile", action=argparse.BooleanOptionalAction, default=None,
                        help="drafter steps through torch.compile (default: on CUDA only)")
    ap.add_argument("--profile", default=None, metavar="DIR",
                    help="profile training steps 10-14 into DIR (toy/step_cost.py)")


def run_from_args(args: argparse.Namespace) -> TrainRun:
    return TrainRun(getattr(args, "compile", None), args.profile)


@dataclass(frozen=True)
class DrafterTrainConfig:
    """What every drafter run shares (DFlash, its ablations, DSpark): depth, captured
    features, data per step and the `fit` schedule. max_minutes: the schedule runs on wall
    time when that is shorter than `steps` (a stage time limit)."""

    num_layers: int = 2
    num_features: int | None = None
    num_anchors: int = 64
    batch: int = 32
    steps: int = 2000
    lr: float = 6e-4
    warmup: float = 0.04
    clip: float = 1.0
    seed: int = 0
    max_minutes: float | None = None


@dataclass(frozen=True)
class DFlashTrainConfig(DrafterTrainConfig):
    """One DFlash drafter run. gamma None: the paper's loss decay for the block size.
    chain_depth (variant "eagle" only): chain steps unrolled per anchor in training (its
    training-time test; None: all B-1), while the engine still drafts B-1 (eagle.py)."""

    block_size: int = 16
    gamma: float | None = None
    no_decay: bool = False
    uniform: bool = False
    variant: str = "dflash"
    chain_depth: int | None = None

    def __post_init__(self) -> None:
        if self.chain_depth is not None and (self.variant != "eagle" or self.chain_depth < 1):
            raise ValueError(f"chain_depth {self.chain_depth} needs variant 'eagle' and >= 1")

    def layer_ids(self, num_target_layers: int) -> list[int]:
        """Captured layers; no_features reads embeddings (K = 1) and captures none: [0] is
        only a placeholder the config format requires."""
        if self.variant == "no_features":
            return [0]
        k = self.num_features or min(5, max(1, num_target_layers - 3))
        return build_target_layer_ids(num_target_layers, k)

    def weights(self) -> torch.Tensor:
        gamma = None if self.no_decay else (self.gamma or default_gamma(self.block_size))
        return position_weights(self.block_size, gamma)


def step_loss(model: TrainableDrafter, target: Target, data: ToyDataset, indices: list[int],
              cfg: DFlashTrainConfig, gen: torch.Generator, compiled: bool = False
              ) -> tuple[torch.Tensor, torch.Tensor]:
    """Weighted loss and top-1 accuracy of one batch of sequences `indices` (through
    torch.compile if `compiled`)."""
    width = data.longest if compiled else None  # fixed shapes for the compiler
    ids, loss_mask, lens = data.batch(indices, target.device, width)
    if cfg.uniform:
        anchors, valid = uniform_anchors(loss_mask, lens, cfg.block_size, cfg.num_anchors)
    else:
        anchors, valid = random_anchors(loss_mask, lens, cfg.block_size, cfg.num_anchors, gen)
    labels, w = block_targets(ids, loss_mask, anchors, valid, cfg.weights())
    if cfg.variant == "no_features":
        features = context_features(cfg.variant, target, ids, None)
    else:
        features = target_features(target, ids, lens, model.config.target_layer_ids)
    loss_fn = _compiled_draft_loss() if compiled else draft_loss
    return loss_fn(model.drafter(target), model.in_proj(target), target, features, ids, lens,
                   anchors, labels, w, cfg.block_size, model.config.mask_token_id, cfg.variant,
                   cfg.chain_depth)


def draft_loss(drafter, in_proj, target: Target, features, ids, lens, anchors, labels, w,
               block_size: int, mask_token_id: int, variant: str, chain_depth: int | None
               ) -> tuple[torch.Tensor, torch.Tensor]:
    """The drafter's dense training forward and its `block_loss` (w is 0 on invalid blocks)."""
    if variant == "eagle":
        h = dense_eagle_hidden(drafter, in_proj, target, ids, features, anchors, block_size,
                               chain_depth)
        labels, w = labels[:, :, : h.shape[2] + 1], w[:, :, : h.shape[2] + 1]  # trained steps
    else:
        h = dense_block_hidden(drafter, target, features, ids, lens, anchors, block_size,
                               mask_token_id, variant)
    return block_loss(h, target.logits, labels, w)


@functools.cache
def _compiled_draft_loss() -> Callable:
    """`draft_loss` through torch.compile, one graph per variant (batches are padded to the
    data's longest sequence, so shapes stay fixed); a frame that fails to compile runs eager."""
    torch._dynamo.config.suppress_errors = True
    return torch.compile(draft_loss)


def _progress(step: int, elapsed_s: float, cfg: DFlashTrainConfig) -> float:
    """Fraction of the run done: by steps, or by wall time when max_minutes runs out first."""
    done = step / cfg.steps
    if cfg.max_minutes:
        done = max(done, elapsed_s / (60 * cfg.max_minutes))
    return done


def usable_sequences(data: ToyDataset, block_size: int) -> list[int]:
    """Sequences with at least 2B continuation tokens (the paper's filter)."""
    cont = data.lengths() - data.prompt_lens
    return [i for i in range(len(data)) if int(cont[i]) >= 2 * block_size]


def fit(model: torch.nn.Module, pool: list[int], cfg: DrafterTrainConfig, step_fn: Callable,
        tag: str, log_every: int | None = None, profile_dir: str | None = None) -> dict:
    """The drafters' optimisation loop: AdamW (0.9, 0.95, no weight decay), warmup then
    cosine on the step or wall-time schedule (`_progress`), clip at cfg.clip.

    step_fn(rows) -> (loss, parts): one batch of sequence indices `rows` of `pool`, parts a
    dict of floats to log (must hold "acc"). Returns the shared metrics (loss_first,
    loss_last: the mean over the last 10% of steps, acc_last, steps_done, wall_s, history).
    profile_dir: where `StepProfile` writes its profile of steps 10-14 (None: nowhere).
    """
    opt = torch.optim.AdamW(model.parameters(), lr=cfg.lr, betas=(0.9, 0.95),
                            weight_decay=0.0)
    pick = torch.Generator().manual_seed(cfg.seed)
    log_every = log_every or max(1, cfg.steps // 20)
    history, losses, t0, step = [], [], time.time(), 0
    profile = StepProfile(tag, profile_dir)
    while (progress := _progress(step, time.time() - t0, cfg)) < 1.0:
        profile.step(step)
        for group in opt.param_groups:
            group["lr"] = lr_at(int(progress * 10_000), 10_000, cfg.lr, cfg.warmup)
        rows = torch.randint(0, len(pool), (min(cfg.batch, len(pool)),), generator=pick)
        loss, parts = step_fn([pool[i] for i in rows])
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.clip)
        opt.step()
        losses.append(loss.detach())
        if step % log_every == 0 or _progress(step + 1, time.time() - t0, cfg) >= 1.0:
            parts = {k: float(v) for k, v in parts.items()}
            history.append({"step": step, "loss": float(loss.detach()), **parts,
                            "wall_s": time.time() - t0})
            shown = "  ".join(f"{k} {v:.3f}" for k, v in parts.items())
            print(f"{tag} step {step:5d}/{cfg.steps}  loss {history[-1]['loss']:.3f}  {shown}"
                  f"  {time.time() - t0:6.1f}s", flush=True)
        step += 1
    profile.close()
    return {"params": sum(p.numel() for p in model.parameters()),
            "loss_first": float(losses[0]),
            "loss_last": float(torch.stack(losses[-max(1, step // 10):]).mean()),
            "acc_last": history[-1]["acc"], "steps_done": step, "wall_s": time.time() - t0,
            "sequences": len(pool), "history": history}


def train_dflash(target: Target, data: ToyDataset, out: Path, cfg: DFlashTrainConfig,
                 mask_token_id: int, log_every: int | None = None,
                 run: TrainRun | None = None) -> dict:
    """Train one drafter, executed as `run` says; saves it to `out` (z-lab format) and
    returns its metrics (`fit`'s, the config, the captured layer ids, whether compiled)."""
    raw = drafter_config_dict(target.config, num_layers=cfg.num_layers,
                              block_size=cfg.block_size, mask_token_id=mask_token_id,
                              target_layer_ids=cfg.layer_ids(target.config.num_layers),
                              variant=cfg.variant)
    model = TrainableDrafter(raw, target, seed=cfg.seed).to(target.device)
    pool = usable_sequences(data, cfg.block_size)
    if not pool:
        raise ValueError(f"no sequence has {2 * cfg.block_size} continuation tokens")
    gen = torch.Generator(device=target.device).manual_seed(cfg.seed)
    run = run or TrainRun()
    compiled = run.compiling(target.device)

    def step_fn(rows):
        loss, acc = step_loss(model, target, data, rows, cfg, gen, compiled)
        return loss, {"acc": acc}

    # The run's folder names it (ablations/<name>, dflash-b16): parallel runs share a log.
    tag = f"{out.name} ({cfg.variant} B={cfg.block_size})"
    metrics = fit(model, pool, cfg, step_fn, tag, log_every, run.profile_dir)
    model.save(out)
    metrics.update(config=asdict(cfg), compiled=compiled,
                   target_layer_ids=raw["dflash_config"]["target_layer_ids"])
    (out / "metrics.json").write_text(json.dumps(metrics, indent=2))
    return metrics


def config_from_args(args: argparse.Namespace) -> DFlashTrainConfig:
    return DFlashTrainConfig(block_size=args.block, gamma=args.gamma, no_decay=args.no_decay,
                             uniform=args.uniform, num_layers=args.layers,
                             num_features=args.features, num_anchors=args.anchors,
                             batch=args.batch, steps=args.steps, lr=args.lr, seed=args.seed,
                             max_minutes=args.max_minutes, variant=args.variant,
                             chain_depth=args.chain_depth)


def add_arguments(ap: argparse.ArgumentParser) -> None:
    d = DFlashTrainConfig()
    ap.add_argument("--block", type=int, default=d.block_size)
    ap.add_argument("--gamma", type=float, default=None, help="default: 7/5/4 for B=16/10/8")
    ap.add_argument("--no-decay", action="store_true", help="uniform position weights")
    ap.add_argument("--uniform", action="store_true", help="back-to-back blocks, no anchors")
    ap.add_argument("--layers", type=int, default=d.num_layers)
    ap.add_argument("--features", type=int, default=None, help="K captured target layers")
    ap.add_argument("--anchors", type=int, default=d.num_anchors)
    ap.add_argument("--batch", type=int, default=d.batch)
    ap.add_argument("--steps", type=int, default=d.steps)
    ap.add_argument("--lr", type=float, default=d.lr)
    ap.add_argument("--seed", type=int, default=d.seed)
    ap.add_argument("--max-minutes", type=float, default=None, help="wall-time budget")
    ap.add_argument("--variant", choices=VARIANTS, default="dflash",
                    help="ablation drafter (toy/variants.py)")
    ap.add_argument("--chain-depth", type=int, default=None,
                    help="eagle: chain steps trained per anchor (default B-1)")


def main() -> None:
    from reference.loaders import load_target
    from toy.gen_data import load_dataset
    from toy.tokenizer import load_tokenizer

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--target", type=Path, required=True, help="target dir with tokenizer.json")
    ap.add_argument("--data", type=Path, required=True, help="gen_data safetensors file")
    ap.add_argument("--out", type=Path, required=True)
    add_arguments(ap)
    add_run_arguments(ap)
    args = ap.parse_args()
    cuda = torch.cuda.is_available()
    target = load_target(args.target, device="cuda" if cuda else "cpu",
                         dtype=torch.bfloat16 if cuda else torch.float32)
    mask_id = load_tokenizer(args.target / "tokenizer.json").token_to_id(MASK)
    metrics = train_dflash(target, load_dataset(args.data), args.out, config_from_args(args),
                           mask_id, run=run_from_args(args))
    print(json.dumps({k: v for k, v in metrics.items() if k != "history"}))


if __name__ == "__main__":
    main()

