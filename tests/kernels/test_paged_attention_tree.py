"""Tree verify attention: every node sees the context and its own path, in the oracle (against
a plain fp64 loop that attends over each node's path) and in the Triton kernel (against the
oracle: random trees, ragged batches, node counts that are not powers of two, splits)."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, note, settings
from hypothesis import strategies as st

from kernels.paged_attention import kernel as kernel_mod
from kernels.paged_attention import rules
from kernels.paged_attention.kernel import paged_attention
from kernels.paged_attention.ref import paged_attention_ref
from reference.tree import ancestors
from tests.kernels.launches import record_launches

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"  # the CPU runs the interpreter


def _case(bs: int, nodes: int, width: int, seed: int, dtype=torch.float32):
    """A ragged batch whose last `nodes` keys of each request are a random tree's nodes."""
    g = torch.Generator().manual_seed(seed)
    nh, nkv, d = 4, 2, 16
    slots = bs * width + 1
    prefix = torch.randint(0, width - nodes + 1, (bs,), generator=g)
    parents = torch.stack([torch.cat([torch.tensor([-1]), torch.stack([
        torch.randint(0, i, (1,), generator=g)[0] for i in range(1, nodes)])])
        if nodes > 1 else torch.tensor([-1]) for _ in range(bs)])
    mask = ancestors(parents)
    table = torch.randperm(slots - 1, generator=g)[: bs * width].add(1).view(bs, width)
    args = (torch.randn(bs, nodes, nh, d, generator=g).to(dtype),
            torch.randn(slots, nkv, d, generator=g).to(dtype),
            torch.randn(slots, nkv, d, generator=g).to(dtype),
            table.to(torch.int32), torch.arange(bs), prefix[:, None] + torch.arange(nodes),
            prefix + nodes)
    return args, mask, parents


def _path_attention(args, parents) -> torch.Tensor:
    """fp64 loop: node i of request b attends over keys 0..prefix-1 and its path's nodes."""
    q, k_pool, v_pool, table, rows, positions, _ = args
    bs, nodes, nh, d = q.shape
    group = nh // k_pool.shape[1]
    out = torch.zeros(bs, nodes, nh, d, dtype=torch.float64)
    for b in range(bs):
        prefix = int(positions[b, 0])
        for i in range(nodes):
            path, node = [], i
            while node >= 0:
                path.append(prefix + node)
                node = int(parents[b, node])
            keys = list(range(prefix)) + sorted(path)
            slot = table[b, keys].long()
            for h in range(nh):
                kk = k_pool[slot, h // group].double()
                vv = v_pool[slot, h // group].double()
                w = torch.softmax(kk @ q[b, i, h].double() * d**-0.5, dim=0)
                out[b, i, h] = w @ vv
    return out


@settings(max_examples=15)
@given(bs=st.integers(1, 3), nodes=st.integers(1, 11), width=st.integers(12, 40),
       seed=st.integers(0, 2**16))
def test_oracle_attends_over_each_nodes_path(bs, nodes, width, seed):
    note(f"{bs=} {nodes=} {width=} {seed=}")
    args, mask, parents = _case(bs, nodes, width, seed)
    got = paged_attention_ref(*args, causal=True, tree_mask=mask)
    torch.testing.assert_close(got.double(), _path_attention(args, parents), rtol=1e-5,
                               atol=1e-6)


def test_chain_mask_is_causal_attention():
    args, _, _ = _case(2, 7, 30, 3)
    chain = torch.ones(7, 7, dtype=torch.bool).tril().expand(2, 7, 7)
    torch.testing.assert_close(paged_attention_ref(*args, causal=True, tree_mask=chain),
                               paged_attention_ref(*args, causal=True))


@settings(max_examples=12)
@given(bs=st.integers(1, 3), nodes=st.sampled_from([1, 3, 7, 13]),
       width=st.sampled_from([16, 40]), split=st.sampled_from([None, 2]),
       early=st.booleans(), key_tile=st.sampled_from([None, 16]),
       seed=st.integers(0, 2**16))
def test_kernel_matches_the_oracle(bs, nodes, width, split, early, key_tile, seed):
    """Also at 16 keys a step: the prefix runs in unmasked steps, the nodes masked."""
    note(f"{bs=} {nodes=} {width=} {split=} {early=} {key_tile=} {seed=}")
    args, mask, _ = _case(bs, nodes, width, seed)
    args = [a.to(DEVICE) for a in args]
    with rules.forced(splits=split, early_loads=early, key_tile=key_tile):
        got = paged_attention(*args, causal=True, tree_mask=mask.to(DEVICE))
    want = paged_attention_ref(*args, causal=True, tree_mask=mask.to(DEVICE))
    torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-5)


def test_bad_tree_mask_names_the_argument(device):
    args, mask, _ = _case(1, 4, 16, 0)
    args = [a.to(device) for a in args]
    with pytest.raises(ValueError, match="tree_mask"):
        paged_attention(*args, causal=True, tree_mask=mask[:, :3].to(device))
    with pytest.raises(ValueError, match="tree_mask"):
        paged_attention(*args, causal=True, tree_mask=mask.int().to(device))


@pytest.mark.parametrize("tile", [None, (128, 4), (256, 8)])
def test_tall_tiles_apply_past_64_rows_and_match_the_oracle(tile, monkeypatch):
    """TALL_TILE: a 40-node tree with 2 query heads per KV head (80 rows) runs in one tall
    tile per head instead of the tree rule's five of 16 rows; a 16-node one (32 rows) keeps
    the rule's two. Both match the oracle."""
    launched = record_launches(monkeypatch, kernel_mod, "_paged_attention_kernel")
    for nodes, tiles in ((40, 5 if tile is None else 1), (16, 2)):
        args, mask, _ = _case(2, nodes, 60, seed=nodes)
        args = [a.to(DEVICE) for a in args]
        with rules.forced(tall_tile=tile):
            got = paged_attention(*args, causal=True, tree_mask=mask.to(DEVICE))
        assert launched[-1] == (2, 2, tiles)  # (bs, nkv, tiles * splits), one split here
        want = paged_attention_ref(*args, causal=True, tree_mask=mask.to(DEVICE))
        torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-5)


@settings(max_examples=10)
@given(bs=st.integers(1, 3), nodes=st.sampled_from([1, 5, 13, 32]),
       width=st.sampled_from([36, 70]), split=st.sampled_from([None, 1, 3]),
       key_tile=st.sampled_from([None, 16]), seed=st.integers(0, 2**16))
def test_tall_tree_matches_the_tree_kernel_and_the_oracle(bs, nodes, width, split, key_tile,
                                                          seed):
    """tall_tree: one (b, h, split) program holds all T * G rows (bs * nkv * splits
    programs), unaligned tree roots, key ranges split into chunks that cut the tree; the
    output equals the oracle's and the 16-row tree kernel's."""
    note(f"{bs=} {nodes=} {width=} {split=} {key_tile=} {seed=}")
    from kernels.paged_attention import tree as tree_mod

    args, mask, _ = _case(bs, nodes, width, seed)
    args, mask = [a.to(DEVICE) for a in args], mask.to(DEVICE)
    with pytest.MonkeyPatch.context() as mp, rules.forced(splits=split, key_tile=key_tile):
        launched = record_launches(mp, tree_mod, "_tree_kernel")
        got = paged_attention(*args, causal=True, tree_mask=mask, tall_tree=True)
        tiles = paged_attention(*args, causal=True, tree_mask=mask)
    assert len(launched) == 1 and launched[0][:2] == (bs, 2)  # (bs, nkv, splits)
    assert split is None or launched[0][2] == split
    want = paged_attention_ref(*args, causal=True, tree_mask=mask)
    torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(got, tiles, rtol=1e-4, atol=1e-5)


def test_tall_tree_word_reads_bit_63():
    """A 64-node path (node t sees 0..t): node 63's word has its sign bit set; the rows
    match the oracle's, and the launch falls back to the tile kernel past 64 nodes."""
    from kernels.paged_attention import tree as tree_mod

    assert tree_mod.supports(64, 4) and not tree_mod.supports(65, 1)
    assert not tree_mod.supports(64, 8)
    args, _, _ = _case(1, 64, 80, seed=1)
    args = [a.to(DEVICE) for a in args]
    path = torch.ones(64, 64, dtype=torch.bool).tril()[None].to(DEVICE)
    got = paged_attention(*args, causal=True, tree_mask=path, tall_tree=True)
    want = paged_attention_ref(*args, causal=True, tree_mask=path)
    torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-5)


def test_tree_bench_rows_compare_the_three_launches():
    """kernels/paged_attention/tree_bench.py on tiny shapes: one row per (bs, N), the tall
    output equal to the tiles' and each ratio the quotient of its two times."""
    from kernels.paged_attention.tree_bench import main

    r = main(["--device", DEVICE, "--batch-sizes", "1,2", "--budgets", "3,6", "--context", "9",
              "--width", "20"])
    assert [(row["bs"], row["nodes"]) for row in r["rows"]] == [(1, 3), (1, 6), (2, 3), (2, 6)]
    for row in r["rows"]:
        assert row["max_abs_diff_tall_tiles"] < 1e-5
        assert row["tall_over_tiles"] == pytest.approx(row["tall_us"] / row["tiles_us"])
        assert row["tall_over_chain"] == pytest.approx(row["tall_us"] / row["chain_us"])
