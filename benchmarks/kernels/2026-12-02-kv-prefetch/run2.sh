#!/usr/bin/env bash
# Where the attention's time goes, and the bs-16 round at shorter verify blocks, on one H200:
#   GIT_SHA=<commit> bash benchmarks/kernels/2026-12-02-kv-prefetch/run2.sh OUT
# ncu on the engine's four attention launch shapes (probe.py: speed of light, launch stats,
# occupancy, warp stalls), reference.bench at bs 16 with B = 8 and 10 at the geometric
# acceptance of tau 6.5 at B = 16 truncated to B (common.survival: alpha 0.8599, tau 5.004
# and 5.560), then the GPU suite.
set -u
dest=$1
source benchmarks/steps.sh  # $out, step NAME SECONDS CMD...
ncu=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu | head -1)
step ncu 150 "$ncu" --clock-control none --kernel-name regex:_paged_attention_kernel \
  --section SpeedOfLight --section LaunchStats --section Occupancy --section WarpStateStats \
  --section MemoryWorkloadAnalysis python benchmarks/kernels/2026-12-02-kv-prefetch/probe.py
for b_tau in 8:5.004 10:5.560; do
  b=${b_tau%%:*}; tau=${b_tau##*:}
  step bench16_b$b 150 python -m reference.bench --batch-sizes 16 --hf-new-tokens 0 \
    --block-size "$b" --tau "$tau" --out "$out/bench16_b$b.json"
done
step suite 240 bash benchmarks/gpu_suite.sh suite "$out/suite"
