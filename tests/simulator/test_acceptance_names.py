"""Acceptance as SGLang and vLLM name it: acceptance length (= tau), per-position acceptance
rates, total token throughput (simulator/metrics.py)."""

from __future__ import annotations

import pytest

import simulator
from simulator.metrics import position_rates
from simulator.params import SimConfig


def test_position_rates_of_a_hand_histogram():
    # 10 rounds: 2 commit 1 token (no draft kept), 3 commit 2, 5 commit 4, at B = 4
    # (draft positions 1..3): position 1 kept by 8 rounds, 2 by 5, 3 by 5
    assert position_rates([0, 2, 3, 0, 5]) == pytest.approx([0.8, 0.5, 0.5])
    assert position_rates([0, 7]) == [] and position_rates([0, 0, 0]) == []


def test_a_run_reports_acceptance_length_rates_and_total_throughput():
    cfg = SimConfig()
    cfg.workload.num_requests, cfg.workload.concurrency = 24, 4
    r = simulator.run(cfg)
    spec, tp = r.summary["speculation"], r.summary["throughput"]
    rates = spec["acceptance_rate_per_position"]
    assert spec["acceptance_length"] == spec["tau"]
    assert len(rates) == cfg.spec.block_size - 1
    assert all(a >= b for a, b in zip(rates, rates[1:]))  # a position needs the one before
    assert 1 + sum(rates) == pytest.approx(spec["tau"])  # E[k] = sum of P(k >= i)
    tokens = r.requests["prompt_tokens"].sum() + r.requests["output_tokens"].sum()
    assert tp["total_tok_s"] == pytest.approx(tokens / r.summary["duration_s"])
    assert tp["total_tok_s"] > tp["output_tok_s"]
