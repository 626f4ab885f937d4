"""Prompt-lookup drafting: the n-gram search, lossless greedy and sampling, full blocks on a
sequence the target continues exactly as its own history predicts."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, note, settings
from hypothesis import strategies as st

from reference.generate import generate
from reference.loaders import random_target
from reference.methods import build
from reference.methods.prompt_lookup import lookup_drafts
from tests.reference.sampling_oracle import joint_23_pvalue
from tests.stats import FALSE_ALARM, seeds


def lookup_loop(history: list[int], num_drafts: int, ngram_max: int, ngram_min: int):
    """Plain-loop reading of the rule: longest n, then latest earlier start, then extend the
    sequence token by token by copying from `period` tokens back."""
    seq = list(history)
    for n in range(ngram_max, ngram_min - 1, -1):
        if len(seq) < n + 1:
            continue
        query = seq[-n:]
        starts = [s for s in range(len(seq) - n) if seq[s:s + n] == query]
        if starts:
            period = len(seq) - n - starts[-1]
            out = []
            for _ in range(num_drafts):
                out.append(seq[len(seq) - period])
                seq.append(out[-1])
            return out
    return [history[-1]] * num_drafts


@settings(max_examples=60)
@given(rows=st.lists(st.lists(st.integers(0, 3), min_size=1, max_size=14), min_size=1,
                     max_size=5),
       drafts=st.integers(1, 7), ngram=st.tuples(st.integers(1, 4), st.integers(0, 3)))
def test_lookup_matches_a_plain_loop(rows, drafts, ngram):
    ngram_min, ngram_max = ngram[0], ngram[0] + ngram[1]
    width = 16
    hist = torch.full((len(rows), width), 9, dtype=torch.int64)  # 9 never occurs in a row
    for b, r in enumerate(rows):
        hist[b, : len(r)] = torch.tensor(r)
    lens = torch.tensor([len(r) for r in rows])
    got = lookup_drafts(hist, lens, drafts, ngram_max, ngram_min).tolist()
    want = [lookup_loop(r, drafts, ngram_max, ngram_min) for r in rows]
    note(f"{rows=} {drafts=} {ngram_min=} {ngram_max=}")
    assert got == want


def test_lookup_hand_cases():
    hist = torch.tensor([[1, 2, 3, 4, 1, 2, 0, 0], [5, 6, 5, 6, 5, 0, 0, 0],
                         [7, 8, 9, 0, 0, 0, 0, 0]])
    lens = torch.tensor([6, 5, 3])
    # row 0: "1 2" recurs at 0 -> 3 4 1 2 ...; row 1: "5 6 5" at 0, period 2 -> 6 5 6 5;
    # row 2: no earlier occurrence -> the anchor repeated
    assert lookup_drafts(hist, lens, 4, 3, 1).tolist() == [[3, 4, 1, 2], [6, 5, 6, 5],
                                                           [9, 9, 9, 9]]


@settings(max_examples=8)
@given(lens=st.lists(st.integers(1, 12), min_size=1, max_size=5), block=st.integers(2, 9),
       max_new=st.integers(1, 30), stop_at=st.none() | st.integers(0, 29),
       lookahead=st.booleans(), seed=st.integers(0, 2**16))
def test_greedy_equals_plain_greedy(target, lens, block, max_new, stop_at, lookahead, seed):
    note(f"{lens=} {block=} {max_new=} {stop_at=} {lookahead=} {seed=}")
    g = torch.Generator().manual_seed(seed)
    vocab = target.config.vocab_size
    prompts = [torch.randint(0, 6, (n,), generator=g).tolist() for n in lens]  # repetitive
    full = generate(target, prompts, max_new_tokens=max_new)
    stop = () if stop_at is None else (full.tokens[0][min(stop_at, len(full.tokens[0]) - 1)],)
    plain = generate(target, prompts, max_new_tokens=max_new, stop_token_ids=stop)
    spec = generate(target, prompts, proposer=build(f"prompt_lookup:block_size={block}", target),
                    max_new_tokens=max_new, stop_token_ids=stop, lookahead=lookahead,
                    check=True)
    assert spec.tokens == plain.tokens
    assert all(1 <= c <= block for cs in spec.accept_lengths for c in cs)
    assert vocab > 6


def test_full_blocks_when_history_predicts_the_target():
    """random:tiny plants t -> t+1 greedy; the prompt is 5..69 then "5 6 7", so the output
    8, 9, ... retraces the prompt and every draft is right: each round but the last commits
    B tokens."""
    target = random_target("tiny", device="cpu", dtype=torch.float32)
    prompt = list(range(5, 70)) + [5, 6, 7]
    block, new = 6, 40
    out = generate(target, [prompt], proposer=build(f"prompt_lookup:block_size={block}", target),
                   max_new_tokens=new)
    assert out.tokens[0] == [8 + i for i in range(new)]
    commits = out.accept_lengths[0]
    assert commits[:-1] == [block] * (len(commits) - 1)


@pytest.mark.parametrize("seed", seeds())
def test_sampling_keeps_the_target_distribution(small_vocab, seed):
    """Tokens 2 and 3 after a repetitive prompt at T = 1: both are drafts of round 1 (B = 3),
    looked up in the prompt; their joint must be the target's.

    4,000 rows, chi-square at 1e-3 (29 cells expect 5 or more). Power: 5 points of
    probability moved between the two likeliest cells (p = 0.187 and 0.168) give a
    noncentrality of 4,000 * 0.05^2 * (1/0.187 + 1/0.168) = 113 against a critical value
    of 58.3 (29 dof): detected essentially always (simulated noncentral chi-square)."""
    target, model = small_vocab
    prompt, rows = [3, 1, 4, 1, 3, 1], 4000
    proposer = build("prompt_lookup:block_size=3,ngram_max=2", target)
    out = generate(target, [prompt] * rows, proposer=proposer, max_new_tokens=3,
                   temperature=1.0, seed=5 + seed)
    assert joint_23_pvalue(out.tokens, model, prompt) > FALSE_ALARM