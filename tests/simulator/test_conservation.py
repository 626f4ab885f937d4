"""Conservation: requests, tokens and KV slots; preemption; horizon cut-off; routing."""

from __future__ import annotations

import numpy as np
import pytest

from simulator import ConfigError, run
from simulator.replica import Replica
from tests.simulator.helpers import simulate, small


@pytest.fixture
def emitted_at_finish(monkeypatch):
    """(emitted, output length) of every request as the host finishes it."""
    seen: list[tuple[np.ndarray, np.ndarray]] = []
    orig = Replica._finish

    def spy(self, slots, t):
        seen.append((self.slots.emitted[slots].copy(), self.slots.out[slots].copy()))
        orig(self, slots, t)

    monkeypatch.setattr(Replica, "_finish", spy)
    return seen


def _tokens_conserved(seen, n):
    emitted = np.concatenate([e for e, _ in seen])
    assert len(emitted) == n
    np.testing.assert_array_equal(emitted, np.concatenate([o for _, o in seen]))


@pytest.mark.parametrize("mode", ["sync", "overlap"])
@pytest.mark.parametrize("method", ["none", "eagle", "dflash"])
def test_every_request_finishes_and_kv_returns(mode, method, emitted_at_finish):
    cluster, res = simulate(small(method, engine__mode=mode))
    s = res.summary
    assert s["requests"]["finished"] == s["requests"]["total"] == 48
    for rep in cluster.replicas:
        assert rep.slots.kv_free == rep.slots.capacity
    assert s["speculation"]["committed_tokens"] == cluster.req.output_tokens.sum() - 48
    _tokens_conserved(emitted_at_finish, 48)


@pytest.mark.parametrize("mode", ["sync", "overlap"])
def test_preemption_recomputes_and_conserves(mode, emitted_at_finish):
    # a 12k-token pool, optimistic admission: requests are retracted and recomputed
    cfg = small("dflash", engine__mode=mode, engine__mem_fraction_static=0.145,
                engine__new_token_ratio=0.0, workload__concurrency=64,
                workload__num_requests=300, workload__prompt_tokens_mean=180,
                workload__output_tokens_mean=360)
    cluster, res = simulate(cfg)
    s = res.summary
    assert s["preemptions"] > 0 and s["requests"]["finished"] == 300
    assert s["kv"]["peak_used_frac"] > 0.9
    assert cluster.req.preemptions.sum() == s["preemptions"]
    _tokens_conserved(emitted_at_finish, 300)


def test_horizon_leaves_requests_in_flight():
    cfg = small("dflash", workload__arrival="poisson", workload__rate_rps=200.0,
                workload__num_requests=2000)
    cfg.max_time_s = 1.0
    cluster, res = simulate(cfg)
    r = res.summary["requests"]
    assert r["in_flight"] > 0 and r["not_arrived"] > 0
    assert r["finished"] + r["in_flight"] + r["not_arrived"] == 2000


@pytest.mark.parametrize("router", ["round_robin", "least_outstanding"])
def test_replicas_share_the_load(router):
    cfg = small("dflash", workload__arrival="poisson", workload__rate_rps=80.0,
                workload__num_requests=400, cluster__replicas=4, cluster__router=router)
    cluster, res = simulate(cfg)
    counts = np.bincount(cluster.req.replica, minlength=4)
    assert counts.sum() == 400 and counts.min() > 60
    if router == "round_robin":
        assert counts.max() - counts.min() <= 1


def test_chunked_prefill_of_long_prompts():
    cfg = small("dflash", engine__chunked_prefill_size=256, workload__prompt_tokens_mean=1500,
                workload__num_requests=24)
    _, res = simulate(cfg)
    assert res.summary["engine"]["prefill_rounds"] >= 24 * 1500 // 256


def test_closed_loop_keeps_concurrency():
    cfg = small("dflash", workload__concurrency=6, workload__num_requests=60,
                metrics__sample_period_s=0.001)
    _, res = simulate(cfg)
    in_system = res.timeseries["in_system"]
    assert in_system.max() == 6 and np.median(in_system) == 6


def test_request_larger_than_the_pool_fails_clearly():
    cfg = small("dflash", engine__mem_fraction_static=0.132, engine__new_token_ratio=0.0,
                workload__prompt_tokens_mean=3000, workload__prompt_tokens_cv=0.0,
                workload__output_tokens_mean=3000, workload__output_tokens_cv=0.0,
                workload__max_new_tokens=4096, workload__num_requests=2)
    with pytest.raises(ConfigError, match="KV pool"):
        run(cfg)


def test_bad_values_fail_before_the_run():
    cfg = small("dflash", workload__rate_rps=-3.0)
    with pytest.raises(ConfigError, match=r"workload.rate_rps = -3.0 is outside"):
        run(cfg)
    with pytest.raises(ConfigError, match="engine.kv_reserve_blocks"):
        run(small("dflash", engine__kv_reserve_blocks=1))
