"""Steady-state throughput (simulator/steady.py): the window rule, the token count inside it,
and the property it exists for: a closed loop's steady rate does not depend on how many
requests the run has, while the benchmark figure does."""

from __future__ import annotations

import numpy as np
import pytest

from simulator.steady import steady_window, throughput_for, tokens_in
from tests.simulator.helpers import simulate, small


def test_window_is_kth_to_n_minus_kth_finish():
    finish = np.array([5.0, 1.0, 3.0, 2.0, 4.0, 6.0, np.nan])
    assert steady_window(finish, 2) == (2.0, 4.0)
    assert steady_window(finish, 3) is None  # 6 finished <= 2k + 1 = 7


def test_tokens_spread_evenly_between_first_token_and_finish():
    # one request: first token at 0, 10 more tokens over (0, 10]; window [5, 10] holds half
    assert tokens_in(np.array([0.0]), np.array([10.0]), np.array([11.0]), 5.0, 10.0) == 5.0
    # the first token counts where it lands
    assert tokens_in(np.array([2.0]), np.array([4.0]), np.array([3.0]), 0.0, 3.0) == 2.0


def _rates(n: int, method: str) -> tuple[float, float]:
    cfg = small(method, workload__num_requests=n, workload__concurrency=8,
                workload__output_tokens_cv=0.05, workload__prompt_tokens_cv=0.05,
                engine__max_running_requests=8)
    th = simulate(cfg)[1].summary["throughput"]
    return th["output_tok_s"], th["steady"]["output_tok_s"]


@pytest.mark.parametrize("method", ["none", "dflash"])
def test_steady_rate_does_not_depend_on_request_count(method):
    bench_s, steady_s = _rates(40, method)
    bench_l, steady_l = _rates(320, method)
    assert steady_s == pytest.approx(steady_l, rel=0.03)
    # the benchmark figure carries warm-up and drain, which weigh 1 / N
    assert abs(bench_s / bench_l - 1) > abs(steady_s / steady_l - 1)
    assert bench_s < bench_l


def test_short_run_falls_back_to_the_benchmark_figure():
    s = simulate(small("none", workload__num_requests=12, workload__concurrency=8))[1].summary
    assert s["throughput"]["steady"]["output_tok_s"] is None
    assert "2k + 1" in s["throughput"]["steady"]["reason"]
    assert throughput_for(s) == (s["throughput"]["output_tok_s"], "benchmark")
