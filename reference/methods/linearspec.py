"""Nemotron-style LinearSpec: a bidirectional draft pass and a causal verify pass per block.

docs/methods.md section 3.2. Per request with committed KV length L
and seed (pending) token x, with the block size B picked by the running batch size from a
tier table (section 3.4, SGLang's `block_size_tiers`: the first tier whose max_running_bs
covers the batch):

1. draft: `[x, MASK * (B-1)]` at positions L..L+B-1, attention bidirectional over the block
   (causal over the prefix); unshifted logits, so MASK j proposes d_j (j = 1..B-1).
2. verify: `[x, d_1 .. d_{B-1}]`, causal, shifted logits (the logit at j scores d_{j+1}).
3. accept: greedy matches plus the bonus (temperature 0); at T > 0, chain speculative
   sampling with the draft's q (exactly lossless; Nemotron's HF code compares two samples
   instead, which is not).
4. KV: committed+1 = L + accept_len + 1 positions kept, the rest of the block trimmed.

The draft pass writes its block K/V into the block's own slots (the paged attention reads
keys from the pool); the verify pass rewrites all B of them causally before anything reads
them, so no draft K/V survives (SGLang's `dllm_causal_kv_update`).
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from common.methods import TIERS  # (max_running_bs, B), ascending; shared with the simulator
from reference.methods.selfspec_base import RoundResult, SelfSpecMode
from reference.proposers import Proposal
from reference.verify import target_probs, verify_greedy, verify_sampling


def select_block_size(running_bs: int, tiers: Sequence[tuple[int, int]]) -> int:
    """B of the first tier whose max_running_bs >= running_bs (SGLang select_block_size)."""
    for max_bs, block in tiers:
        if running_bs <= max_bs:
            return block
    raise ValueError(f"no tier covers a running batch of {running_bs}: {list(tiers)}")


class LinearSpec(SelfSpecMode):
    """LinearSpec with a batch-size tier table of block sizes (each B >= 2).

    Args:
        mask_token_id: MASK id of the draft pass.
        tiers: ((max_running_bs, B), ..) ascending in max_running_bs.
        draft: "sample" (d_j ~ q, verified with q) or "argmax" (one-hot drafts); at
            temperature 0 both draft argmax q.
    """

    forwards_per_round = 2

    def __init__(self, mask_token_id: int, tiers: Sequence[tuple[int, int]] = TIERS,
                 draft: str = "sample"):
        tiers = tuple((int(m), int(b)) for m, b in tiers)
        if [m for m, _ in tiers] != sorted(m for m, _ in tiers) or min(b for _, b in tiers) < 2:
            raise ValueError(f"tiers must ascend in max_running_bs with B >= 2: {tiers}")
        if draft not in ("sample", "argmax"):
            raise ValueError(f"draft must be 'sample' or 'argmax', got {draft!r}")
        self.mask_token_id, self.tiers, self.draft_mode = mask_token_id, tiers, draft
        self.max_query = max(b for _, b in tiers)

    def block_at(self, n: int) -> int:
        """The tier's B for a running batch of n requests."""
        return select_block_size(n, self.tiers)

    def draft(self, draft_logits: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Drafts (bs, B-1) i64 and q (bs, B-1, V) fp32 or None from draft_logits (bs, B-1, V)."""
        if self.sampling.greedy or self.draft_mode == "argmax":
            return draft_logits.argmax(dim=-1), None
        q = target_probs(draft_logits, self.sampling)
        drafts = torch.multinomial(q.flatten(0, 1), 1, generator=self.gen)
        return drafts.view(q.shape[:2]), q

    def propose(self, rnd) -> Proposal:
        """The bidirectional draft pass over the round's block [x, MASK * (B-1)]; the
        engine's verify is the causal pass, which rewrites the block's K/V."""
        draft_logits = self.forward(rnd.block_ids, rnd.req_rows, rnd.prefix_lens,
                                    causal=False)[:, 1:]
        drafts, q = self.draft(draft_logits)
        return Proposal(torch.cat([rnd.verified_id[:, None], drafts], dim=1), q)

    def judge(self, rnd, proposal, verified) -> RoundResult:
        cand, block = proposal.candidates, proposal.candidates.shape[1]
        if self.sampling.greedy:
            res = verify_greedy(cand, verified.logits, rnd.prefix_lens)
        else:
            res = verify_sampling(cand, verified.logits, rnd.prefix_lens, self.sampling,
                                  self.gen, proposal.q)
        accept = res.accept_lens.long()
        tested = (accept + 1).clamp(max=block - 1)
        return RoundResult(res.out_tokens, res.commit_lens.long(),
                           torch.full_like(accept, block), tested, accept)
