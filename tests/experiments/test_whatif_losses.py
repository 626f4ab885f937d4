"""experiments.whatifs.losses at tiny scale: speculation loses at high concurrency and low
tau, and wins at concurrency 1 and high tau."""

from __future__ import annotations

from experiments.whatifs.losses import crossings, sweep


def test_region_below_one_is_at_high_concurrency_and_low_tau():
    rows = sweep(("qwen3-8b",), (1.5, 6.0), (1, 256), per_client=2, min_requests=16, jobs=1)
    speedup = {(r["tau_preset"], r["concurrency"]): r["speedup"] for r in rows}
    assert speedup[1.5, 256] < 1.0
    assert speedup[6.0, 1] > 2.0
    assert speedup[6.0, 1] > speedup[1.5, 1] and speedup[6.0, 256] > speedup[1.5, 256]
    cross = {x["tau"]: x["loses_from_c"] for x in crossings(rows)}
    assert cross[1.5] == 256
