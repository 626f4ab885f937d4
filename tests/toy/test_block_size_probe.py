"""experiments/block_size_probe.py on the micro recipe: the biased float mask is the boolean
mask at zero bias, a bias moves the accuracies, the module's mask is restored, and the
curves plot."""

from __future__ import annotations

import torch

from experiments.block_size_probe import biased_logits, plot, position_accuracy
from reference.loaders import load_target
from reference.methods.dflash import load_dflash
from toy import dense_blocks
from toy.gen_data import load_dataset
from toy.tokenizer import MASK, load_tokenizer


def test_mask_bias_probe(micro, tmp_path):
    out, _ = micro
    target = load_target(out / "target", dtype=torch.float32)
    mask_id = load_tokenizer(out / "tokenizer" / "tokenizer.json").token_to_id(MASK)
    data = load_dataset(out / "data" / "train.safetensors")
    drafter = load_dflash(out / "dflash-b16", target).drafter
    plain = dense_blocks.block_mask
    acc = position_accuracy(drafter, target, data, 8, mask_id)
    assert dense_blocks.block_mask is plain
    assert len(acc) == 7 and all(0.0 <= a <= 1.0 for a in acc)
    plain_logits, _, counted = biased_logits(drafter, target, data, 8, mask_id)
    assert counted.any()
    tiny, _, _ = biased_logits(drafter, target, data, 8, mask_id, mask_bias=1e-12)
    assert dense_blocks.block_mask is plain
    torch.testing.assert_close(tiny, plain_logits, rtol=1e-5, atol=1e-5)
    muted, _, _ = biased_logits(drafter, target, data, 8, mask_id, mask_bias=-60.0)
    assert (muted - plain_logits)[counted].abs().max() > 1e-3  # the masks are attended
    plot({("dflash-b16", 8): acc, ("dflash-b16", 4): acc[:3]}, tmp_path / "probe.png")
    assert (tmp_path / "probe.png").read_bytes()[:4] == b"\x89PNG"
