#!/usr/bin/env bash
# Drafts by batch size at bs 16, side by side, and the tree verify's ratio in alternated
# pairs, on one H200:
#   GIT_SHA=<commit> bash benchmarks/reference/2026-12-02-verify-schedule/run.sh OUT [suite]
# reference.bench at bs 16, B = 16, tau 6.5, with no schedule and three verify schedules
# (block 10 from 9 live requests, from 16 live, and always); experiments.tree_engine's
# 64-node tree against the 16-token chain in 7 alternated pairs. `suite`: the GPU suite.
set -u
dest=$1
source benchmarks/steps.sh  # $out, step NAME SECONDS CMD...
if [ "${2:-}" = suite ]; then
  step suite 300 bash benchmarks/gpu_suite.sh suite "$out/suite"
  exit
fi
step bench16 330 python -m reference.bench --batch-sizes 16 --hf-new-tokens 0 \
  --verify-schedule 'none;[[1,8,15],[9,1024,9]];[[1,15,15],[16,1024,9]];[[1,1024,9]]' \
  --out "$out/bench16.json"
step tree 170 python -m experiments.tree_engine --batch-sizes 1 --budgets 64 --pairs 7 \
  --out "$out/tree.json"
