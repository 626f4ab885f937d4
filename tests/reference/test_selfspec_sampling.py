"""Self-speculative sampling keeps the target distribution; I-DLM's argmax/softmax mix does not.

Settles docs/methods.md 2.8 question 1. Speculative sampling is
exact when the ratio p(d)/q(d) uses the distribution q the draft d was actually drawn from.
ISD's `draft="sample"` (d ~ q, ratio with q) and `draft="argmax"` (d = argmax q, ratio with
the one-hot q: accept with p(d), residual p without d) are both exactly lossless; proposing
argmax q while testing with the softmax q (`argmax_softmax_q`) emits d with probability
min(1, p(d)/q(d)) + (1 - min(1, p(d)/q(d))) * r(d) = min(1, p(d)/q(d)), not p(d).
"""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, note, settings
from hypothesis import strategies as st

from reference.generate import generate
from reference.methods.isd import ISD
from reference.methods.linearspec import LinearSpec
from reference.verify import Sampling, verify_sampling
from tests.reference.sampling_oracle import joint_23_pvalue
from tests.stats import FALSE_ALARM, chi2_pvalue, seeds

ROWS = 20000


def one_draft_round(logit_p, logit_q, variant, seed):
    """Emitted token of one verify step of ROWS rows with p, q (V,) and one draft."""
    g = torch.Generator().manual_seed(seed)
    p, q = logit_p.softmax(-1), logit_q.softmax(-1)
    if variant == "sample":
        d, q_used = torch.multinomial(q.expand(ROWS, -1), 1, generator=g), q
    else:
        d = q.argmax().expand(ROWS, 1)
        q_used = q if variant == "argmax_softmax_q" else None
    cand = torch.cat([torch.zeros(ROWS, 1, dtype=torch.int64), d], 1)
    logits = logit_p.expand(ROWS, 2, -1)  # one draft; the second row scores the bonus
    res = verify_sampling(cand, logits, torch.zeros(ROWS, dtype=torch.int64), Sampling(1.0),
                          g, None if q_used is None else q_used.expand(ROWS, 1, -1))
    return res.out_tokens[:, 0], p, q


@settings(max_examples=10)
@given(vocab=st.integers(2, 8), seed=st.integers(0, 2**16),
       variant=st.sampled_from(["sample", "argmax"]))
def test_exact_variants_preserve_p(vocab, seed, variant):
    """20,000 rows of one verify step per drawn (p, q), chi-square against p.

    Ten drawn cases share the 1e-3 false-alarm budget (1e-4 each). Power: 5 points of
    probability moved between two tokens a, b give a noncentrality of 20,000 * 0.05^2 *
    (1/p_a + 1/p_b) >= 200 (p_a + p_b <= 1), against a critical value of at most 30 (7 dof
    at 1e-4): always detected."""
    g = torch.Generator().manual_seed(seed)
    lp, lq = torch.randn(vocab, generator=g) * 1.5, torch.randn(vocab, generator=g) * 1.5
    tokens, p, _ = one_draft_round(lp, lq, variant, seed)
    note(f"{vocab=} {seed=} {variant=} {p=}")
    assert chi2_pvalue(torch.bincount(tokens, minlength=vocab).tolist(), p.tolist()) > 1e-4


def test_argmax_with_softmax_q_is_biased():
    lp = torch.tensor([1.0, 0.6, 0.0, -0.5])
    lq = torch.tensor([1.2, 0.4, 0.0, -0.5])
    tokens, p, q = one_draft_round(lp, lq, "argmax_softmax_q", 0)
    emitted = torch.bincount(tokens, minlength=4).double() / ROWS
    d = int(q.argmax())
    assert float(emitted[d]) == pytest.approx(min(1.0, float(p[d] / q[d])), abs=0.01)
    assert float(emitted[d] - p[d]) > 0.05  # far outside sampling noise (~0.004)


@pytest.mark.parametrize("seed", seeds())
@pytest.mark.parametrize("mode,lossless", [("isd-sample", True), ("isd-argmax", True),
                                           ("linearspec", True), ("isd-argmax_softmax_q", False)])
def test_selfspec_sampling_matches_target(small_vocab, mode, lossless, seed):
    """Tokens 2 and 3 after a fixed prompt: with ISD N=2 token 3 is a verified draft (round 1
    is cold and drafts it); with LinearSpec B=3 tokens 2 and 3 are both drafts.

    4,000 rows, chi-square at 1e-3 against `exact_joint_23` (24 cells expect 5 or more).
    Power: 5 points of probability moved between the two likeliest cells (p = 0.457 and
    0.212) give a noncentrality of 4,000 * 0.05^2 * (1/0.457 + 1/0.212) = 69 against a
    critical value of 51.2 (24 dof): detected 99.6% of the time (simulated noncentral
    chi-square). The biased variant must fail the same test."""
    target, model = small_vocab
    prompt, rows = [3, 1, 4], 4000
    if mode == "linearspec":
        m = LinearSpec(7, ((1 << 20, 3),))
    else:
        m = ISD(2, 7, draft=mode.split("-", 1)[1])
    out = generate(target, [prompt] * rows, proposer=m, max_new_tokens=3, temperature=1.0,
                   seed=11 + seed)
    pvalue = joint_23_pvalue(out.tokens, model, prompt)
    assert (pvalue > FALSE_ALARM) if lossless else (pvalue < FALSE_ALARM)
