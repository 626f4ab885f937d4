"""The training forward of the DFlash drafter is the inference forward, block by block.

Checked on the reference tests' tiny random target (fp32, CPU): training logits equal the
dense recomputation of the injected-KV draft (tests/reference/test_dflash.py), the request
layout shows each block only the context strictly before its anchor and itself, gradients
reach every parameter, and a saved drafter loads with `load_dflash` to the same logits.
"""

from __future__ import annotations

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from kernels.paged_attention.ref import visible_keys
from reference.loaders import load_target
from reference.methods.dflash import load_dflash
from tests.reference.conftest import TINY, write_target
from tests.reference.test_dflash import dense_draft_logits
from toy.draft_model import (
    TrainableDrafter,
    block_layout,
    block_logits,
    drafter_config_dict,
    target_features,
)
from toy.objective import random_anchors
from workbench.numerics import assert_close

MASK_ID, BLOCK, S = TINY["vocab_size"] - 1, 4, 20


@pytest.fixture(scope="module")
def target_and_hf(tmp_path_factory):
    path = tmp_path_factory.mktemp("toy_target")
    hf = write_target(path)
    return load_target(path), hf


@pytest.fixture(scope="module")
def target(target_and_hf):
    return target_and_hf[0]


@pytest.fixture(scope="module")
def model(target):
    raw = drafter_config_dict(target.config, num_layers=2, block_size=BLOCK,
                              mask_token_id=MASK_ID, target_layer_ids=[0, 2])
    m = TrainableDrafter(raw, target, seed=3)
    with torch.no_grad():  # away from the near-identity init, so every path matters
        for p in m.params:
            p.add_(torch.randn(p.shape, generator=torch.Generator().manual_seed(p.numel()))
                   * 0.2)
    return m


def _batch(seed=0):
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(2, MASK_ID, (2, S), generator=g)
    lens = torch.tensor([S, 15])
    pos = torch.arange(S)
    loss_mask = (pos >= 5)[None] & (pos[None] < lens[:, None])
    anchors, valid = random_anchors(loss_mask, lens, BLOCK, 8, g)
    return ids, lens, anchors, valid


def test_features_are_hf_hidden_states_of_layer_id_plus_one(target_and_hf):
    target, hf = target_and_hf
    ids, lens, _, _ = _batch()
    feats = target_features(target, ids, lens, (1, 0))  # any order; not the last layer
    with torch.no_grad():
        states = hf(input_ids=ids[1:, :15], output_hidden_states=True).hidden_states
    h = target.config.hidden_size
    for k, layer in enumerate((1, 0)):
        assert_close(feats[1, :15, k * h : (k + 1) * h], states[layer + 1][0],
                     kind="reduction", name=f"layer {layer}")


def test_training_logits_equal_the_dense_inference_draft(target, model):
    ids, lens, anchors, valid = _batch()
    feats = target_features(target, ids, lens, model.config.target_layer_ids)
    drafter = model.drafter(target)
    layout = block_layout(ids, anchors, valid, BLOCK, MASK_ID)
    assert layout.index.shape[0] == int(valid.sum()) and valid.sum() < valid.numel()
    with torch.no_grad():
        got = block_logits(drafter, target, feats, layout)
    for m, (b, j) in enumerate(layout.index.tolist()):
        p = int(anchors[b, j])
        block_ids = torch.tensor([int(ids[b, p])] + [MASK_ID] * (BLOCK - 1))
        want = dense_draft_logits(target, drafter, feats[b, :p], block_ids, p)
        assert_close(got[m], want, kind="reduction", name=f"block {b},{j} at {p}")


def test_trap_layout_shows_context_strictly_before_the_anchor(target, model):
    ids, lens, anchors, valid = _batch(1)
    layout = block_layout(ids, anchors, valid, BLOCK, MASK_ID)
    own_slots = set()
    for m, (b, j) in enumerate(layout.index.tolist()):
        p = int(anchors[b, j])
        row = layout.req_to_token[layout.req_rows[m]].long()
        assert int(layout.kv_lens[m]) == p + BLOCK  # keys w < p + B are visible
        assert row[:p].tolist() == [1 + b * S + w for w in range(p)]  # own context, w < p
        assert torch.equal(row[p : p + BLOCK], layout.cache_loc[m])  # its own block
        assert layout.positions[m].tolist() == list(range(p, p + BLOCK))
        own_slots.update(layout.cache_loc[m].tolist())
    assert len(own_slots) == layout.cache_loc.numel()  # blocks never share a slot
    assert min(own_slots) > 2 * S  # and never a context slot


@given(seed=st.integers(0, 2**16), bs=st.integers(1, 4), s=st.integers(2, 40),
       block=st.integers(1, 9), n=st.integers(1, 10), causal=st.booleans())
def test_trap_every_block_sees_exactly_its_context_and_itself(seed, bs, s, block, n, causal):
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(2, 40, (bs, s), generator=g)
    lens = torch.randint(1, s + 1, (bs,), generator=g)
    loss_mask = torch.rand(bs, s, generator=g) < 0.7
    anchors, valid = random_anchors(loss_mask, lens, block, n, g)
    layout = block_layout(ids, anchors, valid, block, mask_token_id=1)
    table = layout.req_to_token[layout.req_rows].long()  # (M, S)
    seen = visible_keys(layout.positions, layout.kv_lens, s, causal=causal, window=None)
    seen = seen.expand(*layout.positions.shape, s)  # (M, B, S); broadcast when not causal
    for m, (b, j) in enumerate(layout.index.tolist()):
        p = int(anchors[b, j])
        for k in range(block):
            slots = set(table[m][seen[m, k]].tolist())
            own = layout.cache_loc[m, : (k + 1 if causal else block)].tolist()
            assert slots == {1 + b * s + w for w in range(p)} | set(own)


def test_trap_block_output_ignores_the_anchor_feature_and_later_tokens(target, model):
    ids, lens, _, _ = _batch(2)
    anchors, valid = torch.tensor([[9], [6]]), torch.ones(2, 1, dtype=torch.bool)
    feats = target_features(target, ids, lens, model.config.target_layer_ids)
    drafter = model.drafter(target)

    def logits(f, x):
        with torch.no_grad():
            return block_logits(drafter, target, f, block_layout(x, anchors, valid, BLOCK,
                                                                 MASK_ID))

    base = logits(feats, ids)
    later = feats.clone()
    later[0, 9:] += 5.0  # the anchor's own target state and everything after it
    changed_ids = ids.clone()
    changed_ids[0, 10:] = 2  # tokens after the anchor (the labels)
    assert torch.equal(logits(later, changed_ids)[0], base[0])
    before = feats.clone()
    before[0, 8] += 5.0  # the last context token
    assert not torch.allclose(logits(before, ids)[0], base[0])
    assert torch.equal(logits(before, ids)[1], base[1])  # sequences are isolated too


def test_gradients_reach_every_parameter_and_save_loads(target, model, tmp_path):
    ids, lens, anchors, valid = _batch(3)
    feats = target_features(target, ids, lens, model.config.target_layer_ids)
    layout = block_layout(ids, anchors, valid, BLOCK, MASK_ID)
    model.zero_grad()
    block_logits(model.drafter(target), target, feats, layout).square().mean().backward()
    assert all(p.grad is not None and p.grad.abs().sum() > 0 for p in model.params)
    assert target.embed.grad is None and target.head.grad is None
    model.save(tmp_path, dtype=torch.float32)
    loaded = load_dflash(tmp_path, target)
    assert loaded.block_size == BLOCK and loaded.mask_token_id == MASK_ID
    with torch.no_grad():
        want = block_logits(model.drafter(target), target, feats, layout)
        got = block_logits(loaded.drafter, target, feats, layout)
    assert torch.equal(got, want)
