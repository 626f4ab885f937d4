"""Chain speculative sampling preserves the target distribution p (total variation within
3/sqrt(N)), alone and inside generate(), with temperature, top-k and top-p."""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given, note
from hypothesis import strategies as st

from reference.generate import generate
from reference.loaders import load_target
from reference.methods.oracle import OracleProposer
from reference.proposers import Proposal, Proposer
from reference.verify import Sampling, target_probs, verify_greedy, verify_sampling
from tests.reference.conftest import write_target


def _tv(samples: torch.Tensor, probs: torch.Tensor) -> float:
    counts = torch.bincount(samples, minlength=probs.numel()).double()
    return 0.5 * (counts / samples.numel() - probs.double()).abs().sum().item()


def test_greedy_accept_golden():
    cand = torch.tensor([[10, 11, 12, 13], [20, 21, 22, 23]])
    logits = torch.full((2, 4, 100), -1.0)
    for b, top in enumerate([[90, 0, 0, 0], [21, 22, 23, 99]]):
        logits[b, torch.arange(4), torch.tensor(top)] = 1.0
    res = verify_greedy(cand, logits, torch.tensor([5, 7]))
    assert res.out_tokens.tolist() == [[90, 12, 13, 0], [21, 22, 23, 99]]
    assert res.commit_lens.tolist() == [1, 4] and res.new_seq_lens.tolist() == [6, 11]


@given(vocab=st.integers(2, 8), block=st.integers(2, 4), with_q=st.booleans(),
       sampling=st.sampled_from([Sampling(1.0), Sampling(0.7, top_k=3), Sampling(1.3, 0, 0.6)]),
       seed=st.integers(0, 2**16))
def test_chain_sampling_preserves_p(vocab, block, with_q, sampling, seed):
    note(f"{vocab=} {block=} {with_q=} {sampling=} {seed=}")
    n = 20000
    g = torch.Generator().manual_seed(seed)
    logits = (torch.randn(1, block, vocab, generator=g) * 2).expand(n, block, vocab)
    p = target_probs(logits[0], sampling)
    q = None
    if with_q:
        q1 = torch.softmax(torch.randn(block - 1, vocab, generator=g) * 2, -1)
        drafts = torch.multinomial(q1, n, replacement=True, generator=g).t()
        q = q1.expand(n, block - 1, vocab)
    else:  # a fixed deterministic draft, the DFlash case
        drafts = torch.randint(0, vocab, (1, block - 1), generator=g).expand(n, block - 1)
    cand = torch.cat([torch.zeros(n, 1, dtype=torch.int64), drafts], dim=1)
    res = verify_sampling(cand, logits, torch.zeros(n, dtype=torch.int64), sampling, g, q)
    first = res.out_tokens[:, 0]
    assert _tv(first, p[0]) <= 3 / math.sqrt(n)
    # given the first draft was accepted, the second token follows p at block position 1
    kept = res.commit_lens >= 2
    second = res.out_tokens[kept, 1]
    if second.numel() > 100:
        assert _tv(second, p[1]) <= 3 / math.sqrt(second.numel())


class SampledDrafts(Proposer):
    """Drafts d_j ~ q (a fixed random distribution per block position), with q reported."""

    def __init__(self, vocab: int, block: int, seed: int):
        self.block_size = block
        g = torch.Generator().manual_seed(seed)
        self.q = torch.softmax(torch.randn(block - 1, vocab, generator=g) * 2, -1)
        self.gen = torch.Generator().manual_seed(seed + 1)

    def propose(self, rnd):
        bs = rnd.verified_id.shape[0]
        drafts = torch.multinomial(self.q, bs, replacement=True, generator=self.gen).t()
        q = self.q.expand(bs, *self.q.shape)
        return Proposal(torch.cat([rnd.verified_id[:, None], drafts], dim=1), q)


@pytest.fixture(scope="module")
def peaked(tmp_path_factory):
    """A tiny target whose logits are peaked enough for a few-token support."""
    path = tmp_path_factory.mktemp("peaked")
    model = write_target(path, seed=3, vocab_size=12)
    with torch.no_grad():
        model.lm_head.weight.mul_(40.0)
    model.save_pretrained(path)
    return model, load_target(path)


def _exact_marginals(model, prompt, sampling, steps):
    """P(token k = v) for k < steps by enumerating every prefix (vocab^k of them)."""
    vocab = model.config.vocab_size
    seqs, weights, out = torch.tensor([prompt]), torch.ones(1, dtype=torch.float64), []
    with torch.no_grad():
        for _ in range(steps):
            p = target_probs(model(seqs).logits[:, -1], sampling).double()
            joint = weights[:, None] * p  # (prefixes, V)
            out.append(joint.sum(0))
            seqs = torch.cat([seqs.repeat_interleave(vocab, 0),
                              torch.arange(vocab).repeat(seqs.shape[0])[:, None]], dim=1)
            weights = joint.reshape(-1)
    return out


@pytest.mark.parametrize("sampling", [Sampling(1.0), Sampling(0.8, top_k=4),
                                      Sampling(1.2, top_p=0.7)])
@pytest.mark.parametrize("kind", ["plain", "oracle", "sampled"])
def test_generate_sampling_matches_target_distribution(peaked, sampling, kind):
    model, target = peaked
    prompt, n, block, steps = [3, 1, 4, 1, 5], 3000, 3, 3
    greedy = generate(target, [prompt], max_new_tokens=steps).tokens
    proposer = {"plain": None,
                "oracle": OracleProposer(greedy * n, block),
                "sampled": SampledDrafts(target.config.vocab_size, block, seed=5)}[kind]
    out = generate(target, [prompt] * n, proposer=proposer, max_new_tokens=steps,
                   temperature=sampling.temperature, top_k=sampling.top_k,
                   top_p=sampling.top_p, seed=11)
    tokens = torch.tensor(out.tokens)
    for k, p in enumerate(_exact_marginals(model, prompt, sampling, steps)):
        assert _tv(tokens[:, k], p) <= 3 / math.sqrt(n), f"token {k}"
