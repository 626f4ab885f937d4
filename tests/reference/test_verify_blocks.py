"""The verify block by batch size (`Proposer.verify_blocks`): the schedule, its option, and
greedy decoding that stays lossless while rounds of a large batch verify shorter blocks."""

from __future__ import annotations

import pytest
import torch

from reference import ops
from reference.generate import generate
from reference.loaders import random_target
from reference.methods import BuildContext, MethodSpec, build
from reference.proposers import Proposer, verify_blocks


def test_block_at_follows_the_schedule():
    """From a padded batch of 16 rows, blocks of 10; from 64, of 6; below 16, B = 16."""
    p = Proposer()
    p.block_size, p.verify_blocks = 16, ((16, 10), (64, 6))
    assert [p.block_at(bs) for bs in (1, 8, 15, 16, 32, 63, 64, 256)] == [16, 16, 16, 10, 10,
                                                                          10, 6, 6]
    assert Proposer().block_at(64) == 1  # no schedule: the block size


def test_the_option_parses_and_names_bad_entries():
    assert verify_blocks("16:10/64:6", 16) == ((16, 10), (64, 6))
    assert verify_blocks(None, 16) == () and verify_blocks("", 16) == ()
    for bad in ("16:1", "16:17", "64:6/16:10", "16:10/16:8", "16-10", "x", "0:4", "16:10:2"):
        with pytest.raises(ValueError, match="blocks="):
            verify_blocks(bad, 16)


@pytest.fixture(scope="module")
def tiny():
    target = random_target("tiny", device="cpu", dtype=torch.float32)
    return target, build(MethodSpec.of("dflash", random="tiny"), target)


def _rounds(monkeypatch) -> list[tuple[int, int]]:
    """(padded batch, block) of every prepare_block call from here on."""
    seen, real = [], ops.prepare_block

    def spy(verified_id, *args, block_size, **kwargs):
        seen.append((verified_id.numel(), block_size))
        return real(verified_id, *args, block_size=block_size, **kwargs)

    monkeypatch.setattr(ops, "prepare_block", spy)
    return seen


@pytest.mark.parametrize("lookahead", [False, True])
def test_rounds_take_the_schedule_and_greedy_tokens_stay_plain(tiny, monkeypatch, lookahead):
    """Four requests with the oracle at tau 4 (B = 8) and the real drafter's work as its
    shadow, blocks of 3 from 4 rows: the batch of 4 verifies 3 tokens a round, and when
    ragged ends shrink it to 2 or 1 rows, 8. Greedy tokens equal plain decoding's."""
    target, drafter = tiny
    prompts = [list(range(3, 15)), list(range(20, 29)), list(range(40, 46)), [7, 8, 9]]
    plain = generate(target, prompts, max_new_tokens=40)
    context = BuildContext(prompts, 40, plain.tokens, drafter)
    spec = "oracle:tau=4.0,block_size=8,shadow=true,blocks=4:3"
    generate(target, prompts, proposer=build(spec, target, context), max_new_tokens=40,
             lookahead=lookahead)
    seen = _rounds(monkeypatch)
    out = generate(target, prompts, proposer=build(spec, target, context), max_new_tokens=40,
                   lookahead=lookahead, check=True)
    assert out.tokens == plain.tokens
    assert seen and all(block == (3 if bs >= 4 else 8) for bs, block in seen)
    assert {3, 8} <= {block for _, block in seen}  # both blocks ran
    assert max(c for commits in out.accept_lengths for c in commits) <= 8


def test_rounds_of_short_blocks_commit_at_most_the_block(tiny):
    """The oracle at tau 7.5 of B = 8 would commit up to 8 tokens a round; at blocks=1:3
    every round verifies 3, so commits reach 3 and never pass it, and the tokens stay plain
    decoding's."""
    target, drafter = tiny
    prompts = [list(range(3, 15)), list(range(20, 29))]
    plain = generate(target, prompts, max_new_tokens=24)
    context = BuildContext(prompts, 24, plain.tokens, drafter)
    proposer = build("oracle:tau=7.5,block_size=8,shadow=true,blocks=1:3", target, context)
    out = generate(target, prompts, proposer=proposer, max_new_tokens=24)
    assert out.tokens == plain.tokens
    assert max(c for commits in out.accept_lengths for c in commits) == 3


def test_a_scheduled_short_block_drafts_as_a_drafter_built_at_that_block(tiny, monkeypatch):
    """DFlash at B = 8 with blocks=1:3 drafts every round exactly as the same weights built
    at B = 3 (`weights_of`): its draft attends over the 3-token block, not 8 slots (the
    draft logits of every round, bitwise)."""
    import reference.dflash as dflash

    target, drafter = tiny
    prompts = [list(range(3, 15)), list(range(20, 29))]
    logits, real = [], dflash.draft_forward

    def spy(*args, **kwargs):
        out = real(*args, **kwargs)
        logits[-1].append(out.clone())
        return out

    monkeypatch.setattr(dflash, "draft_forward", spy)
    for spec in (MethodSpec.of("dflash", weights_of=drafter, block_size=8, blocks="1:3"),
                 MethodSpec.of("dflash", weights_of=drafter, block_size=3)):
        logits.append([])
        generate(target, prompts, proposer=build(spec, target), max_new_tokens=16)
    assert len(logits[0]) == len(logits[1]) > 1
    assert all(a.shape[1] == 2 and torch.equal(a, b) for a, b in zip(*logits))


def test_a_tree_refuses_the_chain_schedule(tiny):
    target, _ = tiny
    with pytest.raises(ValueError, match="tree"):
        build("dflash:random=tiny,tree_budget=8,blocks=4:3", target)
