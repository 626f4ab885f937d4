"""Draft trees: best-first construction against brute-force enumeration, the chain as the
k = 1 case, the ancestor mask, and greedy acceptance against a plain walk."""

from __future__ import annotations

import itertools

import torch
from hypothesis import given, note, settings
from hypothesis import strategies as st

from reference.tree import accept_greedy, ancestors, build_tree, compact_path


def _paths(tree, b: int) -> list[tuple[int, ...]]:
    """Token paths (root excluded) of request b's real nodes, by walking parents."""
    out = []
    for i in range(1, tree.tokens.shape[1]):
        if not torch.isfinite(tree.log_score[b, i]):
            continue
        path, node = [], i
        while node > 0:
            assert len(path) < tree.tokens.shape[1], f"node {i}: its parents form a cycle"
            path.append(int(tree.tokens[b, node]))
            node = int(tree.parents[b, node])
        out.append(tuple(reversed(path)))
    return out


def _brute_force(log_q: torch.Tensor, budget: int, k: int) -> set[tuple[int, ...]]:
    """The budget-1 best token paths by summed log q over every rank path of every depth."""
    top_lp, top_tok = log_q.topk(min(k, log_q.shape[-1]), dim=-1)
    scored = []
    for d in range(1, log_q.shape[0] + 1):
        for ranks in itertools.product(range(top_lp.shape[-1]), repeat=d):
            lp = sum(float(top_lp[j, r]) for j, r in enumerate(ranks))
            scored.append((lp, tuple(int(top_tok[j, r]) for j, r in enumerate(ranks))))
    scored.sort(key=lambda x: -x[0])
    return {p for _, p in scored[: budget - 1]}


@settings(max_examples=40)
@given(bs=st.integers(1, 3), depth=st.integers(0, 4), k=st.integers(1, 3),
       budget=st.integers(1, 20), seed=st.integers(0, 2**16))
def test_best_first_equals_brute_force(bs, depth, k, budget, seed):
    note(f"{bs=} {depth=} {k=} {budget=} {seed=}")
    g = torch.Generator().manual_seed(seed)
    log_q = torch.randn(bs, depth, 6, generator=g).mul(2).log_softmax(-1)
    tree = build_tree(torch.arange(bs) + 100, log_q, budget, k)
    assert tree.tokens[:, 0].tolist() == list(range(100, 100 + bs))
    for b in range(bs):
        got = _paths(tree, b)
        assert len(got) == len(set(got))
        assert set(got) == _brute_force(log_q[b], budget, k)
        real = torch.isfinite(tree.log_score[b])
        parents = tree.parents[b][real][1:]
        assert (parents < torch.arange(1, int(real.sum()))).all()  # parents come first
        assert (tree.depth[b][real][1:] == tree.depth[b][parents] + 1).all()


def test_chain_is_the_top1_case():
    g = torch.Generator().manual_seed(0)
    log_q = torch.randn(2, 7, 50, generator=g).log_softmax(-1)
    tree = build_tree(torch.tensor([3, 4]), log_q, 8, 1)
    assert tree.tokens[:, 1:].tolist() == log_q.argmax(-1).tolist()
    assert tree.parents.tolist() == [[-1, 0, 1, 2, 3, 4, 5, 6]] * 2
    assert tree.depth.tolist() == [list(range(8))] * 2


def test_ancestors_of_a_hand_tree():
    parents = torch.tensor([[-1, 0, 0, 1, 3, 2]])
    want = torch.tensor([[1, 0, 0, 0, 0, 0],
                         [1, 1, 0, 0, 0, 0],
                         [1, 0, 1, 0, 0, 0],
                         [1, 1, 0, 1, 0, 0],
                         [1, 1, 0, 1, 1, 0],
                         [1, 0, 1, 0, 0, 1]], dtype=torch.bool)
    assert torch.equal(ancestors(parents)[0], want)


@settings(max_examples=30)
@given(bs=st.integers(1, 3), nodes=st.integers(1, 40), seed=st.integers(0, 2**16))
def test_ancestors_equal_a_walk_up_the_parents(bs, nodes, seed):
    """Random trees (parent of i drawn below i, so depths up to N-1), with and without the
    depth bound, against following parents one at a time."""
    g = torch.Generator().manual_seed(seed)
    parents = torch.tensor([[-1] + [int(torch.randint(0, i, (1,), generator=g))
                                    for i in range(1, nodes)] for _ in range(bs)])
    want = torch.zeros(bs, nodes, nodes, dtype=torch.bool)
    deepest = 0
    for b in range(bs):
        for i in range(nodes):
            node, hops = i, 0
            while node >= 0:
                want[b, i, node] = True
                node, hops = int(parents[b, node]), hops + 1
            deepest = max(deepest, hops - 1)
    assert torch.equal(ancestors(parents), want)
    assert torch.equal(ancestors(parents, deepest), want)


def _walk(tree, argmax, b: int) -> tuple[int, int]:
    """(accepted depth, last node) by following, from the root, the child whose token is
    the target's argmax at the current node."""
    node, depth = 0, 0
    while True:
        nxt = [i for i in range(1, tree.tokens.shape[1])
               if int(tree.parents[b, i]) == node and torch.isfinite(tree.log_score[b, i])
               and int(tree.tokens[b, i]) == int(argmax[b, node])]
        if not nxt:
            return depth, node
        assert depth < tree.tokens.shape[1], "the walk runs past every node: a parent cycle"
        node, depth = nxt[0], depth + 1


@settings(max_examples=40)
@given(bs=st.integers(1, 4), depth=st.integers(1, 5), k=st.integers(1, 3),
       budget=st.integers(2, 24), agree=st.floats(0.0, 1.0), seed=st.integers(0, 2**16))
def test_greedy_acceptance_follows_the_targets_argmax(bs, depth, k, budget, agree, seed):
    note(f"{bs=} {depth=} {k=} {budget=} {agree=} {seed=}")
    g = torch.Generator().manual_seed(seed)
    log_q = torch.randn(bs, depth, 5, generator=g).log_softmax(-1)
    tree = build_tree(torch.zeros(bs, dtype=torch.int64), log_q, budget, k)
    argmax = torch.randint(0, 5, tree.tokens.shape, generator=g)
    # with probability `agree` a node's argmax is the token of its best-scored child
    for b in range(bs):
        for node in range(budget):
            kids = [i for i in range(1, budget) if int(tree.parents[b, i]) == node
                    and torch.isfinite(tree.log_score[b, i])]
            if kids and torch.rand(1, generator=g).item() < agree:
                argmax[b, node] = tree.tokens[b, kids[0]]
    res = accept_greedy(tree, argmax, depth)
    for b in range(bs):
        d, last = _walk(tree, argmax, b)
        assert int(res.accept_lens[b]) == d and int(res.last[b]) == last
        assert int(res.bonus[b]) == int(argmax[b, last])
        path = [p for p in res.path[b].tolist() if p >= 0]
        assert path[0] == 0 and path[-1] == last and len(path) == d + 1
        assert all(int(tree.parents[b, c]) == p for p, c in zip(path, path[1:]))


@settings(max_examples=30)
@given(bs=st.integers(1, 4), depth=st.integers(1, 5), k=st.integers(1, 3),
       budget=st.integers(2, 16), seed=st.integers(0, 2**16))
def test_compaction_puts_the_path_at_contiguous_positions(bs, depth, k, budget, seed):
    note(f"{bs=} {depth=} {k=} {budget=} {seed=}")
    g = torch.Generator().manual_seed(seed)
    log_q = torch.randn(bs, depth, 5, generator=g).log_softmax(-1)
    tree = build_tree(torch.zeros(bs, dtype=torch.int64), log_q, budget, k)
    argmax = tree.tokens.roll(-1, dims=1)  # some agreement, some not
    argmax[:, 0] = tree.tokens[:, 1]
    res = accept_greedy(tree, argmax, depth)
    width = 40
    table = torch.randperm(1000, generator=g)[: (bs + 1) * width].view(bs + 1, width)
    rows = torch.randperm(bs + 1, generator=g)[:bs]
    prefix = torch.randint(0, width - budget + 1, (bs,), generator=g)
    before = table.clone()
    slots = table[rows[:, None], prefix[:, None] + torch.arange(budget)]
    compact_path(table, rows, prefix, res.path, slots)
    once = table.clone()
    compact_path(table, rows, prefix, res.path, slots)  # a graph's warm-up calls it twice
    assert torch.equal(table, once)
    untouched = torch.ones_like(table, dtype=torch.bool)
    for b in range(bs):
        row, p, n = int(rows[b]), int(prefix[b]), budget
        region_old, region_new = before[row, p:p + n].tolist(), table[row, p:p + n].tolist()
        assert sorted(region_old) == sorted(region_new)  # a permutation: no slot lost
        path = [int(x) for x in res.path[b] if x >= 0]
        assert region_new[: len(path)] == [region_old[i] for i in path]
        rest = [region_old[i] for i in range(n) if i not in path]
        assert region_new[len(path):] == rest
        untouched[row, p:p + n] = False
    assert torch.equal(table[untouched], before[untouched])
