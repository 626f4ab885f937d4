"""simulator.bench's timing loop reports every simulation (its progress bar counts them)."""

from __future__ import annotations

from simulator.bench import _time
from simulator.params import SimConfig


def test_every_simulation_of_every_repeat_is_reported_once():
    cfg = SimConfig()
    cfg.workload.concurrency, cfg.workload.num_requests = 2, 6
    cfg.workload.output_tokens_mean = 32
    calls = []
    best = _time([cfg, cfg], repeat=2, done=lambda: calls.append(1))
    assert len(calls) == 4
    assert best["requests"] == 12  # the best repeat's two runs, 6 requests each
