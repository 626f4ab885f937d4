"""DSpark rounds keep the target distribution with the lossless scheduler (chi-square), and
the appendix-A bias (0.7/0.3 -> 0.85/0.15) appears with the unbroken walk on current
confidences. A first-order Markov target p, draft q and confidence c_k = C[x_{k-1}] over a
small vocabulary stand in for the models, so c_{k+1} depends on the sampled x_k as in DSpark;
drafting, scheduling and `verify_sampling` are the reference's."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from common.dspark_schedule import Scheduler, SPSTable
from reference.verify import Sampling, verify_sampling

CHI2_DF3_P001 = 16.27


def dspark_rounds(p, q, conf, scheduler, gamma, requests, batches, seed=0):
    """First emitted token of `requests * batches` rounds from anchor 0, R = requests.

    p, q: (V, V) rows = next-token distributions given the previous token; conf: (V,)."""
    gen = torch.Generator().manual_seed(seed)
    n = requests * batches
    prev = torch.zeros(n, dtype=torch.int64)
    drafts, qs, cs = [], [], []
    for _ in range(gamma):
        cs.append(conf[prev])
        qs.append(q[prev])
        prev = torch.multinomial(q[prev], 1, generator=gen)[:, 0]
        drafts.append(prev)
    cand = torch.cat([torch.zeros(n, 1, dtype=torch.int64), torch.stack(drafts, 1)], 1)
    c = torch.stack(cs, 1).numpy().reshape(batches, requests, gamma)
    ell = torch.tensor([n_r for b in range(batches) for n_r in scheduler(c[b])])
    logits = p[cand].log()  # (n, gamma+1, V): row j scores the token after cand[:, j]
    res = verify_sampling(
        cand, logits, torch.zeros(n, dtype=torch.int64), Sampling(1.0), gen, torch.stack(qs, 1), ell
    )
    return res.out_tokens[:, 0], ell


def chi_square(tokens, probs):
    counts = torch.bincount(tokens, minlength=probs.numel()).double()
    expected = probs.double() * tokens.numel()
    return float(((counts - expected) ** 2 / expected).sum())


JAGGED = SPSTable([1, 2, 3, 4, 6, 8, 9, 12, 16], [1.0, 0.62, 0.6, 0.58, 0.5, 0.45, 0.3, 0.28, 0.2])


@pytest.mark.parametrize("policy", ["lossless", "production", "static", "full"])
def test_output_distribution_equals_target(policy):
    gen = torch.Generator().manual_seed(3)
    p = torch.rand(4, 4, generator=gen).pow(2) + 0.05
    p = p / p.sum(1, keepdim=True)
    q = torch.rand(4, 4, generator=gen) + 0.05
    q = q / q.sum(1, keepdim=True)
    conf = torch.tensor([0.9, 0.2, 0.7, 0.4])
    sched = Scheduler(policy, JAGGED, threshold=0.5)
    first, ell = dspark_rounds(p, q, conf, sched, gamma=3, requests=3, batches=4000)
    assert 0 < ell.float().mean() < 3 or policy == "full"
    assert chi_square(first, p[0]) < CHI2_DF3_P001


def _appendix_a(policy):
    p = torch.tensor([[0.7, 0.3], [0.7, 0.3]])
    q = torch.full((2, 2), 0.5)
    conf = torch.tensor([0.9, 0.1])  # c_2 = C[x_1]; c_1 = C[anchor 0] is overridden below
    sched = Scheduler(policy, SPSTable([1, 2, 3], [1.0, 0.6, 0.6]))

    def with_c1(c):
        c = c.copy()
        c[:, 0] = 0.5
        return sched(c)

    first, _ = dspark_rounds(p, q, conf, with_c1, gamma=2, requests=1, batches=20000, seed=1)
    return first.float().mean().item()  # frequency of token 1


def test_appendix_a_bias_without_the_break():
    assert abs(_appendix_a("global") - 0.15) < 0.015


@pytest.mark.parametrize("policy", ["lossless", "production"])
def test_appendix_a_unbiased_with_lossless_policies(policy):
    assert abs(_appendix_a(policy) - 0.3) < 0.015


def test_scheduler_rejects_unknown_policy():
    with pytest.raises(ValueError):
        Scheduler("best")
    with pytest.raises(ValueError):
        Scheduler("lossless")
    assert np.isclose(JAGGED(5), 0.5) and np.isclose(JAGGED(32), 0.2 * 16 / 32)
