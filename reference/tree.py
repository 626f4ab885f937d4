"""Draft trees over one DFlash block: construction under a node budget, and greedy acceptance.

A DFlash drafter gives, for each block position d = 1..B-1, a distribution q_d over the token
at depth d (all positions in one forward, none conditioned on the others' picks). A tree of N
nodes (the anchor is node 0, the root) holds N-1 drafted paths' tokens: a node at depth d
carries one of the top-k tokens of q_d, and its score is the product of q along its path
from the root. `build_tree` adds nodes best-first by that product (DDTree / JetSpec's rule),
which keeps the node set closed under parents because every factor is at most 1; the chain
is the case k = 1, N = B.

Because q_d does not depend on the tokens above it, the best N-1 paths are found in D
batched steps rather than N-1 picks: the best M = N-1 paths of depth d extend only the best M
of depth d-1 (a path's score is at most its parent's), so a beam of width M per depth, then
the best M over all beams, gives exactly the best-first set. The ancestor mask takes
ceil(log2(D + 1)) steps of pointer doubling, and acceptance reads it whole. Every step is a
fixed-shape tensor op with no host sync, so a whole round is captured in a CUDA graph per
(batch bucket, N); a round of small ops is what a tree adds to the chain's, so the op count
is kept low (about 30 + 2D for construction, 15 for the mask, 20 for acceptance).

Greedy acceptance (`accept_greedy`): node i is accepted when every node on its path matches,
a node matching when its token is the target's argmax at its parent; the accepted nodes form
one root path (siblings carry distinct tokens), and the deepest accepted node's argmax is
the bonus. `compact_path` then moves the path's KV to contiguous positions by permuting
table entries (no K/V copy).
"""

from __future__ import annotations

from typing import NamedTuple

import torch

from reference.model import ForwardBatch, Target


class Tree(NamedTuple):
    """A padded batch of trees, node 0 the root (the anchor), nodes in order of addition.

    tokens: (bs, N) i64, the root's = the anchor; parents: (bs, N) i64, -1 at the root;
    depth: (bs, N) i64, 0 at the root; log_score: (bs, N) fp32, the sum of log q along the
    path (0 at the root). Parents precede their children.
    """

    tokens: torch.Tensor
    parents: torch.Tensor
    depth: torch.Tensor
    log_score: torch.Tensor


def build_tree(anchor: torch.Tensor, log_q: torch.Tensor, budget: int, top_k: int) -> Tree:
    """The best `budget` - 1 paths by product of draft probabilities, plus the root.

    anchor: (bs,) i64; log_q: (bs, D, V) log draft distributions of depths 1..D (D = B-1);
    budget: N >= 1 nodes, anchor included; top_k: candidates per depth (k >= 1).

    A beam of the best M = N-1 rank paths per depth (two ops a depth: the extension and its
    top-M; where fewer than M paths exist, the rest score -inf), then the best M of all D*M
    candidates (module docstring). Nodes come in order of score (ties: shallower first), so
    parents precede their children; nodes beyond the real paths score -inf (padding).
    """
    bs, depth_max, _ = log_q.shape
    if budget < 1 or top_k < 1:
        raise ValueError(f"budget and top_k must be >= 1, got {budget} and {top_k}")
    dev = log_q.device
    m = budget - 1
    if m == 0 or depth_max == 0:  # nothing is drafted: the root and padding
        node = torch.arange(budget, device=dev).expand(bs, -1)
        return Tree(torch.where(node == 0, anchor[:, None], 0), torch.full_like(node, -1),
                    torch.zeros_like(node), torch.where(node == 0, 0.0, float("-inf")))
    cand_lp, cand_tok = log_q.float().topk(min(top_k, log_q.shape[-1]), dim=-1)  # (bs, D, k)
    k = cand_lp.shape[-1]
    beam = torch.full((bs, m), float("-inf"), device=dev)
    beam[:, 0] = 0.0  # the root
    scores, picks = [], []  # per depth (bs, M): a path's score, its index parent * k + rank
    for d in range(depth_max):
        beam, idx = (beam[:, :, None] + cand_lp[:, d, None, :]).flatten(1).topk(m, dim=1)
        scores.append(beam)
        picks.append(idx)
    c_score = torch.stack(scores, 1).flatten(1)  # (bs, C = D*M), depth-major
    pick = torch.stack(picks, 1)  # (bs, D, M)
    level = torch.arange(depth_max, device=dev)[:, None]  # (D, 1)
    c_parent = torch.where(level > 0, (level - 1) * m + pick // k, -1).flatten(1)
    c_token = cand_tok.flatten(1).gather(1, (level * k + pick % k).flatten(1))
    order = c_score.sort(dim=1, descending=True, stable=True).indices[:, :m]  # (bs, M)
    score = c_score.gather(1, order)
    real = torch.isfinite(score)
    node_of = torch.zeros_like(c_parent)  # candidate -> node (0: the root / not chosen)
    node_of.scatter_(1, order, torch.arange(1, m + 1, device=dev).expand(bs, -1))
    par = c_parent.gather(1, order)
    parents = torch.where(real & (par >= 0), node_of.gather(1, par.clamp(min=0)), 0)
    return Tree(torch.cat([anchor[:, None], torch.where(real, c_token.gather(1, order), 0)], 1),
                torch.cat([parents.new_full((bs, 1), -1), parents], 1),
                torch.cat([parents.new_zeros((bs, 1)), torch.where(real, order // m + 1, 0)], 1),
                torch.cat([score.new_zeros((bs, 1)), score], 1))


def ancestors(parents: torch.Tensor, max_depth: int | None = None) -> torch.Tensor:
    """(bs, N, N) bool: [b, i, j] when node j is node i or one of its ancestors (the
    attention mask inside a tree: a node sees its own path). parents: (bs, N), -1 at the
    root; max_depth: the deepest node's depth, if known (else N-1).

    Pointer doubling: after s steps row i holds i's ancestors at distance < 2^s, and `jump`
    is i's ancestor at distance 2^s (the root past the top); ceil(log2(max_depth + 1)) steps.
    """
    bs, n = parents.shape
    out = torch.eye(n, dtype=torch.bool, device=parents.device).expand(bs, n, n)
    jump = parents.clamp(min=0)
    for _ in range((n - 1 if max_depth is None else max_depth).bit_length()):
        out = out | out.gather(1, jump[:, :, None].expand(-1, -1, n))
        jump = jump.gather(1, jump)
    return out


class TreeAccept(NamedTuple):
    """accept_lens (bs,) i64: accepted drafted nodes (the path's depth); last (bs,) i64: the
    deepest accepted node (0: the root); path (bs, D+1) i64: the accepted path's nodes from
    the root, -1 beyond; bonus (bs,) i64: the target's argmax at `last`."""

    accept_lens: torch.Tensor
    last: torch.Tensor
    path: torch.Tensor
    bonus: torch.Tensor


def accept_greedy(tree: Tree, target_argmax: torch.Tensor, depth_max: int,
                  mask: torch.Tensor | None = None) -> TreeAccept:
    """Tree acceptance against the target's choice at each node. target_argmax: (bs, N) i64,
    the target's argmax at each node (from the tree-masked verify forward), or a token
    sampled from its distribution there (lossless sampling, reference/methods/dflash_tree.py);
    depth_max: D = B-1, the deepest a node can be; mask: the tree's `ancestors` (bs, N, N),
    computed when None. A node is accepted when no node on its path (its mask row) fails
    its own match, so the whole walk is a few whole-tree ops."""
    bs, n = tree.tokens.shape
    mask = ancestors(tree.parents, depth_max) if mask is None else mask
    node = torch.arange(n, device=tree.tokens.device)
    ok = (tree.tokens == target_argmax.gather(1, tree.parents.clamp(min=0))) \
        & torch.isfinite(tree.log_score) | (node == 0)
    accepted = ~(mask & ~ok[:, None, :]).any(dim=2)
    accept = torch.where(accepted, tree.depth, -1).amax(dim=1)
    last = torch.where(accepted & (tree.depth == accept[:, None]), node, n).amin(dim=1)
    on_path = mask.gather(1, last[:, None, None].expand(-1, 1, n))[:, 0]  # (bs, N)
    path = torch.full((bs, depth_max + 2), -1, dtype=torch.int64, device=node.device)
    path.scatter_reduce_(1, torch.where(on_path, tree.depth, depth_max + 1),
                         node.expand(bs, n), "amax")  # column D+1 collects the off-path nodes
    return TreeAccept(accept, last, path[:, :-1],
                      target_argmax.gather(1, last[:, None])[:, 0])


def compact_path(req_to_token: torch.Tensor, rows: torch.Tensor, prefix_lens: torch.Tensor,
                 path: torch.Tensor, slots: torch.Tensor) -> None:
    """Move an accepted path's KV to contiguous positions by permuting table entries, with
    no K/V copy: after a tree verify wrote node i's K/V at position prefix + i, the nodes of
    the accepted path (node path[d] at depth d) must sit at positions prefix + d.

    req_to_token: (R, W) int, changed in place; rows, prefix_lens: (bs,) i64; path: (bs, D+1)
    i64 from `accept_greedy` (-1 beyond the accepted depth); slots: (bs, N) i64, the slots of
    table positions prefix .. prefix + N-1 before the round (node i's). Within each row's N
    positions from prefix, the slots are permuted: the path's first, in depth order, then the
    other nodes' in node order (their K/V is stale, overwritten before any query reads it);
    no slot is lost or duplicated. The result depends on `slots`, not on the table, so a
    second call writes the same entries (a CUDA graph's warm-up calls it more than once).
    Target and draft pools share slot indices, so the draft KV moves with the target's.
    """
    bs, nodes = slots.shape
    node = torch.arange(nodes, device=slots.device)
    depth = torch.arange(path.shape[1], device=slots.device).expand(bs, -1)
    key = (nodes + node).expand(bs, -1).clone()  # off the path: after it, in node order
    key.scatter_reduce_(1, path.clamp(min=0), torch.where(path >= 0, depth, 2 * nodes), "amin")
    perm = key.argsort(dim=1)  # (bs, N): new position j takes the slot of node perm[b, j]
    flat = rows[:, None] * req_to_token.shape[1] + prefix_lens[:, None] + node  # (bs, N)
    req_to_token.view(-1).scatter_(0, flat.flatten(),  # a plain scatter: graph-capturable
                                   slots.gather(1, perm).flatten().to(req_to_token.dtype))


def verify_tree(target: Target, pool, tree: Tree, rows: torch.Tensor,
                prefix_lens: torch.Tensor, capture: tuple[int, ...] = (),
                max_depth: int | None = None, mask: torch.Tensor | None = None,
                slots: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor | None]:
    """One target forward over every tree's N nodes: logits (bs, N, V) and the captured
    layers (bs, N, K*H) or None.

    Node i is written at table position prefix + i (slots reserved up to prefix + N), rotated
    at token position prefix + depth_i, and sees the context and its own path (`ancestors`).
    rows, prefix_lens: (bs,) i64; pool: the engine's KVPool; max_depth: as `ancestors`;
    mask: the tree's `ancestors` (bs, N, N), and slots: the slots (bs, N) i64 of table
    positions prefix .. prefix + N-1; each computed when None.
    """
    n = tree.tokens.shape[1]
    positions = prefix_lens[:, None] + torch.arange(n, device=rows.device)
    if slots is None:
        slots = pool.req_to_token[rows].long().gather(1, positions)
    batch = ForwardBatch(positions, slots, rows, prefix_lens + n)
    mask = ancestors(tree.parents, max_depth) if mask is None else mask
    hidden, aux = target.forward(tree.tokens, batch, pool.req_to_token, pool.k, pool.v,
                                 capture=capture, rope_positions=prefix_lens[:, None] + tree.depth,
                                 tree_mask=mask)
    return target.logits(hidden), aux
