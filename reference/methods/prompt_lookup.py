"""Prompt-lookup (n-gram) drafting: no drafter model, drafts copied from the context.

Each round, for each request, the last n tokens of its history (prompt and output, anchor
included) are searched for an earlier occurrence, from n = `ngram_max` down to `ngram_min`;
the longest n that matches wins, and among its matches the most recent one. The B-1 tokens
that followed that occurrence are the drafts. A continuation that runs into the query itself
repeats with the match's period (the n-gram recurs every `period` tokens, so the history
predicts itself). Without any match the drafts are the anchor repeated (they are verified
like any draft and simply rejected). Drafts are deterministic (q one-hot), so greedy and
chain speculative sampling stay lossless (reference/verify.py).

The history lives on the device, `hist` (R, W+1) i64 indexed by pool row and position
(column W takes padding writes): the prefill writes the prompt, each propose writes the
anchor at position prefix_len, each commit the accepted drafts. The search is tensor ops
over the whole padded batch (`Tensor.unfold` windows), no host sync. Options: `block_size`
B (default 8), `ngram_max` (default 3), `ngram_min` (default 1).
"""

from __future__ import annotations

import torch

from reference.proposers import Proposal, Proposer, Round
from reference.registry import register


def lookup_drafts(hist: torch.Tensor, lens: torch.Tensor, num_drafts: int, ngram_max: int,
                  ngram_min: int) -> torch.Tensor:
    """Drafts (bs, num_drafts) i64 continuing each row of hist (bs, W) past its first lens
    (bs,) i64 tokens (lens >= 1: the anchor is hist[b, lens[b] - 1])."""
    bs, width = hist.shape
    dev = hist.device
    found = torch.zeros(bs, dtype=torch.bool, device=dev)
    start = torch.zeros(bs, dtype=torch.int64, device=dev)  # first token after the match
    period = torch.ones(bs, dtype=torch.int64, device=dev)
    for n in range(ngram_max, ngram_min - 1, -1):
        if n > width - 1:
            continue
        query = hist.gather(1, (lens[:, None] - n + torch.arange(n, device=dev)).clamp(min=0))
        windows = hist.unfold(1, n, 1)  # (bs, W-n+1, n): window s = hist[s : s+n]
        s = torch.arange(windows.shape[1], device=dev)
        # an earlier occurrence: it ends before the anchor, and the query itself fits
        ok = (windows == query[:, None, :]).all(-1) & (s[None, :] + n <= lens[:, None] - 1)
        ok &= (lens >= n + 1)[:, None]
        last = torch.where(ok, s[None, :], -1).amax(dim=1)  # most recent match, or -1
        take = ~found & (last >= 0)
        start = torch.where(take, last + n, start)
        period = torch.where(take, lens - n - last, period)
        found |= take
    idx = start[:, None] + torch.arange(num_drafts, device=dev)  # (bs, num_drafts)
    over = (idx - lens[:, None] + 1).clamp(min=0)
    idx = idx - period[:, None] * torch.div(over + period[:, None] - 1, period[:, None],
                                            rounding_mode="floor")
    drafts = hist.gather(1, idx.clamp(min=0, max=width - 1))
    anchor = hist.gather(1, (lens - 1).clamp(min=0)[:, None])
    return torch.where(found[:, None], drafts, anchor)


class PromptLookupProposer(Proposer):
    """Drafts B-1 tokens per request by n-gram lookup in its own history (module docstring)."""

    def __init__(self, block_size: int = 8, ngram_max: int = 3, ngram_min: int = 1):
        if block_size < 2:
            raise ValueError(f"block_size must be >= 2, got {block_size}")
        if not 1 <= ngram_min <= ngram_max:
            raise ValueError(f"need 1 <= ngram_min <= ngram_max, got {ngram_min}, {ngram_max}")
        self.block_size, self.ngram_max, self.ngram_min = block_size, ngram_max, ngram_min

    def bind(self, target, pool, graphs, *args) -> None:
        super().bind(target, pool, graphs, *args)
        rows, width = pool.req_to_token.shape
        self.width = width
        self.hist = torch.zeros(rows, width + 1, dtype=torch.int64, device=target.device)

    def _write(self, rows: torch.Tensor, positions: torch.Tensor, tokens: torch.Tensor,
               keep: torch.Tensor) -> None:
        """hist[rows[b], positions[b, j]] = tokens[b, j] where keep (bs, T), else column W."""
        cols = torch.where(keep, positions, self.width).clamp(max=self.width)
        self.hist[rows[:, None].expand_as(cols), cols] = tokens

    def prefill(self, input_ids, batch, aux) -> None:
        n = input_ids.shape[1]
        lens = batch.kv_lens - batch.positions[:, 0]
        keep = torch.arange(n, device=input_ids.device)[None, :] < lens[:, None]
        self._write(batch.req_rows, batch.positions, input_ids, keep)

    def propose(self, rnd: Round) -> Proposal:
        rows = rnd.req_rows
        self.hist[rows, rnd.prefix_lens] = rnd.verified_id
        drafts = lookup_drafts(self.hist[rows, : self.width], rnd.prefix_lens + 1,
                               self.block_size - 1, self.ngram_max, self.ngram_min)
        self._candidates = torch.cat([rnd.verified_id[:, None], drafts], dim=1)
        return Proposal(self._candidates)

    def commit(self, rnd: Round, proposal, verified, accepted) -> None:
        j = torch.arange(self.block_size, device=rnd.positions.device)
        keep = (j[None, :] >= 1) & (j[None, :] < accepted.out.commit_lens[:, None])
        self._write(rnd.req_rows, rnd.positions, self._candidates, keep)


@register("prompt_lookup")
def prompt_lookup(target, context, block_size=8, ngram_max=3, ngram_min=1):
    return PromptLookupProposer(block_size, ngram_max, ngram_min)
