"""The planned oracle (plan=True): each request commits its plan's lengths, losslessly, so a
run's realized tau is the requested one (sampling: tests/reference/test_sampling_rules.py)."""

from __future__ import annotations

import pytest
import torch

from common.survival import geometric_survival, plan_rounds
from reference.generate import generate
from reference.methods import BuildContext, build
from reference.methods.oracle import OracleProposer


def _prompts(n, vocab, seed=0):
    g = torch.Generator().manual_seed(seed)
    return [torch.randint(0, vocab, (3 + i,), generator=g).tolist() for i in range(n)]


@pytest.mark.parametrize("lookahead", [False, True])
def test_requests_commit_their_plans(target, lookahead):
    """Greedy: AR's tokens, and request i's commit lengths are plan_rounds(curve, 40 - 1,
    (seed, i)) over streams B - 1 tokens longer, sync and overlap rounds alike (tau 3.2: the
    plan's last round commits past the 39th token)."""
    block, seed = 6, 4
    curve = geometric_survival(3.2, block)
    prompts = _prompts(3, target.config.vocab_size)
    streams = generate(target, prompts, max_new_tokens=40 + block - 1).tokens
    proposer = OracleProposer(streams, block, curve, seed=seed, plan=True, plan_tokens=39)
    out = generate(target, prompts, max_new_tokens=40, lookahead=lookahead, proposer=proposer)
    assert out.tokens == [s[:40] for s in streams]
    for i, commits in enumerate(out.accept_lengths):
        assert commits == plan_rounds(curve, 39, (seed, i))
        assert sum(commits) > 39


@pytest.mark.parametrize("tau", [1.5, 4.5])
def test_realized_tau_is_the_requested_one(target, tau):
    """The pooled tau of a run (committed tokens over request rounds) within 1% of the
    spec's tau: 119 commits a request leave |S / R - tau| <= 0.5 / R."""
    prompts = _prompts(2, target.config.vocab_size, seed=1)
    plain = generate(target, prompts, max_new_tokens=120)
    context = BuildContext(prompts, 120)  # the oracle runs its own, longer streams
    spec = f"oracle:tau={tau},block_size=6,seed=2,plan=true"
    out = generate(target, prompts, proposer=build(spec, target, context), max_new_tokens=120)
    assert out.tokens == plain.tokens
    assert abs(out.stats["tau"] / tau - 1) <= 0.01

