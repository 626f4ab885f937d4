"""Tests marked `slow` are collected first, one every other test (tests/conftest.py): with
`--maxschedchunk 1` pytest-xdist first hands each worker two consecutive tests, so each
worker of the GPU suite starts on one slow test."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SLOW = {"test_cuda_graph_engine_is_lossless",  # each with two parameters
        "test_cuda_tree_decoding_equals_greedy_in_sync_and_overlap",
        "test_cuda_fused_commit_keeps_tokens_and_rounds"}


def _collected(*paths: str) -> list[str]:
    out = subprocess.run(
        [sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider",
         *paths], capture_output=True, text=True, cwd=ROOT, check=True)
    return [line.split("::")[1].split("[")[0] for line in out.stdout.splitlines()
            if "::" in line]


def test_slow_tests_are_collected_first_one_every_other_test():
    names = _collected("tests/reference/test_gpu.py", "tests/kernels/test_gemv.py")
    slow = [i for i, name in enumerate(names) if name in SLOW]
    assert len(slow) == 6 and len(names) > 12
    assert slow == [0, 2, 4, 6, 8, 10], names
