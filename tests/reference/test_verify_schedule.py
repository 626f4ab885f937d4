"""The engine's drafts by batch size (`Proposer.verify_schedule`, vLLM's `[lo, hi, K]` rows of
common/batch_schedule.py): the block each round takes, the option in a method spec, and
greedy decoding that stays lossless while rounds of a large batch verify shorter blocks."""

from __future__ import annotations

import pytest
import torch

from reference import ops
from reference.engine import Engine
from reference.generate import generate
from reference.loaders import random_target
from reference.methods import BuildContext, MethodSpec, build
from reference.proposers import Proposer, parse_verify_schedule


def test_block_at_follows_the_schedule():
    """Rows [1, 15, 15], [16, 63, 9], [64, 1024, 5] at B = 16: blocks of 16 up to 15 live
    requests, 10 from 16, 6 from 64 (and past the table); K + 1 capped at B."""
    p = Proposer()
    p.block_size = 16
    p.verify_schedule = parse_verify_schedule([[1, 15, 15], [16, 63, 9], [64, 1024, 5]])
    assert [p.block_at(n) for n in (1, 8, 15, 16, 32, 63, 64, 4096)] == [16, 16, 16, 10, 10,
                                                                         10, 6, 6]
    p.verify_schedule = parse_verify_schedule([[1, 1024, 40]])
    assert p.block_at(3) == 16
    assert Proposer().block_at(64) == 1  # no schedule: the block size


def test_the_option_takes_json_rows_and_refuses_bad_ones():
    spec = MethodSpec.parse("oracle:tau=6.5,verify_schedule=[[1,15,15],[16,1024,9]],seed=3")
    assert spec.kwargs == {"tau": 6.5, "seed": 3,
                           "verify_schedule": ((1, 15, 15), (16, 1024, 9))}
    assert MethodSpec.parse(str(spec)) == spec and hash(spec)
    assert parse_verify_schedule(None) is None
    with pytest.raises(ValueError, match="K = 0"):
        parse_verify_schedule([[1, 8, 7], [9, 1024, 0]])
    with pytest.raises(ValueError, match="starts at batch"):
        parse_verify_schedule([[2, 8, 7]])


@pytest.fixture(scope="module")
def tiny():
    target = random_target("tiny", device="cpu", dtype=torch.float32)
    return target, build(MethodSpec.of("dflash", random="tiny"), target)


def _rounds(monkeypatch) -> list[tuple[int, int]]:
    """(live requests, block) of every engine round from here on."""
    seen, live, real_round, real_prepare = [], [], Engine.round, ops.prepare_block

    def spy_round(self, batch, *args, **kwargs):
        live.append(batch.live)
        return real_round(self, batch, *args, **kwargs)

    def spy_prepare(*args, block_size, **kwargs):
        seen.append((live[-1], block_size))
        return real_prepare(*args, block_size=block_size, **kwargs)

    monkeypatch.setattr(Engine, "round", spy_round)
    monkeypatch.setattr(ops, "prepare_block", spy_prepare)
    return seen


@pytest.mark.parametrize("lookahead", [False, True])
def test_rounds_take_the_schedule_and_greedy_tokens_stay_plain(tiny, monkeypatch, lookahead):
    """Four requests with the oracle at tau 4 (B = 8) and the real drafter's work as its
    shadow, rows [[1,3,7],[4,1024,2]]: a round of 4 live requests verifies 3 tokens, of
    fewer (ragged ends) 8. Greedy tokens equal plain decoding's."""
    target, drafter = tiny
    prompts = [list(range(3, 15)), list(range(20, 29)), list(range(40, 46)), [7, 8, 9]]
    plain = generate(target, prompts, max_new_tokens=40)
    context = BuildContext(prompts, 40, plain.tokens, drafter)
    spec = "oracle:tau=4.0,block_size=8,shadow=true,verify_schedule=[[1,3,7],[4,1024,2]]"
    generate(target, prompts, proposer=build(spec, target, context), max_new_tokens=40,
             lookahead=lookahead)
    seen = _rounds(monkeypatch)
    out = generate(target, prompts, proposer=build(spec, target, context), max_new_tokens=40,
                   lookahead=lookahead, check=True)
    assert out.tokens == plain.tokens
    assert seen and all(block == (3 if live >= 4 else 8) for live, block in seen)
    assert {3, 8} <= {block for _, block in seen}  # both blocks ran


def test_rounds_of_short_blocks_commit_at_most_the_block(tiny):
    """The oracle at tau 7.5 of B = 8 would commit up to 8 tokens a round; at K = 2 for any
    batch every round verifies 3, so commits reach 3 and never pass it, and the tokens stay
    plain decoding's."""
    target, drafter = tiny
    prompts = [list(range(3, 15)), list(range(20, 29))]
    plain = generate(target, prompts, max_new_tokens=24)
    context = BuildContext(prompts, 24, plain.tokens, drafter)
    proposer = build("oracle:tau=7.5,block_size=8,shadow=true,verify_schedule=[[1,1024,2]]",
                     target, context)
    out = generate(target, prompts, proposer=proposer, max_new_tokens=24)
    assert out.tokens == plain.tokens
    assert max(c for commits in out.accept_lengths for c in commits) == 3


def test_a_scheduled_short_block_drafts_as_a_drafter_built_at_that_block(tiny, monkeypatch):
    """DFlash at B = 8 with K = 2 drafts every round exactly as the same weights built at
    B = 3 (`weights_of`): its draft attends over the 3-token block, not 8 slots (the draft
    logits of every round, bitwise)."""
    import reference.methods.dflash_drafter as dflash

    target, drafter = tiny
    prompts = [list(range(3, 15)), list(range(20, 29))]
    logits, real = [], dflash.draft_forward

    def spy(*args, **kwargs):
        out = real(*args, **kwargs)
        logits[-1].append(out.clone())
        return out

    monkeypatch.setattr(dflash, "draft_forward", spy)
    for spec in (MethodSpec.of("dflash", weights_of=drafter, block_size=8,
                               verify_schedule=((1, 1024, 2),)),
                 MethodSpec.of("dflash", weights_of=drafter, block_size=3)):
        logits.append([])
        generate(target, prompts, proposer=build(spec, target), max_new_tokens=16)
    assert len(logits[0]) == len(logits[1]) > 1
    assert all(a.shape[1] == 2 and torch.equal(a, b) for a, b in zip(*logits))


def test_a_tree_refuses_the_chain_schedule(tiny):
    target, _ = tiny
    with pytest.raises(ValueError, match="tree"):
        build("dflash:random=tiny,tree_budget=8,verify_schedule=[[1,1024,2]]", target)
