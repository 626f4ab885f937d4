#!/usr/bin/env bash
# The side-stream L2 prefetch probe, then the kernels of batch-1 AR decoding through
# `generate` with lookahead, on one H200:
#   GIT_SHA=<commit> bash benchmarks/kernels/2026-12-02-l2-side-stream/run.sh OUT
set -u
dest=$1
source benchmarks/steps.sh  # $out, step NAME SECONDS CMD...
export PYTHONPATH=.
step probe 200 python benchmarks/kernels/2026-12-02-l2-side-stream/probe.py --out "$out/probe.json"
step ar_round 240 python benchmarks/kernels/2026-12-02-l2-side-stream/ar_round.py
