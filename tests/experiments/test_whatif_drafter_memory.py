"""experiments.whatifs.drafter_memory at tiny scale: the KV pool each drafter depth leaves
(written out here from Qwen3-8B's shapes), and a deeper drafter's lower running batch."""

from __future__ import annotations

import pytest

from experiments.whatifs.drafter_memory import budgets, queueing, sweep, tau_of


def _capacity(memory_gb: float, layers: int) -> int:
    """(memory * 0.85 - weights) / KV bytes per token for Qwen3-8B and an L-layer drafter."""
    layer = 4096 * 128 * (2 * 32 + 2 * 8) + 3 * 4096 * 12288
    target = (36 * layer + 2 * 151936 * 4096) * 2
    draft = (layers * layer + 5 * 4096 * 4096) * 2  # its layers and fc (5 features)
    kv = 2 * (36 + layers) * 8 * 128 * 2
    return int((memory_gb * 1e9 * 0.85 - target - draft) // kv)


def test_pool_shrinks_with_drafter_depth_as_computed_by_hand():
    b = budgets()
    for hw, memory in (("h200", 141.0), ("h100", 80.0)):
        for L in (3, 5, 8):
            assert b[hw][L]["capacity_tokens"] == _capacity(memory, L)
        assert b[hw][8]["capacity_tokens"] < b[hw][3]["capacity_tokens"]
    assert tau_of("humaneval", 5) == pytest.approx(6.50)
    assert tau_of("humaneval", 8) == pytest.approx(6.50 * 5.29 / 4.94)


def test_deeper_drafter_runs_fewer_requests_once_the_pool_binds():
    rows = sweep(
        ("h100",),
        ("humaneval",),
        (3, 8),
        (256,),
        free_depth=8,
        per_client=1,
        min_requests=256,
        jobs=1,
    )
    run = {(r["draft_layers"], r["memory_free"]): r["running_mean"] for r in rows}
    assert run[8, False] < 0.95 * run[3, False]
    assert run[8, True] > run[8, False]  # memory made free: the cap lifts
    assert {q["draft_layers"] for q in queueing(rows)} == {0, 3, 8}
