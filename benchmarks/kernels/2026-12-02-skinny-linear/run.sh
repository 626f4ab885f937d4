#!/usr/bin/env bash
# cuBLAS layouts at 16-64 rows, then the GPU suite with --dist worksteal, on one H200:
#   GIT_SHA=<commit> bash benchmarks/kernels/2026-12-02-skinny-linear/run.sh OUT
set -u
dest=$1
source benchmarks/steps.sh  # $out, step NAME SECONDS CMD...
step versions 30 python -c "import xdist, torch; print(xdist.__version__, torch.__version__)"
step probe 120 env PYTHONPATH=. python benchmarks/kernels/2026-12-02-skinny-linear/probe.py \
  --out "$out/probe.json"
step suite 300 bash benchmarks/gpu_suite.sh suite "$out/suite"
