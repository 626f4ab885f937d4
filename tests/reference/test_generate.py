"""Lossless batched speculative decoding: greedy outputs, oracle acceptance, slot ownership."""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given, note
from hypothesis import strategies as st

from common.survival import geometric_survival
from reference.cuda_graphs import GraphCache
from reference.engine import Runtime
from reference.generate import generate
from reference.kv_pool import KVPool, KVShape, PoolFullError
from reference.methods.dflash import load_dflash
from reference.methods.oracle import OracleProposer


def _prompts(lens, vocab, seed=0):
    g = torch.Generator().manual_seed(seed)
    return [torch.randint(0, vocab, (n,), generator=g).tolist() for n in lens]


@pytest.mark.timeout(300)  # whole generate runs per example: about a minute on 2 loaded cores
@given(lens=st.lists(st.integers(1, 12), min_size=1, max_size=8),
       block=st.integers(1, 16), max_new=st.integers(1, 30),
       kind=st.sampled_from(["dflash", "oracle"]), stop_at=st.none() | st.integers(0, 29),
       seed=st.integers(0, 2**16))
def test_speculative_greedy_equals_plain_greedy(target, drafter_dir, lens, block, max_new,
                                                kind, stop_at, seed):
    note(f"{lens=} {block=} {max_new=} {kind=} {stop_at=} {seed=}")
    prompts = _prompts(lens, target.config.vocab_size, seed)
    full = generate(target, prompts, max_new_tokens=max_new)
    stop = ()
    if stop_at is not None:  # a token that request 0 emits mid-stream, likely mid-block
        stop = (full.tokens[0][min(stop_at, len(full.tokens[0]) - 1)],)
    plain = generate(target, prompts, max_new_tokens=max_new, stop_token_ids=stop)
    if kind == "dflash":
        proposer = load_dflash(drafter_dir, target, block_size=block)
    else:
        curve = geometric_survival(1 + (block - 1) * 0.6, block) if block > 1 else []
        proposer = OracleProposer(full.tokens, block, curve, seed=seed)
    spec = generate(target, prompts, proposer=proposer, max_new_tokens=max_new,
                    stop_token_ids=stop)
    assert spec.tokens == plain.tokens
    for toks, commits in zip(spec.tokens, spec.accept_lengths):
        assert all(1 <= c <= block for c in commits)
        assert sum(commits) >= len(toks) - 1
    pool = target.runtime.pool
    pool.check()
    assert pool.free_slots == pool.num_slots - 1


@pytest.mark.timeout(300)  # whole generate runs per example: about a minute on 2 loaded cores
@given(lens=st.lists(st.integers(1, 12), min_size=1, max_size=6), max_new=st.integers(1, 24),
       stops=st.lists(st.tuples(st.integers(0, 5), st.integers(0, 23)), max_size=3),
       seed=st.integers(0, 2**16))
def test_lookahead_plain_decoding_equals_plain(target, lens, max_new, stops, seed):
    """Launching each step before reading the last: same greedy tokens, requests finishing
    at different steps (stop tokens taken from several streams), every slot freed."""
    note(f"{lens=} {max_new=} {stops=} {seed=}")
    prompts = _prompts(lens, target.config.vocab_size, seed)
    full = generate(target, prompts, max_new_tokens=max_new)
    stop = tuple({full.tokens[i % len(prompts)][min(k, max_new - 1)] for i, k in stops})
    plain = generate(target, prompts, max_new_tokens=max_new, stop_token_ids=stop)
    ahead = generate(target, prompts, max_new_tokens=max_new, stop_token_ids=stop,
                     lookahead=True)
    assert ahead.tokens == plain.tokens
    assert ahead.accept_lengths == plain.accept_lengths
    assert ahead.stats["rounds"] <= plain.stats["rounds"] + len(prompts)
    pool = target.runtime.pool
    pool.check()
    assert pool.free_slots == pool.num_slots - 1


def test_lookahead_speculative_equals_sync(target, dflash):
    """Overlap (round k+1 launched before round k is read) with a drafter: same tokens and
    commit lengths as sync, checked bounds every round."""
    prompts = _prompts([3, 11, 6, 1, 8], target.config.vocab_size, seed=4)
    sync = generate(target, prompts, proposer=dflash, max_new_tokens=19, stop_token_ids=(5,))
    ahead = generate(target, prompts, proposer=dflash, max_new_tokens=19, stop_token_ids=(5,),
                     lookahead=True, check=True)
    assert ahead.tokens == sync.tokens
    assert ahead.accept_lengths == sync.accept_lengths


def test_slots_are_never_shared_during_a_run(target, dflash):
    prompts = _prompts([3, 11, 6, 1, 8], target.config.vocab_size, seed=3)
    generate(target, prompts, proposer=dflash, max_new_tokens=17, check=True)
    generate(target, prompts, max_new_tokens=13, stop_token_ids=(1, 2, 3), check=True)
    generate(target, prompts, max_new_tokens=13, stop_token_ids=(1, 2, 3), lookahead=True,
             check=True)


def test_oracle_without_corruption_commits_full_blocks(target):
    prompts = _prompts([4, 9, 2], target.config.vocab_size, seed=5)
    plain = generate(target, prompts, max_new_tokens=40)
    block = 6
    out = generate(target, prompts, proposer=OracleProposer(plain.tokens, block),
                   max_new_tokens=40)
    assert out.tokens == plain.tokens
    for commits in out.accept_lengths:
        assert commits[:-1] == [block] * (len(commits) - 1)


def test_oracle_survival_curve_is_measured(target):
    block, tau = 6, 3.0
    curve = geometric_survival(tau, block)
    prompts = _prompts([5] * 8, target.config.vocab_size, seed=7)
    plain = generate(target, prompts, max_new_tokens=300)
    out = generate(target, prompts, proposer=OracleProposer(plain.tokens, block, curve, seed=1),
                   max_new_tokens=300)
    assert out.tokens == plain.tokens
    accepts = [c - 1 for commits in out.accept_lengths for c in commits[:-1]]
    n = len(accepts)
    for j, s in enumerate(curve, start=1):
        measured = sum(a >= j for a in accepts) / n
        assert abs(measured - s) <= 4 * math.sqrt(s * (1 - s) / n) + 1e-9, (j, measured, s)
    assert abs(sum(accepts) / n + 1 - tau) < 0.25


def test_pool_refuses_what_it_cannot_hold():
    pool = KVPool(11, 2, 8, KVShape(1, 1, 2), None, torch.float32, "cpu")
    a = pool.admit(6)
    with pytest.raises(PoolFullError, match="needs 6 more KV slots, 4 of 10 are free"):
        pool.admit(6)
    with pytest.raises(PoolFullError, match="table width"):
        pool.reserve(a, 9)
    b = pool.admit(4)
    with pytest.raises(PoolFullError, match="no free request row"):
        pool.admit(1)
    pool.check()
    pool.release(a)
    pool.release(b)
    pool.check()
    assert pool.free_slots == 10 and not pool.req_to_token.any()


def test_generate_queues_what_the_pool_cannot_hold_at_once(target):
    """Two requests of 20 + 4 + 2 claimed slots each in a 39-slot pool: the second waits for
    the first to finish (continuous batching), and each decodes as it would alone."""
    cfg = target.config
    shape = KVShape(cfg.num_layers, cfg.num_kv_heads, cfg.head_dim)
    prompts = [[1] * 20, [2] * 20]
    alone = [generate(target, [p], max_new_tokens=4).tokens[0] for p in prompts]
    pool = KVPool(40, 8, 64, shape, None, target.dtype, "cpu")
    target.runtime = Runtime(pool, GraphCache("cpu"))
    try:
        out = generate(target, prompts, max_new_tokens=4, check=True)
        assert out.tokens == alone
        assert [len(c) for c in out.accept_lengths] == [3, 3]
        pool.check()
        assert pool.free_slots == 39
        with pytest.raises(ValueError, match="needs 51 KV slots, the pool has 39"):
            generate(target, [[1] * 45], max_new_tokens=4)
    finally:
        target.runtime = None


@pytest.mark.timeout(300)  # whole generate runs per example: about a minute on 2 loaded cores
@given(lens=st.lists(st.integers(1, 10), min_size=1, max_size=5), max_new=st.integers(1, 24),
       stop_picks=st.lists(st.tuples(st.integers(0, 4), st.integers(0, 23)), max_size=3),
       block=st.integers(2, 8), lookahead=st.booleans(), seed=st.integers(0, 2**16))
def test_stop_and_max_tokens_cut_where_a_plain_loop_cuts(target, lens, max_new, stop_picks,
                                                          block, lookahead, seed):
    """Expected outputs come from the uncut stream by a plain loop: keep tokens up to and
    including the first stop id, at most max_new_tokens. The oracle commits whole blocks
    (no corruption), so a stop id lands inside an accepted block."""
    note(f"{lens=} {max_new=} {stop_picks=} {block=} {lookahead=} {seed=}")
    prompts = _prompts(lens, target.config.vocab_size, seed)
    uncut = generate(target, prompts, max_new_tokens=max_new).tokens
    stop = {uncut[i % len(prompts)][min(k, len(uncut[i % len(prompts)]) - 1)]
            for i, k in stop_picks}
    want = []
    for stream in uncut:
        out = []
        for tok in stream[:max_new]:
            out.append(tok)
            if tok in stop:
                break
        want.append(out)
    for proposer in (None, OracleProposer(uncut, block)):
        got = generate(target, prompts, proposer=proposer, max_new_tokens=max_new,
                       stop_token_ids=tuple(stop), lookahead=lookahead)
        assert got.tokens == want
