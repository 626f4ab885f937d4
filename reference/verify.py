"""Verification of a block of candidates: greedy, or chain speculative sampling.

Greedy uses `accept_bonus` (docs/sglang.md 4.2). Sampling preserves the
target distribution p exactly (Leviathan et al., Chen et al.): draft d_j is accepted with
probability min(1, p_{j-1}(d_j) / q_j(d_j)); at the first rejection the bonus is drawn from
norm(max(0, p - q)) at that position, and when every draft is accepted from p at the last
position. A deterministic draft (q = None) is one-hot: accept with probability p(d), else
sample from p with d removed. p is the target's distribution after temperature, top-k, then
top-p (SGLang's "top-k first" order). Every random draw takes a torch.Generator.
"""

from __future__ import annotations

from typing import NamedTuple

import torch

from reference import ops
from reference.ops import AcceptResult


class Sampling(NamedTuple):
    """temperature 0 means greedy; top_k 0 means off; top_p 1.0 means off."""

    temperature: float = 0.0
    top_k: int = 0
    top_p: float = 1.0

    @property
    def greedy(self) -> bool:
        return self.temperature <= 0.0


def target_probs(logits: torch.Tensor, sampling: Sampling) -> torch.Tensor:
    """p: (..., V) logits -> (..., V) fp32 probabilities after temperature/top-k/top-p."""
    x = logits.float() / sampling.temperature
    vocab = x.shape[-1]
    if 0 < sampling.top_k < vocab:
        kth = x.topk(sampling.top_k, dim=-1).values[..., -1:]
        x = x.masked_fill(x < kth, float("-inf"))
    probs = x.softmax(dim=-1)
    if sampling.top_p < 1.0:
        sorted_p, order = probs.sort(dim=-1, descending=True)
        # keep a token if the mass strictly before it is < top_p (the first always stays)
        drop = (sorted_p.cumsum(dim=-1) - sorted_p) >= sampling.top_p
        probs = probs.scatter(-1, order, sorted_p.masked_fill(drop, 0.0))
        probs = probs / probs.sum(dim=-1, keepdim=True)
    return probs


def sample(logits: torch.Tensor, sampling: Sampling, generator: torch.Generator) -> torch.Tensor:
    """One token per row of logits (bs, V) -> (bs,) i64 (argmax when greedy)."""
    if sampling.greedy:
        return logits.argmax(dim=-1)
    probs = target_probs(logits, sampling)
    return torch.multinomial(probs, 1, generator=generator)[:, 0]


def cap_drafts(candidates: torch.Tensor, verify_lens: torch.Tensor | None) -> torch.Tensor:
    """candidates (bs, B) with d_j set to -1 (never accepted) for j > verify_lens (bs,)."""
    if verify_lens is None:
        return candidates
    j = torch.arange(candidates.shape[1], device=candidates.device)
    return candidates.masked_fill(j[None, :] > verify_lens[:, None], -1)


def verify_greedy(candidates: torch.Tensor, logits: torch.Tensor, prefix_lens: torch.Tensor,
                  verify_lens: torch.Tensor | None = None) -> AcceptResult:
    """candidates (bs, B), logits (bs, B, V) -> AcceptResult via accept_bonus; at most
    verify_lens (bs,) drafts are accepted per request (None: B-1)."""
    return ops.accept_bonus(cap_drafts(candidates, verify_lens), logits.argmax(dim=-1),
                            prefix_lens)


def verify_sampling(candidates: torch.Tensor, logits: torch.Tensor, prefix_lens: torch.Tensor,
                    sampling: Sampling, generator: torch.Generator,
                    q: torch.Tensor | None = None,
                    verify_lens: torch.Tensor | None = None) -> AcceptResult:
    """Chain speculative sampling over the first verify_lens drafts of each request.

    Args:
        candidates: (bs, B) i64 [anchor, d_1 .. d_{B-1}].
        logits: (bs, B, V) target logits; row j scores the token after candidates[:, j].
        prefix_lens: (bs,) i64.
        q: (bs, B-1, V) draft distribution of d_1..d_{B-1}, or None (one-hot drafts).
        verify_lens: (bs,) i64 l_r, drafts verified per request (None: B-1). When all l_r
            are accepted the bonus comes from p after d_{l_r}.
    """
    bs, block = candidates.shape
    p = target_probs(logits, sampling)  # (bs, B, V)
    drafts = candidates[:, 1:]
    p_d = p[:, :-1].gather(-1, drafts[..., None])[..., 0]  # (bs, B-1)
    ratio = p_d if q is None else p_d / q.gather(-1, drafts[..., None])[..., 0]
    u = torch.rand(ratio.shape, generator=generator, device=ratio.device)
    limit = torch.full_like(prefix_lens, block - 1) if verify_lens is None else verify_lens
    ok = (u < ratio) & (torch.arange(block - 1, device=u.device)[None, :] < limit[:, None])
    accept = ok.to(torch.int64).cumprod(dim=1).sum(dim=1)  # (bs,)
    rows = torch.arange(bs, device=p.device)
    p_a = p[rows, accept]  # (bs, V)
    rejected = accept < limit
    d_a = drafts.gather(1, accept.clamp(max=max(block - 2, 0))[:, None]) if block > 1 else None
    if d_a is not None:
        if q is None:
            residual = p_a.scatter(-1, d_a, 0.0)
        else:
            q_a = q[rows, accept.clamp(max=block - 2)]
            residual = (p_a - q_a).clamp(min=0.0)
        mass = residual.sum(dim=-1, keepdim=True)
        use_residual = rejected[:, None] & (mass > 0)
        p_a = torch.where(use_residual, residual / mass.clamp(min=1e-30), p_a)
    bonus = torch.multinomial(p_a, 1, generator=generator)[:, 0]
    out = torch.cat([drafts, candidates.new_zeros(bs, 1)], dim=1)
    out = out.scatter(1, accept[:, None], bonus[:, None])
    commit = accept + 1
    return AcceptResult(accept.to(torch.int32), commit.to(torch.int32), bonus, out,
                        prefix_lens.to(torch.int64) + commit)
