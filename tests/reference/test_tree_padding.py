"""Trees with padding nodes: a budget larger than the drafter's candidates (few tokens, small
top-k), and targets whose choice is often the padding token 0. Acceptance, and the tree
proposer's round output, against a brute force over every root path of the real nodes."""

from __future__ import annotations

import torch
from hypothesis import given, note, settings
from hypothesis import strategies as st

from reference.methods.dflash_tree import DFlashTreeProposer
from reference.proposers import Proposal, Round, Verified
from reference.tree import accept_greedy, ancestors, build_tree
from reference.verify import Sampling

V = 3  # tokens: 0 (the padding token too), 1, 2


def _brute_force(tree, choice, b: int) -> tuple[int, int, list[int]]:
    """(accepted depth, last node, path from the root): every real node whose every node on
    its root path carries the target's choice at that node's parent; the deepest wins."""
    n = tree.tokens.shape[1]
    real = [i == 0 or bool(torch.isfinite(tree.log_score[b, i])) for i in range(n)]
    best = (0, 0, [0])
    for i in range(1, n):
        if not real[i]:
            continue
        path, node = [], i
        while node > 0:
            assert len(path) < n, f"node {i}: its parents form a cycle"
            path.append(node)
            node = int(tree.parents[b, node])
        path = [0, *reversed(path)]
        if all(int(tree.tokens[b, c]) == int(choice[b, p]) for p, c in zip(path, path[1:])):
            if len(path) - 1 > best[0]:
                best = (len(path) - 1, i, path)
            else:
                assert len(path) - 1 < best[0], "two accepted nodes at one depth"
    return best


def _tree_and_choice(bs, depth, k, budget, zero_p, seed):
    g = torch.Generator().manual_seed(seed)
    log_q = torch.randn(bs, depth, V, generator=g).mul(3).log_softmax(-1)
    tree = build_tree(torch.randint(0, V, (bs,), generator=g), log_q, budget, k)
    choice = torch.randint(1, V, tree.tokens.shape, generator=g)
    choice[torch.rand(choice.shape, generator=g) < zero_p] = 0  # the padding token
    # half the real nodes pass on their token, so that paths run deep
    take = torch.rand(choice.shape, generator=g) < 0.5
    for b in range(bs):
        for i in range(1, budget):
            if torch.isfinite(tree.log_score[b, i]) and take[b, i]:
                choice[b, int(tree.parents[b, i])] = tree.tokens[b, i]
    return tree, choice


@settings(max_examples=60)
@given(bs=st.integers(1, 3), depth=st.integers(1, 3), k=st.integers(1, 3),
       budget=st.integers(2, 48), zero_p=st.floats(0.0, 1.0), seed=st.integers(0, 2**16))
def test_padded_tree_acceptance_equals_brute_force(bs, depth, k, budget, zero_p, seed):
    note(f"{bs=} {depth=} {k=} {budget=} {zero_p=} {seed=}")
    tree, choice = _tree_and_choice(bs, depth, k, budget, zero_p, seed)
    paths = sum(min(k, V) ** d for d in range(1, depth + 1))  # rank paths the drafter has
    real = torch.isfinite(tree.log_score)
    assert (real.sum(1) == 1 + min(budget - 1, paths)).all()
    assert real[:, : 1 + min(budget - 1, paths)].all()  # padding comes last
    res = accept_greedy(tree, choice, depth)
    for b in range(bs):
        d, last, path = _brute_force(tree, choice, b)
        assert int(res.accept_lens[b]) == d
        assert int(res.last[b]) == last
        assert res.path[b].tolist() == path + [-1] * (depth - d)
        assert int(res.bonus[b]) == int(choice[b, last])


def test_a_target_choosing_the_padding_token_accepts_no_padding_node():
    """Depth 2, top-1, budget 8: two real nodes (tokens 1, 2) and five padding nodes of
    token 0. A target choosing 0 everywhere accepts nothing: the bonus is its choice at the
    root; choosing 1 at the root, 0 below, it accepts node 1 and 0 is the bonus there."""
    log_q = torch.tensor([[[-9.0, 0.0, -9.0], [-9.0, -9.0, 0.0]]]).log_softmax(-1)
    tree = build_tree(torch.tensor([2]), log_q, 8, 1)
    assert tree.tokens.tolist() == [[2, 1, 2, 0, 0, 0, 0, 0]]
    assert torch.isfinite(tree.log_score).tolist() == [[True] * 3 + [False] * 5]
    res = accept_greedy(tree, torch.zeros(1, 8, dtype=torch.int64), 2)
    assert (res.accept_lens.item(), res.last.item(), res.bonus.item()) == (0, 0, 0)
    assert res.path.tolist() == [[0, -1, -1]]
    res = accept_greedy(tree, torch.tensor([[1, 0, 0, 0, 0, 0, 0, 0]]), 2)
    assert (res.accept_lens.item(), res.last.item(), res.bonus.item()) == (1, 1, 0)
    assert res.path.tolist() == [[0, 1, -1]]


def _proposer(depth: int) -> DFlashTreeProposer:
    """The tree proposer's accept stage alone (it reads only the sampling and the depth)."""
    p = object.__new__(DFlashTreeProposer)
    p.sampling, p.depth = Sampling(), depth
    return p


@settings(max_examples=30)
@given(bs=st.integers(1, 3), depth=st.integers(1, 3), k=st.integers(1, 3),
       budget=st.integers(2, 40), zero_p=st.floats(0.0, 1.0), seed=st.integers(0, 2**16))
def test_tree_round_output_is_the_path_then_the_bonus(bs, depth, k, budget, zero_p, seed):
    """commit = accepted + 1; out_tokens = the path's tokens after the root, then the
    target's choice at the last node; zero commit on a padding row (valid 0)."""
    note(f"{bs=} {depth=} {k=} {budget=} {zero_p=} {seed=}")
    tree, choice = _tree_and_choice(bs, depth, k, budget, zero_p, seed)
    logits = torch.nn.functional.one_hot(choice, V).float()
    valid = torch.ones(bs, dtype=torch.int64)
    valid[-1] = 0 if bs > 1 else 1
    prefix = torch.arange(bs) * 10 + 5
    z = torch.zeros(bs, depth + 1, dtype=torch.int64)
    rnd = Round(tree.tokens[:, 0], prefix, torch.arange(bs) + 1, z, z, z, valid)
    out = _proposer(depth).accept(rnd, Proposal(tree.tokens, tree=tree,
                                                mask=ancestors(tree.parents, depth)),
                                  Verified(logits)).out
    for b in range(bs):
        d, last, path = _brute_force(tree, choice, b)
        want = [int(tree.tokens[b, i]) for i in path[1:]] + [int(choice[b, last])]
        assert out.out_tokens[b, : d + 1].tolist() == want
        assert int(out.commit_lens[b]) == (d + 1) * int(valid[b])
        assert int(out.new_seq_lens[b]) == (int(prefix[b]) + d + 1) * int(valid[b])
        assert int(out.bonus[b]) == int(choice[b, last]) * int(valid[b])
