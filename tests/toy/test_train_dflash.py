"""Drafter training on a tiny random target: what it learns is exactly what the engine accepts.

The target's greedy continuations are the data; a drafter of every variant (the full method,
the ablations of toy/variants.py, the EAGLE baseline of eagle.py) trained a few
steps on them must (a) lower its loss, (b) leave generate lossless, and (c) have, at every
engine round whose block lies inside the data, the commit length that its training forward
predicts teacher-forced at that anchor (leading drafts equal to the same-position labels,
plus one): no train/inference mismatch in labels, context, positions, injection or attention.
"""

from __future__ import annotations

import dataclasses

import pytest
import torch

from reference.generate import generate
from reference.loaders import load_target
from tests.reference.conftest import TINY, write_target
from toy.draft_model import block_layout, block_logits, target_features
from toy.gen_data import continue_prompts, load_dataset, save_dataset
from toy.train_dflash import DFlashTrainConfig, train_dflash
from toy.variants import VARIANTS, context_features, load_variant

MASK_ID, BLOCK, NEW = TINY["vocab_size"] - 1, 4, 20
CFG = DFlashTrainConfig(block_size=BLOCK, num_layers=1, num_anchors=8, batch=8, steps=30,
                        lr=3e-3)


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    """The tiny target and its greedy continuations of random prompts (the data)."""
    root = tmp_path_factory.mktemp("tiny_dflash")
    write_target(root / "target")
    target = load_target(root / "target")
    g = torch.Generator().manual_seed(0)
    prompts = [torch.randint(2, MASK_ID, (int(n),), generator=g).tolist()
               for n in torch.randint(6, 11, (24,), generator=g)]
    conts = continue_prompts(target, prompts, max_new=NEW, batch_size=24)
    save_dataset(root / "data.safetensors", prompts, conts, {"seed": 0})
    return root, target, load_dataset(root / "data.safetensors"), prompts


@pytest.fixture(scope="module", params=VARIANTS)
def trained(request, world):
    root, target, data, prompts = world
    cfg = dataclasses.replace(CFG, variant=request.param)
    metrics = train_dflash(target, data, root / request.param, cfg, MASK_ID)
    return target, data, prompts, metrics, load_variant(root / request.param, target)


def test_loss_falls_and_generate_stays_lossless(trained):
    target, _, prompts, metrics, proposer = trained
    assert metrics["loss_last"] < metrics["loss_first"]
    assert metrics["steps_done"] == CFG.steps
    spec = generate(target, prompts, proposer=proposer, max_new_tokens=NEW)
    assert spec.tokens == generate(target, prompts, max_new_tokens=NEW).tokens


def test_engine_commit_lengths_equal_the_training_forward(trained):
    target, data, prompts, metrics, proposer = trained
    ids, _, lens = data.batch(list(range(len(data))))
    s = ids.shape[1]
    anchors = torch.arange(s).repeat(len(data), 1)
    valid = anchors <= (lens - BLOCK)[:, None]
    with torch.no_grad():
        layout = block_layout(ids, torch.where(valid, anchors, 0), valid, BLOCK, MASK_ID)
        variant = metrics["config"]["variant"]
        feats = (context_features(variant, target, ids, None) if variant == "no_features"
                 else target_features(target, ids, lens, proposer.target_layer_ids))
        logits = block_logits(proposer.drafter, target, feats, layout, ids, variant,
                              getattr(proposer, "in_proj", None))
    predicted = {}
    for m, (b, p) in enumerate(layout.index.tolist()):
        hits = (logits[m].argmax(-1) == ids[b, p + 1 : p + BLOCK]).int()
        predicted[(b, p)] = 1 + int(hits.cumprod(0).sum())
    spec = generate(target, prompts, proposer=proposer, max_new_tokens=NEW)
    compared = []
    for b, commits in enumerate(spec.accept_lengths):
        p = int(data.prompt_lens[b])  # the first anchor: the first generated token
        for c in commits:
            if (b, p) in predicted:
                compared.append((predicted[(b, p)], c))
            p += c
    assert len(compared) > 50
    assert all(want == got for want, got in compared)
    assert len({got for _, got in compared}) >= 3  # partial acceptance occurs: not vacuous


def test_ablation_flags_and_time_budget_train(world, tmp_path):
    _, target, data, _ = world
    with pytest.raises(ValueError):
        dataclasses.replace(CFG, chain_depth=2)  # the EAGLE chain's setting only
    for flags in ({"uniform": True}, {"no_decay": True}, {"gamma": 2.0, "num_layers": 2},
                  {"variant": "eagle", "chain_depth": 1}):
        cfg = dataclasses.replace(CFG, steps=2, **flags)
        m = train_dflash(target, data, tmp_path / str(len(flags)), cfg, MASK_ID)
        assert m["steps_done"] == 2
    budget = dataclasses.replace(CFG, steps=10**6, max_minutes=0.5 / 60)
    assert train_dflash(target, data, tmp_path / "budget", budget, MASK_ID)["steps_done"] < 10**6


def test_compiled_draft_loss_equals_eager(world):
    """The --compile path: the same loss and gradients on one padded batch."""
    from toy import train_dflash as td
    from toy.draft_model import TrainableDrafter, drafter_config_dict

    _, target, data, _ = world
    raw = drafter_config_dict(target.config, num_layers=1, block_size=BLOCK,
                              mask_token_id=MASK_ID, target_layer_ids=CFG.layer_ids(
                                  target.config.num_layers))
    model = TrainableDrafter(raw, target, seed=0)
    rows = list(range(8))
    results = []
    for compiled in (False, True):
        model.zero_grad(set_to_none=True)
        gen = torch.Generator().manual_seed(0)
        loss, acc = td.step_loss(model, target, data, rows, CFG, gen, compiled)
        loss.backward()
        results.append((loss.detach(), acc, [p.grad.clone() for p in model.parameters()]))
    from torch._dynamo.utils import counters

    assert counters["stats"]["unique_graphs"] >= 1  # compiled, not the eager fallback
    (l0, a0, g0), (l1, a1, g1) = results
    torch.testing.assert_close(l1, l0, rtol=1e-5, atol=1e-6)
    assert a1 == a0
    for x, y in zip(g1, g0):
        torch.testing.assert_close(x, y, rtol=1e-4, atol=1e-6)


def test_training_compiles_on_cuda_unless_told():
    """No flag: compiled on CUDA only; --no-compile / --compile decide on any device; the
    flags round-trip through TrainRun.argv (what recipe and ablations give their children)."""
    import argparse

    from toy import train_dflash as td

    cpu, cuda = torch.device("cpu"), torch.device("cuda", 0)
    for argv, want in (([], (False, True)), (["--no-compile"], (False, False)),
                       (["--compile", "--profile", "p"], (True, True))):
        ap = argparse.ArgumentParser()
        td.add_run_arguments(ap)
        run = td.run_from_args(ap.parse_args(argv))
        assert (run.compiling(cpu), run.compiling(cuda)) == want
        assert run.argv() == argv
        assert run.profile_dir == ("p" if "--profile" in argv else None)
