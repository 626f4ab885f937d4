"""The published protocol (experiments/published/protocol.py, scores.py): the round-time
reading of a cell, a fit that recovers the terms its points were made with, a host term
the cells cannot see marked unidentified, and the scores by hand."""

from __future__ import annotations

import pytest

from experiments.published.cells import load
from experiments.published.protocol import (
    ANCHOR_C,
    Linear,
    fit_terms,
    is_anchor,
    loto_sources,
    regime,
)
from experiments.published.scores import stats


def test_round_time_reading():
    sync = Linear(tok_s=1000.0, round_s=0.010, host_s=0.001, n=8, sync=True)
    # 10 ms + 2 ms + 8 x 0.25 ms = 14 ms per round
    assert sync.tok_at(2e-3, 0.25e-3) == pytest.approx(1000.0 * 10 / 14)
    over = Linear(tok_s=1000.0, round_s=0.010, host_s=0.001, n=8, sync=False)
    assert over.tok_at(0.0, 0.25e-3) == 1000.0  # host 3 ms, hidden under a 10 ms GPU round
    assert over.tok_at(0.0, 1.5e-3) == pytest.approx(1000.0 * 10 / 13)  # host 13 ms bound


def test_fit_recovers_both_terms_from_sync_and_overlap_points():
    a, b = 2.2e-3, 55e-6
    pts = [Linear(1000.0 * c, 0.004 + 1e-4 * c, 0.001, c, sync) for c in (1, 8, 32)
           for sync in (True, False)]
    f = fit_terms([(p, p.tok_at(a, b)) for p in pts])
    assert f["values"]["spec_round_s"] == pytest.approx(a, rel=1e-3)
    assert f["values"]["spec_request_s"] == pytest.approx(b, rel=1e-3)
    assert f["identified"] == {"spec_round_s": True, "spec_request_s": True}


def test_a_host_term_hidden_under_overlap_is_not_identified():
    pts = [Linear(1000.0, 0.010, 0.001, 4, False), Linear(2000.0, 0.012, 0.001, 8, False)]
    f = fit_terms([(p, p.tok_at(1e-3, 0.0)) for p in pts])
    assert f["identified"]["spec_request_s"] is False and f["values"]["spec_request_s"] == 0.0
    assert f["values"]["spec_round_s"] == pytest.approx(1e-3, rel=1e-3)


def test_stats_by_hand():
    s = stats([0.1, -0.2, 0.3, 0.05], [("a",), ("a",), ("b",), ("c",)])
    assert s["median_abs_error"] == pytest.approx(0.15) and s["worst_abs_error"] == 0.3
    assert s["bias"] == pytest.approx(0.075) and s["clusters"] == 3
    lo, hi = s["median_abs_ci95"]
    assert 0.05 <= lo <= s["median_abs_error"] <= hi <= 0.3


def test_anchors_and_regimes_of_the_cells():
    cells = [c for c in load().cells if not c.baseline]
    assert {c.concurrency for c in cells if is_anchor(c)} == set(ANCHOR_C.values())
    assert sum(is_anchor(c) for c in cells) == 7 + 9 + 3 + 2
    got = {regime(c) for c in cells}
    assert got == {"dense SGLang V2", "Spec V1", "EAGLE trees", "MoE", "vLLM"}


def test_leave_one_table_out_takes_the_engine_familys_other_sources():
    got = loto_sources([c for c in load().cells if not c.baseline])
    assert got["sglang-pr23000"] == {"dflash-table3", "dflash-table5"}
    assert got["dflash-table3"] == {"dflash-table5", "sglang-pr23000"}
    assert got["dflash-table12"] == {"dflash-table3", "dflash-table5", "sglang-pr23000"}
