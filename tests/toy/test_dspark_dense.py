"""DSpark's dense training loss equals the paged computation it replaced.

toy/train_dspark.py used to run every block of gamma tokens as a paged engine
request (context K/V injected by `kv_materialize_ref`, then the inference `dspark_hidden`
over each block's request row). It now takes every slot of `dense_block_hidden`
(all_columns=True). On the tiny random target (fp32, CPU) the two losses, their parts and
their gradients must agree; the paged computation lives on here as the oracle.
"""

from __future__ import annotations

import pytest
import torch

from kernels.kv_materialize.ref import kv_materialize_ref
from reference.loaders import load_target
from reference.methods.dflash_drafter import context_hidden
from reference.methods.dspark_proposer import dspark_hidden
from reference.model import ForwardBatch
from tests.reference.conftest import TINY, write_target
from toy.draft_model import block_layout, drafter_config_dict
from toy.objective import block_targets, position_weights, random_anchors
from toy.train_dspark import (
    DSparkTrainConfig,
    TrainableDSpark,
    dspark_loss,
    loss_terms,
    target_pass,
)
from workbench.numerics import assert_close

MASK_ID, S = TINY["vocab_size"] - 1, 24


@pytest.fixture(scope="module")
def target(tmp_path_factory):
    path = tmp_path_factory.mktemp("dspark_dense_target")
    write_target(path)
    return load_target(path)


def _model(target, cfg: DSparkTrainConfig) -> TrainableDSpark:
    raw = drafter_config_dict(target.config, num_layers=2, block_size=cfg.block_size,
                              mask_token_id=MASK_ID, target_layer_ids=[0, 2])
    raw["architectures"] = ["DSparkDraftModel"]
    raw["dspark_config"] = {"markov_rank": cfg.markov_rank, "gamma": cfg.gamma}
    model = TrainableDSpark(raw, target, seed=3)
    with torch.no_grad():  # W2 starts at zero: perturb everything so the Markov bias acts
        for i, p in enumerate(model.parameters()):
            p.add_(torch.randn(p.shape, generator=torch.Generator().manual_seed(i)) * 0.2)
    return model


def _paged_loss(model, target, ids, loss_mask, lens, anchors, valid, cfg):
    """The previous step_loss body: block_layout + injected context + dspark_hidden."""
    labels, w = block_targets(ids, loss_mask, anchors, valid,
                              position_weights(cfg.block_size, cfg.loss_decay))
    layout = block_layout(ids, anchors, valid, cfg.gamma, model.config.mask_token_id)
    features, t_logits = target_pass(target, ids, lens, model.config.target_layer_ids)
    drafter = model.drafter(target)
    dcfg = drafter.config.model
    bs, s, _ = features.shape
    pool = [torch.zeros(dcfg.num_layers, 1 + bs * s + layout.cache_loc.numel(),
                        dcfg.num_kv_heads, dcfg.head_dim) for _ in range(2)]
    kv_materialize_ref(context_hidden(drafter, features.reshape(bs * s, -1)), drafter.w_kv,
                       drafter.k_norm, drafter.cos_sin, torch.arange(s).repeat(bs),
                       1 + torch.arange(bs * s), pool[0], pool[1], eps=dcfg.rms_norm_eps)
    batch = ForwardBatch(layout.positions, layout.cache_loc, layout.req_rows, layout.kv_lens)
    h = dspark_hidden(drafter, target, layout.block_ids, batch, layout.req_to_token, *pool)
    seq, n = layout.index[:, 0], layout.index[:, 1]
    prev = ids[seq[:, None], layout.positions]
    p_t = t_logits[seq[:, None], layout.positions].float().softmax(-1)
    return loss_terms(target, model.heads(target, drafter), h, prev, labels[seq, n, 1:],
                      w[seq, n, 1:], p_t, cfg)


@pytest.mark.parametrize("gamma", [3, 6])
def test_dense_dspark_loss_equals_the_paged_computation(target, gamma):
    cfg = DSparkTrainConfig(gamma=gamma, markov_rank=8, num_anchors=8)
    model = _model(target, cfg)
    g = torch.Generator().manual_seed(gamma)
    ids = torch.randint(2, MASK_ID, (3, S), generator=g)
    lens = torch.tensor([S, 13, 20])
    pos = torch.arange(S)
    loss_mask = (pos >= 4)[None] & (pos[None] < lens[:, None])
    anchors, valid = random_anchors(loss_mask, lens, cfg.block_size, cfg.num_anchors, g)
    assert valid.any() and not valid.all()  # invalid blocks are computed, then dropped
    results = []
    for fn in (_paged_loss, dspark_loss):
        model.zero_grad(set_to_none=True)
        loss, parts = fn(model, target, ids, loss_mask, lens, anchors, valid, cfg)
        loss.backward()
        grads = [p.grad.clone() for p in model.parameters()]
        results.append((loss.detach(), parts, grads))
    (lp, pp, gp), (ld, pd, gd) = results
    assert_close(ld, lp, kind="reduction", name="loss")
    for k in pp:
        assert pd[k] == pytest.approx(pp[k], rel=1e-4, abs=1e-6), k
    for i, (a, b) in enumerate(zip(gd, gp, strict=True)):
        assert_close(a, b, kind="reduction", name=f"grad {i}")
