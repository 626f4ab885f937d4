"""DFlash with tree verification: one draft forward, a tree of N nodes, one verify forward.

A round: the DFlash drafter drafts the block [anchor, MASK * (B-1)] as in the chain and
gives q_d at every depth d; `build_tree` keeps the best N-1 paths by product of draft
probabilities (top-k per depth); `verify_tree` runs the target over the N nodes with the
ancestor mask; `accept_greedy` takes the longest path whose every token is the target's
choice at its parent (the argmax, or at temperature > 0 a token sampled from the target's
distribution p at every node) and the choice after it is the bonus; `compact_path` moves
that path's slots to positions prefix + depth (the draft pool shares them); the path's
captured target states are injected into the draft pool at those positions, as the chain
injects its committed columns. With top-k 1 and N = B the
tree is the chain.

Sampling is lossless: at each accepted node the next token is one sample from p at that
node; the tree only decides whether that sample's K/V is already computed (a child carries
it) or the round ends with it as the bonus. Every emitted token is therefore drawn from the
target's own conditional, as in plain sampling (for deterministic candidates this is the
recursive rejection over siblings of SpecInfer: accept child c with p'(c), remove it from
the residual p', try the next). Options of the `dflash` method: `tree_budget` N,
`tree_top_k` k.
"""

from __future__ import annotations

import torch

from reference.dflash import DFlashProposer, Drafter, draft_forward
from reference.model import ForwardBatch, Target
from reference.tree import accept_greedy, build_tree, compact_path, verify_tree
from reference.verify import target_probs


class DFlashTreeProposer(DFlashProposer):
    """DFlash drafting, verified as a tree of `budget` nodes (anchor included)."""

    owns_round = True

    def __init__(self, drafter: Drafter, target: Target, block_size: int | None = None,
                 budget: int = 16, top_k: int = 4):
        super().__init__(drafter, target, block_size)
        if budget < 1 or top_k < 1:
            raise ValueError(f"tree_budget and tree_top_k must be >= 1, got {budget}, {top_k}")
        self.depth, self.budget, self.top_k = self.block_size - 1, budget, top_k
        self.block_size = max(budget, self.block_size)  # KV positions a round writes

    def draft_log_q(self, rows: torch.Tensor, prefix_lens: torch.Tensor,
                    pending: torch.Tensor) -> torch.Tensor:
        """log q (bs, B-1, V) of depths 1..B-1: the drafter's block [anchor, MASK * (B-1)]."""
        bs, b = rows.shape[0], self.depth + 1
        positions = prefix_lens[:, None] + torch.arange(b, device=rows.device)
        block = torch.full((bs, b), self.mask_token_id, dtype=torch.int64, device=rows.device)
        block[:, 0] = pending
        cache_loc = self.pool.req_to_token[rows].long().gather(1, positions)
        logits = draft_forward(self.drafter, self.target, block,
                               ForwardBatch(positions, cache_loc, rows, prefix_lens + b),
                               self.pool.req_to_token, self.pool.draft_k, self.pool.draft_v)
        return logits.float().log_softmax(-1)

    def run_round(self, rows, prefix_lens, pending, valid, live):
        positions = prefix_lens[:, None] + torch.arange(self.depth + 1, device=rows.device)
        log_q = self.draft_log_q(rows, prefix_lens, pending)
        tree = build_tree(pending, log_q, self.budget, self.top_k)
        verify, aux = verify_tree(self.target, self.pool, tree, rows, prefix_lens,
                                  self.target_layer_ids)
        if self.sampling.greedy:
            choice = verify.argmax(dim=-1)
        else:  # one sample from p per node, (bs, N)
            p = target_probs(verify, self.sampling)
            choice = torch.multinomial(p.flatten(0, 1), 1, generator=self.gen).view(p.shape[:2])
        res = accept_greedy(tree, choice, self.depth)
        compact_path(self.pool.req_to_token, rows, prefix_lens, res.path, self.budget)
        commit = (res.accept_lens + 1) * valid
        path = res.path.clamp(min=0)  # (bs, B) nodes of the accepted path, root first
        path_aux = aux.gather(1, path[:, :, None].expand(-1, -1, aux.shape[-1]))
        loc = self.pool.req_to_token[rows].long().gather(1, positions)
        self._inject(path_aux.flatten(0, 1), positions.reshape(-1), loc.reshape(-1),
                     commit.to(torch.int32))
        drafted = tree.tokens.gather(1, path[:, 1:])  # (bs, B-1) path tokens after the root
        out = torch.cat([drafted, torch.zeros_like(drafted[:, :1])], dim=1)
        out.scatter_(1, res.accept_lens[:, None], res.bonus[:, None])
        return commit, out
