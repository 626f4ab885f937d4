#!/usr/bin/env bash
# The graphed greedy decode step (EngineOptions.graphed_decode) against the eager step
# around the forward's graph, batch-1 AR in interleaved runs; then the targets at batch 1
# and 16, and the GPU suite, on one H200:
#   GIT_SHA=<commit> bash benchmarks/reference/2026-12-02-graphed-decode/run.sh OUT
set -u
dest=$1
source benchmarks/steps.sh  # $out, step NAME SECONDS CMD...
step ablate 170 python -m reference.bench --ablate --ablate-repeats 3 \
  --variants "qk+gemv+defer+static+pdl,+graphed step" --out "$out/ablate.json"
step bench 200 python -m reference.bench --batch-sizes 1,16 --hf-new-tokens 0 \
  --out "$out/bench.json"
step suite 200 bash benchmarks/gpu_suite.sh suite "$out/suite"
