#!/usr/bin/env bash
# K and V loaded a step ahead (rules.PREFETCH) and 8 warps, on one H200, from the repository
# root:
#   GIT_SHA=<commit> bash benchmarks/kernels/2026-12-02-kv-prefetch/run.sh OUT
# The attention tests on the GPU (bf16 and fp16 against the oracle, the load schedules bitwise
# equal), then the key-loop sweep over stages, early loads, prefetch, key tiles and warps on
# the engine's launch shapes. OUT/results.tgz holds every output so far, re-packed after each
# step.
set -u
dest=$1
source benchmarks/steps.sh  # $out, step NAME SECONDS CMD...
step tests 120 env HYPOTHESIS_PROFILE=gpu python -m pytest -q -p no:cacheprovider \
  tests/kernels/test_paged_attention.py tests/kernels/test_paged_attention_tree.py \
  tests/kernels/test_paged_attention_rules.py
step sweep 420 python -m kernels.paged_attention.sweep --stages 1,2 --early 0,1 \
  --prefetch 0,1 --key-tiles 32,64 --warps auto,8 --out "$out/sweep.json"
