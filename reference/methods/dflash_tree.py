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

from reference.methods.dflash_drafter import DFlashProposer, Drafter, draft_forward
from reference.model import ForwardBatch, Target
from reference.tree import (
    Tree,
    accept_greedy,
    ancestors,
    build_tree,
    compact_path,
    verify_tree,
)
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

    def _draft_and_verify(self, rows, prefix_lens, pending):
        """Draft, build the tree, verify it: (the target's choice (bs, N) i64 at greedy, else
        logits (bs, N, V)), the tree's four (bs, N) tensors, its ancestor mask (bs, N, N),
        the nodes' slots before the round (bs, N) i64, and the captured states."""
        log_q = self.draft_log_q(rows, prefix_lens, pending)
        tree = build_tree(pending, log_q, self.budget, self.top_k)
        mask = ancestors(tree.parents, self.depth)
        node_pos = prefix_lens[:, None] + torch.arange(self.budget, device=rows.device)
        slots = self.pool.req_to_token[rows].long().gather(1, node_pos)
        logits, aux = verify_tree(self.target, self.pool, tree, rows, prefix_lens,
                                  self.target_layer_ids, mask=mask, slots=slots)
        head = logits.argmax(dim=-1) if self.sampling.greedy else logits
        return (head, *tree, mask, slots, aux)

    def _accept_and_inject(self, choice, tokens, parents, depth, log_score, mask, slots, aux,
                           rows, prefix_lens, valid):
        """Accept against `choice` (bs, N), inject the path's captured states at positions
        prefix + depth into the slots its nodes held (`slots`), and move those slots there
        (`compact_path`). Idempotent, as a graph's warm-up calls require: everything is
        computed from the inputs, not from the table it rewrites. Returns (commit_lens (bs,)
        i64, out_tokens (bs, B) i64)."""
        tree = Tree(tokens, parents, depth, log_score)
        res = accept_greedy(tree, choice, self.depth, mask)
        commit = (res.accept_lens + 1) * valid
        positions = prefix_lens[:, None] + torch.arange(self.depth + 1, device=rows.device)
        path = res.path.clamp(min=0)  # (bs, B) nodes of the accepted path, root first
        path_aux = aux.gather(1, path[:, :, None].expand(-1, -1, aux.shape[-1]))
        self._inject(path_aux.flatten(0, 1), positions.reshape(-1),
                     slots.gather(1, path).reshape(-1), commit.to(torch.int32))
        compact_path(self.pool.req_to_token, rows, prefix_lens, res.path, slots)
        drafted = tokens.gather(1, path[:, 1:])  # (bs, B-1) path tokens after the root
        out = torch.cat([drafted, torch.zeros_like(drafted[:, :1])], dim=1)
        out.scatter_(1, res.accept_lens[:, None], res.bonus[:, None])
        return commit, out

    def _greedy_round(self, rows, prefix_lens, pending, valid):
        """A whole greedy round as one graphed step: (commit_lens, out_tokens)."""
        head, *tree, mask, slots, aux = self._draft_and_verify(rows, prefix_lens, pending)
        return self._accept_and_inject(head, *tree, mask, slots, aux, rows, prefix_lens, valid)

    def run_round(self, rows, prefix_lens, pending, valid, live):
        """One CUDA graph per (batch bucket, N) at greedy. At temperature > 0, two: draft +
        tree + verify, then accept + inject + compaction, with the per-node samples drawn
        between them, eagerly."""
        key = (self.graph_key, self.budget, self.top_k)
        if self.sampling.greedy:
            return self.graphs.run(("tree_round", key), self._greedy_round, rows, prefix_lens,
                                   pending, valid)
        logits, *tree, mask, slots, aux = self.graphs.run(
            ("tree_verify", key), self._draft_and_verify, rows, prefix_lens, pending)
        p = target_probs(logits, self.sampling)  # one sample from p per node, (bs, N)
        choice = torch.multinomial(p.flatten(0, 1), 1, generator=self.gen).view(p.shape[:2])
        return self.graphs.run(("tree_commit", key), self._accept_and_inject, choice, *tree,
                               mask, slots, aux, rows, prefix_lens, valid)
