#!/usr/bin/env bash
# The targets at batch 1 and 16 and the GPU suite again, after the engine's graphed step
# and fused verify-commit came to share their tail, on one H200:
#   GIT_SHA=<commit> bash benchmarks/reference/2026-12-02-graphed-decode/run2.sh OUT
set -u
dest=$1
source benchmarks/steps.sh  # $out, step NAME SECONDS CMD...
step bench 200 python -m reference.bench --batch-sizes 1,16 --hf-new-tokens 0 \
  --out "$out/bench.json"
step suite 220 bash benchmarks/gpu_suite.sh suite "$out/suite"
