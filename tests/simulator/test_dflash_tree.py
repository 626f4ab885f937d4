"""DFlash tree verification in the simulator (simulator/methods/dflash_tree.py): N tokens
verified per request, priced by hand; the chain case is the `dflash` method exactly; the
acceptance model against the zoo pair's measured tree budgets; the load-aware policy shrinks
trees as the batch grows; KV reservation and conservation."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

import simulator
from simulator.acceptance import CurveAcceptance
from simulator.costs import RooflineCostModel
from simulator.methods import make_method
from simulator.methods.dflash import DFlash
from simulator.methods.dflash_tree import BETA, GAIN, R_INF, DFlashTree, fit_ratio, tree_ratio
from simulator.params import ConfigError, SimConfig
from tests.simulator.helpers import simulate, small

TOY = Path(__file__).resolve().parents[2] / "experiments" / "tree_budget" / "results.json"


class LinearCost:
    """Every piece linear in its token counts, with distinct coefficients (seconds)."""

    def target_forward_s(self, q, kv):
        return 1e-3 + 2e-6 * q.sum() + 1e-9 * (q * kv).sum()

    def draft_forward_s(self, q, kv, causal=True):
        assert not causal
        return 5e-4 + 3e-6 * q.sum() + 2e-9 * (q * kv).sum()

    def lm_head_s(self, n_rows):
        return 1e-4 + 1e-7 * n_rows

    def kv_materialize_s(self, n_tokens):
        return 1e-5 + 1e-8 * n_tokens


def test_round_verifies_n_tokens_per_request_priced_by_hand():
    """b = 3 requests, B = 16, N = 32, contexts 100, 200, 300 (sum 600)."""
    m = DFlashTree(16, (32,))
    kv = np.array([100, 200, 300])
    q = m.schedule(LinearCost(), None, np.arange(3), kv)
    np.testing.assert_array_equal(q, [32, 32, 32])
    draft = 5e-4 + 3e-6 * 48 + 2e-9 * 16 * 600  # 3 blocks of B = 16
    verify = 1e-3 + 2e-6 * 96 + 1e-9 * 32 * 600  # b * N = 96 tokens
    heads = (1e-4 + 1e-7 * 45) + (1e-4 + 1e-7 * 96)  # B - 1 draft rows, N verify rows each
    inject = 1e-5 + 1e-8 * 48  # the accepted path's B positions
    assert m.decode_gpu_s(LinearCost(), q, kv) == pytest.approx(
        draft + verify + heads + inject, rel=1e-12
    )


@pytest.mark.parametrize("b,N", [(1, 128), (8, 64), (64, 32)])
def test_only_the_verify_grows_with_the_budget(b, N):
    """Against the roofline: tree(N) - tree(B) is the target forward and LM head of b * N
    tokens minus those of b * B tokens."""
    cost = RooflineCostModel(SimConfig())
    kv = np.full(b, 700)
    grow = DFlashTree(16, (N,)).decode_gpu_s(cost, np.full(b, N), kv) - DFlashTree(
        16, (16,)
    ).decode_gpu_s(cost, np.full(b, 16), kv)
    verify = (
        cost.target_forward_s(np.full(b, N), kv)
        - cost.target_forward_s(np.full(b, 16), kv)
        + cost.lm_head_s(b * N)
        - cost.lm_head_s(b * 16)
    )
    assert grow == pytest.approx(verify, rel=1e-12) and grow > 0


def test_chain_case_is_the_dflash_method_exactly():
    cost = RooflineCostModel(SimConfig())
    chain, dflash = DFlashTree(16, (16,), top_k=1), DFlash(16)
    for n in (1, 7, 64):
        q, kv = np.full(n, 16), np.arange(n) * 37 + 200
        assert chain.decode_gpu_s(cost, q, kv) == pytest.approx(
            dflash.decode_gpu_s(cost, q, kv), rel=1e-12)
        kv2 = kv[None, :] + 16 * np.arange(5)[:, None]  # a stretch of 5 rounds
        np.testing.assert_allclose(  # equal up to summation order
            chain.decode_gpu_s(cost, q, kv2), dflash.decode_gpu_s(cost, q, kv2), rtol=1e-12
        )
    for mode in ("sync", "overlap"):
        runs = [
            simulator.run(SimConfig.coerce(small(m, engine__mode=mode, **extra))).summary
            for m, extra in (
                ("dflash", {}),
                ("dflash", {"spec__options__tree_top_k": 1, "spec__options__tree_budget": 16}),
            )
        ]
        for key in ("throughput", "tpot_s", "ttft_s", "speculation", "goodput", "kv"):
            assert runs[0][key] == runs[1][key], key


def _toy_rows() -> tuple[float, np.ndarray, np.ndarray, np.ndarray]:
    rows = json.loads(TOY.read_text())["rows"]
    trees = [r for r in rows if "tree_budget=" in r["spec"]]
    N = np.array([int(r["spec"].split("tree_budget=")[1].split(",")[0]) for r in trees])
    return (
        rows[0]["tau"],
        N,
        np.array([r["tau"] for r in trees]),
        np.array([r["tau_2se"] for r in trees]),
    )


def test_ratio_model_is_the_fit_of_the_toy_points_within_its_residual():
    tau_chain, N, tau, se2 = _toy_rows()
    np.testing.assert_array_equal(N, [16, 32, 64, 128])
    fit = fit_ratio(N, tau / tau_chain, 16)
    np.testing.assert_allclose(fit, (R_INF, GAIN, BETA), atol=2e-4)
    resid = tree_ratio(N, 16) * tau_chain - tau
    assert np.abs(resid).max() <= 0.004  # the docstring's stated residual, in tau
    assert np.all(np.abs(resid) < 0.05 * se2)
    r = tree_ratio(np.arange(16, 4097), 16)
    assert np.all(np.diff(r) > 0) and r[0] > 1.0 and r[-1] < R_INF


def test_fit_recovers_known_parameters():
    N = np.array([16, 24, 32, 64, 128, 256])
    r = 1.6 - 0.5 * (N / 16.0) ** -0.7
    np.testing.assert_allclose(fit_ratio(N, r, 16), (1.6, 0.5, 0.7), atol=1e-6)


def test_tree_commits_average_r_times_the_chain():
    """Constant alpha = 0.7 at B = 16: the chain's tau is (1 - a^16) / (1 - a) = 3.3307; the
    tree's mean commit must be r(N) times it. 64 requests x 2000 rounds = 128,000 draws of a
    commit length in [1, 16] (sd <= 7.5, so SE <= 0.021): the tolerance 0.11 (5.2 SE) fails a
    correct model with p < 1e-6 and catches a 5% error (>= 0.2 at tau_tree >= 4)."""
    a, B = 0.7, 16
    tau_chain = (1 - a**B) / (1 - a)
    m = DFlashTree(B, (16, 64))
    m.fit_acceptance(float(np.log(a / (1 - a))), 0.0, 0.0)
    acc = CurveAcceptance(64, B, np.log(a / (1 - a)), 0.0, np.random.default_rng(5))
    slots = np.arange(64)
    acc.admit(slots, slots)
    for N in (16, 64):
        c = m.commit_lens(acc, slots, 2000, np.full(64, N))
        assert c.min() >= 1 and c.max() <= B
        assert abs(c.mean() - tree_ratio(N, B) * tau_chain) < 0.11, (N, c.mean())


def test_load_aware_budget_shrinks_as_the_batch_grows():
    cfg = SimConfig.coerce({"spec": {"method": "dflash",
                                     "options": {"tree_policy": "load_aware"}}})
    m, cost = make_method(cfg), RooflineCostModel(cfg)
    picks = [m.pick(cost, n, np.full(n, 600)) for n in (1, 2, 4, 8, 16, 32, 64)]
    assert all(x >= y for x, y in zip(picks, picks[1:], strict=False))
    assert picks[0] >= 64 and picks[-1] == 16
    # the pick at n = 8 maximises tokens per GPU second, recomputed from the pieces
    kv = np.full(8, 640)  # 600 falls in the 512..767 bucket, read at its middle
    rate = {
        N: 8
        * m.tau[N]
        / (
            cost.draft_forward_s(np.full(8, 16), kv, causal=False)
            + cost.target_forward_s(np.full(8, N), kv)
            + cost.lm_head_s(8 * 15)
            + cost.lm_head_s(8 * N)
            + cost.kv_materialize_s(8 * 16)
        )
        for N in m.budgets
    }
    assert picks[3] == max(rate, key=rate.get)


@pytest.mark.parametrize("mode", ["sync", "overlap"])
@pytest.mark.parametrize(
    "spec,reserve_per_block",
    [
        ({"spec__options__tree_budget": 16}, 16),
        ({"spec__options__tree_budget": 64}, 64),
        ({"spec__options__tree_policy": "load_aware"}, 128),
    ],
)
def test_reservation_and_conservation(mode, spec, reserve_per_block):
    cluster, res = simulate(small("dflash", engine__mode=mode, **spec))
    s, R = res.summary, cluster.cfg.engine.kv_reserve_blocks
    assert cluster.replicas[0].reserve_tokens == R * reserve_per_block
    assert s["requests"]["finished"] == 48
    assert s["speculation"]["committed_tokens"] == cluster.req.output_tokens.sum() - 48
    assert max(i for i, k in enumerate(s["speculation"]["commit_hist"]) if k) <= 16


def test_load_aware_verifies_less_at_high_concurrency():
    per_round = []
    for c in (1, 64):
        s = simulator.run(
            SimConfig.coerce(
                {
                    "spec": {"method": "dflash", "options": {"tree_policy": "load_aware"}},
                    "workload": {"concurrency": c, "num_requests": max(16, 2 * c)},
                }
            )
        ).summary
        sp = s["speculation"]
        per_round.append(sp["verified_tokens"] / sum(sp["commit_hist"]))
    assert per_round[0] > 100 and per_round[1] < 20


@pytest.mark.parametrize(
    "spec,options,message",
    [
        ({}, {"tree_top_k": 1, "tree_budget": 32},
         r"spec.options.tree_budget = 32 must equal spec.block_size"),
        ({}, {"tree_budget": 8}, r"spec.options.tree_budget = 8 must be >= spec.block_size = 16"),
        ({}, {"tree_policy": "load_aware", "tree_budgets": [4, 32]},
         r"spec.options.tree_budgets = \[4, 32\]"),
        ({"acceptance": "mean"}, {"tree_budget": 32},
         r"spec.acceptance = mean must be preset or constant"),
        ({"verify_schedule": [[1, 64, 7]]}, {"tree_budget": 32},
         r"spec.verify_schedule .* does not apply to a tree"),
        ({}, {"tree_top_k": 2}, r"spec.options.tree_top_k = 2 is not one of \[1, 4\]"),
        ({}, {"tree_budget": 0}, r"spec.options.tree_budget = 0 is outside \[1, 4096\]"),
        ({}, {"tree_budgets": 8}, r"spec.options.tree_budgets = 8 must be a list"),
        ({}, {"tree_tokens": 10}, r"spec.options.tree_tokens is not an option of spec.method "
         r"= dflash \(its options: target_features, tree_budget"),
    ],
)
def test_bad_tree_configs_name_the_key(spec, options, message):
    with pytest.raises(ConfigError, match=message):
        SimConfig.coerce({"spec": {"method": "dflash", **spec, "options": options}})


def test_a_tree_tau_at_or_above_b_is_refused():
    cfg = SimConfig.coerce({"spec": {"method": "dflash", "tau": 12.0,
                                     "options": {"tree_budget": 128}}})
    with pytest.raises(ConfigError, match=r"must lie below spec.block_size = 16"):
        make_method(cfg)
