#!/usr/bin/env bash
# Two kernel sweeps on one H200, from the repository root:
#   GIT_SHA=<commit> bash benchmarks/kernels/2026-12-02-loop-schedule/run.sh OUT
# The attention key loop's schedules on the engine's launch shapes
# (kernels.paged_attention.sweep), then the GEMV bench with the 32- and 64-row rows of a tree
# verify (kernels.bench --ops gemv). OUT/results.tgz holds every output so far, re-packed
# after each step.
set -u
dest=$1
source benchmarks/steps.sh  # $out, step NAME SECONDS CMD...
step sweep 300 python -m kernels.paged_attention.sweep --out "$out/sweep.json"
step gemv 200 python -m kernels.bench --ops gemv --out "$out/gemv.json"
