"""Admission and KV reservation rules of the serving loop, on pools sized by hand.

A request claims prompt + max_new_tokens + 2B slots at admission (reference/serve/
scheduler.py), so that the reservation of host + 2B at every decode round can never fail;
the table is wide enough for that look-ahead; the pool fills to its last slot. Every pool
here is a CheckingKVPool (conftest.py): a write outside a reservation is caught.
"""

from __future__ import annotations

import pytest
import torch

from reference.cuda_graphs import GraphCache
from reference.engine import Runtime
from reference.generate import generate
from reference.kv_pool import KVShape, PoolFullError
from tests.reference.conftest import CheckingKVPool


def test_pool_fills_to_its_last_slot_and_refuses_one_more():
    """10 usable slots (slot 0 is padding): one request of 10, then two of 4 and 6."""
    pool = CheckingKVPool(11, 2, 16, KVShape(1, 1, 2), None, torch.float32, "cpu")
    a = pool.admit(10)
    assert pool.free_slots == 0
    pool.check()
    pool.release(a)
    b, c = pool.admit(1), pool.admit(1)
    pool.reserve_many([b, c], [4, 6])
    assert pool.free_slots == 0 and (pool.reserved(b), pool.reserved(c)) == (4, 6)
    with pytest.raises(PoolFullError, match="needs 1 more KV slots, 0 of 10 are free"):
        pool.reserve(b, 5)
    pool.check()
    pool.release(b)
    pool.release(c)
    pool.check()
    assert pool.free_slots == 10


def test_admission_claims_the_two_block_lookahead(target, dflash):
    """DFlash B = 4, prompts of 20, 4 new tokens: each request claims 20 + 4 + 8 = 32 slots.
    A pool of 49 usable slots holds one claim, not two (64), though both requests' tokens
    alone (48) would fit: the second waits, and each decodes as it would alone."""
    cfg = target.config
    shape = KVShape(cfg.num_layers, cfg.num_kv_heads, cfg.head_dim)
    prompts = [[1] * 20, [2] * 20]
    alone = [generate(target, [p], proposer=dflash, max_new_tokens=4).tokens[0] for p in prompts]
    pool = CheckingKVPool(50, 8, 64, shape, dflash.draft_kv, target.dtype, "cpu")
    target.runtime = Runtime(pool, GraphCache("cpu"))
    try:
        out = generate(target, prompts, proposer=dflash, max_new_tokens=4, check=True)
        assert out.tokens == alone
        pool.check()
        assert pool.free_slots == 49
    finally:
        target.runtime = None


@pytest.mark.parametrize("lookahead", [False, True])
def test_the_table_holds_the_lookahead_of_the_last_round(target, dflash, lookahead):
    """Prompt 50 + 10 new tokens = 60 positions, B = 4: the last rounds reserve up to
    59 + 8 = 67 positions, past a 64-wide table; the engine's table is wide enough, and the
    drafted decoding equals plain decoding."""
    target.runtime = None  # a fresh runtime sized for this run alone
    try:
        plain = generate(target, [[3] * 50], max_new_tokens=10)
        target.runtime = None
        spec = generate(
            target, [[3] * 50], proposer=dflash, max_new_tokens=10, lookahead=lookahead, check=True
        )
        assert spec.tokens == plain.tokens and len(spec.tokens[0]) == 10
    finally:
        target.runtime = None
