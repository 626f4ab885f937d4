"""The split-K heuristic of `paged_attention` and its short-context rule (UNSPLIT_MAX_WIDTH):
the rule only ever turns splitting off, at table widths up to its threshold, and the unsplit
launch computes the same attention as the split one."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from kernels.paged_attention import kernel, rules
from kernels.paged_attention.ref import paged_attention_ref
from tests.kernels.launches import record_launches
from workbench.numerics import assert_close

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"


@given(programs=st.integers(1, 2048), width=st.integers(1, 65536),
       block_n=st.sampled_from([32, 64]), threshold=st.integers(0, 70000))
def test_rule_only_unsplits_widths_up_to_its_threshold(programs, width, block_n, threshold):
    off = rules.num_splits(programs, width, block_n)
    on = rules.num_splits(programs, width, block_n, threshold)
    assert off == rules.num_splits(programs, width, block_n, 0)  # 0 is off
    assert on == (1 if width <= threshold else off)
    assert off >= 1 and off & (off - 1) == 0 and off <= 64


def test_qwen3_8b_batch1_decode_splits():
    """bs 1, nkv 8, one M tile, D 128 (BLOCK_N 32): the bench's table (W = 704) splits 8
    ways today, a serving table (W = 32768) 64 ways; the rule at 1024 unsplits only W = 704."""
    assert rules.num_splits(8, 704, 32) == 8
    assert rules.num_splits(8, 32768, 32) == 64
    assert rules.num_splits(8, 704, 32, 1024) == 1
    assert rules.num_splits(8, 32768, 32, 1024) == 64
    assert rules.num_splits(8 * 64, 704, 32, 0) == 1  # a big batch never splits


def _decode_case(width: int, kv_len: int, seed: int = 0):
    """One decode query (nh 4, nkv 2, D 128) over kv_len keys of a table of `width`."""
    g = torch.Generator().manual_seed(seed)
    slots = width + 3
    table = torch.randperm(slots, generator=g)[:width].view(1, width).int()
    args = (torch.randn(1, 1, 4, 128, generator=g), torch.randn(slots, 2, 128, generator=g),
            torch.randn(slots, 2, 128, generator=g), table, torch.tensor([0]),
            torch.tensor([[kv_len - 1]]), torch.tensor([kv_len]))
    return [a.to(DEVICE) for a in args]


@pytest.mark.parametrize("kv_len", [1, 37, 300])
def test_unsplit_by_rule_equals_split_and_oracle(kv_len, monkeypatch):
    """W = 320 splits 2 ways by the heuristic (4 programs, BLOCK_N 32); with the rule at 512
    the same call runs unsplit (no merge launch). Both match the fp32 oracle."""
    args = _decode_case(320, kv_len)
    assert rules.num_splits(2, 320, 32) == 2
    launched = record_launches(monkeypatch, kernel, "_merge_kernel")
    want = paged_attention_ref(*args, causal=True)
    split = kernel.paged_attention(*args, causal=True)
    assert len(launched) == 1
    unsplit = kernel.paged_attention(*args, causal=True, unsplit_max_width=512)
    assert len(launched) == 1, "the rule must skip the merge launch"
    for got in (split, unsplit):
        assert_close(got, want, kind="reduction")
