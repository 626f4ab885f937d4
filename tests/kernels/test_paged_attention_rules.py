"""`paged_attention`'s launch rules (rules.py): the query tile, the key tile and the split count
each launch takes, read from the constexprs the kernel is launched with."""

from __future__ import annotations

import pytest
import torch

from kernels.paged_attention import kernel, rules
from kernels.paged_attention.kernel import paged_attention
from tests.kernels.launches import record_launches

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"


def test_query_tile_rule():
    """16-row tiles for a tree at any size, up to 64 rows else; TALL_TILE only past 64 rows."""
    assert rules.query_tile(1, False) == (16, 4)
    assert rules.query_tile(4, False) == (16, 4)
    assert rules.query_tile(33, False) == (64, 4)
    assert rules.query_tile(2048, False) == (64, 4)  # a prefill
    assert rules.query_tile(256, True) == (16, 4)  # a 64-node tree at 4 heads per KV head
    assert rules.query_tile(8, True) == (16, 4)
    with rules.forced(tall_tile=(128, 8)):
        assert rules.query_tile(256, True) == (128, 8)
        assert rules.query_tile(2048, False) == (128, 8)
        assert rules.query_tile(64, True) == (16, 4)
        assert rules.query_tile(64, False) == (64, 4)


def test_key_tile_rule():
    """64 keys a step at D <= 64, or for early-load launches of >= 128 programs; else 32."""
    assert rules.key_tile(64, False, 1) == 64
    assert rules.key_tile(128, True, 128) == 64  # a bs-16 decode: 16 x 8 KV heads
    assert rules.key_tile(128, True, 127) == 32
    assert rules.key_tile(128, True, 8) == 32  # a bs-1 decode or verify
    assert rules.key_tile(128, False, 4096) == 32  # the plain loop (trees, prefill)
    with rules.forced(key_tile=128):
        assert rules.key_tile(128, True, 8) == 128


def _call(bs: int, t: int, nh: int, nkv: int, d: int, width: int, tree: bool):
    q = torch.zeros(bs, t, nh, d, device=DEVICE)
    pool = torch.zeros(bs * width, nkv, d, device=DEVICE)
    table = torch.arange(bs * width, device=DEVICE, dtype=torch.int32).view(bs, width)
    pos = (width - t + torch.arange(t, device=DEVICE)).expand(bs, t).contiguous()
    lens = torch.full((bs,), width, device=DEVICE)
    mask = torch.ones(bs, t, t, dtype=torch.bool, device=DEVICE).tril() if tree else None
    paged_attention(q, pool, pool, table, torch.arange(bs, device=DEVICE), pos, lens,
                    causal=True, tree_mask=mask)


@pytest.mark.parametrize("bs, t, tree, block_m, block_n, early, z", [
    (1, 1, False, 16, 32, True, 8),  # bs-1 decode: 8 programs, 8 splits
    (1, 16, False, 64, 32, True, 8),  # bs-1 16-token verify
    (16, 1, False, 16, 64, True, 2),  # bs-16 decode: 128 programs, 2 splits
    (16, 16, False, 64, 64, True, 2),  # bs-16 verify
    (1, 64, True, 16, 32, False, 32),  # 64-node tree: 16 tiles of 16 rows, 2 splits
    (1, 128, False, 64, 32, False, 32),  # a 128-token prefill chunk: 8 tiles, 4 splits
])
def test_launches_take_the_rules(monkeypatch, bs, t, tree, block_m, block_n, early, z):
    """The launched constexprs and grid at Qwen3-8B's heads (32 query, 8 KV, D = 128) in a
    table of width 832. Splits by hand: min(next_pow2(264 // programs), next_pow2(832 //
    (4 * BLOCK_N))), e.g. bs-1 decode min(64, 8) = 8, bs-16 decode min(2, 4) = 2."""
    launched = record_launches(monkeypatch, kernel, "_paged_attention_kernel",
                               with_kwargs=True, run=False)
    record_launches(monkeypatch, kernel, "_merge_kernel", run=False)
    _call(bs, t, 32, 8, 128, 832, tree)
    (grid, kw), = launched
    assert (kw["BLOCK_M"], kw["BLOCK_N"], kw["EARLY"]) == (block_m, block_n, early)
    assert kw["UNMASKED_BODY"] == tree  # unmasked key steps for trees only
    assert grid == (bs, 8, z)
