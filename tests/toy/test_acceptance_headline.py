"""The loop-aware headline (experiments/acceptance_stats.py, acceptance_report.py and the
position rows of acceptance_compare.py) against small cases computed by hand."""

from __future__ import annotations

import math

import pytest

from experiments.acceptance_compare import compare
from experiments.acceptance_report import headline_table
from experiments.acceptance_stats import low_repetition_tau, position_tau, rounds_in_window


def test_rounds_in_window_starts_after_the_prefill_token():
    # rounds start at output positions 1, 4, 9, 10
    assert rounds_in_window([3, 5, 1, 2], 0, 5) == [3, 5]
    assert rounds_in_window([3, 5, 1, 2], 5, 10) == [1]
    assert rounds_in_window([3, 5, 1, 2], 10, 20) == [2]
    assert rounds_in_window([3, 5, 1, 2], 11, 20) == [] and rounds_in_window([], 0, 64) == []


def test_position_tau_by_hand():
    # request A: 20 rounds of 4, starting at 1, 5, ..., 77: 16 start below 64 (1..61), 4 after
    # request B: 100 rounds of 1, starting at 1..100: 63 below 64, 37 in [64, 256)
    early, late = position_tau([[4] * 20, [1] * 100])
    assert (early["rounds"], early["requests"]) == (79, 2)
    assert early["tau"] == pytest.approx((16 * 4 + 63) / 79)
    assert (late["rounds"], late["requests"]) == (41, 2)
    assert late["tau"] == pytest.approx((4 * 4 + 37) / 41)
    # tau = 8 / 6 = 4/3; residuals (4 - 8/3) / 6 = +2/9 and (4 - 16/3) / 6 = -2/9;
    # se = sqrt(2 / 1 * 2 * (2/9)^2) = 4/9. Nothing starts at 64 or later.
    early, late = position_tau([[2, 2], [1, 1, 1, 1]])
    assert (early["tau"], early["tau_se"]) == pytest.approx((4 / 3, 4 / 9))
    assert late["rounds"] == 0 and late["requests"] == 0 and math.isnan(late["tau"])


def test_low_repetition_tau_by_hand():
    outputs = [[1, 2, 3, 4, 5, 6],        # no 4-gram repeats: 0
               [7] * 10,                  # 7 4-grams, 6 repeat the first: 6/7
               [1, 2, 3, 4, 1, 2, 3, 4]]  # 5 4-grams, (1, 2, 3, 4) twice: 1/5
    commits = [[2, 3], [8, 8], [1, 1, 2]]
    low = low_repetition_tau(commits, outputs, threshold=0.3)
    # requests 0 and 2: tau = (5 + 4) / (2 + 3) = 1.8; residuals (5 - 3.6) / 5 = +0.28 and
    # (4 - 5.4) / 5 = -0.28; se = sqrt(2 * 2 * 0.28^2) = 0.56
    assert low["requests"] == 2
    assert (low["tau"], low["tau_se"]) == pytest.approx((1.8, 0.56))
    strict = low_repetition_tau(commits, outputs, threshold=0.2)  # below, not at: 0.2 out
    assert (strict["requests"], strict["tau"], strict["tau_se"]) == (1, 2.5, 0.0)
    assert low_repetition_tau(commits, outputs, threshold=0.0)["requests"] == 0


def test_headline_table_quotes_both_taus_with_two_se():
    row = {"drafter": "dflash-b16", "test_B": 16, "split": "test", "T": 0.0, "prompts": 64,
           "tau": 4.5, "tau_se": 0.25, "low_rep_requests": 20, "tau_low_rep": 3.0,
           "tau_low_rep_se": 0.1, "tau_pos0_64": 3.5, "tau_pos0_64_se": 0.2,
           "rounds_pos0_64": 900, "tau_pos64_256": math.nan, "tau_pos64_256_se": 0.0,
           "rounds_pos64_256": 0}
    table = headline_table([row], 0.3)
    assert "fewer than 0.3 of its 4-grams" in table
    assert "| dflash-b16 | 16 | test | 0.0 | 64 | 4.50 ± 0.50 | 20 | 3.00 ± 0.20 | " \
           "3.50 ± 0.40 (900) | - (0) |" in table


def _requests(folder, rows):
    """requests.csv with per-window columns: (rounds, committed, rounds [0, 64),
    committed [0, 64), rounds [64, 256), committed [64, 256)) per request."""
    folder.mkdir()
    with (folder / "requests.csv").open("w") as f:
        f.write("drafter,train_B,test_B,split,T,request,prompt_len,rounds,committed,repetition,"
                "rounds_pos0_64,committed_pos0_64,rounds_pos64_256,committed_pos64_256\n")
        for i, r in enumerate(rows):
            f.write(f"dflash-b16,16,16,test,0.0,{i},70,{r[0]},{r[1]},0.1,"
                    + ",".join(map(str, r[2:])) + "\n")
    return folder


def test_compare_pairs_each_position_window(tmp_path):
    a = _requests(tmp_path / "a", [(4, 10, 3, 6, 1, 4), (3, 6, 3, 6, 0, 0)])
    b = _requests(tmp_path / "b", [(5, 10, 4, 8, 1, 2), (3, 6, 3, 6, 0, 0)])
    rows = {r["stratum"]: r for r in compare(a, b)}
    early = rows["pos [0, 64)"]  # A: 12 / 6 = 2; B: 14 / 7 = 2
    assert early["requests"] == 2 and (early["tau_A"], early["tau_B"]) == pytest.approx((2, 2))
    assert "pos [64, 256)" not in rows  # one request has a late round: no spread
    assert rows["all"]["tau_A"] == pytest.approx(16 / 7)
