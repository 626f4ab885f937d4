#!/usr/bin/env bash
# Unmasked key steps (rules.UNMASKED_BODY) on one H200, from the repository root:
#   GIT_SHA=<commit> bash benchmarks/kernels/2026-12-02-unmasked-body/run.sh OUT
# The attention on the engine's launch shapes with UNMASKED_BODY off and on (every other
# choice the launch rules'), side by side; the 64-node tree verify against the 16-token chain
# and the AR step at bs 1 (experiments.tree_engine, with its kernel profile); the GPU suite.
# OUT/results.tgz holds every output so far, re-packed after each step.
set -u
dest=$1
source benchmarks/steps.sh  # $out, step NAME SECONDS CMD...
step sweep 120 python -m kernels.paged_attention.sweep --stages auto --early auto \
  --key-tiles auto --unmasked 0,1 --out "$out/sweep.json"
step tree 150 python -m experiments.tree_engine --batch-sizes 1 --budgets 64 --profile \
  --out "$out/tree.json"
step suite 240 bash benchmarks/gpu_suite.sh suite "$out/suite"
