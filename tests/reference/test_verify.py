"""Chain speculative sampling preserves the target distribution p, alone and inside
generate(), with temperature, top-k and top-p. The expected p comes from the plain statement
of the sampling rule (sampling_oracle.py) and, inside generate, from transformers' logits by
enumerating every prefix; counts are compared by chi-square tests sized in tests/stats.py's
terms (a correct sampler fails a test < 1e-3 of the time)."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, note, settings
from hypothesis import strategies as st

from reference.generate import generate
from reference.loaders import load_target
from reference.methods.oracle import OracleProposer
from reference.proposers import Proposal, Proposer
from reference.verify import Sampling, verify_greedy, verify_sampling
from tests.reference.conftest import write_target
from tests.reference.sampling_oracle import expected_probs
from tests.stats import FALSE_ALARM, chi2_pvalue


def _pvalue(samples: torch.Tensor, probs: list[float]) -> float:
    return chi2_pvalue(torch.bincount(samples, minlength=len(probs)).tolist(), probs)


def test_greedy_accept_golden():
    cand = torch.tensor([[10, 11, 12, 13], [20, 21, 22, 23]])
    logits = torch.full((2, 4, 100), -1.0)
    for b, top in enumerate([[90, 0, 0, 0], [21, 22, 23, 99]]):
        logits[b, torch.arange(4), torch.tensor(top)] = 1.0
    res = verify_greedy(cand, logits, torch.tensor([5, 7]))
    assert res.out_tokens.tolist() == [[90, 12, 13, 0], [21, 22, 23, 99]]
    assert res.commit_lens.tolist() == [1, 4] and res.new_seq_lens.tolist() == [6, 11]


def test_greedy_accepts_at_most_the_verify_length():
    """Every draft matches; verify lengths 0, 1, 3 accept 0, 1, 3 drafts, and the bonus is
    the target's choice right after the last accepted one."""
    cand = torch.tensor([[10, 11, 12, 13]]).expand(3, 4)
    logits = torch.full((3, 4, 100), -1.0)
    logits[:, torch.arange(4), torch.tensor([11, 12, 13, 99])] = 1.0
    res = verify_greedy(cand, logits, torch.zeros(3, dtype=torch.int64), torch.tensor([0, 1, 3]))
    assert res.accept_lens.tolist() == [0, 1, 3] and res.bonus.tolist() == [11, 12, 99]
    assert [row[: n + 1] for row, n in zip(res.out_tokens.tolist(), [0, 1, 3])] == [
        [11], [11, 12], [11, 12, 13, 99]]


CHAIN_CHECKS = 2 * settings.default.max_examples  # two tests per example of the profile


@given(vocab=st.integers(2, 8), block=st.integers(2, 4), with_q=st.booleans(),
       sampling=st.sampled_from([Sampling(1.0), Sampling(0.7, top_k=3), Sampling(1.3, 0, 0.6)]),
       seed=st.integers(0, 2**16))
def test_chain_sampling_preserves_p(vocab, block, with_q, sampling, seed):
    """The first emitted token follows p at block position 0, and given d_1 accepted the
    second follows p at position 1.

    Chi-square at 1e-3 / 50 = 2e-5 per check (two per example, 25 examples in the ci
    profile; the budget is split over the loaded profile's examples). Power: 5 points of
    probability moved between two tokens of p ~ 0.3 give a noncentrality of
    20000 * 0.05^2 * (2 / 0.3) = 333 against a critical value of 36 (7 dof): certain."""
    note(f"{vocab=} {block=} {with_q=} {sampling=} {seed=}")
    n = 20000
    g = torch.Generator().manual_seed(seed)
    logits = (torch.randn(1, block, vocab, generator=g) * 2).expand(n, block, vocab)
    p = [expected_probs(row, *sampling) for row in logits[0].tolist()]
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
    assert _pvalue(first, p[0]) > FALSE_ALARM / CHAIN_CHECKS
    kept = res.commit_lens >= 2
    second = res.out_tokens[kept, 1]
    if second.numel() > 100:
        assert _pvalue(second, p[1]) > FALSE_ALARM / CHAIN_CHECKS


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
    """P(token k = v) for k < steps by enumerating every prefix (vocab^k of them), from
    transformers' logits and the plain sampling rule."""
    vocab = model.config.vocab_size
    seqs, weights, out = torch.tensor([prompt]), [1.0], []
    with torch.no_grad():
        for _ in range(steps):
            rows = model(seqs).logits[:, -1].double().tolist()
            joint = [[w * pv for pv in expected_probs(row, *sampling)]
                     for w, row in zip(weights, rows)]
            out.append([sum(col) for col in zip(*joint)])
            seqs = torch.cat([seqs.repeat_interleave(vocab, 0),
                              torch.arange(vocab).repeat(seqs.shape[0])[:, None]], dim=1)
            weights = [pv for row in joint for pv in row]
    return out


GENERATE_CHECKS = 9 * 3  # 3 samplings x 3 proposers, 3 tokens each


@pytest.mark.parametrize("sampling", [Sampling(1.0), Sampling(0.8, top_k=4),
                                      Sampling(1.2, top_p=0.7)])
@pytest.mark.parametrize("kind", ["plain", "oracle", "sampled"])
def test_generate_sampling_matches_target_distribution(peaked, sampling, kind):
    """Tokens 1-3 of 4000 sampled continuations against the exact marginals.

    Chi-square at 1e-3 / 27 = 3.7e-5 per token. Power: 5 points of probability moved
    between two tokens of p ~ 0.3 give a noncentrality of 4000 * 0.05^2 * (2 / 0.3) = 67
    against a critical value of 36 (7 dof): detected ~97% of the time per token."""
    model, target = peaked
    prompt, n, block, steps = [3, 1, 4, 1, 5], 4000, 3, 3
    greedy = generate(target, [prompt], max_new_tokens=steps).tokens
    proposer = {"plain": None,
                "oracle": OracleProposer(greedy * n, block),
                "sampled": SampledDrafts(target.config.vocab_size, block, seed=5)}[kind]
    out = generate(target, [prompt] * n, proposer=proposer, max_new_tokens=steps,
                   temperature=sampling.temperature, top_k=sampling.top_k,
                   top_p=sampling.top_p, seed=11)
    tokens = torch.tensor(out.tokens)
    for k, p in enumerate(_exact_marginals(model, prompt, sampling, steps)):
        assert _pvalue(tokens[:, k], p) > FALSE_ALARM / GENERATE_CHECKS, f"token {k}"
