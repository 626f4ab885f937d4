"""The serving loop's scheduler driven by hand, without a model: FCFS admission under the
claim of prompt + max_new_tokens + 2B, prefill chunking under the token budget, where stop
tokens and max_new_tokens cut a commit, the overlap mode's discarded extra round, and the
guard that fails a request planned past its last possible round; the loop's stats (TTFT, TPOT,
tau) on requests written by hand.

Each step plans, then applies results written by hand as `[commit_len, tokens...]` rows
(reference/serve/scheduler.py `apply`)."""

from __future__ import annotations

import pytest
import torch

from reference.kv_pool import KVPool, KVShape
from reference.serve.loop import ServeConfig, Server
from reference.serve.scheduler import DecodePlan, Live, PrefillPlan, Scheduler
from reference.serve.workload import ServeRequest

B = 4


def _sched(slots: int = 200, *, max_running: int = 8, budget: int = 64, stop=()):
    pool = KVPool(slots, 8, 64, KVShape(1, 1, 2), None, torch.float32, "cpu")
    return Scheduler(pool, B, max_running=max_running, prefill_budget=budget,
                     stop_token_ids=stop)


def _req(rid: int, prompt_len: int, max_new: int) -> ServeRequest:
    return ServeRequest(rid, tuple(range(1, prompt_len + 1)), max_new)


def _prefill_all(s: Scheduler, now: float = 0.0) -> PrefillPlan:
    plan, _ = s.plan(now)
    assert isinstance(plan, PrefillPlan)
    s.apply(plan, [[int(f), 7] for f in plan.final], now)
    return plan


def test_admission_is_fcfs_and_the_head_blocks_the_queue():
    """Usable slots 60; claims: rid 0 5 + 10 + 8 = 23, rid 1 20 + 20 + 8 = 48 (does not fit
    beside rid 0), rid 2 1 + 1 + 8 = 10 (would fit): FCFS admits rid 0 only."""
    s = _sched(61)
    s.arrive([_req(0, 5, 10), _req(1, 20, 20), _req(2, 1, 1)], 0.0)
    plan, admitted = s.plan(0.0)
    assert [lv.req.rid for lv in admitted] == [0]
    assert [r.rid for r, _ in s.waiting] == [1, 2]
    assert s.claimed == 23
    assert plan.chunks == [[1, 2, 3, 4, 5]] and plan.final == [True]


def test_admission_stops_at_max_running():
    s = _sched(max_running=2)
    s.arrive([_req(i, 2, 2) for i in range(3)], 0.0)
    _, admitted = s.plan(0.0)
    assert [lv.req.rid for lv in admitted] == [0, 1] and len(s.waiting) == 1


def test_prefill_chunks_follow_admission_order_under_the_budget():
    """Prompts 5 and 7 under a budget of 8 tokens a step: [5, 3], then [4]."""
    s = _sched(budget=8)
    s.arrive([_req(0, 5, 4), _req(1, 7, 4)], 0.0)
    p1, _ = s.plan(0.0)
    assert [len(c) for c in p1.chunks] == [5, 3] and p1.starts == [0, 0]
    assert p1.final == [True, False]
    s.apply(p1, [[1, 9], [0, 0]], 1.0)
    p2, _ = s.plan(1.0)
    assert isinstance(p2, PrefillPlan)
    assert p2.chunks == [[4, 5, 6, 7]] and p2.starts == [3] and p2.final == [True]
    s.apply(p2, [[1, 9]], 2.0)
    a, b = s.live
    assert (a.tokens, b.tokens) == ([9], [9])
    assert (a.first_token_s, b.first_token_s) == (1.0, 2.0)
    assert (a.host_len, b.host_len) == (5, 7)


def test_a_stop_token_ends_the_commit_and_the_request():
    """Commit [5, 3, 6] with 3 a stop token: tokens 7 (the prefill's), 5, 3; the 6 after the
    stop is dropped; finish at the round's time."""
    s = _sched(stop=(3,))
    s.arrive([_req(0, 4, 20)], 0.0)
    _prefill_all(s)
    plan, _ = s.plan(1.0)
    assert isinstance(plan, DecodePlan) and plan.planning == [4 + B]
    done = s.apply(plan, [[3, 5, 3, 6]], 2.0)
    lv = s.live[0]
    assert done == [lv] and lv.tokens == [7, 5, 3] and lv.finish_s == 2.0
    assert lv.commits == [3] and lv.host_len == 4 + 3


def test_max_new_tokens_cuts_inside_a_commit():
    """max_new_tokens 3: the prefill gives one token, a commit of 4 gives the other two."""
    s = _sched()
    s.arrive([_req(0, 4, 3)], 0.0)
    _prefill_all(s)
    plan, _ = s.plan(1.0)
    s.apply(plan, [[4, 10, 11, 12, 13]], 2.0)
    lv = s.live[0]
    assert lv.finished and lv.tokens == [7, 10, 11]


def test_overlap_extra_round_is_discarded_and_the_row_released_at_the_next_plan():
    """Two rounds launched before the first is applied (overlap): the first finishes the
    request (max_new_tokens 2), the second's row is discarded; the next plan releases the
    row, returns its claim and admits the waiting request."""
    s = _sched(61)
    s.arrive([_req(0, 4, 2), _req(1, 30, 20)], 0.0)  # claims 14 and 58: one at a time
    _prefill_all(s)
    r1, _ = s.plan(1.0)
    r2, _ = s.plan(1.5)
    s.apply(r1, [[2, 5, 6]], 2.0)
    s.apply(r2, [[1, 8]], 3.0)
    lv = s.live[0]
    assert lv.tokens == [7, 5] and lv.discarded == 1 and lv.commits == [2]
    calls = []
    plan, admitted = s.plan(3.0, lambda: calls.append(1))
    assert calls == [1] and lv.released and s.done == [lv]
    assert [a.req.rid for a in admitted] == [1] and s.claimed == 30 + 20 + 2 * B


def test_rounds_that_commit_nothing_fail_fast():
    """A request whose rounds commit nothing (a broken accept) would decode for ever: with
    max_new_tokens 3, the fourth decode round's plan raises."""
    s = _sched()
    s.arrive([_req(0, 4, 3)], 0.0)
    _prefill_all(s)
    for t in range(3):
        plan, _ = s.plan(1.0 + t)
        s.apply(plan, [[0, 0]], 1.5 + t)
    with pytest.raises(RuntimeError, match="request 0 would get decode round 4 with "
                                           "max_new_tokens = 3"):
        s.plan(5.0)


def test_the_longest_legal_run_is_not_stopped():
    """One token a round and overlap's extra round: max_new_tokens 3 is one prefill token,
    two decode rounds and a third launched before the host saw the finish."""
    s = _sched()
    s.arrive([_req(0, 4, 3)], 0.0)
    _prefill_all(s)
    r1, _ = s.plan(1.0)
    r2, _ = s.plan(2.0)
    s.apply(r1, [[1, 5]], 2.0)
    r3, _ = s.plan(3.0)
    s.apply(r2, [[1, 6]], 3.0)
    s.apply(r3, [[1, 8]], 4.0)
    lv = s.done[0] if s.done else s.live[0]
    assert lv.tokens == [7, 5, 6] and lv.discarded == 1 and lv.rounds == 3
    assert s.plan(4.0)[0] is None


class _Timeline:
    steps = [("prefill", 2, None, None), ("decode", 2, None, None), ("decode", 1, None, None)]

    def summary(self) -> dict:
        return {}


def test_serve_stats_by_hand():
    """Two requests: A arrives at 0, admitted at 1, first token at 2, 4 tokens by 5 (TTFT
    2, TPOT 3/3 = 1), commits 2 and 1; B arrives at 1, first token at 3, 3 tokens by 7
    (TTFT 2, TPOT 4/2 = 2), commit 2. 7 tokens by 7 s; tau = 5/3."""
    a = Live(_req(0, 3, 8), 1, 0.0, 1.0, tokens=[1, 2, 3, 4], commits=[2, 1],
             first_token_s=2.0, finish_s=5.0)
    b = Live(_req(1, 3, 8), 2, 1.0, 1.0, tokens=[1, 2, 3], commits=[2],
             first_token_s=3.0, finish_s=7.0)
    fake = type("S", (), {"cfg": ServeConfig(check=False), "timeline": _Timeline(),
                          "max_lag": 0, "fenced_plans": 0, "prefilled_s": None,
                          "proposer": None})()
    st = Server.stats(fake, [a, b])
    assert (st["requests"], st["output_tokens"], st["wall_s"]) == (2, 7, 7.0)
    assert st["throughput_tok_s"] == pytest.approx(1.0)
    assert st["ttft_s"] == pytest.approx(2.0)
    assert st["tpot_s"] == pytest.approx(1.5) and st["tpot_p99_s"] == pytest.approx(2.0)
    assert st["tau"] == pytest.approx(5 / 3)
    assert (st["decode_rounds"], st["prefill_steps"]) == (2, 1)
