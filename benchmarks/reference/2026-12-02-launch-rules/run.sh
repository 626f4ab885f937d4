#!/usr/bin/env bash
# The attention launch rules of rules.py end to end on one H200, from the repository root:
#   GIT_SHA=<commit> bash benchmarks/reference/2026-12-02-launch-rules/run.sh OUT
# The 64-node tree verify against the 16-token chain at bs 1, with the tree rule's 16-row
# query tiles and (--tall-tiles 64x4) the 64-row tiles of before, side by side, with its
# kernels; reference.bench at batch 1 and 16; the bs-16 decode and verify attention at forced
# split counts; the GPU suite. OUT/results.tgz holds every output so far, re-packed after each
# step (the files are written to a scratch folder).
set -u
dest=$1
source benchmarks/steps.sh  # $out, step NAME SECONDS CMD...
step tree 120 python -m experiments.tree_engine --batch-sizes 1 --budgets 64 --tall-tiles 64x4 \
  --profile --out "$out/tree.json"
step bench 190 python -m reference.bench --batch-sizes 1,16 --hf-new-tokens 0 \
  --out "$out/bench.json"
step splits16 50 python -m kernels.paged_attention.sweep --shapes "decode bs=16,verify bs=16" \
  --stages 2 --early 1 --key-tiles 32,64 --splits auto,1,2,4 --out "$out/splits16.json"
step suite 230 bash benchmarks/gpu_suite.sh suite "$out/suite"
