"""experiments.whatifs.tensor_parallel at tiny scale: TP = 2 lowers Qwen3-32B's per-token
latency, and at concurrency 1 it is the analytic time of one decode step written out here."""

from __future__ import annotations

import pytest

from experiments.whatifs.tensor_parallel import sweep


def _step_s(tp: int) -> float:
    """One decode step of Qwen3-32B on H200s at a short context: one rank's weights and
    activations over 4.30 TB/s, a 30 us launch, 64 layers x 2 all-reduces (10 us + ring over
    0.45 TB/s) and the vocabulary-split LM head (one gather latency)."""
    H, L, V = 5120, 64, 151936
    layer = H * 128 * (2 * 64 + 2 * 8) // tp + 3 * H * 25600 // tp
    act = L * (6 * H + 3 * 25600 // tp) * 2
    allreduce = 2 * L * (10e-6 + 2 * (tp - 1) / tp * H * 2 / 0.45e12) if tp > 1 else 0.0
    head = (V * H // tp * 2 + V // tp * 8) / 4.30e12 + (10e-6 if tp > 1 else 0.0)
    return (L * layer * 2 + act) / 4.30e12 + 30e-6 + allreduce + head


def test_tp2_lowers_per_token_latency_as_the_formula_says():
    rows = sweep(("qwen3-32b",), (1, 2), (1,), per_client=8, min_requests=8, jobs=1)
    tpot = {(r["tp"], r["method"]): r["tpot_ms"] / 1e3 for r in rows}
    assert tpot[2, "none"] < tpot[1, "none"]
    assert tpot[2, "dflash"] < tpot[1, "dflash"]
    for tp in (1, 2):  # the KV read at a few hundred tokens adds < 1%
        assert tpot[tp, "none"] == pytest.approx(_step_s(tp), rel=0.02)
