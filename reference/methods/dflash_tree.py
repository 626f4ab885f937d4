"""DFlash with tree verification: one draft forward, a tree of N nodes, one verify forward.

A round: the DFlash drafter drafts the block [anchor, MASK * (B-1)] as in the chain and
gives q_d at every depth d; `build_tree` keeps the best N-1 paths by product of draft
probabilities (top-k per depth); the engine's verify runs the target over the N nodes with
the ancestor mask; `accept_greedy` takes the longest path whose every token is the target's
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
from reference.proposers import Accepted, Proposal, Round, Span, StepOutput, Verified
from reference.tree import accept_greedy, ancestors, build_tree, compact_path
from reference.verify import target_probs


class DFlashTreeProposer(DFlashProposer):
    """DFlash drafting, verified as a tree of `budget` nodes (anchor included).

    Its stages: propose drafts the chain's block and builds the tree with its ancestor mask;
    the engine verifies the N nodes; accept takes the tree path against the target's choice
    at each node; commit injects the path's states and compacts its slots. At greedy the
    whole round is one CUDA graph per (batch bucket, N). At temperature > 0, two: draft +
    tree + verify, then injection + compaction, with the per-node samples and the path rule
    between them, eagerly."""

    def __init__(self, drafter: Drafter, target: Target, block_size: int | None = None,
                 budget: int = 16, top_k: int = 4):
        super().__init__(drafter, target, block_size)
        if budget < 1 or top_k < 1:
            raise ValueError(f"tree_budget and tree_top_k must be >= 1, got {budget}, {top_k}")
        self.depth, self.budget, self.top_k = self.block_size - 1, budget, top_k
        self.block_size = max(budget, self.block_size)  # KV positions a round writes

    @property
    def _key(self) -> tuple:
        return (self.graph_key, self.budget, self.top_k)

    def spans(self, sampling, options) -> tuple[Span, ...]:
        if sampling.greedy:
            return (Span(("propose", "verify", "accept", "commit"), ("tree_round", self._key)),)
        return (Span(("propose", "verify"), ("tree_verify", self._key)), Span(("accept",)),
                Span(("commit",)))

    @property
    def verify_key(self) -> tuple:
        return ("tree_verify_forward", self.target_layer_ids)

    def draft_log_q(self, rnd: Round) -> torch.Tensor:
        """log q (bs, B-1, V) of depths 1..B-1: the drafter's block [anchor, MASK * (B-1)]
        (the first B columns of the round's block)."""
        b = self.depth + 1
        batch = ForwardBatch(rnd.positions[:, :b], rnd.cache_loc[:, :b], rnd.req_rows,
                             rnd.prefix_lens + b)
        logits = draft_forward(self.drafter, self.target, rnd.block_ids[:, :b], batch,
                               self.pool.req_to_token, self.pool.draft_k, self.pool.draft_v)
        return logits.float().log_softmax(-1)

    def propose(self, rnd: Round) -> Proposal:
        """The best N-1 paths of the draft (`build_tree`) and their ancestor mask; node i
        sits at table position prefix + i, in the slot rnd.cache_loc[:, i] holds."""
        tree = build_tree(rnd.verified_id, self.draft_log_q(rnd), self.budget, self.top_k)
        return Proposal(tree.tokens, tree=tree, mask=ancestors(tree.parents, self.depth))

    def accept(self, rnd: Round, proposal: Proposal, verified: Verified) -> Accepted:
        """The tree path against the target's argmax at each node, or at temperature > 0 one
        sample from p per node (module docstring): out_tokens (bs, B) the path's tokens
        after the root with the bonus at column accept_len."""
        logits = verified.logits
        if self.sampling.greedy:
            choice = logits.argmax(dim=-1)
        else:
            p = target_probs(logits, self.sampling)  # (bs, N, V)
            choice = torch.multinomial(p.flatten(0, 1), 1,
                                       generator=self.gen).view(p.shape[:2])
        res = accept_greedy(proposal.tree, choice, self.depth, proposal.mask)
        valid = rnd.valid
        commit = (res.accept_lens + 1) * valid
        path = res.path.clamp(min=0)  # (bs, B) nodes of the accepted path, root first
        drafted = proposal.candidates.gather(1, path[:, 1:])  # (bs, B-1) after the root
        out = torch.cat([drafted, torch.zeros_like(drafted[:, :1])], dim=1)
        out.scatter_(1, res.accept_lens[:, None], res.bonus[:, None])
        return Accepted(StepOutput(commit.to(torch.int32), out, res.bonus * valid,
                                   (rnd.prefix_lens + commit) * valid), res.path)

    def commit(self, rnd: Round, proposal: Proposal, verified: Verified,
               accepted: Accepted) -> None:
        """Inject the path's captured states at positions prefix + depth into the slots its
        nodes held, and move those slots there (`compact_path`)."""
        n = proposal.candidates.shape[1]
        self.graphs.run(("tree_commit", self._key), self._inject_path, verified.aux,
                        accepted.path, rnd.cache_loc[:, :n], rnd.req_rows, rnd.prefix_lens,
                        accepted.out.commit_lens)

    def _inject_path(self, aux, path, slots, rows, prefix_lens, commit_lens) -> None:
        """Idempotent, as a graph's warm-up calls require: everything is computed from the
        inputs (slots (bs, N) i64, the nodes' slots before the round), not from the table
        it rewrites."""
        positions = prefix_lens[:, None] + torch.arange(self.depth + 1, device=rows.device)
        nodes = path.clamp(min=0)
        path_aux = aux.gather(1, nodes[:, :, None].expand(-1, -1, aux.shape[-1]))
        self._inject(path_aux.flatten(0, 1), positions.reshape(-1),
                     slots.gather(1, nodes).reshape(-1), commit_lens)
        compact_path(self.pool.req_to_token, rows, prefix_lens, path, slots)
