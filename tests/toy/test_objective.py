"""The DFlash training objective: golden layer ids, anchors, and the three known traps.

Traps (docs/dflash.md 2.6): block output k is scored against x_{p+k} (the
same position); a block sees the context strictly before its anchor; the anchor position
(k = 0) carries no loss and the first drafted token weighs 1.
"""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from toy.objective import (
    block_inputs,
    block_loss,
    block_targets,
    build_target_layer_ids,
    default_gamma,
    position_weights,
    random_anchors,
    uniform_anchors,
)


def test_target_layer_ids_golden():
    assert build_target_layer_ids(36, 5) == [1, 9, 17, 25, 33]
    assert build_target_layer_ids(12, 5) == [1, 3, 5, 7, 9]
    assert build_target_layer_ids(6, 3) == [1, 2, 3]
    assert build_target_layer_ids(2, 1) == [1] and build_target_layer_ids(36, 1) == [18]
    with pytest.raises(ValueError, match="num_features"):
        build_target_layer_ids(2, 2)


def test_position_weights_exclude_the_anchor_and_start_at_one():
    w = position_weights(16, 7.0)
    assert w[0] == 0 and w[1] == 1
    assert torch.allclose(w[1:], torch.exp(-torch.arange(15.0) / 7.0))
    assert torch.equal(position_weights(4, None), torch.tensor([0.0, 1.0, 1.0, 1.0]))
    assert [default_gamma(b) for b in (16, 10, 8)] == [7.0, 5.0, 4.0]


def _batch(lens, prompt_lens, width):
    lens, prompt_lens = torch.tensor(lens), torch.tensor(prompt_lens)
    pos = torch.arange(width)
    loss_mask = (pos[None] >= prompt_lens[:, None]) & (pos[None] < lens[:, None])
    ids = 100 + pos.repeat(len(lens), 1) + 1000 * torch.arange(len(lens))[:, None]
    return ids, loss_mask, lens


@given(seed=st.integers(0, 2**16), block=st.integers(2, 9), n=st.integers(1, 12))
def test_random_anchors_are_distinct_sorted_and_inside_the_loss_mask(seed, block, n):
    ids, loss_mask, lens = _batch([30, 21, 9], [5, 12, 2], 30)
    anchors, valid = random_anchors(loss_mask, lens, block, n,
                                    torch.Generator().manual_seed(seed))
    assert anchors.shape == valid.shape == (3, n)
    for b in range(3):
        got = anchors[b][valid[b]].tolist()
        assert got == sorted(set(got))
        room = int(loss_mask[b, : max(0, int(lens[b]) - block + 1)].sum())
        assert len(got) == min(n, room)
        assert all(loss_mask[b, p] and p <= lens[b] - block for p in got)


def test_uniform_anchors_tile_the_continuation():
    ids, loss_mask, lens = _batch([30, 14], [5, 4], 30)
    anchors, valid = uniform_anchors(loss_mask, lens, 4, 8)
    assert anchors[0][valid[0]].tolist() == [5, 9, 13, 17, 21, 25]
    assert anchors[1][valid[1]].tolist() == [4, 8]


def test_trap_labels_are_same_position():
    ids, loss_mask, lens = _batch([20], [3], 20)
    anchors, valid = torch.tensor([[3, 7, 16]]), torch.tensor([[True, True, True]])
    labels, w = block_targets(ids, loss_mask, anchors, valid, position_weights(4, 2.0))
    block_ids, positions = block_inputs(ids, anchors, 4, mask_token_id=1)
    assert torch.equal(labels[0], ids[0, positions[0]])  # x_{p+k}, not x_{p+k+1}
    assert torch.equal(block_ids[0, :, 0], ids[0, anchors[0]])
    assert (block_ids[0, :, 1:] == 1).all()
    # Only the drafted positions are scored; the first drafted token has weight exactly 1.
    assert (w[..., 0] == 0).all() and (w[..., 1] == 1).all()


def test_trap_block_loss_scores_column_i_against_position_i_plus_1():
    ids, loss_mask, lens = _batch([12], [0], 12)
    vocab, block = 1200, 4
    anchors, valid = torch.tensor([[2, 6]]), torch.tensor([[True, True]])
    labels, w = block_targets(ids, loss_mask, anchors, valid, position_weights(block, None))

    def one_hot(shift):  # (1, N, B-1, V) logits
        pos = anchors[0][:, None] + torch.arange(1, block) + shift  # column i -> p + i + 1
        return 30.0 * torch.nn.functional.one_hot(ids[0, pos], vocab).float()[None]

    loss, acc = block_loss(one_hot(0), lambda x: x, labels, w)
    assert acc == 1 and loss < 1e-6
    _, acc_shifted = block_loss(one_hot(1), lambda x: x, labels, w)  # the x_{p+k+1} bug
    assert acc_shifted == 0


def test_masked_positions_and_invalid_blocks_carry_no_loss():
    ids, loss_mask, lens = _batch([10], [2], 10)
    loss_mask[0, 7] = False  # a position outside the loss mask inside a block
    anchors, valid = torch.tensor([[4, 0]]), torch.tensor([[True, False]])
    labels, w = block_targets(ids, loss_mask, anchors, valid, position_weights(4, 2.0))
    # position 7 is outside the loss mask
    assert w[0, 0].tolist() == pytest.approx([0.0, 1.0, math.exp(-0.5), 0.0])
    assert (w[0, 1] == 0).all()  # the invalid block
    logits = torch.zeros(1, 2, 3, 1200, requires_grad=True)
    loss, _ = block_loss(logits, lambda x: x, labels, w)
    loss.backward()
    assert logits.grad[0, 0, 2].abs().sum() == 0 and logits.grad[0, 0, :2].abs().sum() > 0
    assert logits.grad[0, 1].abs().sum() == 0  # the invalid block
