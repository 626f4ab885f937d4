"""Per-request latency metrics on traces small enough to work out by hand, and the
scheduling policy's order (FCFS admission, preempted requests back at the head of the queue).

Every trace runs one replica with a fixed one second per forward (prefill or decode, any
batch) and nothing else costed, one-token prompts, sync mode unless named: the hand
timeline is then a list of one-second steps. Definitions (simulator/metrics.py): TTFT =
first token - arrival, TPOT = (finish - first token) / (output tokens - 1), ITL = every gap
between successive token-emitting rounds of a request; a prefill step emits only first
tokens, so a request decoding meanwhile sees a two-second gap.
"""

from __future__ import annotations

import numpy as np
import pytest

from simulator.cluster import Cluster
from simulator.params import SimConfig
from tests.simulator.helpers import FixedRoundCost, simulate, small


def _trace(method: str, seed: int, mode: str = "sync", **extra):
    """Closed loop of 2 over 3 requests (the third arrives when the first finishes),
    output lengths drawn by `seed` (asserted by each test: its hand timeline needs them)."""
    cfg = small(method, seed=seed, engine__mode=mode, engine__max_running_requests=2,
                workload__arrival="closed_loop", workload__concurrency=2,
                workload__num_requests=3, workload__prompt_tokens_mean=1,
                workload__prompt_tokens_cv=0.0, workload__output_tokens_mean=4,
                workload__output_tokens_cv=0.6, **extra)
    return simulate(cfg, cost_model=FixedRoundCost(1.0))


def test_plain_decoding_trace_with_a_prefill_between_rounds():
    """Outputs A = 2, B = 10, C = 4 tokens. Step [0, 1]: prefill A, B (first tokens at 1).
    [1, 2]: A2 (A done), B2. C arrives at 2; [2, 3]: prefill C (C1 at 3; B emits nothing).
    [3, 4], [4, 5], [5, 6]: B3-B5 and C2-C4 (C done at 6). [6, 11]: B6-B10 alone.
    Gaps: A [1]; B [1, 2, 1 x 7]; C [1, 1, 1]: 13 gaps summing to 14 s."""
    _, res = _trace("none", seed=4)
    r = res.requests
    assert r["output_tokens"].tolist() == [2, 10, 4]
    assert r["arrival_s"].tolist() == [0, 0, 2]
    assert r["first_token_s"].tolist() == [1, 1, 3]
    assert r["finish_s"].tolist() == [2, 11, 6]
    assert r["ttft_s"].tolist() == [1, 1, 1]
    assert r["e2e_s"].tolist() == [2, 11, 4]
    assert r["tpot_s"] == pytest.approx([1 / 1, 10 / 9, 3 / 3])
    assert r["decode_rounds"].tolist() == [1, 9, 3]
    itl = res.summary["itl_s"]
    assert itl["mean"] == pytest.approx(14 / 13)
    assert (itl["p50"], itl["p90"], itl["p99"]) == (1.0, 1.0, 2.0)
    assert res.summary["ttft_s"]["mean"] == pytest.approx(1.0)
    assert res.summary["tpot_s"]["mean"] == pytest.approx((1 + 10 / 9 + 1) / 3)
    assert res.summary["throughput"]["output_tok_s"] == pytest.approx(16 / 11)


def test_overlap_trace_plans_a_round_ahead():
    """The seed-4 trace in overlap mode: the host plans each step before it has read the
    last, so round [2, 3] is planned for A and B before A's finish (at 2) is seen: A's row
    rides it wasted, B emits B3; C, arriving at 2, is prefilled in [3, 4] (first token at 4,
    TTFT 2); B and C decode [4, 7] (C done at 7), B alone [7, 11]. Gaps: A [1]; B [1, 1, 2,
    1 x 6]; C [1, 1, 1]: again 13 summing to 14, the 2 s gap a round later."""
    _, res = _trace("none", seed=4, mode="overlap")
    r = res.requests
    assert r["output_tokens"].tolist() == [2, 10, 4]
    assert r["first_token_s"].tolist() == [1, 1, 4]
    assert r["finish_s"].tolist() == [2, 11, 7]
    assert r["ttft_s"].tolist() == [1, 1, 2]
    assert r["tpot_s"] == pytest.approx([1.0, 10 / 9, 1.0])
    assert r["decode_rounds"].tolist() == [1, 9, 3]  # A's wasted round is not one of its own
    itl = res.summary["itl_s"]
    assert itl["mean"] == pytest.approx(14 / 13) and itl["p99"] == 2.0
    assert res.summary["speculation"]["wasted_rows"] == 3  # each request rides one round past
    # its finish (B's is [11, 12])


def test_three_token_commits_trace():
    """DFlash, B = 3, every draft accepted (alpha = 1: 3 tokens a round, bonus included).
    Outputs 3, 2, 3. [0, 1]: prefill A, B (first tokens at 1). [1, 2]: A commits 2 (A done),
    B 1 (done, its output is cut). C arrives at 2; [2, 3]: prefill C; [3, 4]: C commits 2.
    One gap per request, each 1 s; TPOT A = 1/2, B = 1/1, C = 1/2."""
    _, res = _trace("dflash", seed=3, spec__acceptance="constant", spec__alpha=1.0,
                    spec__block_size=3)
    r = res.requests
    assert r["output_tokens"].tolist() == [3, 2, 3]
    assert r["first_token_s"].tolist() == [1, 1, 3]
    assert r["finish_s"].tolist() == [2, 2, 4]
    assert r["ttft_s"].tolist() == [1, 1, 1]
    assert r["tpot_s"] == pytest.approx([0.5, 1.0, 0.5])
    assert r["decode_rounds"].tolist() == [1, 1, 1]
    assert r["tau"] == pytest.approx([3, 3, 3])  # a finishing round counts its raw commit
    itl = res.summary["itl_s"]
    assert (itl["mean"], itl["p99"]) == (1.0, 1.0)
    sp = res.summary["speculation"]
    assert sp["commit_hist"] == [0, 0, 0, 3] and sp["tau"] == pytest.approx(3.0)


def test_two_prefill_steps_delay_only_the_decoding_request():
    """Plain decoding, outputs 3, 2, 3: [0, 1] prefill A, B; [1, 2] A2, B2 (B done); C
    arrives at 2, [2, 3] prefill C; [3, 4] A3 (done), C2; [4, 5] C3. A's gaps 1 and 2."""
    _, res = _trace("none", seed=3)
    r = res.requests
    assert r["output_tokens"].tolist() == [3, 2, 3]
    assert r["finish_s"].tolist() == [4, 2, 5]
    assert r["tpot_s"] == pytest.approx([1.5, 1.0, 1.0])
    itl = res.summary["itl_s"]
    assert itl["mean"] == pytest.approx(6 / 5)
    assert (itl["p50"], itl["p99"]) == (1.0, 2.0)


def test_admission_is_first_come_first_served():
    """One running request at a time and arrivals faster than service: requests start, and
    finish, in arrival order."""
    cfg = small("none", engine__mode="sync", engine__max_running_requests=1,
                workload__arrival="poisson", workload__rate_rps=50.0,
                workload__num_requests=30, workload__prompt_tokens_mean=1,
                workload__prompt_tokens_cv=0.0, workload__output_tokens_mean=5)
    _, res = simulate(cfg, cost_model=FixedRoundCost(0.01))
    r = res.requests
    order = np.argsort(r["arrival_s"], kind="stable")
    assert np.all(np.diff(r["first_token_s"][order]) > 0)
    assert np.all(np.diff(r["finish_s"][order]) > 0)
    # a queue builds up: each request starts when the one before it finishes
    queued = r["arrival_s"][order][1:] < r["finish_s"][order][:-1]
    assert queued.sum() >= 10
    late = r["first_token_s"][order][1:] - r["finish_s"][order][:-1]
    assert late[queued] == pytest.approx(np.full(int(queued.sum()), 0.01))


def _replica():
    cfg = small("none", engine__mode="sync", engine__max_running_requests=4,
                workload__num_requests=8, workload__prompt_tokens_mean=4,
                workload__prompt_tokens_cv=0.0)
    cluster = Cluster(SimConfig.coerce(cfg), FixedRoundCost(1.0))
    return cluster.replicas[0]


def test_preempted_requests_go_back_to_the_head_in_retraction_order():
    """Retracting slots of requests 3 then 1 while 6 and 7 wait: the queue becomes
    3, 1, 6, 7 (the victims first, in the order they were picked), each victim keeping the
    tokens the host has emitted (not the GPU's count) and the time of its last one, and
    readmission follows that queue."""
    rep = _replica()
    st = rep.slots
    rep.waiting.clear()
    slot_of = {}
    for rid, emitted in [(1, 5), (3, 2), (4, 7)]:
        slot_of[rid] = st.occupy(rid, 4, 50, emitted, 10.0 + rid)
        st.prefilling.remove(slot_of[rid])
        st.ready[slot_of[rid]] = True
        st.gen[slot_of[rid]] = emitted + 3  # the GPU's view runs a round ahead (overlap)
    rep.waiting.extend([6, 7])
    rep.retract(np.array([slot_of[3], slot_of[1]]))
    assert list(rep.waiting) == [3, 1, 6, 7]
    assert rep.resume == {3: (2, 13.0), 1: (5, 11.0)}
    assert rep.req.preemptions[[1, 3, 4]].tolist() == [1, 1, 0]
    rows, chunks, new = rep._select_prefill()
    assert [int(st.rid[s]) for s in new] == [3, 1, 6][: len(new)] and len(new) >= 2
    assert chunks[:2] == [4 + 2, 4 + 5]  # a resumed request recomputes prompt + emitted
    assert st.emitted[new[0]] == 2 and st.last_emit[new[0]] == 13.0
