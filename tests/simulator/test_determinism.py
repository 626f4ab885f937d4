"""Determinism and equivalences: same seed same results, independent random streams,
speculation off equals B = 1."""

from __future__ import annotations

import numpy as np
import pytest

from tests.simulator.helpers import simulate, small

RECORDS = ("arrival_s", "first_token_s", "finish_s", "decode_rounds", "replica")


def _same(a, b):
    for k in RECORDS:
        np.testing.assert_array_equal(a.requests[k], b.requests[k], err_msg=k)


@pytest.mark.parametrize("arrival", ["poisson", "closed_loop"])
def test_same_seed_identical_results(arrival):
    cfg = small("dflash", workload__arrival=arrival, workload__rate_rps=50.0,
                cluster__replicas=2, cluster__router="least_outstanding")
    _, a = simulate(cfg)
    _, b = simulate(cfg)
    _same(a, b)
    drop = ("wall_s", "sim_requests_per_wall_s")
    assert {k: v for k, v in a.summary.items() if k not in drop} == {
        k: v for k, v in b.summary.items() if k not in drop}


def test_different_seed_different_results():
    _, a = simulate(small("dflash", seed=1))
    _, b = simulate(small("dflash", seed=2))
    assert not np.array_equal(a.requests["finish_s"], b.requests["finish_s"])


def test_streams_are_independent():
    """Changing the output-length distribution does not move arrivals or prompt lengths."""
    base = dict(workload__arrival="poisson", workload__rate_rps=30.0)
    _, a = simulate(small("dflash", **base))
    _, b = simulate(small("dflash", workload__output_tokens_mean=300,
                          workload__output_tokens_cv=1.5, **base))
    np.testing.assert_array_equal(a.requests["arrival_s"], b.requests["arrival_s"])
    np.testing.assert_array_equal(a.requests["prompt_tokens"], b.requests["prompt_tokens"])
    np.testing.assert_array_equal(a.requests["difficulty"], b.requests["difficulty"])
    assert not np.array_equal(a.requests["output_tokens"], b.requests["output_tokens"])


@pytest.mark.parametrize("mode", ["sync", "overlap"])
@pytest.mark.parametrize("method", ["dflash", "eagle"])
def test_speculation_off_equals_block_size_one(mode, method):
    _, off = simulate(small("none", engine__mode=mode))
    _, one = simulate(small(method, engine__mode=mode, spec__block_size=1))
    _same(off, one)
    assert one.summary["speculation"]["tau"] == 1.0
    assert one.summary["throughput"] == off.summary["throughput"]
