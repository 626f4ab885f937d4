#!/usr/bin/env bash
# The Triton GEMV at up to 64 rows (ops.GEMV_MAX_ROWS) on one H200, from the repository root:
#   GIT_SHA=<commit> bash benchmarks/reference/2026-12-02-launch-rules/run2.sh OUT
# The 64-node tree verify against the 16-token chain at bs 1 (tree tiles of the rule and the
# 64-row ones, with kernels), the GEMV bench (1 to 64 rows against cuBLAS), the tree
# attention at forced split counts and query tiles, the GPU suite. OUT/results.tgz holds every
# output so far, re-packed after each step.
set -u
dest=$1
source benchmarks/steps.sh  # $out, step NAME SECONDS CMD...
step tree2 120 python -m experiments.tree_engine --batch-sizes 1 --budgets 64 --tall-tiles 64x4 \
  --profile --out "$out/tree2.json"
step gemv 110 python -m kernels.bench --ops gemv --out "$out/gemv.json"
step tree_splits 60 python -m kernels.paged_attention.sweep --shapes tree --stages 2 --early 0 \
  --key-tiles 32 --splits auto,1,2,4,8 --out "$out/tree_splits.json"
step suite2 240 bash benchmarks/gpu_suite.sh suite "$out/suite2"
