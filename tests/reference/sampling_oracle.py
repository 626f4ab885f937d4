"""Independent expected distributions for the sampling tests.

`expected_probs` applies temperature, top-k, then top-p (SGLang's "top-k first" order) to
one row of logits in plain Python floats, token by token, without torch; the engine's
`reference.verify.target_probs` is checked against it, never the other way round.
`exact_joint_23` enumerates a transformers model's joint of the 2nd and 3rd sampled tokens
(T = 1), and `joint_23_pvalue` tests generated outputs against it: the distribution tests
of every speculative method whose first round drafts those tokens.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch

from tests.stats import chi2_pvalue


def expected_probs(
    logits: Sequence[float], temperature: float = 1.0, top_k: int = 0, top_p: float = 1.0
) -> list[float]:
    """p over the vocabulary of one row of logits (V,).

    top_k: keep the tokens whose scaled logit is at least the k-th largest (0: all);
    top_p: then keep tokens in decreasing probability while the mass before each is still
    below top_p (the first always stays), and renormalize.
    """
    x = [float(v) / temperature for v in logits]
    vocab = range(len(x))
    keep = set(vocab)
    if 0 < top_k < len(x):
        kth = sorted(x, reverse=True)[top_k - 1]
        keep = {i for i in vocab if x[i] >= kth}
    top = max(x[i] for i in keep)
    weight = {i: math.exp(x[i] - top) for i in keep}
    total = sum(weight.values())
    p = [weight.get(i, 0.0) / total for i in vocab]
    if top_p < 1.0:
        nucleus, mass = [], 0.0
        for i in sorted(vocab, key=lambda i: -p[i]):
            if mass >= top_p:
                break
            nucleus.append(i)
            mass += p[i]
        total = sum(p[i] for i in nucleus)
        p = [p[i] / total if i in nucleus else 0.0 for i in vocab]
    return p


def exact_joint_23(model, prompt: list[int]) -> torch.Tensor:
    """P(t2, t3 | prompt) (V, V) in fp64, by enumerating t1 under a transformers causal LM
    (`model(ids).logits`) at temperature 1."""
    v = model.config.vocab_size
    t1, t2 = torch.meshgrid(torch.arange(v), torch.arange(v), indexing="ij")
    seqs = torch.cat([torch.tensor(prompt).expand(v * v, -1), t1.reshape(-1, 1),
                      t2.reshape(-1, 1)], 1)
    with torch.no_grad():
        probs = model(seqs).logits.double().softmax(-1)  # (V*V, T, V)
    n = len(prompt)
    p1 = probs[0, n - 1]  # (V,)
    p2 = probs[:, n, :].view(v, v, v)[torch.arange(v), 0]  # p(t2 | t1): (V, V)
    p3 = probs[:, n + 1].view(v, v, v)  # p(t3 | t1, t2)
    return torch.einsum("a,ab,abc->bc", p1, p2, p3)


def joint_23_pvalue(outputs: list[list[int]], model, prompt: list[int]) -> float:
    """Chi-square p-value of the (t2, t3) pairs of `outputs` (rows of >= 3 generated tokens
    after `prompt`) against `exact_joint_23`."""
    v = model.config.vocab_size
    cells = torch.tensor([t[1] * v + t[2] for t in outputs])
    return chi2_pvalue(torch.bincount(cells, minlength=v * v).tolist(),
                       exact_joint_23(model, prompt).reshape(-1).tolist())
