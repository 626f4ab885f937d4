"""The speculative path's own costs (simulator/engine_profiles.py `spec_path_s`): a fixed GPU
time per drafting round and a host time per request per round, exposed under sync and
hidden under overlap while the GPU round is longer."""

from __future__ import annotations

import numpy as np
import pytest

from simulator.engine_profiles import spec_path_s
from simulator.params import SimConfig
from tests.simulator.helpers import simulate, small


def test_terms_apply_to_drafting_rounds_only():
    cfg = SimConfig.coerce({"engine": {"spec_round_s": 1e-3, "spec_request_s": 1e-5}})
    gpu, host = spec_path_s(cfg, np.array([16, 16, 16]), 3)
    assert gpu == pytest.approx(1e-3) and host == pytest.approx(3e-5)
    gpu, host = spec_path_s(cfg, np.array([[1, 1], [4, 4]]), 2)  # K = 0, then K = 3
    assert gpu.tolist() == pytest.approx([0.0, 1e-3]) and host == pytest.approx(2e-5)
    assert spec_path_s(cfg, np.ones(5, dtype=int), 5) == (0.0, 0.0)


def _round_s(method: str, mode: str, **engine) -> float:
    sections = {f"engine__{k}": v for k, v in engine.items()}
    s = simulate(small(method, engine__mode=mode, workload__num_requests=24,
                       workload__concurrency=4, **sections))[1].summary
    return s["duration_s"] / s["engine"]["decode_rounds"]


@pytest.mark.parametrize("mode", ["sync", "overlap"])
def test_fixed_round_time_lengthens_every_round(mode):
    base = _round_s("dflash", mode)
    extra = _round_s("dflash", mode, spec_round_s=2e-3)
    # the same acceptance draws, so the same rounds: each about 2 ms longer
    assert extra - base == pytest.approx(2e-3, rel=0.15)


def test_host_term_is_exposed_under_sync_and_hidden_under_overlap():
    sync = _round_s("dflash", "sync", spec_request_s=100e-6) - _round_s("dflash", "sync")
    over = (_round_s("dflash", "overlap", spec_request_s=100e-6)
            - _round_s("dflash", "overlap"))
    assert sync == pytest.approx(4 * 100e-6, rel=0.2)  # 4 requests per round
    assert over < 0.25 * sync


def test_plain_decoding_pays_neither():
    assert _round_s("none", "sync", spec_round_s=2e-3, spec_request_s=1e-4) == _round_s(
        "none", "sync")
