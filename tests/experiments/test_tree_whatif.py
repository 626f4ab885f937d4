"""experiments/tree_whatif.py: the per-point summary names the best fixed budget and the
load-aware margin from hand-made runs; one real run at c = 1 verifies the largest tree."""

from __future__ import annotations

import pytest

from experiments.tree_whatif import CONCURRENCY, FIXED, METHODS, run_one, summarize


def test_summary_picks_the_best_fixed_budget_and_the_paired_margin():
    base = {"none": 1.0, "chain": 2.0, "N=16": 3.0, "N=32": 4.0, "N=64": 3.5, "N=128": 1.5}
    base["load-aware"] = 1.1 * base["N=32"]
    rows = [
        {
            "cost": "x",
            "concurrency": c,
            "seed": s,
            "method": m,
            "throughput_tok_s": v * (1 + s),
            "goodput_req_s": v if m != "N=16" else 9.0,
            "verify_per_row": 32.0,
            "tau": 7.0,
        }
        for c in CONCURRENCY
        for s in (0, 1)
        for m, v in base.items()
    ]
    out = summarize(rows)
    assert len(out) == len(CONCURRENCY) and set(out[0]["throughput_tok_s"]) == set(METHODS)
    p = out[0]
    assert p["best_throughput_tok_s"] == "N=32" and p["best_goodput_req_s"] == "N=16"
    assert p["load_aware_vs_best_throughput_tok_s"] == pytest.approx((0.1, 0.0), abs=1e-12)
    assert p["load_aware_vs_goodput_req_s"]["N=16"] == pytest.approx(4.4 / 9.0 - 1)
    assert set(p["load_aware_vs_throughput_tok_s"]) == set(FIXED)


def test_one_closed_loop_run_at_c1_verifies_a_large_tree():
    r = run_one(("roofline", {}, 1, 0, "load-aware"))
    assert r["verify_per_row"] > 64 and r["tau"] > 8.0
    assert 0.0 < r["goodput_fraction"] <= 1.0
