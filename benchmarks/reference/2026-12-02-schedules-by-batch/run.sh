#!/usr/bin/env bash
# The speed targets at batch 1, 16 and 64 with and without drafts by batch size, the GPU
# suite, then the bs-1 phases replayed alone without PDL (clean per-kernel times), on one
# H200:
#   GIT_SHA=<commit> bash benchmarks/reference/2026-12-02-schedules-by-batch/run.sh OUT
# The schedule verifies blocks of 16 up to 8 live requests, 10 from 9 to 32, 4 from 33.
set -u
dest=$1
source benchmarks/steps.sh  # $out, step NAME SECONDS CMD...
step bench 330 python -m reference.bench --batch-sizes 1,16,64 --hf-new-tokens 0 \
  --verify-schedule 'none;[[1,8,15],[9,32,9],[33,1024,3]]' --out "$out/bench.json"
step suite 260 bash benchmarks/gpu_suite.sh suite "$out/suite"
step phases 120 python -m reference.bench_phases --no-pdl --out "$out/phases_nopdl.json"
