"""An independent statement of the sampling rule, for the tests' expected distributions.

`expected_probs` applies temperature, top-k, then top-p (SGLang's "top-k first" order) to
one row of logits in plain Python floats, token by token, without torch; the engine's
`reference.verify.target_probs` is checked against it, never the other way round.
"""

from __future__ import annotations

import math
from collections.abc import Sequence


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
