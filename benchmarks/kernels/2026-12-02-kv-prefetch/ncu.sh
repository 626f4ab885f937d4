#!/usr/bin/env bash
# ncu on the engine's four attention launch shapes (probe.py), on one H200, from the
# repository root:
#   GIT_SHA=<commit> bash benchmarks/kernels/2026-12-02-kv-prefetch/ncu.sh OUT
# Speed of light, launch stats, occupancy, warp stalls and memory workload of each
# _paged_attention_kernel launch (three calls a shape) into OUT/results.tgz (ncu.log).
set -u
dest=$1
source benchmarks/steps.sh  # $out, step NAME SECONDS CMD...
ncu=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu | head -1)
step ncu 150 env PYTHONPATH=. "$ncu" --clock-control none \
  --kernel-name regex:_paged_attention_kernel --section SpeedOfLight --section LaunchStats \
  --section Occupancy --section WarpStateStats --section MemoryWorkloadAnalysis \
  python benchmarks/kernels/2026-12-02-kv-prefetch/probe.py
