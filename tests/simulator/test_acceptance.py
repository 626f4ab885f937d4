"""Acceptance models: the chained-acceptance law, preset solving, replay, mean-only."""

from __future__ import annotations

import json

import numpy as np
import pytest

from common.survival import logistic_survival
from simulator.acceptance import (
    CurveAcceptance,
    MeanAcceptance,
    ReplayAcceptance,
    load_recordings,
    make_acceptance,
    mean_commit,
    solve_logit0,
)
from simulator.params import ConfigError, SimConfig


def _sample(model, n_req=256, rounds=400, B=16):
    slots = np.arange(n_req)
    model.admit(slots, slots)
    return model.sample(slots, rounds, np.full(n_req, B))


@pytest.mark.parametrize("alpha", [0.0, 0.3, 0.7, 0.9, 1.0])
@pytest.mark.parametrize("B", [2, 8, 16])
def test_constant_alpha_mean_commit_is_geometric_sum(alpha, B):
    cfg = SimConfig()
    cfg.spec.acceptance, cfg.spec.alpha, cfg.spec.block_size = "constant", alpha, B
    model = make_acceptance(cfg, 256, np.zeros(256), np.random.default_rng(0))
    c = _sample(model, B=B)
    expected = B if alpha == 1.0 else (1 - alpha**B) / (1 - alpha)
    n = c.size
    se = max(c.std(), 1e-9) / np.sqrt(n)
    assert c.min() >= 1 and c.max() <= B
    assert abs(c.mean() - expected) < 4 * se + 1e-9, (c.mean(), expected)


def test_per_position_conditional_acceptance_matches_curve():
    """P(accept >= k+1 | accept >= k) estimated from samples equals alpha_k."""
    logit0 = 1.5
    model = CurveAcceptance(4096, 8, logit0, 0.2, np.random.default_rng(1))
    c = _sample(model, n_req=4096, rounds=50, B=8) - 1
    s = logistic_survival(np.float64(logit0), 0.2, 8)
    alpha = np.concatenate([[s[0]], s[1:] / s[:-1]])
    for k in range(7):
        reached = (c >= k).sum()
        est = (c >= k + 1).sum() / reached
        assert abs(est - alpha[k]) < 4 * np.sqrt(alpha[k] * (1 - alpha[k]) / reached) + 1e-3


@pytest.mark.parametrize("tau", [2.0, 4.24, 6.5, 8.01, 12.0])
@pytest.mark.parametrize("sigma", [0.0, 0.5, 1.0])
def test_preset_solver_hits_published_tau(tau, sigma):
    a = solve_logit0(tau, 0.1, sigma, 16)
    assert abs(mean_commit(a, 0.1, sigma, 16) - tau) < 1e-6


def test_preset_per_request_mean_is_published_tau():
    """Sampled with per-request difficulty, the mean over requests is the preset tau."""
    cfg = SimConfig()  # dflash, Qwen3-8B, HumanEval: 6.50
    z = np.random.default_rng(3).standard_normal(2000)
    model = make_acceptance(cfg, 2000, z, np.random.default_rng(4))
    c = _sample(model, n_req=2000, rounds=200)
    per_request = c.mean(axis=0)
    assert abs(per_request.mean() - 6.50) < 0.05
    assert np.corrcoef(per_request, z)[0, 1] > 0.8  # difficulty correlates within a request


def test_preset_tau_out_of_range_is_a_config_error():
    with pytest.raises(ConfigError, match="spec.tau"):
        solve_logit0(16.0, 0.1, 0.5, 16)


def test_replay_cycles_recorded_commit_lengths(tmp_path):
    path = tmp_path / "rec.jsonl"
    path.write_text("\n".join(json.dumps({"accept_lengths": r}) for r in ([3, 1, 5], [2])))
    recs = load_recordings(str(path))
    model = ReplayAcceptance(4, 16, recs)
    slots = np.array([0, 1, 2])
    model.admit(slots, np.array([0, 1, 2]))
    c = model.sample(slots, 4, np.full(3, 16))
    assert c[:, 0].tolist() == [3, 1, 5, 3] and c[:, 1].tolist() == [2, 2, 2, 2]
    assert c[:, 2].tolist() == [3, 1, 5, 3]  # request 2 reuses recording 0
    model.advance(slots, 2)
    assert model.sample(slots, 1, np.full(3, 16))[0].tolist() == [5, 2, 5]
    assert model.sample(slots, 1, np.full(3, 4))[0].tolist() == [4, 2, 4]  # clipped to q


def test_replay_json_formats(tmp_path):
    (tmp_path / "a.json").write_text(json.dumps([[1, 2], [3]]))
    (tmp_path / "b.json").write_text(json.dumps({"accept_lengths": [[4]]}))
    assert [r.tolist() for r in load_recordings(str(tmp_path / "a.json"))] == [[1, 2], [3]]
    assert [r.tolist() for r in load_recordings(str(tmp_path / "b.json"))] == [[4]]
    (tmp_path / "c.json").write_text("[]")
    with pytest.raises(ConfigError):
        load_recordings(str(tmp_path / "c.json"))


def test_mean_only_is_deterministic_with_the_right_mean():
    model = MeanAcceptance(2, 16, 6.25)
    slots = np.array([0, 1])
    model.admit(slots, slots)
    c = model.sample(slots, 8, np.full(2, 16))
    assert c[:, 0].tolist() == [6, 6, 6, 7, 6, 6, 6, 7]
    model.advance(slots, 8)
    assert model.sample(slots, 8, np.full(2, 16)).sum(axis=0).tolist() == [50, 50]


@pytest.mark.parametrize("mode", ["sync", "overlap"])
def test_replay_and_mean_models_through_the_engine(tmp_path, mode):
    from tests.simulator.helpers import simulate, small

    path = tmp_path / "rec.json"
    path.write_text(json.dumps([[4, 4, 4, 4], [2, 6]]))
    _, res = simulate(small("dflash", engine__mode=mode, spec__acceptance="replay",
                            spec__replay_path=str(path)))
    hist = np.asarray(res.summary["speculation"]["commit_hist"])
    assert set(np.flatnonzero(hist)) <= {2, 4, 6}
    assert res.summary["speculation"]["tau"] == pytest.approx(4.0, abs=0.1)
    _, res = simulate(small("dflash", engine__mode=mode, spec__acceptance="mean",
                            spec__tau=5.5))
    per_request = res.requests["tau"]
    assert np.nanmax(per_request) - np.nanmin(per_request) < 1.0  # no per-request spread
