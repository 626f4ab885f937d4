"""The dense training forward equals the engine's paged block forward, variant by variant.

toy/dense_blocks.py computes every block of a sequence in one masked attention
call; toy/draft_model.py's `block_logits` runs each block as a paged engine
request (itself checked against the inference draft in test_draft_model.py). On the tiny
random target (fp32, CPU) their logits must agree on every valid block, and the dense mask
must show each block exactly the context before its anchor and its own block.
"""

from __future__ import annotations

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from reference.loaders import load_target
from tests.reference.conftest import write_target
from tests.toy.test_draft_model import BLOCK, MASK_ID, _batch
from toy.dense_blocks import block_mask, dense_block_logits
from toy.draft_model import (
    TrainableDrafter,
    block_layout,
    block_logits,
    drafter_config_dict,
    target_features,
)
from toy.eagle import dense_eagle_hidden
from toy.objective import random_anchors
from toy.variants import context_features
from workbench.numerics import assert_close


@pytest.fixture(scope="module")
def target(tmp_path_factory):
    path = tmp_path_factory.mktemp("dense_target")
    write_target(path)
    return load_target(path)


def _model(target, variant):
    layer_ids = [0] if variant == "no_features" else [0, 2]
    raw = drafter_config_dict(target.config, num_layers=1 if variant == "eagle" else 2,
                              block_size=BLOCK,
                              mask_token_id=MASK_ID, target_layer_ids=layer_ids,
                              variant=variant)
    m = TrainableDrafter(raw, target, seed=5)
    with torch.no_grad():
        for p in m.params:
            p.add_(torch.randn(p.shape, generator=torch.Generator().manual_seed(p.numel()))
                   * 0.2)
    return m


@pytest.mark.parametrize("variant", ["dflash", "no_features", "ar", "fusion", "eagle"])
def test_dense_logits_equal_the_paged_training_forward(target, variant):
    model = _model(target, variant)
    ids, lens, anchors, valid = _batch(3)
    captured = None
    if variant != "no_features":
        captured = target_features(target, ids, lens, model.config.target_layer_ids)
    feats = context_features(variant, target, ids, captured)
    drafter = model.drafter(target)
    with torch.no_grad():
        paged = block_logits(drafter, target, feats,
                             block_layout(ids, anchors, valid, BLOCK, MASK_ID), ids, variant,
                             model.in_proj(target))
        if variant == "eagle":
            dense = target.logits(dense_eagle_hidden(drafter, model.in_proj(target), target,
                                                     ids, feats, anchors, BLOCK))
        else:
            dense = dense_block_logits(drafter, target, feats, ids, lens, anchors, BLOCK,
                                       MASK_ID, variant)
    assert dense.shape == (*anchors.shape, BLOCK - 1, target.config.vocab_size)
    assert_close(dense[valid], paged, kind="reduction", name=variant)


@pytest.mark.parametrize("depth", [1, 2, 5])
def test_a_shorter_eagle_chain_is_the_full_chain_cut(target, depth):
    """chain_depth trains the first steps of the same chain: its columns are the full one's."""
    model = _model(target, "eagle")
    ids, lens, anchors, _ = _batch(4)
    feats = target_features(target, ids, lens, model.config.target_layer_ids)
    drafter, in_proj = model.drafter(target), model.in_proj(target)
    with torch.no_grad():
        full = dense_eagle_hidden(drafter, in_proj, target, ids, feats, anchors, BLOCK)
        cut = dense_eagle_hidden(drafter, in_proj, target, ids, feats, anchors, BLOCK, depth)
    assert cut.shape == (*anchors.shape, min(depth, BLOCK - 1), target.config.hidden_size)
    assert_close(cut, full[:, :, :depth], name=f"depth {depth}")


@given(seed=st.integers(0, 2**16), bs=st.integers(1, 3), s=st.integers(2, 30),
       block=st.integers(1, 6), n=st.integers(1, 6), causal=st.booleans(),
       fusion=st.booleans())
def test_mask_shows_each_block_its_context_and_itself(seed, bs, s, block, n, causal, fusion):
    g = torch.Generator().manual_seed(seed)
    lens = torch.randint(1, s + 1, (bs,), generator=g)
    loss_mask = torch.rand(bs, s, generator=g) < 0.7
    anchors, _ = random_anchors(loss_mask, lens, block, n, g)
    mask = block_mask(anchors, lens, s, block, causal_block=causal, context_queries=fusion)
    off = s if fusion else 0
    assert mask.shape == (bs, off + n * block, s + n * block)
    for b in range(bs):
        for m in range(n):
            p = int(anchors[b, m])
            for j in range(block):
                seen = mask[b, off + m * block + j].nonzero().flatten().tolist()
                own = range(s + m * block, s + m * block + (j + 1 if causal else block))
                assert seen == list(range(p)) + list(own)
        for t in range(off):
            seen = mask[b, t].nonzero().flatten().tolist()
            assert seen == list(range(min(t + 1, int(lens[b]))))
