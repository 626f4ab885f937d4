"""Draft trees over one DFlash block: construction under a node budget, and greedy acceptance.

A DFlash drafter gives, for each block position d = 1..B-1, a distribution q_d over the token
at depth d (all positions in one forward, none conditioned on the others' picks). A tree of N
nodes (the anchor is node 0, the root) holds N-1 drafted paths' tokens: a node at depth d
carries one of the top-k tokens of q_d, and its score is the product of q along its path
from the root. `build_tree` adds nodes best-first by that product (DDTree / JetSpec's rule),
which keeps the node set closed under parents because every factor is at most 1; the chain
is the case k = 1, N = B.

Best-first runs with the classic frontier of a k-ary tree ordered by score: picking a node
pushes its first child (rank 0 at the next depth) and its next sibling (the next rank under
the same parent), so after t picks the frontier holds at most t + 1 entries. The loop is over
the budget (N-1 picks), each pick one batched tensor step for every request at once.

Greedy acceptance (`accept_greedy`): node i is accepted when its parent is and its token is
the target's argmax at its parent; the accepted nodes form one root path (siblings carry
distinct tokens), and the deepest accepted node's argmax is the bonus. `compact_path` then
moves the path's KV to contiguous positions by permuting table entries (no K/V copy).
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
    """
    bs, depth_max, _ = log_q.shape
    if budget < 1 or top_k < 1:
        raise ValueError(f"budget and top_k must be >= 1, got {budget} and {top_k}")
    dev = log_q.device
    k = min(top_k, log_q.shape[-1])
    cand_lp, cand_tok = log_q.float().topk(k, dim=-1)  # (bs, D, k), descending
    tokens = torch.zeros(bs, budget, dtype=torch.int64, device=dev)
    parents = torch.full((bs, budget), -1, dtype=torch.int64, device=dev)
    depth = torch.zeros(bs, budget, dtype=torch.int64, device=dev)
    score = torch.zeros(bs, budget, dtype=torch.float32, device=dev)
    tokens[:, 0] = anchor
    # frontier entries: (score, parent node, depth, rank); -inf marks an empty slot
    size = budget + 1
    f_score = torch.full((bs, size), float("-inf"), device=dev)
    f_parent = torch.zeros(bs, size, dtype=torch.int64, device=dev)
    f_depth = torch.ones(bs, size, dtype=torch.int64, device=dev)
    f_rank = torch.zeros(bs, size, dtype=torch.int64, device=dev)
    rows = torch.arange(bs, device=dev)
    score[:, 1:] = float("-inf")  # padding until picked
    if depth_max == 0:  # B = 1: nothing is drafted
        return Tree(tokens, parents, depth, score)
    f_score[:, 0] = cand_lp[:, 0, 0]  # the root's first child
    for n in range(1, budget):
        pick = f_score.argmax(dim=1)  # (bs,)
        s, par = f_score[rows, pick], f_parent[rows, pick]
        d, r = f_depth[rows, pick], f_rank[rows, pick]
        live = torch.isfinite(s)  # a request whose tree is complete keeps padding nodes
        tokens[:, n] = torch.where(live, cand_tok[rows, (d - 1).clamp(max=depth_max - 1),
                                                  r.clamp(max=k - 1)], 0)
        parents[:, n] = torch.where(live, par, 0)
        depth[:, n] = torch.where(live, d, 0)
        score[:, n] = torch.where(live, s, float("-inf"))
        f_score[rows, pick] = float("-inf")
        # next sibling (same parent, next rank) goes where the pick was
        sib = live & (r + 1 < k)
        sib_score = s - _lp(cand_lp, d, r) + _lp(cand_lp, d, r + 1)
        f_score[rows, pick] = torch.where(sib, sib_score, float("-inf"))
        f_parent[rows, pick], f_depth[rows, pick], f_rank[rows, pick] = par, d, r + 1
        # first child (next depth, rank 0) goes to free slot n
        child = live & (d < depth_max)
        f_score[:, n] = torch.where(child, s + _lp(cand_lp, d + 1, torch.zeros_like(r)),
                                    float("-inf"))
        f_parent[:, n], f_depth[:, n], f_rank[:, n] = n, d + 1, 0
    return Tree(tokens, parents, depth, score)


def _lp(cand_lp: torch.Tensor, d: torch.Tensor, r: torch.Tensor) -> torch.Tensor:
    """log q of candidate rank r at depth d (1-based), (bs,), 0 where out of range."""
    bs, depth_max, k = cand_lp.shape
    rows = torch.arange(bs, device=cand_lp.device)
    ok = (d >= 1) & (d <= depth_max) & (r < k)
    val = cand_lp[rows, (d - 1).clamp(0, depth_max - 1), r.clamp(0, k - 1)]
    return torch.where(ok, val, torch.zeros_like(val))


def ancestors(parents: torch.Tensor) -> torch.Tensor:
    """(bs, N, N) bool: [b, i, j] when node j is node i or one of its ancestors (the
    attention mask inside a tree: a node sees its own path). parents: (bs, N), -1 at the
    root, each parent before its child."""
    bs, n = parents.shape
    eye = torch.eye(n, dtype=torch.bool, device=parents.device).expand(bs, n, n)
    out = eye.clone()
    for i in range(1, n):  # row i = own bit | row of its parent (parents come first)
        par = parents[:, i].clamp(min=0)
        out[:, i] |= out[torch.arange(bs, device=parents.device), par] & (parents[:, i] >= 0
                                                                          )[:, None]
    return out


class TreeAccept(NamedTuple):
    """accept_lens (bs,) i64: accepted drafted nodes (the path's depth); last (bs,) i64: the
    deepest accepted node (0: the root); path (bs, D+1) i64: the accepted path's nodes from
    the root, -1 beyond; bonus (bs,) i64: the target's argmax at `last`."""

    accept_lens: torch.Tensor
    last: torch.Tensor
    path: torch.Tensor
    bonus: torch.Tensor


def accept_greedy(tree: Tree, target_argmax: torch.Tensor, depth_max: int) -> TreeAccept:
    """Tree acceptance against the target's choice at each node. target_argmax: (bs, N) i64,
    the target's argmax at each node (from the tree-masked verify forward), or a token
    sampled from its distribution there (lossless sampling, reference/dflash_tree.py);
    depth_max: D = B-1."""
    bs, n = tree.tokens.shape
    dev = tree.tokens.device
    rows = torch.arange(bs, device=dev)
    ok = torch.zeros(bs, n, dtype=torch.bool, device=dev)
    ok[:, 0] = True
    for i in range(1, n):
        par = tree.parents[:, i].clamp(min=0)
        match = tree.tokens[:, i] == target_argmax[rows, par]
        ok[:, i] = ok[rows, par] & match & (tree.parents[:, i] >= 0) & torch.isfinite(
            tree.log_score[:, i])
    deepest = torch.where(ok, tree.depth, -1)
    accept = deepest.amax(dim=1)
    last = torch.where(ok & (tree.depth == accept[:, None]),
                       torch.arange(n, device=dev), n).amin(dim=1)
    path = torch.full((bs, depth_max + 1), -1, dtype=torch.int64, device=dev)
    node = last
    for d in range(depth_max, -1, -1):
        here = accept >= d
        path[:, d] = torch.where(here, node, -1)
        node = torch.where(here & (d > 0), tree.parents[rows, node].clamp(min=0), node)
    return TreeAccept(accept, last, path, target_argmax[rows, last])


def compact_path(req_to_token: torch.Tensor, rows: torch.Tensor, prefix_lens: torch.Tensor,
                 path: torch.Tensor, nodes: int) -> None:
    """Move an accepted path's KV to contiguous positions by permuting table entries, with
    no K/V copy: after a tree verify wrote node i's K/V at position prefix + i, the nodes of
    the accepted path (node path[d] at depth d) must sit at positions prefix + d.

    req_to_token: (R, W) int, changed in place; rows, prefix_lens: (bs,) i64; path: (bs, D+1)
    i64 from `accept_greedy` (-1 beyond the accepted depth); nodes: N, the tree's size. Within
    each row's N positions from prefix, the slots are permuted: the path's first, in depth
    order, then the other nodes' in node order (their K/V is stale, overwritten before any
    query reads it); no slot is lost or duplicated. Target and draft pools share slot
    indices, so the draft KV moves with the target's.
    """
    bs = rows.shape[0]
    dev = req_to_token.device
    node = torch.arange(nodes, device=dev)
    depth_of = torch.full((bs, nodes), -1, dtype=torch.int64, device=dev)
    on_path = path >= 0
    depth_idx = torch.arange(path.shape[1], device=dev).expand(bs, -1)
    depth_of.scatter_(1, path.clamp(min=0), torch.where(on_path, depth_idx, -1))
    depth_of[:, 0] = 0  # the root is always depth 0 (and the scatter's clamp target)
    key = torch.where(depth_of >= 0, depth_of, nodes + node)  # path first, then node order
    perm = key.argsort(dim=1)  # (bs, N): new position j takes the slot of node perm[b, j]
    cols = prefix_lens[:, None] + node  # (bs, N)
    r = rows[:, None].expand(-1, nodes)
    old = req_to_token[r, cols]
    req_to_token[r, cols] = old.gather(1, perm)


def verify_tree(target: Target, pool, tree: Tree, rows: torch.Tensor,
                prefix_lens: torch.Tensor, capture: tuple[int, ...] = ()
                ) -> tuple[torch.Tensor, torch.Tensor | None]:
    """One target forward over every tree's N nodes: logits (bs, N, V) and the captured
    layers (bs, N, K*H) or None.

    Node i is written at table position prefix + i (slots reserved up to prefix + N), rotated
    at token position prefix + depth_i, and sees the context and its own path (`ancestors`).
    rows, prefix_lens: (bs,) i64; pool: the engine's KVPool.
    """
    n = tree.tokens.shape[1]
    positions = prefix_lens[:, None] + torch.arange(n, device=rows.device)
    cache_loc = pool.req_to_token[rows].long().gather(1, positions)
    batch = ForwardBatch(positions, cache_loc, rows, prefix_lens + n)
    hidden, aux = target.forward(tree.tokens, batch, pool.req_to_token, pool.k, pool.v,
                                 capture=capture, rope_positions=prefix_lens[:, None] + tree.depth,
                                 tree_mask=ancestors(tree.parents))
    return target.logits(hidden), aux
