"""Why table 8's asymmetry does not reproduce on the toy: per-position accuracy of each
drafter's training forward (fp32) at its own and the other block size.

    python -m experiments.block_size_probe --artifacts experiments/zoo --out D [--prompts 96]

On the toy the B = 16 drafter tested at B = 8 loses most of its position-1 acceptance
(alpha_1; the acceptance runs' READMEs under benchmarks/ hold the numbers). One candidate
cause: a query's softmax mass on the in-block mask keys, whose values are identical in the
first layer, scales with their count (15 at B = 16, 7 at B = 8). The probe tests it by
adding log((B_train - 1) / (B_test - 1)) to every in-block mask key's attention logit, which
gives the test block the training block's mask mass. If the accuracy comes back, the mask
count explains the collapse; if not, the drafter has learned its position from the block's
extent. Each drafter is also read at every test B in {4, 8, 16}, each position k:
D/block_size_probe.png draws the curves. Data: the target's greedy continuations of
--prompts training prompts (gen_data, seed 5), anchors as in training (random_anchors, seed
0). Writes D/block_size_probe.md (and prints it) and D/block_size_probe.png.
"""

from __future__ import annotations

import argparse
import math
from pathlib import Path

import torch

from reference.loaders import load_target
from reference.methods.dflash import load_dflash
from toy import dense_blocks
from toy.draft_model import target_features
from toy.gen_data import gen_data, load_dataset
from toy.objective import block_targets, position_weights, random_anchors
from toy.tokenizer import MASK, load_tokenizer

POSITIONS = 7  # the table's k = 1..7 (the plot has every k)
TEST_BLOCKS = (4, 8, 16)


def biased_logits(drafter, target, data, block_size: int, mask_id: int,
                  mask_bias: float = 0.0, anchors_per_seq: int = 16):
    """The training forward's draft logits (bs, N, B-1, V) over every sequence of `data`,
    with mask_bias added to the attention logit of every in-block mask key (j >= 1), and
    their labels (bs, N, B-1) and counted (bs, N, B-1) bool (valid, in the loss)."""
    ids, loss_mask, lens = data.batch(list(range(len(data))))
    gen = torch.Generator().manual_seed(0)
    anchors, valid = random_anchors(loss_mask, lens, block_size, anchors_per_seq, gen)
    labels, w = block_targets(ids, loss_mask, anchors, valid,
                              position_weights(block_size, None))
    features = target_features(target, ids, lens, tuple(drafter.config.target_layer_ids))
    plain_mask = dense_blocks.block_mask

    def biased_mask(anchors, lens, s, block_size, **kw):
        allowed = plain_mask(anchors, lens, s, block_size, **kw)
        jj = torch.arange(block_size).repeat(anchors.shape[1])
        mask_key = torch.cat([torch.zeros(s, dtype=torch.bool), jj >= 1])
        bias = torch.zeros(allowed.shape).masked_fill(~allowed, float("-inf"))
        return bias + mask_bias * (allowed & mask_key[None, None, :])

    dense_blocks.block_mask = biased_mask if mask_bias else plain_mask
    try:
        with torch.no_grad():
            logits = dense_blocks.dense_block_logits(drafter, target, features, ids, lens,
                                                     anchors, block_size, mask_id, "dflash")
    finally:
        dense_blocks.block_mask = plain_mask
    return logits, labels[:, :, 1:], w[:, :, 1:] > 0


def position_accuracy(*args, **kwargs) -> list[float]:
    """Top-1 accuracy of draft positions k = 1..B-1 (`biased_logits`' arguments)."""
    logits, labels, counted = biased_logits(*args, **kwargs)
    right = (logits.argmax(-1) == labels) & counted
    return (right.sum((0, 1)) / counted.sum((0, 1)).clamp(min=1)).tolist()


def plot(curves: dict[tuple[str, int], list[float]], out: Path) -> None:
    """Accuracy against k, one panel per drafter, one line per test B."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = list(dict.fromkeys(name for name, _ in curves))
    fig, axes = plt.subplots(1, len(names), figsize=(5 * len(names), 3.6), sharey=True,
                             squeeze=False)
    for ax, name in zip(axes[0], names):
        for (drafter, test_b), acc in sorted(curves.items()):
            if drafter == name:
                ax.plot(range(1, len(acc) + 1), acc, marker="o", ms=3, label=f"test B = {test_b}")
        ax.set(title=name, xlabel="block position k", ylim=(0, 1))
        ax.legend(fontsize=8)
    axes[0, 0].set_ylabel("top-1 accuracy (training forward)")
    fig.tight_layout()
    fig.savefig(out, dpi=120)
    plt.close(fig)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--artifacts", type=Path, default=Path("experiments/zoo"))
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--prompts", type=int, default=96)
    ap.add_argument("--max-files", type=int, default=None)
    args = ap.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    target = load_target(args.artifacts / "target", dtype=torch.float32)
    tok = load_tokenizer(args.artifacts / "tokenizer" / "tokenizer.json")
    data_path = args.out / "data.safetensors"
    gen_data(target, tok, data_path, num_prompts=args.prompts, min_len=64, max_len=128,
             max_new=96, batch_size=48, seed=5, max_files=args.max_files)
    data = load_dataset(data_path)
    lines = ["| drafter | test B | mask-key bias | " + " | ".join(
        f"acc k={k}" for k in range(1, POSITIONS + 1)) + " |", "| --- " * (3 + POSITIONS) + "|"]
    curves = {}
    for name, other in (("dflash-b16", 8), ("dflash-b8", 16)):
        drafter = load_dflash(args.artifacts / name, target).drafter
        trained = drafter.config.block_size
        runs = [(b, 0.0) for b in TEST_BLOCKS] + [(other, math.log((trained - 1) / (other - 1)))]
        for test_b, bias in runs:
            acc = position_accuracy(drafter, target, data, test_b, tok.token_to_id(MASK), bias)
            if not bias:
                curves[name, test_b] = acc
            cells = [f"{a:.2f}" for a in acc[:POSITIONS]] + [""] * (POSITIONS - len(acc))
            lines.append(f"| {name} | {test_b} | {bias:+.2f} | " + " | ".join(cells) + " |")
    report = "\n".join(lines) + "\n"
    (args.out / "block_size_probe.md").write_text(report)
    plot(curves, args.out / "block_size_probe.png")
    data_path.unlink()
    print(report)


if __name__ == "__main__":
    main()
