"""Workloads: arrival processes, length distributions, trace replay."""

from __future__ import annotations

import json

import numpy as np
import pytest

from simulator.params import ConfigError, SimConfig
from simulator.workload import load_trace, make_requests, make_streams
from tests.simulator.helpers import simulate, small


def _requests(**workload):
    cfg = SimConfig()
    for k, v in workload.items():
        setattr(cfg.workload, k, v)
    return make_requests(cfg, make_streams(cfg.seed))


@pytest.mark.parametrize("arrival,cv", [("poisson", 1.0), ("gamma", 0.5), ("gamma", 3.0)])
def test_arrival_rate_and_burstiness(arrival, cv):
    r = _requests(arrival=arrival, rate_rps=50.0, gamma_cv=cv, num_requests=20_000)
    gaps = np.diff(r.arrival_s)
    assert gaps.mean() == pytest.approx(1 / 50, rel=0.05)
    assert gaps.std() / gaps.mean() == pytest.approx(cv, rel=0.1)


def test_duration_bounds_open_loop_arrivals():
    r = _requests(arrival="poisson", rate_rps=100.0, duration_s=30.0)
    assert r.arrival_s.max() <= 30.0 and len(r) == pytest.approx(3000, rel=0.1)


def test_lengths_have_the_requested_moments():
    r = _requests(arrival="poisson", num_requests=50_000, prompt_tokens_mean=500,
                  prompt_tokens_cv=0.5, output_tokens_mean=300, output_tokens_cv=1.0,
                  max_new_tokens=100_000)
    assert r.prompt_tokens.mean() == pytest.approx(500, rel=0.03)
    assert r.prompt_tokens.std() / r.prompt_tokens.mean() == pytest.approx(0.5, rel=0.1)
    assert r.output_tokens.mean() == pytest.approx(300, rel=0.05)
    capped = _requests(num_requests=1000, output_tokens_mean=5000, max_new_tokens=2048)
    assert capped.output_tokens.max() == 2048 and capped.output_tokens.min() >= 1


def test_closed_loop_arrivals_are_filled_in_as_requests_finish():
    r = _requests(arrival="closed_loop", num_requests=10)
    assert np.isnan(r.arrival_s).all()
    cluster, res = simulate(small("dflash", workload__concurrency=3, workload__num_requests=9,
                                  workload__think_time_s=0.5))
    a = res.requests["arrival_s"]
    assert (a[:3] == 0).all() and (a[3:] >= 0.5).all()


@pytest.mark.parametrize("fmt", ["csv", "jsonl"])
def test_trace_replay(tmp_path, fmt):
    rows = [(0.5, 100, 20), (0.1, 50, 10), (2.0, 300, 40)]
    path = tmp_path / f"trace.{fmt}"
    if fmt == "csv":
        path.write_text("arrival_s,prompt_tokens,output_tokens\n"
                        + "\n".join(",".join(map(str, r)) for r in rows))
    else:
        keys = ("arrival_s", "prompt_tokens", "output_tokens")
        path.write_text("\n".join(json.dumps(dict(zip(keys, r, strict=True))) for r in rows))
    arrival, prompt, out = load_trace(str(path))
    assert arrival.tolist() == [0.1, 0.5, 2.0] and prompt.tolist() == [50, 100, 300]
    _, res = simulate(small("dflash", workload__arrival="trace", workload__trace_path=str(path)))
    assert res.summary["requests"]["finished"] == 3
    assert res.requests["output_tokens"].tolist() == [10, 20, 40]


def test_trace_without_columns_is_a_config_error(tmp_path):
    path = tmp_path / "bad.csv"
    path.write_text("t,p\n1,2\n")
    with pytest.raises(ConfigError, match="arrival_s"):
        load_trace(str(path))
