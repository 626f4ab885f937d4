"""Verify lengths and round costs of every simulator method, pinned by hand-computed cases.

`Ledger` is a cost model whose every term has its own scale, so a round's price shows which
terms it sums and over how many rows: target forward 1 per query token + 0.001 per context
token; draft forward 10 (non-causal) or 20 (causal) per query token + 0.01 per context
token; LM head 100 per row; KV materialization 1000 per token; prefill 10^4 per prompt
token; a Markov step launch 10^5 (its flop and byte terms vanish). The expected values are
written out by hand from each method's round (its module docstring), for two requests with
200 and 100 committed tokens.
"""

from __future__ import annotations

import numpy as np
import pytest

from simulator.methods.base import NoSpec
from simulator.methods.dflash import DFlash
from simulator.methods.dspark import DSpark
from simulator.methods.eagle import Eagle
from simulator.methods.isd import ISD
from simulator.methods.linearspec import LinearSpec

KV = np.array([200, 100])


class Ledger:
    """Each cost term on its own scale (module docstring); kv (rounds, n) gives (rounds,)."""

    flops = bw = 1e30
    launch, vocab, dtype = 1e5, 1000, 2

    @staticmethod
    def _ctx(kv, per):
        kv = np.asarray(kv, dtype=np.float64)
        return per * kv.sum(axis=-1)

    def target_forward_s(self, q, kv):
        return float(np.sum(q)) + self._ctx(kv, 0.001)

    def draft_forward_s(self, q, kv, causal=True):
        return (20.0 if causal else 10.0) * float(np.sum(q)) + self._ctx(kv, 0.01)

    def lm_head_s(self, rows):
        return 100.0 * float(rows)

    def kv_materialize_s(self, tokens):
        return 1000.0 * float(tokens)

    def prefill_forward_s(self, q, kv):
        return 1e4 * float(np.sum(q))


def test_plain_decoding_round():
    """q = 1 each: target 2 + 0.3, head over 2 rows."""
    m = NoSpec()
    q = m.verify_lens(2)
    assert q.tolist() == [1, 1] and m.max_query == 1
    assert m.decode_gpu_s(Ledger(), q, KV) == pytest.approx(2.3 + 200)


def test_dflash_round_and_prefill():
    """B = 4, 8 verified rows: non-causal draft 80 + 3, target 8 + 0.3, draft head over the
    6 drafted rows, verify head over 8, materialization of 8."""
    m = DFlash(4)
    q = m.verify_lens(2)
    assert q.tolist() == [4, 4] and m.max_query == 4
    want = (80 + 3) + (8 + 0.3) + 600 + 800 + 8000
    assert m.decode_gpu_s(Ledger(), q, KV) == pytest.approx(want)
    # prefill of 5 + 7 prompt tokens: forward, head on each request's last row, materialize
    chunk = np.array([5, 7])
    assert m.prefill_gpu_s(Ledger(), chunk, np.zeros(2)) == pytest.approx(12e4 + 200 + 12000)
    # B = 1 is plain decoding
    assert DFlash(1).decode_gpu_s(Ledger(), np.ones(2, dtype=np.int64), KV) == pytest.approx(202.3)


def test_isd_round_verifies_2n_minus_1():
    """Stride N = 4: 7 query tokens per request, one causal target forward, head on all 14."""
    m = ISD(4)
    q = m.verify_lens(3)
    assert q.tolist() == [7, 7, 7] and m.max_query == 7
    assert m.decode_gpu_s(Ledger(), m.verify_lens(2), KV) == pytest.approx((14 + 0.3) + 1400)


def test_linearspec_round_two_forwards():
    """Cap 8 at batch 2 (tier 16 for <= 4 requests): two target forwards of 16 rows, heads on
    14 (drafts) and 16 (verify) rows."""
    m = LinearSpec(8)
    q = m.verify_lens(2)
    assert q.tolist() == [8, 8] and m.max_query == 8
    assert m.decode_gpu_s(Ledger(), q, KV) == pytest.approx(2 * 16.3 + 1400 + 1600)
    assert LinearSpec(16).verify_lens(5).tolist() == [8] * 5  # 5 > 4: the 8 tier
    assert LinearSpec(16).verify_lens(33).tolist() == [4] * 33


def test_eagle_chain_round():
    """B = 4: three causal one-token draft steps at context kv + 1 with a head each, the
    draft extend over the block (causal), the target verify and its head."""
    m = Eagle(4)
    q = m.verify_lens(2)
    steps = 3 * ((40 + 0.01 * (201 + 101)) + 200)
    extend = 160 + 3
    assert m.decode_gpu_s(Ledger(), q, KV) == pytest.approx(steps + extend + 8.3 + 800)


def test_dspark_round_pads_to_a_bucket():
    """gamma = 3 drafts, verify lengths 2 and 4 (6 tokens) padded to the 8-token bucket:
    backbone over 3 rows each (non-causal) 60 + 3, its head over 6 rows, 3 Markov launches;
    target over the padded 8 rows 8 + 0.3 and its head over 8, materialization of the 6
    verified tokens only."""
    m = DSpark(3, 4, buckets=np.array([4, 8, 16]))
    q = np.array([2, 4])
    draft = (60 + 3) + 600 + 3 * 1e5
    verify = (8 + 0.3) + 800 + 6000
    assert m.decode_gpu_s(Ledger(), q, KV) == pytest.approx(draft + verify)
    rounds = m.decode_gpu_s(Ledger(), np.array([[2, 4], [4, 4]]), np.stack([KV, KV + 4]))
    assert rounds.tolist() == pytest.approx([draft + verify, draft + 0.008 + verify + 2000])


def test_dspark_schedule_reads_conditional_confidences():
    """The static policy (threshold 0.5) runs on c_k = S_k / S_{k-1}, not on the survival S.
    Row 0: S = 0.9, 0.36, 0.324, c = 0.9, 0.4, 0.9: one draft (q = 2). Row 1: S = 0.9, 0.6,
    0.3, c = 0.9, 2/3, 0.5: all three (q = 4), where S itself would stop before 0.3."""
    from simulator.acceptance import AcceptanceModel

    acc = AcceptanceModel(2, 4)
    acc.S = np.array([[0.9, 0.36, 0.324], [0.9, 0.6, 0.3]])
    m = DSpark(3, 4, policy="static", threshold=0.5)
    assert m.schedule(Ledger(), acc, np.arange(2), KV).tolist() == [2, 4]
