"""Proposers share CUDA graphs by `graph_key`: a fresh proposer over the same drafter replays
the graphs the first one captured (so a benchmark's timed run, or a sweep's next point,
captures nothing), and proposers that read different weights or buffers never share one.

On the CPU the graph cache calls each function directly, so the tests emulate what a replay
does on CUDA: whatever function runs under a key and input shapes, the work is the first
one's (its kernels and the buffers they were captured with)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from common.engine_options import EngineOptions
from reference.cuda_graphs import GraphCache
from reference.generate import generate
from reference.loaders import load_target, random_target
from reference.methods.dflash import load_dflash
from reference.methods.dflash_drafter import DFlashProposer, random_dflash
from reference.methods.oracle import OracleProposer
from reference.methods.variants import FusionProposer, NoFeatureProposer

ZOO = Path(__file__).resolve().parents[2] / "experiments" / "zoo"


def _replay_first(self, key, fn, *inputs):
    """GraphCache.run as a CUDA replay behaves: the first function seen for (key, shapes)."""
    full = GraphCache.full_key(key, inputs)
    first = self.__dict__.setdefault("first", {}).setdefault(full, fn)
    return first(*inputs)


@pytest.mark.parametrize("fused", [False, True])
def test_a_second_proposer_over_one_drafter_replays_the_first_ones_graphs(monkeypatch, fused):
    """The zoo pair (real acceptance, so the drafts decide every commit length): under
    replay semantics a second proposer's rounds equal a run without graphs, and add no key."""
    from toy.eval_sets import held_out_prompts

    prompts = held_out_prompts(ZOO / "tokenizer" / "tokenizer.json", "test", 3)
    kw = dict(max_new_tokens=32)
    plain = load_target(ZOO / "target", dtype=torch.float32)
    want = generate(plain, prompts, proposer=load_dflash(ZOO / "dflash-b16", plain), **kw)
    assert sum(map(sum, want.accept_lengths)) > 2 * sum(map(len, want.accept_lengths))

    monkeypatch.setattr(GraphCache, "run", _replay_first)
    target = load_target(ZOO / "target", dtype=torch.float32,
                         options=EngineOptions(fused_commit=fused))
    first = load_dflash(ZOO / "dflash-b16", target)
    generate(target, prompts, proposer=first, **kw)
    keys = set(target.runtime.graphs.first)
    again = generate(target, prompts, proposer=DFlashProposer(first.drafter, target), **kw)
    assert set(target.runtime.graphs.first) == keys
    assert again.tokens == want.tokens and again.accept_lengths == want.accept_lengths
    assert any(k[0][0] == "verify_commit" for k in keys) == fused


def test_keys_differ_when_weights_class_or_block_differ():
    target = random_target("tiny", dtype=torch.float32)
    a = random_dflash("tiny", target, seed=1)
    b = random_dflash("tiny", target, seed=1)  # same weights, another drafter object
    assert DFlashProposer(a.drafter, target).graph_key == a.graph_key
    assert b.graph_key != a.graph_key
    assert FusionProposer(a.drafter, target).graph_key != a.graph_key
    assert DFlashProposer(a.drafter, target, block_size=4).graph_key != a.graph_key
    streams, block = [[1, 2, 3]], a.block_size
    assert OracleProposer(streams, block, None, shadow=a).graph_key == (
        OracleProposer(streams, block, None, shadow=DFlashProposer(a.drafter, target)).graph_key)
    assert OracleProposer(streams, block, None, shadow=b).graph_key != (
        OracleProposer(streams, block, None, shadow=a).graph_key)


def test_proposers_with_state_of_their_own_keep_their_own_key_and_commit():
    target = random_target("tiny", dtype=torch.float32)
    a = random_dflash("tiny", target)
    no_feature = NoFeatureProposer(a.drafter, target)
    assert not no_feature.commit_in_graph  # its commit reads the candidates it kept
    assert OracleProposer([[1]], 16, None).graph_key != a.graph_key


def test_eagle_keeps_its_own_graphs_and_commit():
    """Eagle's graphs read its own `_prev` and `in_proj`: a second Eagle proposer over the same
    drafter must not replay the first one's; its commit reads the candidates it kept."""
    from reference.methods.eagle import EagleProposer

    target = random_target("tiny", dtype=torch.float32)
    a = random_dflash("tiny", target)
    in_proj = torch.zeros(target.config.hidden_size, 2 * target.config.hidden_size)
    first, second = (EagleProposer(a.drafter, target, in_proj) for _ in range(2))
    assert first.graph_key != second.graph_key
    assert first.graph_key != a.graph_key
    assert not first.commit_in_graph
