"""Drafted tokens per round by batch size: vLLM's dynamic speculation table, numpy-free.

vLLM's `num_speculative_tokens_per_batch_size` is a list of `[lo, hi, K]` rows: a decode
batch of n requests with lo <= n <= hi drafts K tokens per request (verifies K + 1, anchor
included); K = 0 turns speculation off for that batch. Rows here must start at batch 1,
ascend without gaps or overlaps, and a batch past the last row uses the last row's K.

Unlike DSpark's load-aware budget (common/dspark_schedule.py), which reads each request's
confidences and the batch's steps-per-second table, the schedule sees only the batch size,
so it changes K in steps at fixed thresholds:

    schedule = parse_schedule([[1, 8, 7], [9, 32, 3], [33, 1024, 0]])
    drafts_for(schedule, 9)   # -> 3
"""

from __future__ import annotations

from collections.abc import Sequence

Schedule = tuple[tuple[int, int, int], ...]


def parse_schedule(rows: Sequence[Sequence[int]]) -> Schedule:
    """Validated `[lo, hi, K]` rows as a tuple; ValueError names the offending row."""
    out = []
    expect = 1
    for i, row in enumerate(rows):
        if len(row) != 3 or any(isinstance(v, bool) or int(v) != v for v in row):
            raise ValueError(f"verify_schedule[{i}] = {list(row)} must be [lo, hi, K] integers")
        lo, hi, k = (int(v) for v in row)
        if lo != expect:
            raise ValueError(
                f"verify_schedule[{i}] starts at batch {lo}, expected {expect} "
                "(rows ascend from 1 without gaps or overlaps)"
            )
        if hi < lo or k < 0:
            raise ValueError(f"verify_schedule[{i}] = {[lo, hi, k]} needs lo <= hi and K >= 0")
        out.append((lo, hi, k))
        expect = hi + 1
    if not out:
        raise ValueError("verify_schedule must hold at least one [lo, hi, K] row")
    return tuple(out)


def drafts_for(schedule: Schedule, batch: int) -> int:
    """K of the row holding `batch` (>= 1); the last row's K past the table."""
    if batch < 1:
        raise ValueError(f"batch must be >= 1, got {batch}")
    for _, hi, k in schedule:
        if batch <= hi:
            return k
    return schedule[-1][2]
