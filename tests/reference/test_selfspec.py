"""Self-speculation (ISD, LinearSpec): greedy equals plain greedy, KV trims, the ISD TPF law."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, note, settings
from hypothesis import strategies as st

from reference.generate import generate
from reference.methods.isd import ISD
from reference.methods.isd import tpf_closed_form as tpf
from reference.methods.linearspec import LinearSpec, select_block_size


def _prompts(lens, vocab, seed=0):
    g = torch.Generator().manual_seed(seed)
    return [torch.randint(0, vocab, (n,), generator=g).tolist() for n in lens]


@settings(max_examples=10)
@given(lens=st.lists(st.integers(1, 10), min_size=1, max_size=6), max_new=st.integers(1, 24),
       mode=st.sampled_from(["isd", "linearspec"]), size=st.integers(2, 6),
       stop_at=st.none() | st.integers(0, 23), lookahead=st.booleans(),
       seed=st.integers(0, 2**16))
def test_selfspec_greedy_equals_plain_greedy(target, lens, max_new, mode, size, stop_at,
                                             lookahead, seed):
    """Sync and overlap (lookahead) alike: the mode's per-row state advances on the device,
    whatever the host has read."""
    note(f"{lens=} {max_new=} {mode=} {size=} {stop_at=} {lookahead=} {seed=}")
    vocab = target.config.vocab_size
    prompts = _prompts(lens, vocab, seed)
    stop = ()
    if stop_at is not None:  # a token request 0 emits mid-stream
        full = generate(target, prompts, max_new_tokens=max_new)
        stop = (full.tokens[0][min(stop_at, len(full.tokens[0]) - 1)],)
    plain = generate(target, prompts, max_new_tokens=max_new, stop_token_ids=stop)
    m = ISD(size, vocab - 1) if mode == "isd" else LinearSpec(vocab - 1, ((2, size + 2),
                                                                          (64, size)))
    spec = generate(target, prompts, proposer=m, max_new_tokens=max_new, stop_token_ids=stop,
                    lookahead=lookahead, check=True)
    assert spec.tokens == plain.tokens
    pool = target.runtime.pool
    pool.check()
    assert pool.free_slots == pool.num_slots - 1


def test_isd_trims_match_advance(target):
    n = 4
    out = generate(target, _prompts([5, 2, 9], target.config.vocab_size, 1),
                   proposer=ISD(n, target.config.vocab_size - 1), max_new_tokens=30,
                   temperature=1.0, seed=3)
    # advance 1 (C, or rejected at s_0), 1+i (rejected at s_i), N (all accepted)
    assert set(out.stats["trim_hist"]) <= {2 * n - 1 - a for a in range(1, n + 1)}
    assert all(1 <= c <= n for commits in out.accept_lengths for c in commits)


def test_linearspec_tiers():
    tiers = ((1, 32), (8, 16), (64, 4))
    assert [select_block_size(b, tiers) for b in (1, 2, 8, 9, 64)] == [32, 16, 16, 4, 4]
    with pytest.raises(ValueError):
        select_block_size(65, tiers)
    with pytest.raises(ValueError):
        LinearSpec(0, ((8, 4), (4, 8)))


class OracleISD(ISD):
    """ISD whose drafts are the greedy stream, each kept with probability p, else corrupted:
    a controlled per-token acceptance p under greedy verification."""

    def __init__(self, stride, mask_token_id, streams, p, seed=0):
        super().__init__(stride, mask_token_id)
        self.streams, self.p = streams, p
        self.draft_gen = torch.Generator().manual_seed(seed)

    def bind(self, target, pool, graphs, *args):
        super().bind(target, pool, graphs, *args)
        width = max(len(s) for s in self.streams)
        self.stream = torch.zeros(self.specs.shape[0], width, dtype=torch.int64)
        self.offset = torch.zeros(self.specs.shape[0], dtype=torch.int64)

    def start(self, rows, request_ids, prompt_lens):
        super().start(rows, request_ids, prompt_lens)
        for row, rid, n in zip(rows, request_ids, prompt_lens):
            self.stream[row, : len(self.streams[rid])] = torch.tensor(self.streams[rid])
            self.offset[row] = n

    def draft(self, mask_logits, rows, positions):
        index = (positions - self.offset[rows][:, None]).clamp(max=self.stream.shape[1] - 1)
        true = self.stream[rows[:, None], index]
        keep = torch.rand(true.shape, generator=self.draft_gen) < self.p
        shift = torch.randint(1, mask_logits.shape[-1], true.shape, generator=self.draft_gen)
        return torch.where(keep, true, (true + shift) % mask_logits.shape[-1]), None


@pytest.mark.parametrize("n,p", [(4, 0.8), (8, 0.9), (3, 0.5)])
def test_isd_tokens_per_forward_matches_closed_form(target, n, p):
    vocab, max_new = target.config.vocab_size, 200
    prompts = _prompts([4, 7, 3, 9, 5, 6, 2, 8], vocab, seed=n)
    streams = generate(target, prompts, max_new_tokens=max_new + 2 * n).tokens
    mode = OracleISD(n, vocab - 1, streams, p, seed=n)
    out = generate(target, prompts, proposer=mode, max_new_tokens=max_new)
    assert out.tokens == [s[:max_new] for s in streams]
    measured, expected = out.stats["tokens_per_forward"], tpf(p, n)
    print(f"{measured=} {expected=} acceptance={out.stats['acceptance']}")
    assert abs(out.stats["acceptance"] - p) < 0.05
    assert abs(measured / expected - 1) < 0.05


def test_closed_form_values():
    # docs/methods.md 2.2's derived table
    for n, p, want in [(2, 0.8, 1.67), (4, 0.9, 2.92), (8, 0.95, 5.40), (16, 0.98, 11.16)]:
        assert tpf(p, n) == pytest.approx(want, abs=0.006)
    assert tpf(1.0, 8) == 8.0 and tpf(0.0, 8) == 1.0
