"""KV reservation and admission in the simulator, against hand-computed cases.

The checker (invariants.py) asserts on every run that no round writes KV outside its
request's reservation; these tests drive the cases where that rule bites: ISD's 2N-1 written
slots, the overlap host's one-round lag, admission that must count the reservation, the
retraction order, and the verified-token and latency counters on runs small enough to work
out by hand.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

import simulator.cluster
from simulator.slots import SlotTable
from tests.simulator.helpers import FixedRoundCost, simulate, small


def _with_capacity(monkeypatch, tokens: int) -> None:
    """Every replica's KV pool holds exactly `tokens` slots."""
    real = simulator.cluster.kv_budget
    monkeypatch.setattr(
        simulator.cluster,
        "kv_budget",
        lambda cfg: dataclasses.replace(real(cfg), capacity_tokens=tokens),
    )


def _fixed(method: str, **kw):
    """Prompts of 100, outputs of 50 tokens exactly."""
    return small(
        method,
        workload__prompt_tokens_mean=100,
        workload__prompt_tokens_cv=0.0,
        workload__output_tokens_mean=50,
        workload__output_tokens_cv=0.0,
        **kw,
    )


@pytest.mark.parametrize("mode", ["sync", "overlap"])
@pytest.mark.parametrize("stride", [2, 4])
def test_isd_reserves_its_written_slots(mode, stride):
    """ISD writes 2N-1 slots a round; R = 1 (sync) or 2 (overlap) times that is reserved:
    14 and 28 at N = 4. The checker asserts every round's writes fit."""
    cfg = small(
        "isd",
        engine__mode=mode,
        spec__block_size=stride,
        spec__draft_layers=0,
        spec__acceptance="constant",
        spec__alpha=0.7,
        workload__num_requests=32,
    )
    cluster, res = simulate(cfg)
    blocks = 1 if mode == "sync" else 2
    assert cluster.replicas[0].reserve_tokens == blocks * (2 * stride - 1)
    assert res.summary["requests"]["finished"] == 32


@pytest.mark.parametrize("mode,reserve", [("sync", 8), ("overlap", 16)])
def test_admission_counts_the_reservation(monkeypatch, mode, reserve):
    """Two requests of 100 prompt tokens, new_token_ratio 0, DFlash B = 8, a pool of
    200 + reserve slots: admitting both would leave no room for either's reservation, so the
    second waits for the first to finish; nobody is retracted."""
    _with_capacity(monkeypatch, 200 + reserve)
    cfg = _fixed(
        "dflash",
        engine__mode=mode,
        engine__new_token_ratio=0.0,
        spec__block_size=8,
        workload__num_requests=2,
        workload__concurrency=2,
    )
    cluster, res = simulate(cfg)
    assert cluster.replicas[0].reserve_tokens == reserve
    s = res.summary
    assert s["requests"]["finished"] == 2 and s["preemptions"] == 0
    assert s["running"]["max"] == 1
    first, second = np.argsort(res.requests["first_token_s"])
    assert res.requests["first_token_s"][second] >= res.requests["finish_s"][first]


def test_victims_fewest_generated_then_longest_prompt():
    """Rows 0..3 generated 5, 2, 2, 9 tokens with prompts 10, 30, 20, 5, each row's next
    round needing 4 slots. 3 slots short: row 1 alone (2 tokens, the longer prompt); 6
    short: rows 1 and 2; 16 short: all four cannot free 17 -> none."""
    st = SlotTable(4, 100)
    st.emitted[:] = [5, 2, 2, 9]
    rows, need, prompt = np.arange(4), np.full(4, 4), np.array([10, 30, 20, 5])
    assert st.victims(rows, 3, need, prompt).tolist() == [1]
    assert st.victims(rows, 4, need, prompt).tolist() == [1]
    assert st.victims(rows, 6, need, prompt).tolist() == [1, 2]
    assert st.victims(rows, 13, need, prompt).tolist() == [1, 2, 0, 3]
    assert st.victims(rows, 17, need, prompt).tolist() == []


@pytest.mark.parametrize("chunk", [8192, 64])
@pytest.mark.parametrize("mode", ["sync", "overlap"])
def test_retraction_keeps_every_round_inside_the_pool(monkeypatch, mode, chunk):
    """Eight requests of 100 + 50 tokens in a pool that holds about three at a time, with
    optimistic admission and prompts prefilled whole or in chunks of 64: requests are
    retracted and recomputed; the checker asserts the
    reservations at every iteration, and every request still emits exactly its tokens."""
    _with_capacity(monkeypatch, 480)
    cfg = _fixed(
        "dflash",
        engine__mode=mode,
        engine__new_token_ratio=0.0,
        engine__chunked_prefill_size=chunk,
        spec__block_size=8,
        workload__num_requests=8,
        workload__concurrency=8,
    )
    _, res = simulate(cfg)
    s = res.summary
    assert s["requests"]["finished"] == 8 and s["preemptions"] > 0
    if mode == "sync":  # 49 decode tokens each, less one per recompute (its prefill emits
        # the next token); overlap may also lose a round in flight per retraction (checker)
        assert s["speculation"]["committed_tokens"] == 8 * 49 - s["preemptions"]


@pytest.mark.parametrize("method,width", [("none", 1), ("dflash", 6), ("isd", 7)])
def test_a_lone_request_by_hand(method, width):
    """One request, 50 output tokens, every forward 10 ms, hosts free, sync mode, nothing
    accepted (alpha 0): prefill gives the first token at 10 ms, then 49 rounds of one token,
    each verifying `width` tokens (B = 6; ISD N = 4: 7). TTFT 10 ms, TPOT 10 ms, 49 rounds,
    verified 49 * width, tau 1."""
    spec = {} if method == "none" else dict(spec__acceptance="constant", spec__alpha=0.0)
    if method == "dflash":
        spec["spec__block_size"] = 6
    if method == "isd":
        spec.update(spec__block_size=4, spec__draft_layers=0)
    cfg = _fixed(
        method, engine__mode="sync", workload__num_requests=1, workload__concurrency=1, **spec
    )
    _, res = simulate(cfg, cost_model=FixedRoundCost(0.01))
    r, s = res.requests, res.summary
    assert r["ttft_s"][0] == pytest.approx(0.01)
    assert r["tpot_s"][0] == pytest.approx(0.01)
    assert r["decode_rounds"][0] == 49 and r["tau"][0] == pytest.approx(1.0)
    assert s["speculation"]["tau"] == pytest.approx(1.0)
    assert s["speculation"]["verified_tokens"] == 49 * width
    assert s["speculation"]["rejected_per_committed"] == pytest.approx(width - 1)


def test_overlap_rides_one_wasted_round_per_request():
    """Overlap mode: the host sees a finish one round late, so each finished request costs
    one wasted row (alpha 1: every round commits B; 50 tokens at B = 8 finish in 7 rounds),
    and its per-request rounds count only the 7 live ones."""
    cfg = _fixed(
        "dflash",
        engine__mode="overlap",
        spec__acceptance="constant",
        spec__alpha=1.0,
        spec__block_size=8,
        workload__num_requests=1,
        workload__concurrency=1,
    )
    _, res = simulate(cfg, cost_model=FixedRoundCost(0.01))
    s = res.summary["speculation"]
    assert res.requests["decode_rounds"][0] == 7  # ceil(49 / 8)
    assert s["wasted_rows"] == 1
    assert s["verified_tokens"] == 8 * 8
