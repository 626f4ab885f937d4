#!/usr/bin/env bash
# The fused-SwiGLU measurements on one H200, from the repository root:
#   GIT_SHA=<commit> bash benchmarks/reference/2026-12-02-fused-swiglu/run.sh OUT
# The decode-step ablation (with and without EngineOptions.fused_swiglu), each bs-1 phase
# replayed alone with and without it, the GEMV kernel rows (gemv_swiglu against gate_up +
# SiLU-and-mul), then the GPU suite. Each step has its own time limit; OUT/results.tgz holds
# every output so far, re-packed after each step (the files are written to a scratch folder).
set -u
dest=$1
out=$(mktemp -d)
mkdir -p "$dest"
export PYTHONUNBUFFERED=1
step() {  # step NAME SECONDS CMD...: run CMD into NAME.log, then re-pack the results
  local name=$1 limit=$2
  shift 2
  echo "== $name: $*"
  timeout "$limit" "$@" >"$out/$name.log" 2>&1
  echo "== $name: exit $?"
  tar czf "$dest/results.tgz" -C "$out" .
}
step ablation 200 python -m reference.bench --ablate --batch-sizes 1 --hf-new-tokens 0 \
  --variants "qk+gemv+defer+static+pdl,+swiglu" --out "$out/ablation.json"
step phases 100 python -m reference.bench_phases --out "$out/phases.json"
step phases_swiglu 100 python -m reference.bench_phases --fused-swiglu \
  --out "$out/phases_swiglu.json"
step gemv 150 python -m kernels.bench --ops gemv --out "$out/gemv.json"
step suite 220 bash benchmarks/gpu_suite.sh suite "$out/suite"
