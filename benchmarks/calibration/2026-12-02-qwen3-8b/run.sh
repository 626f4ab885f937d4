#!/usr/bin/env bash
# Recalibration of the simulator's Qwen3-8B tables on one H200 and its validation runs, from
# the repository root (torch only on the GPU machine):
#   GIT_SHA=<commit> bash benchmarks/calibration/2026-12-02-qwen3-8b/run.sh OUT
# then on the CPU (benchmarks/calibration/README.md):
#   python -m workbench calibrate install OUT/calibration/qwen3-8b.json hardware=h200
#   python -m workbench validate report OUT/validation/validation-qwen3-8b.json
# OUT/results.tgz holds every output so far, re-packed after each step.
set -u
dest=$1
source benchmarks/steps.sh  # $out, step NAME SECONDS CMD...
step calibrate 200 python -m workbench calibrate hardware=h200 --out "$out/calibration" \
  model=qwen3-8b --budget-s 170
step validate 170 python -m workbench validate run --out "$out/validation" model=qwen3-8b \
  --new-tokens 96
# The first calibrate step's 170 s ran out before the prefill (the target forward's compiles
# took 146 s); the prefill alone, into that calibration:
#   python -m workbench calibrate hardware=h200 model=qwen3-8b --budget-s 120 \
#     --prefill-into benchmarks/calibration/2026-12-02-qwen3-8b/calibration/qwen3-8b.json \
#     --out OUT/prefill
