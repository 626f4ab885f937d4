"""vLLM-style verify schedules: parsing rules and the lookup at and past each threshold."""

from __future__ import annotations

import pytest

from common.batch_schedule import drafts_for, parse_schedule


def test_lookup_at_the_thresholds_and_past_the_table():
    s = parse_schedule([[1, 4, 2], [5, 512, 0]])  # the schedule of vllm-project/vllm#49548
    assert [drafts_for(s, n) for n in (1, 4, 5, 512, 513)] == [2, 2, 0, 0, 0]
    s = parse_schedule([[1, 8, 7], [9, 32, 3], [33, 64, 1]])
    assert [drafts_for(s, n) for n in (8, 9, 32, 33, 64, 1000)] == [7, 3, 3, 1, 1, 1]


@pytest.mark.parametrize(
    "rows,match",
    [
        ([], "at least one"),
        ([[2, 8, 3]], "starts at batch 2, expected 1"),
        ([[1, 8, 3], [10, 20, 1]], "starts at batch 10, expected 9"),
        ([[1, 8, 3], [8, 20, 1]], "starts at batch 8, expected 9"),
        ([[1, 0, 3]], "lo <= hi"),
        ([[1, 4, -1]], "K >= 0"),
        ([[1, 4]], "must be \\[lo, hi, K\\]"),
        ([[1, 4, 1.5]], "integers"),
    ],
)
def test_bad_rows_are_named(rows, match):
    with pytest.raises(ValueError, match=match):
        parse_schedule(rows)


def test_batch_must_be_positive():
    with pytest.raises(ValueError, match="batch"):
        drafts_for(parse_schedule([[1, 4, 2]]), 0)
