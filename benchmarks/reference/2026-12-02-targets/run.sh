#!/usr/bin/env bash
# The speed targets re-measured on one H200, from the repository root:
#   GIT_SHA=<commit> bash benchmarks/reference/2026-12-02-targets/run.sh OUT [suite|tree]
# Without `suite`: reference.bench at batch 1, 16 and 64 (sync and overlap rounds, the round
# split), each phase of a bs-16 round replayed alone with its kernels, and the 64-node tree
# verify against the 16-token chain verify at bs 1 with its kernels. With `suite`: the GPU
# suite. With `tree`: the tree rows again, plain, with the fused merge and with the early-load
# key loop, side by side, then the attention kernel's rows. Each step has its own time limit; OUT/results.tgz holds every output so far,
# re-packed after each step (the files are written to a scratch folder).
set -u
dest=$1
source benchmarks/steps.sh  # $out, step NAME SECONDS CMD...
if [ "${2:-}" = tree ]; then
  for v in plain fused-merge early-loads; do
    flag=--$v
    [ $v = plain ] && flag=
    step "tree_$v" 90 python -m experiments.tree_engine --batch-sizes 1 --budgets 64 $flag \
      --out "$out/tree_$v.json"
  done
  step attention 120 python -m kernels.bench --ops paged_attention --out "$out/attention.json"
  exit 0
fi
if [ "${2:-}" = suite ]; then
  step suite 300 bash benchmarks/gpu_suite.sh suite "$out/suite"
  exit 0
fi
step bench 300 python -m reference.bench --batch-sizes 1,16,64 --hf-new-tokens 0 \
  --out "$out/bench.json"
step phases16 150 python -m reference.bench_phases --batch-size 16 --out "$out/phases16.json"
step tree 140 python -m experiments.tree_engine --batch-sizes 1 --budgets 64 --profile \
  --out "$out/tree.json"
