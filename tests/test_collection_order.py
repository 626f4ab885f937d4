"""Tests marked `slow` are collected first (tests/conftest.py), so that pytest-xdist hands
them out at the start of the GPU suite instead of leaving the longest for last."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SLOW = {"test_cuda_graph_engine_is_lossless",  # each with two parameters
        "test_cuda_tree_decoding_equals_greedy_in_sync_and_overlap",
        "test_cuda_fused_commit_keeps_tokens_and_rounds"}


def test_slow_tests_are_collected_first():
    out = subprocess.run(
        [sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider",
         "tests/reference/test_gpu.py"], capture_output=True, text=True, cwd=ROOT, check=True)
    names = [line.split("::")[1].split("[")[0] for line in out.stdout.splitlines()
             if "::" in line]
    assert len(names) > 6
    assert set(names[:6]) == SLOW and not SLOW & set(names[6:]), names
