"""Self-speculative simulator methods: ISD's V/C chain law, LinearSpec's tiers and costs."""

from __future__ import annotations

import numpy as np
import pytest

import simulator
from simulator.acceptance import AcceptanceModel
from simulator.costs import RooflineCostModel
from simulator.methods.isd import ISD
from simulator.methods.linearspec import LinearSpec, tier_block
from simulator.params import SimConfig


class Geometric(AcceptanceModel):
    """commit_len = 1 + min(Geometric accepted drafts, q - 1) at per-token acceptance p."""

    def __init__(self, p: float, seed: int = 0):
        super().__init__(1, 1)
        self.p, self.rng = p, np.random.default_rng(seed)

    def sample(self, slots, rounds, q):
        accepted = self.rng.geometric(1 - self.p, (rounds, len(slots))) - 1
        return 1 + np.minimum(accepted, q - 1)


def tpf(p: float, n: int) -> float:
    return (2 + sum(p**k for k in range(1, n - 1))) / (2 - p ** (n - 1))


@pytest.mark.parametrize("n,p", [(4, 0.9), (8, 0.7), (2, 0.5)])
def test_isd_chain_matches_closed_form(n, p):
    method = ISD(n)
    slots = np.arange(64)
    commits = np.concatenate([method.commit_lens(Geometric(p, s), slots, 50, np.full(64, 2 * n - 1))
                              for s in range(4)])
    assert commits.min() >= 1 and commits.max() <= n
    assert commits.mean() == pytest.approx(tpf(p, n), rel=0.02)


def test_isd_in_the_simulator_commits_its_tpf():
    cfg = SimConfig.coerce({"spec": {"method": "isd", "block_size": 4, "draft_layers": 0,
                                     "acceptance": "constant", "alpha": 0.9},
                            "workload": {"concurrency": 16, "num_requests": 64}})
    tau = simulator.run(cfg).summary["speculation"]["tau"]
    assert tau == pytest.approx(tpf(0.9, 4), rel=0.03)


def test_linearspec_tiers_and_cost():
    assert [tier_block(b) for b in (1, 4, 5, 32, 33, 1000)] == [16, 16, 8, 8, 4, 4]
    method = LinearSpec(8)
    assert method.verify_lens(2).tolist() == [8, 8]
    cost = RooflineCostModel(SimConfig())
    q, kv = method.verify_lens(4), np.full(4, 1000.0)
    assert method.decode_gpu_s(cost, q, kv) > 2 * cost.target_forward_s(q, kv)
    assert ISD(4).decode_gpu_s(cost, ISD(4).verify_lens(4), kv) < method.decode_gpu_s(cost, q,
                                                                                        kv)
