#!/usr/bin/env bash
# The persistent weight-streaming probe on one H200:
#   GIT_SHA=<commit> bash benchmarks/kernels/2026-12-02-persistent-chain/run.sh OUT
set -u
dest=$1
source benchmarks/steps.sh  # $out, step NAME SECONDS CMD...
export PYTHONPATH=.
step probe 300 python benchmarks/kernels/2026-12-02-persistent-chain/probe.py --out "$out/probe.json"
