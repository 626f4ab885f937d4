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
the best M over all beams, gives exactly the best-first set. The ancestor mask and the
acceptance walk are D steps of pointer jumping. Every step is a fixed-shape tensor op with no
host sync, so a whole round is captured in a CUDA graph per (batch bucket, N).

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

    A fixed number of batched steps, whatever N (module docstring): a beam of the best M =
    N-1 rank paths per depth, then the best M of all beams. Nodes come in order of score
    (ties: shallower first), so parents precede their children.
    """
    bs, depth_max, _ = log_q.shape
    if budget < 1 or top_k < 1:
        raise ValueError(f"budget and top_k must be >= 1, got {budget} and {top_k}")
    dev = log_q.device
    tokens = torch.zeros(bs, budget, dtype=torch.int64, device=dev)
    parents = torch.full((bs, budget), -1, dtype=torch.int64, device=dev)
    depth = torch.zeros(bs, budget, dtype=torch.int64, device=dev)
    score = torch.full((bs, budget), float("-inf"), device=dev)
    tokens[:, 0], score[:, 0] = anchor, 0.0
    m = budget - 1
    if m == 0 or depth_max == 0:  # nothing is drafted
        return Tree(tokens, parents, depth, score)
    cand_lp, cand_tok = log_q.float().topk(min(top_k, log_q.shape[-1]), dim=-1)  # (bs, D, k)
    k = cand_lp.shape[-1]
    beam = torch.zeros(bs, 1, device=dev)  # the root
    levels = []  # per depth: (score, parent index in the level above, token), each (bs, W)
    for d in range(depth_max):
        ext = (beam[:, :, None] + cand_lp[:, d, None, :]).flatten(1)  # (bs, W*k)
        beam, idx = ext.topk(min(m, ext.shape[1]), dim=1)  # descending
        levels.append((beam, idx // k, cand_tok[:, d].gather(1, idx % k)))
    widths = [lv[0].shape[1] for lv in levels]
    offsets = [sum(widths[:d]) for d in range(depth_max)]
    pad = max(0, m - sum(widths))  # fewer rank paths than M: -inf padding candidates
    c_score = torch.cat([lv[0] for lv in levels] + [beam.new_full((bs, pad), float("-inf"))],
                        dim=1)  # (bs, C), depth-major
    c_parent = torch.cat([torch.full_like(levels[0][1], -1)]
                         + [lv[1] + off for lv, off in zip(levels[1:], offsets)]
                         + [levels[0][1].new_full((bs, pad), -1)], dim=1)
    c_depth = torch.cat([torch.full_like(lv[1], d + 1) for d, lv in enumerate(levels)]
                        + [levels[0][1].new_zeros((bs, pad))], dim=1)
    c_token = torch.cat([lv[2] for lv in levels] + [levels[0][2].new_zeros((bs, pad))], dim=1)
    order = c_score.sort(dim=1, descending=True, stable=True).indices[:, :m]  # (bs, M)
    node_of = torch.zeros_like(c_parent)  # candidate -> node (0: the root / not chosen)
    node_of.scatter_(1, order, torch.arange(1, m + 1, device=dev).expand(bs, -1))
    real = torch.isfinite(c_score.gather(1, order))
    par = c_parent.gather(1, order)
    parents[:, 1:] = torch.where(real & (par >= 0), node_of.gather(1, par.clamp(min=0)), 0)
    tokens[:, 1:] = torch.where(real, c_token.gather(1, order), 0)
    depth[:, 1:] = torch.where(real, c_depth.gather(1, order), 0)
    score[:, 1:] = torch.where(real, c_score.gather(1, order), float("-inf"))
    return Tree(tokens, parents, depth, score)


def ancestors(parents: torch.Tensor, max_depth: int | None = None) -> torch.Tensor:
    """(bs, N, N) bool: [b, i, j] when node j is node i or one of its ancestors (the
    attention mask inside a tree: a node sees its own path). parents: (bs, N), -1 at the
    root; max_depth: the deepest node's depth, if known (else N-1), the number of jumps."""
    bs, n = parents.shape
    node = torch.arange(n, device=parents.device)
    out = (node[:, None] == node[None, :]).expand(bs, n, n).clone()
    cur = node.expand(bs, n)
    for _ in range(n - 1 if max_depth is None else max_depth):
        cur = torch.where(cur >= 0, parents.gather(1, cur.clamp(min=0)), -1)
        out |= cur[:, :, None] == node
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
    depth_max: D = B-1, the deepest a node can be."""
    bs, n = tree.tokens.shape
    dev = tree.tokens.device
    rows = torch.arange(bs, device=dev)
    par = tree.parents.clamp(min=0)
    ok = (tree.tokens == target_argmax.gather(1, par)) & torch.isfinite(tree.log_score)
    ok[:, 0] = True  # a node is accepted when it and every ancestor matches
    match, cur = ok.clone(), par
    for _ in range(depth_max - 1):
        ok &= match.gather(1, cur)
        cur = tree.parents.gather(1, cur).clamp(min=0)
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
                prefix_lens: torch.Tensor, capture: tuple[int, ...] = (),
                max_depth: int | None = None) -> tuple[torch.Tensor, torch.Tensor | None]:
    """One target forward over every tree's N nodes: logits (bs, N, V) and the captured
    layers (bs, N, K*H) or None.

    Node i is written at table position prefix + i (slots reserved up to prefix + N), rotated
    at token position prefix + depth_i, and sees the context and its own path (`ancestors`).
    rows, prefix_lens: (bs,) i64; pool: the engine's KVPool; max_depth: as `ancestors`.
    """
    n = tree.tokens.shape[1]
    positions = prefix_lens[:, None] + torch.arange(n, device=rows.device)
    cache_loc = pool.req_to_token[rows].long().gather(1, positions)
    batch = ForwardBatch(positions, cache_loc, rows, prefix_lens + n)
    hidden, aux = target.forward(tree.tokens, batch, pool.req_to_token, pool.k, pool.v,
                                 capture=capture, rope_positions=prefix_lens[:, None] + tree.depth,
                                 tree_mask=ancestors(tree.parents, max_depth))
    return target.logits(hidden), aux
