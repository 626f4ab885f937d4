"""The user-visible rules of generation, each against an expectation from elsewhere:
temperature, top-k and top-p against closed forms and a plain-Python statement of the rule
(sampling_oracle.py), sampled tokens against that distribution by a chi-square test, and
stop tokens and max_new_tokens against transformers' own greedy decoding."""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given, note
from hypothesis import strategies as st

from reference.generate import generate
from reference.methods.oracle import OracleProposer
from reference.verify import Sampling, sample, target_probs
from tests.reference.sampling_oracle import expected_probs
from tests.stats import FALSE_ALARM, chi2_pvalue, seeds

E = math.e
LOGITS = [2.0, 1.0, 0.0, -1.0]


def _probs(sampling: Sampling, logits=LOGITS) -> list[float]:
    return target_probs(torch.tensor([logits]), sampling)[0].tolist()


def test_rules_by_hand():
    """Logits 2, 1, 0, -1: softmax e^x / Z; top-k 2 keeps e^2, e^1; top-p 0.7 keeps the
    first two too (p_0 = e^2 / Z = 0.644 < 0.7, 0.644 + 0.237 >= 0.7), top-p 0.5 the first
    alone; temperature 2 halves the logits; top-k 1 is the argmax."""
    z = E**2 + E + 1 + 1 / E
    assert _probs(Sampling(1.0)) == pytest.approx([E**2 / z, E / z, 1 / z, 1 / E / z])
    two = [E**2 / (E**2 + E), E / (E**2 + E), 0.0, 0.0]
    assert _probs(Sampling(1.0, top_k=2)) == pytest.approx(two)
    assert _probs(Sampling(1.0, top_p=0.7)) == pytest.approx(two)
    assert _probs(Sampling(1.0, top_p=0.5)) == pytest.approx([1.0, 0.0, 0.0, 0.0])
    half = [E**1, E**0.5, 1.0, E**-0.5]
    assert _probs(Sampling(2.0)) == pytest.approx([h / sum(half) for h in half])
    assert _probs(Sampling(0.5, top_k=1)) == pytest.approx([1.0, 0.0, 0.0, 0.0])
    # top-k 3 at temperature 0.5, then top-p 0.95: e^4, e^2, 1 -> the first two carry 0.985
    three = [E**4, E**2, 1.0]
    assert _probs(Sampling(0.5, top_k=3)) == pytest.approx([t / sum(three) for t in three] + [0.0])
    assert _probs(Sampling(0.5, 3, 0.95)) == pytest.approx(
        [E**4 / (E**4 + E**2), E**2 / (E**4 + E**2), 0.0, 0.0]
    )
    for s in (Sampling(1.0), Sampling(1.0, top_k=2), Sampling(2.0), Sampling(0.5, 3, 0.95)):
        assert expected_probs(LOGITS, *s) == pytest.approx(_probs(s))  # the oracle agrees


@given(
    vocab=st.integers(2, 12),
    temperature=st.floats(0.3, 2.0),
    top_k=st.integers(0, 12),
    top_p=st.one_of(st.just(1.0), st.floats(0.05, 0.99)),
    seed=st.integers(0, 2**16),
)
def test_target_probs_matches_the_plain_rule(vocab, temperature, top_k, top_p, seed):
    note(f"{vocab=} {temperature=} {top_k=} {top_p=} {seed=}")
    g = torch.Generator().manual_seed(seed)
    logits = torch.randn(3, vocab, generator=g) * 2
    got = target_probs(logits, Sampling(temperature, top_k, top_p))
    for row, p in zip(logits.tolist(), got.tolist()):
        assert p == pytest.approx(expected_probs(row, temperature, top_k, top_p), abs=1e-6)


SETTINGS = [Sampling(1.0), Sampling(0.7, top_k=3), Sampling(1.3, top_p=0.6), Sampling(0.8, 5, 0.9)]


@pytest.mark.parametrize("seed", seeds())
def test_sampled_tokens_follow_the_rule(seed):
    """40,000 draws per setting, chi-square against `expected_probs` (V = 8).

    Four settings share the 1e-3 false-alarm budget: each fails a correct sampler with
    probability 2.5e-4. Power against a 5% error: moving 5% of the probability of a token
    with p ~ 0.3 (0.015) onto another gives a noncentrality of about N * 0.015^2 * (1/0.3 +
    1/0.3) = 60, against a 7-dof critical value of 27 at 2.5e-4: detected > 99.9% of the
    time; dropping a whole token (top-k keeping k - 1) is far beyond that."""
    g = torch.Generator().manual_seed(100 + seed)
    logits = torch.randn(8, generator=g) * 1.5
    n = 40_000
    for s in SETTINGS:
        tokens = sample(logits.expand(n, -1), s, torch.Generator().manual_seed(seed))
        counts = torch.bincount(tokens, minlength=8).tolist()
        p = expected_probs(logits.tolist(), *s)
        assert all(c == 0 for c, q in zip(counts, p) if q == 0), (s, counts, p)
        assert chi2_pvalue(counts, p) > FALSE_ALARM / len(SETTINGS), (s, counts, p)


def _hf_greedy(hf_model, prompt: list[int], n: int) -> list[int]:
    """transformers' own greedy continuation: argmax of the last logits, n times."""
    ids = torch.tensor([prompt])
    with torch.no_grad():
        for _ in range(n):
            nxt = hf_model(ids).logits[0, -1].argmax()
            ids = torch.cat([ids, nxt.view(1, 1)], dim=1)
    return ids[0, len(prompt) :].tolist()


PROMPTS = [[3, 1, 4, 1, 5], [9, 2, 6], [5, 3, 5, 8, 9, 7, 9]]


@pytest.fixture(scope="module")
def hf_streams(hf_model):
    return [_hf_greedy(hf_model, p, 24) for p in PROMPTS]


@pytest.mark.parametrize("lookahead", [False, True])
@pytest.mark.parametrize("kind", ["plain", "oracle"])
def test_max_new_tokens_exactly(target, hf_streams, kind, lookahead):
    """No stop ids: exactly max_new_tokens tokens, transformers' greedy ones (7 is not a
    multiple of the oracle's block of 3, so the last block is cut)."""
    proposer = OracleProposer(hf_streams, 3) if kind == "oracle" else None
    out = generate(target, PROMPTS, proposer=proposer, max_new_tokens=7, lookahead=lookahead)
    assert out.tokens == [s[:7] for s in hf_streams]


@pytest.mark.parametrize("lookahead", [False, True])
@pytest.mark.parametrize("kind", ["plain", "oracle"])
def test_several_stop_ids_cut_inside_an_accepted_block(target, hf_streams, kind, lookahead):
    """Stop ids: request 0's 13th and 7th tokens. Each request stops after the first token
    that is any of them (found by a plain loop over transformers' stream); with the oracle
    (blocks of 5, all accepted: tokens 2-6, then 7-11 of request 0) request 0's stop is the
    first token of a committed block, whose four tokens past it are dropped."""
    stop = (hf_streams[0][12], hf_streams[0][6])
    want = []
    for stream in hf_streams:
        cut = next((i + 1 for i, t in enumerate(stream) if t in stop), len(stream))
        want.append(stream[:cut])
    assert len(want[0]) <= 7  # the second id stops request 0, at the latest at token 7
    proposer = OracleProposer(hf_streams, 5) if kind == "oracle" else None
    out = generate(
        target,
        PROMPTS,
        proposer=proposer,
        max_new_tokens=24,
        stop_token_ids=stop,
        lookahead=lookahead,
    )
    assert out.tokens == want
    if kind == "oracle" and len(want[0]) == 7:
        assert sum(out.accept_lengths[0]) == 10  # two blocks of 5 committed, 4 dropped
