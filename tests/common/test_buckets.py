"""Round-up arithmetic and the CUDA-graph buckets (common/buckets.py), against hand-listed
values and the defining properties (a bucket is >= n and the smallest such)."""

import numpy as np
from hypothesis import given
from hypothesis import strategies as st

from common.buckets import BATCH_BUCKETS, bucket, cdiv, round_up, token_buckets


def test_round_up_and_cdiv_by_hand():
    assert [round_up(n, 64) for n in (0, 1, 63, 64, 65, 200)] == [0, 64, 64, 64, 128, 256]
    assert [round_up(n, 16) for n in (17, 40, 48)] == [32, 48, 48]
    assert [cdiv(n, 16) for n in (0, 1, 16, 17)] == [0, 1, 1, 2]
    assert round_up(np.array([1, 64, 65]), 64).tolist() == [64, 64, 128]


@given(st.integers(0, 10_000), st.integers(1, 300))
def test_round_up_is_the_smallest_multiple_at_least_n(n, m):
    r = round_up(n, m)
    assert r >= n and r % m == 0 and r - m < n


def test_batch_bucket_by_hand():
    got = [bucket(n) for n in (1, 2, 3, 5, 17, 25, 33, 49, 65, 100, 129, 200, 256, 257, 300)]
    assert got == [1, 2, 4, 8, 24, 32, 48, 64, 96, 128, 192, 256, 256, 320, 320]
    assert isinstance(bucket(3), int)


@given(st.integers(1, 2_000))
def test_batch_bucket_is_the_smallest_candidate_at_least_n(n):
    candidates = sorted(set(BATCH_BUCKETS) | set(range(320, 2_100, 64)))
    assert bucket(n) == min(c for c in candidates if c >= n)


def test_bucket_over_a_table_and_past_it():
    table = [2, 4, 16]
    assert bucket(np.array([0, 3, 16, 17, 70]), table).tolist() == [2, 4, 16, 64, 128]
    assert bucket(np.array([3, 17, 70]), table, beyond=None).tolist() == [4, 17, 70]


def test_token_buckets_by_hand():
    grid = token_buckets(4, max_tokens=400).tolist()
    assert grid[:5] == [1 * 4, 2 * 4, 4 * 4, 24, 32]
    assert {12, 20, 28} & set(grid) == set()  # not x 4 of a batch bucket nor a multiple of 8
    assert 96 * 4 in grid and 320 in grid and 384 in grid and grid[-1] == 384
    assert grid == sorted(set(grid))
