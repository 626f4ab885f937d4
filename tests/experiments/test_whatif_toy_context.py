"""experiments.whatifs.toy_context without the model: nested cut windows and the per-bucket
tau with its paired difference, on hand-made commit lengths."""

from __future__ import annotations

import pytest

from experiments.whatifs.toy_context import bucket_rows, cut_windows


def test_windows_are_nested_suffixes_before_one_cut():
    files = [list(range(1000)), list(range(5000, 5300))]
    windows = cut_windows(files, 20, (16, 64, 256), new=8, seed=0)
    for w in windows:
        assert [len(w[L]) for L in (16, 64, 256)] == [16, 64, 256]
        assert w[256][-64:] == w[64] and w[64][-16:] == w[16]
    with pytest.raises(ValueError, match="no file"):
        cut_windows(files, 1, (2000,), new=8, seed=0)


def test_bucket_tau_and_paired_difference_by_hand():
    commits = {64: [[4, 2], [3, 3, 2]], 512: [[1, 1, 2], [2, 1]]}
    tokens = {64: [[1, 2, 3, 4, 1, 2, 3, 4], [5]], 512: [[1], [2]]}
    rows = {r["context_tokens"]: r for r in bucket_rows(commits, tokens)}
    assert rows[64]["tau"] == pytest.approx(14 / 5)
    assert rows[512]["tau"] == pytest.approx(7 / 5)
    assert rows[512]["diff_vs_shortest"] == pytest.approx(7 / 5 - 14 / 5)
    assert rows[64]["diff_2se"] == 0.0
    assert rows[64]["repetition"] == pytest.approx(1 / 5)  # 1 of 5 four-grams repeats
