"""Acceptance models: the chained-acceptance law, preset solving, replay, mean-only."""

from __future__ import annotations

import json
import math
from statistics import NormalDist

import numpy as np
import pytest

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
from tests.stats import seeds, z_bound


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
    """P(accept >= k+1 | accept >= k) from samples equals alpha_k = sigmoid(1.5 - 0.2 (k-1)),
    written out here (the model builds its curve with common/survival.py).

    Seven positions, each within 4 standard errors of its binomial estimate: a correct
    model fails with probability 7 * 6.3e-5 < 1e-3. A 5% error in one alpha_k (0.82 ->
    0.78 at k = 1) is 60+ standard errors (SE < 6e-4 with 204,800 samples reaching k = 1)."""
    logit0, decay = 1.5, 0.2
    model = CurveAcceptance(4096, 8, logit0, decay, np.random.default_rng(1))
    c = _sample(model, n_req=4096, rounds=50, B=8) - 1
    alpha = [1 / (1 + math.exp(-(logit0 - decay * k))) for k in range(7)]
    for k in range(7):
        reached = (c >= k).sum()
        est = (c >= k + 1).sum() / reached
        assert abs(est - alpha[k]) < 4 * np.sqrt(alpha[k] * (1 - alpha[k]) / reached)


def test_commits_are_cut_at_the_verify_length():
    """A sure curve (alpha = 1) commits exactly q per round when q < B, and B otherwise."""
    model = CurveAcceptance(3, 8, 50.0, 0.0, np.random.default_rng(0))
    slots = np.arange(3)
    model.admit(slots, slots)
    c = model.sample(slots, 5, np.array([1, 3, 8]))
    assert (c == np.array([1, 3, 8])).all()


@pytest.mark.parametrize("tau", [2.0, 4.24, 6.5, 8.01, 12.0])
@pytest.mark.parametrize("sigma", [0.0, 0.5, 1.0])
def test_preset_solver_hits_published_tau(tau, sigma):
    a = solve_logit0(tau, 0.1, sigma, 16)
    assert abs(mean_commit(a, 0.1, sigma, 16) - tau) < 1e-6


@pytest.mark.parametrize("seed", seeds())
def test_preset_per_request_mean_is_published_tau(seed):
    """The mean over requests of their own mean commit length is the published tau (6.50:
    DFlash, Qwen3-8B, HumanEval, presets' table), with per-request difficulty.

    The 2000 requests' difficulties z are the normal quantiles at (i + 1/2) / 2000, so the
    mean over requests carries no sampling error from z (the quantile grid itself is off by
    3e-5), only the per-round draws': SE = sqrt(mean within-request variance / 200 rounds /
    2000 requests) = 0.0064. Tolerance 3.29 SE + 1e-3 (a correct model fails < 1e-3 of the
    time); a 5% error in tau (0.33) lies 50 SE out."""
    n, rounds = 2000, 200
    z = np.array([NormalDist().inv_cdf((i + 0.5) / n) for i in range(n)])
    model = make_acceptance(SimConfig(), n, z, np.random.default_rng(seed))
    c = _sample(model, n_req=n, rounds=rounds)
    per_request = c.mean(axis=0)
    se = np.sqrt(c.var(axis=0, ddof=1).mean() / rounds / n)
    assert abs(per_request.mean() - 6.50) < z_bound() * se + 1e-3, (per_request.mean(), se)
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


def test_replay_binds_recordings_by_request_id(tmp_path):
    """Request ids 3 and 4 in slots 0 and 1 replay recordings 3 % 2 = 1 and 4 % 2 = 0."""
    path = tmp_path / "rec.json"
    path.write_text(json.dumps([[3, 1, 5], [2, 7]]))
    model = ReplayAcceptance(2, 16, load_recordings(str(path)))
    slots = np.array([0, 1])
    model.admit(slots, np.array([3, 4]))
    assert model.sample(slots, 3, np.full(2, 16)).T.tolist() == [[2, 7, 2], [3, 1, 5]]


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


def test_mean_only_carries_its_fraction_across_stretches():
    """tau = 2.5 over one-round stretches: 2, 3, 2, 3 (floor of 2.5 k differences)."""
    model = MeanAcceptance(1, 16, 2.5)
    slots = np.array([0])
    model.admit(slots, slots)
    got = []
    for _ in range(4):
        got.append(int(model.sample(slots, 1, np.full(1, 16))[0, 0]))
        model.advance(slots, 1)
    assert got == [2, 3, 2, 3]


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
