"""Prompt lookup's device history is the request's own token stream: at every round, row r's
history up to the anchor is the prompt followed by the tokens emitted so far, whatever each
round committed (the stream itself comes from plain greedy decoding; rows and their
history columns outlive a request, so rows are not reused here)."""

from __future__ import annotations

import pytest
import torch

from reference.generate import generate
from reference.methods.prompt_lookup import PromptLookupProposer


class Recording(PromptLookupProposer):
    """Records, before each search, every live row's history up to its anchor."""

    def __init__(self, block_size: int):
        super().__init__(block_size)
        self.seen: list[tuple[int, list[int]]] = []  # (pool row, history through the anchor)

    def propose(self, rnd):
        out = super().propose(rnd)
        valid = rnd.valid if rnd.valid is not None else torch.ones_like(rnd.req_rows)
        for row, n, v in zip(rnd.req_rows.tolist(), rnd.prefix_lens.tolist(), valid.tolist()):
            if v:
                self.seen.append((row, self.hist[row, : n + 1].tolist()))
        return out


@pytest.mark.parametrize("lookahead", [False, True])
def test_history_is_the_prompt_and_the_emitted_tokens(target, lookahead):
    g = torch.Generator().manual_seed(3)
    prompts = [torch.randint(0, 5, (n,), generator=g).tolist() for n in (9, 3)]
    plain = generate(target, prompts, max_new_tokens=14)
    streams = [p + t for p, t in zip(prompts, plain.tokens)]
    proposer = Recording(block_size=5)
    out = generate(target, prompts, proposer=proposer, max_new_tokens=14, lookahead=lookahead)
    assert out.tokens == plain.tokens
    assert any(c > 1 for cs in out.accept_lengths for c in cs)  # drafts were accepted
    rounds = sum(len(cs) for cs in out.accept_lengths)
    assert len(proposer.seen) >= rounds
    for row, hist in proposer.seen:
        # a prefix of one request's stream (rows are not reused here); in lookahead mode
        # the round launched before the host saw the finish runs past the stream's end
        matches = [s for s in streams if s[: len(hist)] == hist[: len(s)]]
        assert matches, (row, hist)
        assert len(hist) > min(len(p) for p in prompts)
